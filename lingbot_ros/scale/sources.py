"""The scale sources: one small protocol (:class:`ScaleSource`), one registry (:data:`SOURCES`).

This module is the one place that tells the sources apart by name. Everything else asks the
registered source what it needs (``needs_depth``, ``needs_sensor_depth``,
``needs_odometry``, ``metric``, ``fixed``) and lets it sample:

* ``none``: no metric scale; outputs stay in model units;
* ``fixed``: ``scale.factor`` metres per model unit, LOCKED from the start (no sample);
* ``depth``: an aligned sensor depth image against the frame's predicted depth;
* ``odometry``: the base's displacements from odometry against the model's;
* ``camera_height``: the floor in the frame's predicted points, the camera's height over it.

A source object holds only its own buffers (depth images, the odometry window, TF lookups);
the stream's owner (:class:`~lingbot_ros.scale.stream.ScaleStream`) holds the estimator and
the lock and calls the source under it. Stamps are integer nanoseconds throughout (the
samples', the buffers', the estimator's and the snapshots'); a duration becomes seconds only
where an algorithm computes with seconds (``samples.span_s``: the estimator's rate bound,
the drift's duration, the stale clock).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Optional, Protocol

import numpy as np

from .samples import Reason, Rejection, SampleResult

if TYPE_CHECKING:
    from .config import ScaleConfig

__all__ = ["ScaleSource", "SourceKind", "SOURCES", "SCALE_SOURCES", "source_kind",
           "LookupMissed", "Lookup"]


class LookupMissed(Exception):
    """A TF lookup handed to a source (``attach_tf``) could not answer; ``retry``: the
    transform may come later (ask again at the next frame)."""

    def __init__(self, message: str, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


Lookup = Callable[[int], np.ndarray]  # stamp_ns -> 4x4, raising LookupMissed


@dataclass(frozen=True)
class SourceKind:
    """What a registered source needs and is (the only facts read by name elsewhere)."""

    name: str
    metric: bool  # outputs are meant to be in metres (once LOCKED)
    fixed: bool = False  # LOCKED from the start at scale.factor, no samples
    needs_depth: bool = False  # reads every frame's predicted depth (the session returns it)
    needs_sensor_depth: bool = False  # aligned sensor depth images (aligned_depth, --scale depth)
    needs_odometry: bool = False  # odometry poses (odom_in, or odom -> base on TF)
    ground_from_tf: bool = False  # without scale.camera_height_m: the height from TF
    offline: bool = True  # the offline runner can feed it (odometry needs the node)
    settings: tuple[str, ...] = ()  # ScaleConfig fields the estimate's value depends on
    impl: str = "Sampleless"  # its ScaleSource class in scale/source_impl.py (make_source)
    no_input_reason: Optional[str] = None  # the stale reason while nothing came in
    # the offline runner's ``--scale NAME:VALUE``: the ScaleConfig field VALUE sets, what it
    # is (for messages), and whether it must be given
    value_field: Optional[str] = None
    value_what: str = ""
    value_required: bool = False

    @property
    def samples(self) -> bool:
        """The estimate comes from per-frame samples (not none, not fixed)."""
        return self.metric and not self.fixed


class ScaleSource(Protocol):
    """One stream's source: the owner calls these under its lock."""

    kind: SourceKind

    def push_depth(self, stamp_ns: int, image: np.ndarray, encoding: str) -> None: ...

    def push_odometry(self, stamp_ns: int, T_odom_base: np.ndarray) -> Optional[Rejection]: ...

    def pin(self, stamp_ns: int) -> None: ...

    def attach_tf(self, ground: Optional[Lookup], odometry: Optional[Lookup]) -> None: ...

    def sample(self, result, T_base_optical: np.ndarray,
               took: Callable[[Optional[Rejection], int], None]) -> Optional[SampleResult]: ...

    def reset(self, keep_sensor: bool = True) -> None: ...

    def state_dict(self) -> Optional[dict]: ...

    def load_state_dict(self, state: Optional[dict]) -> None: ...


_DEPTH_SETTINGS = ("depth_unit_m",)
SOURCES: dict[str, SourceKind] = {
    "none": SourceKind("none", metric=False),
    "fixed": SourceKind("fixed", metric=True, fixed=True, settings=("factor",),
                        value_field="factor", value_what="the factor K",
                        value_required=True),
    "depth": SourceKind("depth", metric=True, needs_depth=True, needs_sensor_depth=True,
                        settings=_DEPTH_SETTINGS, no_input_reason=Reason.NO_DEPTH,
                        impl="DepthSampler"),
    "odometry": SourceKind("odometry", metric=True, needs_odometry=True, offline=False,
                           no_input_reason=Reason.NO_ODOMETRY, impl="OdometrySampler"),
    "camera_height": SourceKind("camera_height", metric=True, needs_depth=True,
                                ground_from_tf=True, settings=("camera_height_m",),
                                no_input_reason=Reason.NO_FLOOR, impl="CameraHeightSampler",
                                value_field="camera_height_m",
                                value_what="the height H (metres)"),
}
SCALE_SOURCES = tuple(SOURCES)


def source_kind(name: str) -> SourceKind:
    """The registered source ``name``; ValueError naming the sources for another."""
    kind = SOURCES.get(name) if isinstance(name, str) else None
    if kind is None:
        raise ValueError(f"scale.source must be one of {SCALE_SOURCES}, got {name!r}")
    return kind

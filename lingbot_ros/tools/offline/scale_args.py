"""Metric scale for the offline runner and the evaluation: ``--scale none|fixed:K|depth|
camera_height[:H]``.

The stream stays in model units; one :class:`OfflineScale` per run owns the stream's
:class:`~lingbot_ros.scale.ScaleEstimator` (reset when the stream restarts, kept across
rollovers), feeds it every frame's result (``depth``: the sequence's aligned sensor depth
nearest to the frame's stamp against the frame's predicted depth; ``camera_height``: the
frame's predicted points below the camera against the camera's height, unprojected as the
node does, by ``camera_height_depth_sample`` on the ``depth_stride`` grid, the pixels of
confidence ``--min-conf`` and up), and converts what leaves the run **once, when it is
written, with the final estimate**: the trajectory, the points and the evaluation. Frames
before the lock are kept and written in metres too. If the estimate never locks, the files
stay in model units and say so (and the summary).

Every file written states its units, the scale source and the value in a header comment
(:meth:`OfflineScale.header_lines`).

``--save-session`` keeps the estimate in the snapshot (:meth:`OfflineScale.state_dict`) and
``--resume`` continues it, so a recording in two runs gives the files of one. A snapshot whose
estimate was made under another ``--scale`` (or other estimate settings) is refused.
"""
from __future__ import annotations

import argparse
import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ...geometry import T_BODY_OPTICAL
from ...scale import (MODEL_UNITS, SOURCES, Reason, ScaleConfig, ScaleEstimate, ScaleStream,
                     c2w_to_metres, points_to_metres, units_header)
from ..sources.depth_stream import DepthStream

__all__ = ["SCALE_SOURCES", "ScaleChoice", "OfflineScale", "parse_scale", "scale_arg",
           "parse_scale_params", "add_scale_args", "scale_config", "MODEL_UNITS"]

log = logging.getLogger("lingbot_ros.offline")

SCALE_SOURCES = tuple(name for name, kind in SOURCES.items() if kind.offline)
SCALE_SYNTAX = "none | fixed:K | depth | camera_height[:H]"
# The camera_height source needs the base's up axis in the camera's frame: offline there is
# no URDF, so the camera is taken as mounted level, looking forward (REP-103 body ->
# optical), as on KITTI's car and most robots. The floor may still tilt by
# scale.max_ground_tilt_deg.
LEVEL_CAMERA = T_BODY_OPTICAL


@dataclass(frozen=True)
class ScaleChoice:
    """A parsed ``--scale``: ``source`` (one of :data:`SCALE_SOURCES`), ``factor`` (fixed:
    metres per model unit), ``camera_height_m`` (camera_height; None = the dataset's)."""

    source: str = "none"
    factor: Optional[float] = None
    camera_height_m: Optional[float] = None


def _positive(text: str, what: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"--scale {spec}: {what} must be a number > 0, got {text!r} "
                         f"(use {SCALE_SYNTAX})")
    return value


def parse_scale(text: str) -> ScaleChoice:
    """``none``, ``fixed:K`` (K metres per model unit), ``depth``, ``camera_height`` or
    ``camera_height:H`` (H metres) -> :class:`ScaleChoice`; ValueError naming the syntax."""
    spec = str(text).strip()
    source, sep, value = spec.partition(":")
    source = source.strip().lower()
    if source not in SCALE_SOURCES:
        raise ValueError(f"--scale {spec!r}: unknown source {source!r}; use {SCALE_SYNTAX} "
                         f"(odometry needs the ROS node)")
    kind = SOURCES[source]  # what VALUE sets, if anything: the registry says
    if kind.value_field is None:
        if sep:
            raise ValueError(f"--scale {source} takes no value, got {spec!r} "
                             f"(use {SCALE_SYNTAX})")
        return ScaleChoice(source)
    if not sep:
        if kind.value_required:
            raise ValueError(f"--scale {source} needs its value, {kind.value_what} (use "
                             f"{SCALE_SYNTAX}; fixed:K is K metres per model unit)")
        return ScaleChoice(source)
    return ScaleChoice(source, **{kind.value_field: _positive(value, kind.value_what, spec)})


def scale_arg(text: str) -> str:
    """argparse ``type`` of ``--scale``: checks the text, keeps it (a JSON-able setting)."""
    try:
        parse_scale(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return str(text).strip()


_FIELDS = {f.name: f for f in dataclasses.fields(ScaleConfig)}
_NOT_SETTABLE = ("source", "factor", "camera_height_m")  # set by --scale itself


def parse_scale_params(items) -> dict:
    """``["min_pixels=200", "lock_spread=0.1"]`` -> ``{"min_pixels": 200, ...}``, typed as
    :class:`ScaleConfig`'s fields; ValueError for an unknown name or a bad value."""
    out = {}
    for item in items or ():
        name, sep, value = str(item).partition("=")
        name = name.strip()
        if not sep or name not in _FIELDS or name in _NOT_SETTABLE:
            settable = ", ".join(n for n in _FIELDS if n not in _NOT_SETTABLE)
            raise ValueError(f"--scale-param {item!r}: expected NAME=VALUE with NAME one of "
                             f"{settable}")
        kind = str(_FIELDS[name].type)
        value = value.strip()
        try:
            if "bool" in kind:
                if value.lower() not in ("true", "false", "1", "0"):
                    raise ValueError
                out[name] = value.lower() in ("true", "1")
            elif "int" in kind:
                out[name] = int(value)
            elif "float" in kind:
                out[name] = None if value.lower() == "none" else float(value)
            else:
                out[name] = value
        except ValueError:
            raise ValueError(f"--scale-param {item!r}: {value!r} is not a valid {kind}") \
                from None
    return out


def add_scale_args(p: argparse.ArgumentParser) -> None:
    """``--scale``, ``--scale-param``, ``--depth-topic`` (shared with lingbot-ros-eval)."""
    g = p.add_argument_group("metric scale (docs/scale.md)")
    g.add_argument("--scale", type=scale_arg, default="none", metavar="SOURCE",
                   help=f"{SCALE_SYNTAX}: where metres come from. none: the files stay in "
                   "model units (and say so); fixed:K: K metres per model unit; depth: the "
                   "sequence's aligned sensor depth (TUM RGB-D depth.txt, 7-Scenes "
                   "depth PNGs, a bag's --depth-topic); camera_height:H: the floor below the "
                   "camera, H metres down (KITTI: 1.65 when H is left out). Files, points "
                   "and the evaluation are converted once, at the end, with the final "
                   "estimate")
    g.add_argument("--scale-param", action="append", default=[], metavar="NAME=VALUE",
                   help="a scale.* setting of ScaleConfig (docs/scale.md), e.g. "
                   "min_samples=5, depth_max_dt_s=0.03, lock_spread=0.1; repeatable")
    g.add_argument("--depth-topic", help="bags: the aligned depth Image topic (16UC1 mm or "
                   "32FC1 m); default /camera/aligned_depth_to_color/image_raw when the bag "
                   "has it")


def scale_config(args, dataset) -> ScaleConfig:
    """The run's ScaleConfig from ``--scale`` / ``--scale-param`` and what the dataset offers
    (its depth, KITTI's camera height). ValueError, before the run, when the source cannot
    work on this dataset."""
    choice = parse_scale(getattr(args, "scale", "none") or "none")
    params = parse_scale_params(getattr(args, "scale_param", None))
    kind = SOURCES[choice.source]
    if kind.needs_sensor_depth and dataset.depth is None:
        raise ValueError(f"--scale {choice.source}: {dataset.description} has no aligned "
                         f"depth (TUM RGB-D needs depth.txt, 7-Scenes frame-N.depth.png, a "
                         f"bag a depth Image topic: --depth-topic)")
    if kind.value_field == "factor":
        params["factor"] = choice.factor
    elif kind.value_field == "camera_height_m":
        height = choice.camera_height_m
        if height is None:
            height = dataset.camera_height_m
            if height is None:
                raise ValueError(f"--scale camera_height needs the camera's height over the "
                                 f"ground: camera_height:H (metres); only KITTI has a default "
                                 f"(1.65 m), {dataset.format} has none")
            log.info("--scale camera_height: the %s camera height, %.3g m over the ground "
                     "(give camera_height:H to change it)", dataset.format, height)
        params["camera_height_m"] = height
    return ScaleConfig(source=choice.source, **params)


class OfflineScale:
    """The metric scale of one offline run (one stream), adapted to the one owner,
    :class:`~lingbot_ros.scale.ScaleStream` (estimator, source, segment, snapshot): feeds it
    each result with the sequence's depth reading of its stamp, converts the outputs at
    write time. ``depth``: the sequence's
    :class:`~lingbot_ros.tools.sources.depth_stream.DepthStream` (source ``depth``)."""

    def __init__(self, config: ScaleConfig, depth: Optional[DepthStream] = None,
                 min_conf: float = 1.5) -> None:
        self.config = config
        # camera_height: the confident pixels are those of the point files (--min-conf; the
        # head's confidence is 1 + exp(.) >= 1)
        self.stream = ScaleStream(config, log=log, point_min_conf=max(1.0, float(min_conf)))
        self._depth = depth if config.kind.needs_sensor_depth else None

    @property
    def needs_depth(self) -> bool:
        """The results must carry the predicted depth (``SessionConfig.return_depth``)."""
        return self.config.reads_predicted_depth

    @property
    def estimate(self) -> ScaleEstimate:
        return self.stream.estimate

    @property
    def frames(self) -> int:
        return self.stream.frames

    @property
    def restarts(self) -> int:
        return self.stream.restarts

    @property
    def factor(self) -> Optional[float]:
        """Metres per model unit to apply to the outputs, or None: they stay in model units
        (source none, or never locked)."""
        return self.estimate.output_factor

    @property
    def units(self) -> str:
        return "m" if self.factor is not None else MODEL_UNITS

    def feed(self, result) -> ScaleEstimate:
        """One frame's result (a ``FrameResult``), in order. A result with index 0 after
        others is a restarted stream: the estimate starts again, the recording's depth
        buffered for it too (a rollover keeps both)."""
        stream = self.stream
        if result.index == 0 and stream.frames:
            stream.reset(keep_sensor=False)
        if self._depth is not None:
            reading = self._depth.nearest(result.stamp_ns)
            if reading is None:
                return stream.reject(result.stamp_ns, Reason.NO_DEPTH,
                                     "no depth image for this frame")
            stream.push_depth(reading.stamp_ns, reading.image, reading.encoding)
        # a level camera (LEVEL_CAMERA): no URDF offline
        return stream.on_frame(result, LEVEL_CAMERA)

    def state_dict(self) -> dict:
        """The run's scale for a stream snapshot: ``ScaleStream.state_dict`` (the one schema
        the node's snapshots have too; the depth buffer holds readings of the recording: not
        saved)."""
        return self.stream.state_dict()

    def load_state_dict(self, state) -> ScaleEstimate:
        """Continue a snapshot's estimate (this schema, or an older offline or node one);
        ValueError (nothing changed) when it was made under another ``--scale`` or other
        estimate settings, or is malformed."""
        return self.stream.load_state_dict(state)

    # --- at write time ----------------------------------------------------------------------

    def poses(self, poses: np.ndarray) -> np.ndarray:
        """(N, 4, 4) model-unit poses -> the units the files are in."""
        k = self.factor
        return np.asarray(poses, np.float64) if k is None else c2w_to_metres(poses, k)

    def points(self, xyz: np.ndarray) -> np.ndarray:
        k = self.factor
        return xyz if k is None or not len(xyz) else points_to_metres(xyz, k)

    def length(self, value: float) -> float:
        """A length in model units (a voxel edge) in the files' units."""
        k = self.factor
        return value if k is None else value * k

    def header_lines(self) -> list[str]:
        """What every file written states: units, the scale source and the value (the one
        ``units_header``, as the node's saved files; written with the final estimate)."""
        return units_header(self.estimate, final=True, setting="--scale")

    def summary(self) -> dict:
        """The summary's ``scale`` entry."""
        est = self.estimate
        out = {"source": self.config.source, "state": est.state.value,
               "locked": est.locked, "units": self.units,
               "metres_per_unit": self.factor,
               "estimate_metres_per_unit": (None if math.isnan(est.metres_per_unit)
                                            else est.metres_per_unit),
               "sigma_log": None if math.isinf(est.sigma_log) else est.sigma_log,
               "samples": est.samples, "min_samples": est.min_samples,
               "segment": est.segment, "stream_restarts": self.restarts,
               "rejections": dict(est.rejections)}
        if "camera_height_m" in self.config.kind.settings:
            out["camera_height_m"] = self.config.camera_height_m
        if self._depth is not None:  # the source reads the sequence's depth
            out["depth_skipped_by_reason"] = dict(self._depth.stats)
        if self.config.metric and not est.locked:
            out["note"] = (f"the {self.config.source} scale never locked ({est.status_text}): "
                           f"every file is in model units")
        return out

"""The registered sources' implementations (:class:`~lingbot_ros.scale.sources.ScaleSource`).

Named by the registry (``SourceKind.impl``, scale/sources.py); built by ``make_source``.
Each holds only its own buffers; the owner (scale/stream.py) calls it under its lock.
"""
from __future__ import annotations

import copy
import dataclasses
from typing import Optional

import numpy as np

from .camera_height import camera_height_depth_sample
from .config import ScaleConfig
from .depth import DepthSource
from .odometry import OdometrySource, odometry_rejection
from .samples import Reason, Rejection, SampleResult
from .sources import Lookup, LookupMissed, ScaleSource, SourceKind, source_kind

__all__ = ["make_source", "Sampleless", "DepthSampler", "CameraHeightSampler",
           "OdometrySampler"]

TF_PENDING_MAX = 64  # frames whose odometry TF did not have yet, looked up again later


class Sampleless:
    """A source that samples nothing (``none``, ``fixed``); the base of the others."""

    def __init__(self, kind: SourceKind, config: ScaleConfig, log,
                 point_min_conf: Optional[float] = None) -> None:
        self.kind, self.config, self._log = kind, config, log

    def push_depth(self, stamp_ns: int, image: np.ndarray, encoding: str) -> None:
        pass

    def push_odometry(self, stamp_ns: int, T_odom_base: np.ndarray) -> Optional[Rejection]:
        return None

    def pin(self, stamp_ns: int) -> None:
        pass

    def attach_tf(self, ground: Optional[Lookup], odometry: Optional[Lookup]) -> None:
        pass

    def sample(self, result, T_base_optical, took) -> Optional[SampleResult]:
        return None

    def reset(self, keep_sensor: bool = True) -> None:
        pass

    def state_dict(self) -> Optional[dict]:
        return None

    def load_state_dict(self, state: Optional[dict]) -> None:
        pass


def _no_depth(stamp_ns: int) -> Rejection:
    return Rejection(stamp_ns, Reason.NO_DEPTH, "no predicted depth for this frame")


class DepthSampler(Sampleless):
    """``depth``: the aligned depth image matched to the frame's stamp (pinned when the
    frame was handed in) against the frame's predicted depth."""

    def __init__(self, kind, config, log, point_min_conf=None) -> None:
        super().__init__(kind, config, log)
        self._depth = DepthSource(config)

    def push_depth(self, stamp_ns, image, encoding) -> None:
        self._depth.push_depth(stamp_ns, image, encoding)

    def pin(self, stamp_ns) -> None:
        self._depth.pin(stamp_ns)

    def sample(self, result, T_base_optical, took) -> SampleResult:
        stamp_ns = int(result.stamp_ns)
        if result.depth is None:
            return _no_depth(stamp_ns)
        return self._depth.sample(stamp_ns, result.depth, result.depth_conf, result.crop)

    def reset(self, keep_sensor: bool = True) -> None:
        if not keep_sensor:
            self._depth.reset()


class CameraHeightSampler(Sampleless):
    """``camera_height``: the floor in the frame's predicted points; the height configured
    (the up axis: the base's, from ``T_base_optical``), else TF ``ground -> optical``."""

    def __init__(self, kind, config, log, point_min_conf=None) -> None:
        if point_min_conf is not None:  # the confident points are those of the point files
            config = dataclasses.replace(config, depth_min_conf=point_min_conf)
        super().__init__(kind, config, log)
        self._ground: Optional[Lookup] = None

    def attach_tf(self, ground, odometry) -> None:
        self._ground = ground

    def sample(self, result, T_base_optical, took) -> SampleResult:
        stamp_ns = int(result.stamp_ns)
        if result.depth is None:
            return _no_depth(stamp_ns)
        height_m, T_up = self.config.camera_height_m, T_base_optical
        if height_m is None:
            if self._ground is None:
                return Rejection(stamp_ns, Reason.NO_GROUND_FRAME, "no TF tree to look the "
                                 "ground frame up in (set scale.camera_height_m)")
            try:
                T_up = self._ground(result.stamp_ns)
            except LookupMissed as exc:
                return Rejection(stamp_ns, Reason.NO_GROUND_FRAME, str(exc))
            height_m = float(T_up[2, 3])
        return camera_height_depth_sample(stamp_ns, result.depth, result.K_model, T_up,
                                          height_m, self.config, result.depth_conf)


class OdometrySampler(Sampleless):
    """``odometry``: odometry poses pushed (``odom_in``) or looked up on TF at each frame's
    stamp; the window is built at the first frame (the camera's mount ``T_base_optical``)."""

    def __init__(self, kind, config, log, point_min_conf=None) -> None:
        super().__init__(kind, config, log)
        self._odometry: Optional[OdometrySource] = None
        self._T_bo: Optional[np.ndarray] = None
        self._pending: list = []  # odometry before the first frame (T_bo unknown)
        self._saved: Optional[dict] = None  # a snapshot's window until the source is built
        self._lookup: Optional[Lookup] = None
        self._tf_pending: list[int] = []  # stamps to look up again
        self._tf_error = ""  # why the last TF lookup failed ("" once one succeeded)

    def attach_tf(self, ground, odometry) -> None:
        self._lookup = odometry
        self._tf_pending.clear()

    def push_odometry(self, stamp_ns, T_odom_base) -> Optional[Rejection]:
        if self._odometry is not None:
            return self._odometry.push_odometry(stamp_ns, T_odom_base)
        rejected = odometry_rejection(stamp_ns, T_odom_base)
        if rejected is None:
            self._pending.append((int(stamp_ns), np.array(T_odom_base, float)))
            del self._pending[:-4096]
        return rejected

    def sample(self, result, T_base_optical, took) -> SampleResult:
        odometry = self._source(T_base_optical)
        if self._lookup is not None:
            self._pull_tf(result.stamp_ns, took)
        sample = odometry.sample(result.stamp_ns, result.c2w)
        if (isinstance(sample, Rejection) and self._tf_error
                and sample.reason in (Reason.NO_ODOMETRY, Reason.OUT_OF_SYNC)):
            sample = Rejection(sample.stamp_ns, sample.reason,
                               f"{sample.detail}; TF: {self._tf_error}")
        return sample

    def _pull_tf(self, stamp_ns: int, took) -> None:
        """The base in odom at this frame's stamp (interpolated by the tree), and again at
        the earlier frames TF did not cover yet; ``took(rejection or None)`` for each pose
        taken from TF (the owner counts it, and a rejection)."""
        self._tf_pending.append(int(stamp_ns))
        del self._tf_pending[:-TF_PENDING_MAX]
        keep = []
        for s in self._tf_pending:
            try:
                T = self._lookup(s)
            except LookupMissed as exc:
                self._tf_error = str(exc)
                if exc.retry:  # not on TF yet: the next frame asks again
                    keep.append(s)
                continue
            self._tf_error = ""
            took(self._odometry.push_odometry(s, T), s)
        self._tf_pending = keep

    def reset(self, keep_sensor: bool = True) -> None:
        if self._odometry is not None:
            self._odometry.reset()
        self._saved = None
        self._tf_pending.clear()

    def _source(self, T_base_optical) -> OdometrySource:
        T_bo = np.asarray(T_base_optical, float)
        if self._odometry is None or not np.allclose(T_bo, self._T_bo, atol=1e-9):
            self._odometry = OdometrySource(self.config, T_bo)
            self._T_bo = T_bo
            if self._saved is not None:  # a restored snapshot's window
                self._restore(self._saved)
                self._saved = None
            for stamp_ns, T in self._pending:
                self._odometry.push_odometry(stamp_ns, T)
            self._pending = []
        return self._odometry

    def state_dict(self) -> Optional[dict]:
        if self._odometry is not None:
            return self._odometry.state_dict()
        return self._saved  # restored, no frame since: carried on

    def load_state_dict(self, state: Optional[dict]) -> None:
        """A snapshot's window (None: an older build's, or another source's): loaded when
        the mount is known (now, or at the next frame); one that cannot continue is dropped
        with a warning and the window starts anew."""
        self._saved = None
        if self._odometry is not None:
            if state is None or not self._restore(state):
                self._odometry.reset()
        else:
            self._saved = copy.deepcopy(state)

    def _restore(self, saved) -> bool:
        try:
            self._odometry.load_state_dict(saved)
        except ValueError as exc:
            self._log.warning(f"scale.source odometry: the snapshot's odometry window is "
                              f"dropped ({exc}); new samples come once the robot has moved "
                              "scale.min_baseline_m")
            return False
        return True


def make_source(config: ScaleConfig, log,
                point_min_conf: Optional[float] = None) -> ScaleSource:
    """A new source object of ``config.source``, the class the registry names
    (``SourceKind.impl``): ``log``: where a warning goes; ``point_min_conf``: the confidence
    of the points a floor is fitted in, else ``scale.depth_min_conf`` (the offline runner's
    ``--min-conf``)."""
    kind = source_kind(config.source)
    return globals()[kind.impl](kind, config, log, point_min_conf)

"""ScaleStream: the one owner of one stream's metric scale (the node's and the offline runner's).

It holds the stream's :class:`~lingbot_ros.scale.ScaleEstimator`, the registered source
(scale/sources.py: its buffers, TF lookups), the lock between the thread that pushes sensor
data (``push_depth``, ``push_odometry``) and the one that feeds finished frames
(``on_frame``), the segment (``reset``: a new stream; a rollover keeps it) and the snapshot
(``state_dict`` / ``load_state_dict``: one schema for the node and the offline runner). The
front ends only adapt their inputs to it: the node its messages and TF
(ros/intake/scale_msgs.py, ros/intake/scale_inputs.py), the offline runner a dataset's depth
readings (tools/offline/scale_args.py). The source is the registry's (scale/sources.py).

Stamps are integer nanoseconds throughout (the estimate carries its ``stamp_ns``; the
samples, the sources' buffers and the snapshot hold ns); durations become seconds only inside
the algorithms that compute with seconds (``samples.span_s``). Readers get
immutable :class:`ScaleEstimate` snapshots. The lock guards the source's buffers and the
estimate: the node's executor pushes sensor data while its worker feeds frames.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Optional

import numpy as np

from .config import ScaleConfig
from .estimator import ScaleEstimate, ScaleEstimator
from .samples import Rejection, SampleResult
from .source_impl import make_source
from .sources import Lookup

__all__ = ["ScaleStream", "SNAPSHOT_KEY", "STATE_SCHEMA"]

SNAPSHOT_KEY = "scale"  # a stream snapshot's front_end_state[SNAPSHOT_KEY]: state_dict()
STATE_SCHEMA = 2  # of ScaleStream.state_dict(); 1: the node's and the offline's older ones
# (the estimator's and the odometry window's own versions say whether stamps are ns or s)
_log = logging.getLogger(__name__)


class ScaleStream:
    def __init__(self, config: ScaleConfig, log=None,
                 point_min_conf: Optional[float] = None) -> None:
        """``log``: where a warning goes (the node's logger; default Python's ``logging``
        for this module), called ``log.warning(text)``; ``point_min_conf``: the confidence
        of the points a floor is fitted in (the offline runner's ``--min-conf``; None:
        ``scale.depth_min_conf``)."""
        self.config = config
        self.kind = config.kind
        self._log = log if log is not None else _log
        self._estimator = ScaleEstimator(config)
        self._source = make_source(config, self._log, point_min_conf)
        self._lock = threading.Lock()  # the source's buffers: pushes vs frames
        self._estimate = self._estimator.estimate
        self._last_frame: Optional[tuple[int, float]] = None  # (stamp ns, time.monotonic())
        self._detail = ""  # the detail of the last rejection (the stale reason shows it)
        self.depth_received = 0  # depth images pushed
        self.odometry_received = 0  # odometry poses pushed or taken from TF
        self.frames = 0  # frames fed since the snapshot chain began
        self.restarts = 0  # new streams (reset) since then

    @property
    def estimate(self) -> ScaleEstimate:
        """The latest snapshot (immutable): what ~/scale, diagnostics and the outputs read."""
        return self._estimate

    @property
    def needs_depth(self) -> bool:
        """The source reads every frame's predicted depth (the session must return it)."""
        return self.kind.needs_depth

    @property
    def factor(self) -> Optional[float]:
        """Metres per model unit to apply to the outputs, or None: model units."""
        return self._estimate.output_factor

    def attach_tf(self, ground: Optional[Lookup] = None,
                  odometry: Optional[Lookup] = None) -> None:
        """The TF lookups the source may read (``attach_tf()`` detaches them):
        ``ground(stamp_ns)`` -> T_ground_optical, ``odometry(stamp_ns)`` -> T_odom_base;
        each raises :class:`~lingbot_ros.scale.LookupMissed`. Called while no frame is in
        flight."""
        with self._lock:
            self._source.attach_tf(ground, odometry)

    # -- sensor data (the node's executor; the offline runner before each frame) ---------------
    def push_depth(self, stamp_ns: int, image: np.ndarray, encoding: str) -> None:
        """An aligned depth image (decoded by ``image_decode.decode_depth``); kept for the
        colour frame of its stamp."""
        with self._lock:
            self.depth_received += 1
            self._source.push_depth(stamp_ns, image, encoding)

    def push_odometry(self, stamp_ns: int, T_odom_base: np.ndarray) -> None:
        """One odometry pose of the base (metres); one that cannot be used (NaN, not rigid)
        is a counted ``non_finite`` rejection, also before the first frame."""
        with self._lock:
            self.odometry_received += 1
            rejected = self._source.push_odometry(stamp_ns, T_odom_base)
            if rejected is not None:  # counted with the frames' reasons
                self._add(rejected, stamp_ns)

    def on_submit(self, stamp_ns: int) -> None:
        """A frame was handed to the session: the source pins its sensor data now (the
        result may come many depth images later on a slow machine)."""
        with self._lock:
            self._source.pin(stamp_ns)

    # -- frames (the node's worker; the offline runner) ----------------------------------------
    def on_frame(self, result, T_base_optical: np.ndarray) -> ScaleEstimate:
        """Feed one finished frame (a ``FrameResult``, model units; ``T_base_optical``: the
        camera's mount) to the source; the snapshot to apply to this frame's outputs."""
        with self._lock:
            self.frames += 1
            self._note_frame(int(result.stamp_ns))
            sample = self._source.sample(result, T_base_optical, self._took_pose)
            if sample is not None:
                self._add(sample, int(result.stamp_ns))
        return self._estimate

    def reject(self, stamp_ns: int, reason: str, detail: str) -> ScaleEstimate:
        """A frame the front end has no input for (e.g. no depth reading of the dataset at
        its stamp): a counted rejection, as a source's."""
        with self._lock:
            self.frames += 1
            self._note_frame(int(stamp_ns))
            self._add(Rejection(int(stamp_ns), reason, detail), int(stamp_ns))
        return self._estimate

    def _note_frame(self, stamp_ns: int) -> None:
        self._last_frame = (stamp_ns, time.monotonic())

    def _took_pose(self, rejected: Optional[Rejection], stamp_ns: int) -> None:
        """The source took an odometry pose from TF (under the lock)."""
        self.odometry_received += 1
        if rejected is not None:
            self._estimate = self._estimator.add(rejected, stamp_ns)

    def _add(self, sample: SampleResult, stamp_ns: int) -> None:
        self._estimate = self._estimator.add(sample, stamp_ns)
        if isinstance(sample, Rejection):
            self._detail = sample.detail

    def reset(self, keep_sensor: bool = True) -> ScaleEstimate:
        """A new stream (reset, restart): a new estimate in a new segment. ``keep_sensor``:
        the sensor's buffers stay (the node: they hold the sensor's data, not the stream's;
        the offline runner clears its recording's)."""
        with self._lock:
            self.restarts += 1
            self._source.reset(keep_sensor)
            self._last_frame = None
            self._detail = ""
            self._estimate = self._estimator.reset()
        return self._estimate

    # -- readers ---------------------------------------------------------------------------------
    def stale_reason(self, now_monotonic: float) -> Optional[str]:
        """Why the source has yielded no sample for ``stale_timeout_s``, or None (also before
        the first frame). The estimator counts in the frames' stamps; the time since the
        last frame is added in steady seconds, so a camera that stopped still ages it."""
        with self._lock:
            last = self._last_frame
            if last is None:
                return None
            now_ns = last[0] + round(max(0.0, now_monotonic - last[1]) * 1e9)
            reason = self._estimator.stale_reason(now_ns)
            detail = self._detail if reason == self._estimate.reason else ""
        return f"{reason} ({detail})" if reason and detail else reason

    def health_warning(self, now_monotonic: float) -> Optional[str]:
        """The scale's WARN for /diagnostics, or None: the source yields no sample (the stale
        reason) or, LOCKED, the recent samples disagree with the applied scale."""
        stale = self.stale_reason(now_monotonic)
        e = self._estimate
        if stale:
            return (f"scale ({self.config.source}): no sample for "
                    f"{self.config.stale_timeout_s:g} s: {stale}; {e.status_text}")
        return e.drift_warning

    def info(self) -> dict:
        """Diagnostics key/values: the ~/scale fields, the rejections by reason, and once
        LOCKED on samples the recent samples' drift (``scale_recent_metres_per_unit``,
        ``scale_drift_sigma``, ``scale_drift_s``)."""
        e = self._estimate
        out = {"scale": (f"{e.units} ({e.status_text})" if self.kind.metric
                         else "monocular: the model's units, not metres"),
               "scale_state": e.state.value, "scale_source": e.source,
               "scale_metres_per_unit": e.metres_per_unit, "scale_sigma_log": e.sigma_log,
               "scale_samples": e.samples, "scale_segment": e.segment,
               "scale_units": e.units, "scale_last_rejection": e.reason or "none",
               "scale_last_rejection_detail": (self._detail if e.reason else "") or "none",
               "scale_depth_received": self.depth_received,
               "scale_odometry_received": self.odometry_received}
        if e.drift is not None:
            out.update(scale_recent_metres_per_unit=e.drift.recent_metres_per_unit,
                       scale_drift_sigma=e.drift.sigmas, scale_drift_s=e.drift.for_s)
        out.update({f"scale_rejected_{reason}": n for reason, n in e.rejections})
        return out

    # -- snapshots: one schema for the node and the offline runner ----------------------------
    def state_dict(self) -> dict:
        """The stream's scale for a snapshot, as JSON values: ``schema``, the estimator's
        state (``estimator``), the source's (``source``: the odometry window; None for the
        others: sensor images are not saved) and the frame counts."""
        with self._lock:
            return {"schema": STATE_SCHEMA, "estimator": self._estimator.state_dict(),
                    "source": self._source.state_dict(), "frames": self.frames,
                    "restarts": self.restarts}

    def check_state_dict(self, state) -> None:
        """ValueError (naming why) unless ``state`` can continue in this stream's scale."""
        self._estimator.check_state_dict(_upgraded(state)["estimator"])

    def load_state_dict(self, state) -> ScaleEstimate:
        """Continue a snapshot's estimate (LOCKED stays LOCKED at its value); ValueError, and
        nothing changed, for another source or settings, or a malformed state. Reads this
        schema and the two older ones (the node's: the estimator's state at the top; the
        offline runner's: ``estimator``, ``frames``, ``restarts``)."""
        state = _upgraded(state)
        with self._lock:
            self._estimator.check_state_dict(state["estimator"])
            self._source.load_state_dict(state["source"])
            self._last_frame = None
            self.frames, self.restarts = state["frames"], state["restarts"]
            self._estimate = self._estimator.load_state_dict(state["estimator"])
        return self._estimate


def _upgraded(state) -> dict:
    """A snapshot's scale state in this schema; ValueError when it is none of the known."""
    if not isinstance(state, dict):
        raise ValueError(f"the snapshot's scale state is malformed (a "
                         f"{type(state).__name__}, not a dict)")
    if "schema" not in state and "estimator" not in state:  # the node's, schema 1
        return {"estimator": state, "source": state.get("odometry"), "frames": 0,
                "restarts": 0}
    schema = state.get("schema", 1)
    if schema not in (1, STATE_SCHEMA):
        raise ValueError(f"the snapshot's scale state has schema {schema!r}; this build "
                         f"reads {STATE_SCHEMA} and 1")
    try:
        frames, restarts = int(state["frames"]), int(state["restarts"])
    except (KeyError, TypeError, ValueError):
        raise ValueError("the snapshot's scale state is malformed (frame counts)") from None
    return {"estimator": state["estimator"], "source": state.get("source"),
            "frames": frames, "restarts": restarts}


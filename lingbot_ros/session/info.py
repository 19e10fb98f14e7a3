"""What ``StreamingSession.info()`` returns: a frozen ``SessionInfo`` (counters, phase,
segment, latency) with the stream's GPU state nested (``StreamInfo``: backend, fast path,
graphs, and the two caches' ``KVCacheInfo`` and ``CameraCacheInfo``).

    info = session.info()
    info.phase, info.frames_processed, info.latency_ms.p50
    info.stream.fast_path, info.stream.cache.frames_cached   # cache: None before a frame
    info.as_dict()      # the flat dict of old, key for key and in order (JSON outputs)

Front ends read fields; a JSON output that shows the whole thing calls ``as_dict`` at its
boundary. Built by ``session_info`` from the session's owners (no reference to them kept:
the value does not change afterwards, so a diagnostics timer may read it on another thread).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping, Optional

__all__ = ["SessionInfo", "StreamInfo", "KVCacheInfo", "CameraCacheInfo", "LatencySummary",
           "session_info"]


def _fields_dict(obj) -> dict:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}


@dataclass(frozen=True)
class LatencySummary:
    """A ``LatencyWindow.summary()``: ms over the kept window (None when it is empty)."""

    count: int
    last: Optional[float]
    p50: Optional[float]
    p90: Optional[float]
    p99: Optional[float]
    max: Optional[float]

    @classmethod
    def from_dict(cls, d: Mapping) -> "LatencySummary":
        return cls(**d)

    def as_dict(self) -> dict:
        return _fields_dict(self)


@dataclass(frozen=True)
class KVCacheInfo:
    """``PagedKVCache.info()``: counts of the committed state plus memory."""

    frames_seen: int
    frames_committed: int
    frames_rolled_back: int
    frames_cached: int
    scale_frames: int
    window_frames: int
    special_frames: int
    special_tokens: int
    patch_pages_used: int
    patch_pages_total: int
    special_pages_used: int
    special_pages_total: int
    page_size: int
    tokens_visible: int
    step_pending: int
    num_layers: int
    bytes_used: int
    bytes_reserved: int
    max_special_frames: Optional[int]
    dtype: str
    device: str

    @classmethod
    def from_dict(cls, d: Mapping) -> "KVCacheInfo":
        return cls(**d)

    @property
    def occupancy(self) -> float:
        """Pages used over pages allocated (0 with none)."""
        used = self.patch_pages_used + self.special_pages_used
        total = self.patch_pages_total + self.special_pages_total
        return used / total if total else 0.0

    def as_dict(self) -> dict:
        return _fields_dict(self)


@dataclass(frozen=True)
class CameraCacheInfo:
    """``CameraCache.info()``."""

    frames_cached: int
    capacity_frames: int
    bytes_reserved: int
    step_pending: int

    @classmethod
    def from_dict(cls, d: Mapping) -> "CameraCacheInfo":
        return cls(**d)

    def as_dict(self) -> dict:
        return _fields_dict(self)


@dataclass(frozen=True)
class StreamInfo:
    """The stream's GPU state (``StreamRunner.info()``); before the first frame (no runner
    yet) the backend and fast path it will have, no caches, no fused kernel names."""

    attention: str
    fast_path: str
    fused_kernels: bool
    fused_kernel_names: Optional[tuple]  # None before the first frame (no key in as_dict)
    graph_captures: int
    graph_capture_failures: int
    steps_planned_ahead: int
    cache: Optional[KVCacheInfo]
    camera_cache: Optional[CameraCacheInfo]

    @classmethod
    def idle(cls, attention: str, fast_path: str, fused_kernels) -> "StreamInfo":
        """Before a stream's first frame: the backend and fast path it will use, no caches."""
        return cls(attention, fast_path, fused_kernels, None, 0, 0, 0, None, None)

    @classmethod
    def from_runner(cls, d: Mapping) -> "StreamInfo":
        """From ``StreamRunner.info()``."""
        return cls(d["attention"], d["fast_path"], d["fused_kernels"],
                   tuple(d["fused_kernel_names"]), d["graph_captures"],
                   d["graph_capture_failures"], d["steps_planned_ahead"],
                   KVCacheInfo.from_dict(d["cache"]),
                   CameraCacheInfo.from_dict(d["camera_cache"]))

    def as_dict(self) -> dict:
        out = {"attention": self.attention, "fast_path": self.fast_path,
               "fused_kernels": self.fused_kernels}
        if self.fused_kernel_names is not None:
            out["fused_kernel_names"] = list(self.fused_kernel_names)
        out.update(graph_captures=self.graph_captures,
                   graph_capture_failures=self.graph_capture_failures,
                   steps_planned_ahead=self.steps_planned_ahead,
                   cache=None if self.cache is None else self.cache.as_dict(),
                   camera_cache=None if self.camera_cache is None
                   else self.camera_cache.as_dict())
        return out


@dataclass(frozen=True)
class SessionInfo:
    """Counters, phase, segment, latency and the stream's GPU state of a session, at one
    moment (for services, diagnostics, summaries)."""

    frames_in: int
    frames_processed: int
    keyframes: int
    non_keyframes: int
    frames_rejected: int
    rejected_by_reason: Mapping[str, int]  # read only
    frames_failed: int
    plan_ahead_failures: int  # the step was then planned as usual
    phase: str  # "scale_frames" (buffering the anchors) or "streaming"
    scale_frames_buffered: int
    startup_latency_frames: int
    segment: int
    segment_keyframes: int
    rollovers: int
    rollover_building: bool
    rollover_build_failures: int
    model_hw: Optional[tuple[int, int]]
    restarts: int
    restarts_by_reason: Mapping[str, int]  # read only
    trajectory_poses: int
    latency_ms: LatencySummary
    stream: StreamInfo

    def as_dict(self) -> dict:
        """The flat dict ``info()`` returned before it was typed: same keys, same order,
        same values (the stream's keys after ``latency_ms``)."""
        out = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "stream":
                out.update(value.as_dict())
            elif isinstance(value, LatencySummary):
                out[f.name] = value.as_dict()
            elif isinstance(value, Mapping):
                out[f.name] = dict(value)
            else:
                out[f.name] = value
        return out


def session_info(session, stream: StreamInfo) -> SessionInfo:
    """The ``SessionInfo`` of ``session`` (``StreamingSession.info``) with its stream's GPU
    state ``stream``: read from the session's owners (its counters by fact, segments, input
    buffer, latency window, trajectory), none of them kept."""
    counts, restarts, segments = session._counts, session._restarts, session._segments
    rejected = {k[len("rejected_"):]: v for k, v in counts.items() if k.startswith("rejected_")}
    return SessionInfo(
        frames_in=counts["frames_in"], frames_processed=counts["processed"],
        keyframes=counts["keyframes"], non_keyframes=counts["non_keyframes"],
        frames_rejected=sum(rejected.values()),
        rejected_by_reason=MappingProxyType(rejected),
        frames_failed=counts["failed_non_finite"],
        plan_ahead_failures=counts["plan_ahead_failed"],
        phase="streaming" if segments.started else "scale_frames",
        scale_frames_buffered=len(session._anchors),
        startup_latency_frames=session.config.num_scale_frames,
        segment=segments.number, segment_keyframes=segments.keyframes,
        rollovers=counts["rollovers"], rollover_building=session._next.pending,
        rollover_build_failures=counts["rollover_build_failed"], model_hw=session._model_hw,
        restarts=sum(restarts.values()), restarts_by_reason=MappingProxyType(dict(restarts)),
        trajectory_poses=len(session.trajectory),
        latency_ms=LatencySummary.from_dict(session._latency.summary()), stream=stream)

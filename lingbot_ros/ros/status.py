"""Periodic and per-frame status: ~/status, ~/cache_info and /diagnostics."""
from __future__ import annotations

import time

from diagnostic_msgs.msg import DiagnosticArray
from lingbot_ros_interfaces.msg import CacheInfo, TrackingStatus

from . import diagnostics
from .messages import cache_info


class Status:
    """Created on activate, destroyed on deactivate. Reads the node's snapshots only."""

    def __init__(self, node) -> None:
        self._node = node
        cfg = node.settings.node
        self.status = node.create_publisher(TrackingStatus, "~/status", 10)
        self.cache = node.create_publisher(CacheInfo, "~/cache_info", 10)
        self.diag = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self._timers = [node.create_timer(1.0 / cfg.cache_info_rate_hz, self._publish_cache),
                        node.create_timer(1.0 / cfg.diagnostics_rate_hz, self._publish_diag)]
        self._last = (time.monotonic(), 0, 0)  # for rates: time, received, processed

    def destroy(self) -> None:
        for timer in self._timers:
            self._node.destroy_timer(timer)
        for pub in (self.status, self.cache, self.diag):
            self._node.destroy_publisher(pub)
        self._timers = []

    def frame(self, result, header, latency_ms: float) -> None:
        n = self._node
        c = n.counters
        msg = TrackingStatus(header=header, keyframe=result.keyframe,
                             frame_index=result.index, compute_ms=float(result.latency_ms),
                             latency_ms=float(latency_ms), frames_received=c["received"],
                             frames_processed=c["processed"],
                             frames_dropped=sum(v for k, v in c.items() if k.startswith("dropped")),
                             frames_rejected=sum(v for k, v in c.items()
                                                 if k.startswith("rejected")))
        msg.state = TrackingStatus.STATE_TRACKING
        self.status.publish(msg)

    def _publish_cache(self) -> None:
        snapshot = self._node.info_snapshot
        if snapshot and snapshot["cache"]:
            self.cache.publish(cache_info(CacheInfo, snapshot["cache"],
                                          self._node.get_clock().now().to_msg()))

    def _publish_diag(self) -> None:
        n = self._node
        now = time.monotonic()
        t0, received0, processed0 = self._last
        dt = max(now - t0, 1e-6)
        c = dict(n.counters)
        rates = {"input": (c.get("received", 0) - received0) / dt,
                 "processed": (c.get("processed", 0) - processed0) / dt}
        self._last = (now, c.get("received", 0), c.get("processed", 0))
        info = n.info_snapshot
        fx = float(n.camera_info.k[0]) if n.camera_info is not None else None
        msg = diagnostics.build(
            n.get_clock().now().to_msg(), f"{n.get_name()}: tracking",
            n.settings.session.device, c, rates, n.latency.summary(),
            info["latency_ms"] if info else {}, info, _gpu_memory(n.settings.session.device),
            None if n.last_image_time is None else now - n.last_image_time,
            n.resolve_topic_name(n.settings.node.image_topic), n.last_error, fx, n.last_fx)
        self.diag.publish(msg)


def _gpu_memory(device: str):
    if not device.startswith("cuda"):
        return None
    import torch
    return {"gpu_memory_allocated_mib": torch.cuda.memory_allocated() / 2**20,
            "gpu_memory_reserved_mib": torch.cuda.memory_reserved() / 2**20,
            "gpu_memory_peak_mib": torch.cuda.max_memory_allocated() / 2**20}

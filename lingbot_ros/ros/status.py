"""Periodic and per-frame status: ~/status, ~/cache_info and /diagnostics."""
from __future__ import annotations

import time

from diagnostic_msgs.msg import DiagnosticArray
from lingbot_ros_interfaces.msg import CacheInfo, TrackingStatus

from . import diagnostics
from .health import HealthMonitor
from .messages import cache_info
from .topics import image_subscription


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
        self._health = HealthMonitor(cfg.warn_drop_share, cfg.stall_timeout_s)
        self.state = None  # the last state published on ~/status

    def destroy(self) -> None:
        for timer in self._timers:
            self._node.destroy_timer(timer)
        for pub in (self.status, self.cache, self.diag):
            self._node.destroy_publisher(pub)
        self._timers = []

    def frame(self, result, header, latency_ms: float) -> None:
        """The status of one processed frame (TRACKING)."""
        msg = self._message(header, TrackingStatus.STATE_TRACKING)
        msg.keyframe, msg.frame_index = result.keyframe, result.index
        msg.compute_ms, msg.latency_ms = float(result.latency_ms), float(latency_ms)
        self.status.publish(msg)

    def initializing(self, header, message: str) -> None:
        """A frame that gave no pose yet: the stream collects its anchors, or waits for the
        base -> camera transform."""
        self.publish_state(header, TrackingStatus.STATE_INITIALIZING, message)

    def failed(self, header, message: str) -> None:
        """A frame failed (non-finite output, out of memory): rolled back, the node goes on."""
        self.publish_state(header, TrackingStatus.STATE_FAILED, message)

    def paused(self, header, message: str) -> None:
        """An image dropped because ~/pause is on."""
        self.publish_state(header, TrackingStatus.STATE_PAUSED, message)

    def publish_state(self, header, state: int, message: str) -> None:
        self.status.publish(self._message(header, state, message))

    def _message(self, header, state: int, message: str = "") -> TrackingStatus:
        c = self._node.counters
        self.state = state
        return TrackingStatus(
            header=header, state=state, message=message, frames_received=c["received"],
            frames_processed=c["processed"],
            frames_dropped=sum(v for k, v in c.items() if k.startswith("dropped")),
            frames_rejected=sum(v for k, v in c.items() if k.startswith("rejected")))

    def _publish_cache(self) -> None:
        snapshot = self._node.info_snapshot
        if snapshot and snapshot["cache"]:
            self.cache.publish(cache_info(CacheInfo, snapshot["cache"],
                                          self._node.get_clock().now().to_msg()))

    def _publish_diag(self) -> None:
        n = self._node
        now = time.monotonic()
        frames = n.robot_frames
        t0, received0, processed0 = self._last
        dt = max(now - t0, 1e-6)
        c = dict(n.counters)
        rates = {"input": (c.get("received", 0) - received0) / dt,
                 "processed": (c.get("processed", 0) - processed0) / dt}
        self._last = (now, c.get("received", 0), c.get("processed", 0))
        info = n.info_snapshot
        topic = image_subscription(n, n.settings.node)[0]  # the topic actually subscribed
        idle = "tracking"
        if info is not None and info["phase"] == "scale_frames":
            idle = (f"initialising: {info['scale_frames_buffered']}/"
                    f"{info['startup_latency_frames']} anchor frames")
        override = None
        if n.paused:
            override = (0, "paused (~/pause): images are dropped until it is turned off")
        elif frames is not None:
            override = frames.health(now)
        level, message = self._health.evaluate(
            now, c, None if n.last_image_time is None else now - n.last_image_time,
            None if n.last_processed_time is None else now - n.last_processed_time,
            n.last_error, n.last_restart, idle, topic, override)
        extra = {"paused": n.paused}
        if n.image_input is not None:
            extra["image_qos"] = n.image_input.describe()
        if frames is not None:
            extra.update(frames.describe())
        extra.update(n.outputs_info())
        extra.update(diagnostics.camera_info_check(n.camera_info, n.last_input_hw, n.last_fx))
        msg = diagnostics.build(
            n.get_clock().now().to_msg(), f"{n.get_name()}: tracking",
            n.settings.session.device, level, message, c, rates, n.latency.summary(),
            info["latency_ms"] if info else {}, info, _gpu_memory(n.settings.session.device),
            topic, extra)
        self.diag.publish(msg)


def _gpu_memory(device: str):
    if not device.startswith("cuda"):
        return None
    import torch
    return {"gpu_memory_allocated_mib": torch.cuda.memory_allocated() / 2**20,
            "gpu_memory_reserved_mib": torch.cuda.memory_reserved() / 2**20,
            "gpu_memory_peak_mib": torch.cuda.max_memory_allocated() / 2**20}

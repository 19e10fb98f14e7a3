"""Periodic and per-frame status: ~/status, ~/cache_info and /diagnostics.

The periodic ones run on timers of the steady clock: a paused sim clock (``use_sim_time``)
does not silence /diagnostics, which then says that the clock stalled.
"""
from __future__ import annotations

import time
from typing import Optional

from diagnostic_msgs.msg import DiagnosticArray
from lingbot_ros_interfaces.msg import CacheInfo, TrackingStatus
from rclpy.clock import Clock, ClockType

from . import diagnostics
from .health import HealthMonitor
from .messages import cache_info
from .topics import image_subscription


class Status:
    """Created on activate, destroyed on deactivate. Reads ``NodeTelemetry`` snapshots only."""

    def __init__(self, node) -> None:
        self._node = node
        self._telemetry = node.telemetry
        cfg = node.settings.node
        self.status = node.create_publisher(TrackingStatus, "~/status", 10)
        self.cache = node.create_publisher(CacheInfo, "~/cache_info", 10)
        self.diag = node.create_publisher(DiagnosticArray, "/diagnostics", 10)
        steady = Clock(clock_type=ClockType.STEADY_TIME)
        self._timers = [node.create_timer(1.0 / cfg.cache_info_rate_hz, self._publish_cache,
                                          clock=steady),
                        node.create_timer(1.0 / cfg.diagnostics_rate_hz, self._publish_diag,
                                          clock=steady)]
        self._last = (time.monotonic(), 0, 0)  # for rates: time, received, processed
        self._ros_clock = (None, time.monotonic())  # (last ROS time seen, when it changed)
        self._health = HealthMonitor(cfg.warn_drop_share, cfg.stall_timeout_s)
        self._key_values = diagnostics.KeyValues()  # /diagnostics' unchanged ones reused
        self.state = None  # the last state published on ~/status

    def destroy(self) -> None:
        for timer in self._timers:
            self._node.destroy_timer(timer)
        for pub in (self.status, self.cache, self.diag):
            self._node.destroy_publisher(pub)
        self._timers = []

    def frame(self, result, header, end_to_end_ms: float, message: str = "") -> None:
        """The status of one processed frame (TRACKING): ``compute_ms`` the session's
        hand-in to result, ``latency_ms`` the node's image callback to outputs published;
        ``message``: "" when every output of the frame went out, else what did not (its
        pose did: map -> odom without the other odometry, say)."""
        msg = self._message(header, TrackingStatus.STATE_TRACKING, message)
        msg.keyframe, msg.frame_index = result.keyframe, result.index
        msg.compute_ms, msg.latency_ms = float(result.latency_ms), float(end_to_end_ms)
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
        t = self._telemetry.snapshot()
        self.state = state
        return TrackingStatus(
            header=header, state=state, message=message, frames_received=t.received,
            frames_processed=t.processed, frames_dropped=t.dropped, frames_rejected=t.rejected)

    def _publish_cache(self) -> None:
        snapshot = self._telemetry.session_info()
        if snapshot and snapshot.stream.cache:
            self.cache.publish(cache_info(CacheInfo, snapshot.stream.cache,
                                          self._node.get_clock().now().to_msg()))

    def _publish_diag(self) -> None:
        n = self._node
        t = self._telemetry.snapshot()
        now = time.monotonic()
        frames = n.robot_frames
        t0, received0, processed0 = self._last
        dt = max(now - t0, 1e-6)
        c = dict(t.counters)
        rates = {"input": (t.received - received0) / dt,
                 "processed": (t.processed - processed0) / dt}
        self._last = (now, t.received, t.processed)
        info = t.session_info
        topic = image_subscription(n, n.settings.node)[0]  # the topic actually subscribed
        idle = "tracking"
        if info is not None and info.phase == "scale_frames":
            idle = (f"initialising: {info.scale_frames_buffered}/"
                    f"{info.startup_latency_frames} anchor frames")
        clock_stalled = self._clock_stalled(now)
        override = None
        if n.paused:
            override = (0, "paused (~/pause): images are dropped until it is turned off")
        elif frames is not None:
            override = frames.health(now)
        level, message = self._health.evaluate(
            now, c, None if t.last_image_time is None else now - t.last_image_time,
            None if t.last_processed_time is None else now - t.last_processed_time,
            t.last_error, t.last_restart, idle, topic, override,
            map_to_odom_failing=n.outputs.map_to_odom_failing() if n.outputs else None,
            clock_stalled=clock_stalled)
        scale = n.scale
        # the source yields nothing (outputs stay withheld/unscaled), or the applied scale
        # lags what the recent samples say
        scale_warning = scale.health_warning(now) if scale is not None else None
        if scale_warning and level == 0:
            level, message = 1, scale_warning
        extra = {"paused": n.paused, "ros_clock": self._clock_description(now)}
        if n.image_input is not None:
            extra["image_qos"] = n.image_input.describe()
        if frames is not None:
            extra.update(frames.describe())
        extra.update(n.outputs_info())
        extra.update(n.gc_pauses.describe())
        extra.update(diagnostics.camera_info_check(n.camera_info, t.last_input_hw, t.last_fx))
        msg = diagnostics.build(
            n.get_clock().now().to_msg(), f"{n.get_fully_qualified_name()}: tracking",
            n.settings.session.device, level, message, c, rates, dict(t.end_to_end_ms),
            info.latency_ms.as_dict() if info else {}, info, _gpu_memory(n.settings.session.device),
            topic, extra, self._key_values)
        self.diag.publish(msg)


    def _clock_stalled(self, now: float) -> Optional[tuple[float, str]]:
        """(seconds, why) while the node's clock is sim time (``use_sim_time``) and has not
        advanced; None on the system clock or while it advances."""
        clock = self._node.get_clock()
        ros_ns = clock.now().nanoseconds
        last_ns, changed_at = self._ros_clock
        if ros_ns != last_ns:
            self._ros_clock = (ros_ns, now)
            changed_at = now
        if not getattr(clock, "ros_time_is_active", False):
            return None
        stalled_s = now - changed_at
        if ros_ns == 0:
            return stalled_s, (f"use_sim_time is true but no /clock was received for "
                               f"{stalled_s:.0f} s")
        return stalled_s, (f"the sim clock (use_sim_time) has not advanced for "
                           f"{stalled_s:.0f} s: /clock is paused or its publisher stopped; "
                           "diagnostics go on (steady clock), stamps stay at "
                           f"{ros_ns / 1e9:.3f} s")

    def _clock_description(self, now: float) -> str:
        clock = self._node.get_clock()
        if not getattr(clock, "ros_time_is_active", False):
            return "system time"
        return f"sim time (use_sim_time), last advanced {now - self._ros_clock[1]:.1f} s ago"


def _gpu_memory(device: str):
    if not device.startswith("cuda"):
        return None
    import torch
    return {"gpu_memory_allocated_mib": torch.cuda.memory_allocated() / 2**20,
            "gpu_memory_reserved_mib": torch.cuda.memory_reserved() / 2**20,
            "gpu_memory_peak_mib": torch.cuda.max_memory_allocated() / 2**20}

"""Periodic and per-frame status: ~/status, ~/cache_info and /diagnostics.

The periodic ones run on timers of the steady clock: a paused sim clock (``use_sim_time``)
does not silence /diagnostics, which then says that the clock stalled.

``Status`` holds no node facts of its own and never reaches into the node: it creates its
publishers and timers on the rclpy node it is given, and reads what it reports through
``StatusReads``: frozen snapshots (``NodeTelemetry``'s, the worker's ``NodeFacts``, the
scale's ``ScaleEstimate`` inside ``ScaleStream.info``) or an owner's own locked read (the
map's size, the collector's pauses).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

from diagnostic_msgs.msg import DiagnosticArray
from lingbot_ros_interfaces.msg import CacheInfo, TrackingStatus
from rclpy.clock import Clock, ClockType

from ..outputs.messages import cache_info
from ..params.topics import image_subscription
from . import diagnostics
from .health import HealthMonitor, extrinsic_wait
from .node_facts import NodeFacts
from .telemetry import NodeTelemetry


@dataclass(frozen=True)
class StatusReads:
    """What ~/status and /diagnostics read, each a snapshot or an owner's locked read."""

    telemetry: NodeTelemetry
    device: str = "cpu"  # session.device: the hardware id, GPU memory
    facts: Callable[[], NodeFacts] = NodeFacts  # the worker's latest (FactsBoard.read)
    paused: Callable[[], bool] = bool  # ~/pause
    scale: Callable[[], object] = lambda: None  # the ScaleStream (locked) or None
    map_info: Callable[[], dict] = dict  # the map's size (MapPoints.info, locked)
    gc: Callable[[], dict] = dict  # GcPauses.describe
    camera_info: Callable[[], object] = lambda: None  # the last CameraInfo received
    image_qos: Callable[[], Optional[str]] = lambda: None  # ImageInput.describe
    # a camera rig's check (RigIO.check: level, message, key values); None: one camera
    rig: Optional[Callable[[], tuple[int, str, dict]]] = None


def tracking_status(telemetry: NodeTelemetry, header, state: int,
                    message: str = "") -> TrackingStatus:
    """A ~/status message: the state, what did not go out, and ``telemetry``'s counters."""
    t = telemetry.snapshot()
    return TrackingStatus(
        header=header, state=state, message=message, frames_received=t.received,
        frames_processed=t.processed, frames_dropped=t.dropped, frames_rejected=t.rejected)


class TrackingStates:
    """The per-frame ``TrackingStatus`` of one stream: the node's ~/status (``Status``) or a
    rig camera's ~/<camera>/status (``CameraStatus``). A subclass sets ``status`` (the
    publisher) and ``tracked`` (the counters its messages carry); ``state`` is the last
    state published."""

    status = None
    tracked: NodeTelemetry
    state: Optional[int] = None

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
        self.state = state
        return tracking_status(self.tracked, header, state, message)


class Status(TrackingStates):
    """Created on activate, destroyed on deactivate."""

    def __init__(self, node, cfg, reads: StatusReads) -> None:
        """``node``: the rclpy node its publishers, timers and clock belong to; ``cfg``:
        the ``NodeConfig``; ``reads``: everything it reports."""
        self._node = node
        self._reads = reads
        self._telemetry = reads.telemetry
        self.tracked = reads.telemetry  # ~/status's counters
        self._topic = image_subscription(node, cfg)[0]  # the topic actually subscribed
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

    def _publish_cache(self) -> None:
        snapshot = self._telemetry.session_info()
        if snapshot and snapshot.stream.cache:
            self.cache.publish(cache_info(CacheInfo, snapshot.stream.cache,
                                          self._node.get_clock().now().to_msg()))

    def _publish_diag(self) -> None:
        n, r = self._node, self._reads
        t = self._telemetry.snapshot()
        facts = r.facts()  # one frozen object: the chain and the outputs of one frame
        now = time.monotonic()
        t0, received0, processed0 = self._last
        dt = max(now - t0, 1e-6)
        c = dict(t.counters)
        rates = {"input": (t.received - received0) / dt,
                 "processed": (t.processed - processed0) / dt}
        self._last = (now, t.received, t.processed)
        info = t.session_info
        topic = self._topic
        idle = "tracking"
        if info is not None and info.phase == "scale_frames":
            idle = (f"initialising: {info.scale_frames_buffered}/"
                    f"{info.startup_latency_frames} anchor frames")
        clock_stalled = self._clock_stalled(now)
        paused = r.paused()
        if paused:
            override = (0, "paused (~/pause): images are dropped until it is turned off")
        else:
            override = extrinsic_wait(facts.frames, now)
        outputs = facts.outputs
        level, message = self._health.evaluate(
            now, c, None if t.last_image_time is None else now - t.last_image_time,
            None if t.last_processed_time is None else now - t.last_processed_time,
            t.last_error, t.last_restart, idle, topic, override,
            map_to_odom_failing=outputs.map_to_odom_failing(now) if outputs else None,
            clock_stalled=clock_stalled)
        scale = r.scale()
        # the source yields nothing (outputs stay withheld/unscaled), or the applied scale
        # lags what the recent samples say
        scale_warning = scale.health_warning(now) if scale is not None else None
        if scale_warning and level == 0:
            level, message = 1, scale_warning
        extra = {"paused": paused, "ros_clock": self._clock_description(now)}
        image_qos = r.image_qos()
        if image_qos is not None:
            extra["image_qos"] = image_qos
        extra.update(facts.frames.describe())
        if outputs is not None:
            extra.update(outputs.info())
            extra.update(r.map_info())
        if scale is not None:
            extra.update(scale.info())
        if facts.backend is not None:  # loop.enable: candidates, verified, accepted, rejections
            extra.update(facts.backend.info())
        extra.update(r.gc())
        extra.update(diagnostics.camera_info_check(r.camera_info(), t.last_input_hw,
                                                   t.last_fx))
        if r.rig is not None:  # the fused pose's source, failovers, disagreement
            rig_level, rig_message, rig_values = r.rig()
            extra.update(rig_values)
            if rig_level > level:
                level, message = rig_level, rig_message
            elif rig_level == level:
                message = f"{message}; {rig_message}"
        msg = diagnostics.build(
            n.get_clock().now().to_msg(), f"{n.get_fully_qualified_name()}: tracking",
            r.device, level, message, c, rates, dict(t.end_to_end_ms),
            info.latency_ms.as_dict() if info else {}, info, _gpu_memory(r.device),
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

"""~/path: the whole pose history, published from the node's executor at a bounded rate.

Per frame the worker appends one pose: O(1), whatever the history's length; the history is
kept serialized (``PathCdr``), so a Path goes out as bytes, without the GIL-held conversion of
every pose that made a long Path stall the worker (28 ms at 10,000 poses). The executor
publishes the Path when poses were added: at once if the last Path is at least
``1 / path_rate_hz`` s old, else by a one-shot timer one period later. So Path messages are at
least a period apart (at most ``path_rate_hz`` a second), the first poses of a stream go out
at once, and the last Path holds every pose within a period of a pause. ``clear`` (reset)
publishes an empty Path at once.
"""
from __future__ import annotations

import math
import threading
import time

import numpy as np
from nav_msgs.msg import Path
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.clock import Clock, ClockType
from rclpy.duration import Duration
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from ...geometry import rotation_to_quaternion
from .path_cdr import PathCdr

PATH_FINAL_ACK_S = 0.5  # destroy() waits this long at most for readers to take the last Path


class PathPublisher:
    """``~/path`` (transient local, reliable, depth 1) in ``frame_id`` (or ``topic``)."""

    def __init__(self, node, frame_id: str, rate_hz: float, max_poses: int,
                 topic: str = "~/path") -> None:
        """``max_poses``: the history kept (0 = all); ``topic``: a rig's camera's own
        (``~/front/path``)."""
        self._node = node
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self.path = node.create_publisher(Path, topic, latched)
        # Shared by the worker (append) and the executor (snapshot) under _path_lock, held for
        # an append or a copy only. _path_send_lock orders the Path publications (executor,
        # clear, the final one in destroy): a Path snapshotted before a reset is never
        # published after the reset's empty one.
        self._path_lock = threading.Lock()
        self._path_send_lock = threading.RLock()  # also guards the wake and timer handles
        self._path_poses = PathCdr(frame_id, max_poses)
        self._path_pending = False  # poses appended since the last Path message
        self._path_scheduled = False  # the executor was asked for a Path (wake or timer)
        self._path_last_sent = -math.inf  # time.monotonic() of the last non-empty Path
        self._path_period = 1.0 / rate_hz
        self._path_closed = False  # destroy() ran: no Path any more
        self.num_paths = 0  # Path messages published
        group = MutuallyExclusiveCallbackGroup()  # wake and timer never run concurrently
        self._path_wake = node.create_guard_condition(self._on_path_wake, callback_group=group)
        # One-shot (armed by reset(), cancelled when it fires). Steady clock: the rate bounds
        # CPU work, and a paused /clock (use_sim_time) must not hold poses back.
        self._path_timer = node.create_timer(
            self._path_period, self._on_path_timer, callback_group=group,
            clock=Clock(clock_type=ClockType.STEADY_TIME), autostart=False)

    def append(self, pose) -> None:
        """One PoseStamped in this path's frame (worker thread): O(1); the executor
        publishes the Path."""
        stamp, p, q = pose.header.stamp, pose.pose.position, pose.pose.orientation
        with self._path_lock:
            self._path_poses.append(stamp.sec, stamp.nanosec, (p.x, p.y, p.z),
                                    (q.x, q.y, q.z, q.w))
            self._path_pending = True
            wake, self._path_scheduled = not self._path_scheduled, True
        guard = self._path_wake
        if wake and guard is not None:  # at most twice a period: the wake, the timer it arms
            guard.trigger()

    def flush(self) -> None:
        """Make sure the poses appended since the last Path go out. While the node's executor
        publishes the Path (until ``destroy``) they are already on their way, within one
        period: a no-op, never a publication from the caller's thread (the worker calls this
        when idle). After ``destroy`` stopped that, it has published them already."""
        if self._path_wake is None:
            self._send_path()

    def clear(self) -> None:
        """Forget the path (reset) and publish it empty at once, so late joiners see the
        restart; a Path taken before the reset is never published after the empty one."""
        self._send_path(clear=True)

    def records(self):
        """The history's records, oldest first (a stream snapshot's part)."""
        with self._path_lock:
            return self._path_poses.records()

    def state_dict(self):
        """The history as a snapshot part: its records, oldest first (one array)."""
        return np.ascontiguousarray(self.records())

    def load_state_dict(self, records) -> None:
        """Continue a snapshot's history (``state_dict``'s output)."""
        self.load_records(records)

    def load_records(self, records) -> None:
        """Replace the history by ``records`` (a restored snapshot's); published soon."""
        with self._path_lock:
            self._path_poses.load_records(records)
            self._path_pending = True
            wake, self._path_scheduled = not self._path_scheduled, True
        guard = self._path_wake
        if wake and guard is not None:
            guard.trigger()

    def rewrite(self, poses) -> None:
        """Replace the history up to the newest of ``poses`` by ``poses`` (``[(stamp_ns,
        (4, 4) pose in this path's frame)]``, oldest first: a loop's corrected keyframes);
        the poses appended after it stay. Any thread; the records are built before the
        lock, so an append waits only for the swap."""
        if not poses:
            return
        fresh = PathCdr(self._path_poses.frame_id)
        for stamp_ns, T in poses:
            fresh.append(int(stamp_ns) // 1_000_000_000, int(stamp_ns) % 1_000_000_000,
                         T[:3, 3], rotation_to_quaternion(T[:3, :3]))
        last_ns = int(poses[-1][0])
        new = fresh.records()
        with self._path_lock:
            current = self._path_poses.records()  # (n, record_size) uint8
            stamps = current[:, 0:8].copy().view("<i4, <u4").reshape(-1)  # (n,) sec, nanosec
            later = (stamps["f0"].astype(np.int64) * 1_000_000_000 + stamps["f1"]) > last_ns
            self._path_poses.load_records(np.concatenate([new, current[later]]))
            self._path_pending = True
            wake, self._path_scheduled = not self._path_scheduled, True
        guard = self._path_wake
        if wake and guard is not None:
            guard.trigger()

    def destroy(self) -> None:
        """Stop the path wake and timer, publish the poses held back (the last Path of a
        stream holds every pose), then remove the publisher."""
        with self._path_send_lock:  # waits for a Path publication in progress
            wake, timer = self._path_wake, self._path_timer
            self._path_wake = self._path_timer = None
            if timer is not None:
                self._node.destroy_timer(timer)
            if wake is not None:
                self._node.destroy_guard_condition(wake)
        if self._node.context.ok():
            try:
                if self._send_path():  # let reliable readers take it before the writer goes
                    self.path.wait_for_all_acked(Duration(seconds=PATH_FINAL_ACK_S))
            except Exception:  # noqa: BLE001 -- the context went down meanwhile (Ctrl-C)
                pass
        with self._path_send_lock:
            self._path_closed = True
        self._node.destroy_publisher(self.path)

    def _on_path_wake(self) -> None:
        """Poses were added and nothing was scheduled: publish now if the last Path is a
        period old, else arm the timer (it fires one period from now)."""
        with self._path_send_lock:
            with self._path_lock:
                due = time.monotonic() - self._path_last_sent >= self._path_period
            if due or self._path_timer is None:
                self._send_path(scheduled=True)
            else:
                self._path_timer.reset()  # also wakes the executor's wait

    def _on_path_timer(self) -> None:
        with self._path_send_lock:
            if self._path_timer is not None:
                self._path_timer.cancel()  # one shot
            self._send_path(scheduled=True)

    def _send_path(self, clear: bool = False, scheduled: bool = False) -> bool:
        """Publish the history (emptied first if ``clear``) as one Path, if ``clear`` or if
        poses were added since the last one. Its stamp is the last pose's, or now when empty.
        ``scheduled``: called by the wake or the timer, which may be asked again after this."""
        with self._path_send_lock:
            with self._path_lock:
                if scheduled:
                    self._path_scheduled = False
                if clear:
                    self._path_poses.clear()
                if self._path_closed or not (clear or self._path_pending):
                    return False
                self._path_pending = False
                stamp = self._path_poses.last_stamp()
                if stamp is None:
                    now = self._node.get_clock().now().to_msg()
                    stamp = (now.sec, now.nanosec)
                else:
                    self._path_last_sent = time.monotonic()
                data = self._path_poses.serialize(*stamp)  # a copy: appends may go on
            self.path.publish(data)
            self.num_paths += 1
            return True

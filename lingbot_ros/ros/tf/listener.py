"""TfListener: feeds ``/tf`` and ``/tf_static`` into a :class:`~.tree.TransformTree`.

``/tf`` is subscribed reliable, volatile, keep-last 100; ``/tf_static`` reliable,
transient-local, keep-last 100, so a listener that starts late still receives the latched
transforms of e.g. robot_state_publisher. Both callbacks share a mutually exclusive callback
group of their own. A malformed transform (empty frame id, non-finite value, zero quaternion,
a frame as its own parent, or one that would close a loop) is skipped and counted in
``rejected`` (the latest reason in ``last_rejection``); nothing is raised into the executor.
Quaternions of any other norm are normalised.
"""
from __future__ import annotations

import math
from typing import Optional

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from tf2_msgs.msg import TFMessage

from ...geometry import tq_to_matrix
from .tree import TransformTree

__all__ = ["TfListener", "TF_QOS", "TF_STATIC_QOS"]

TF_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100,
                    reliability=ReliabilityPolicy.RELIABLE,
                    durability=DurabilityPolicy.VOLATILE)
TF_STATIC_QOS = QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=100,
                           reliability=ReliabilityPolicy.RELIABLE,
                           durability=DurabilityPolicy.TRANSIENT_LOCAL)
WARN_EVERY_S = 10.0  # throttle of the rejection / reparent warnings


class TfListener:
    """Subscribes ``node`` to /tf and /tf_static and writes every transform into ``tree``."""

    def __init__(self, node, tree: TransformTree, tf_topic: str = "/tf",
                 tf_static_topic: str = "/tf_static") -> None:
        self.tree = tree
        self.rejected = 0
        self.last_rejection: Optional[str] = None
        self._node = node
        self._reparents_seen = tree.reparents
        group = MutuallyExclusiveCallbackGroup()
        self._subscriptions = [
            node.create_subscription(TFMessage, tf_topic, lambda m: self.feed(m, False),
                                     TF_QOS, callback_group=group),
            node.create_subscription(TFMessage, tf_static_topic, lambda m: self.feed(m, True),
                                     TF_STATIC_QOS, callback_group=group),
        ]

    def feed(self, msg, static: bool) -> None:
        """Write the TransformStamped of one TFMessage into the tree (the callbacks' body)."""
        for ts in msg.transforms:
            try:
                self._add(ts, static)
            except Exception as err:  # noqa: BLE001 -- skip it, never raise into the executor
                self.rejected += 1
                self.last_rejection = (f"{ts.header.frame_id!r} -> {ts.child_frame_id!r}: "
                                       f"{err}")
                self._node.get_logger().warning(
                    f"ignoring a transform ({self.rejected} so far): {self.last_rejection}",
                    throttle_duration_sec=WARN_EVERY_S)
        if self.tree.reparents != self._reparents_seen:
            self._reparents_seen = self.tree.reparents
            r = self.tree.last_reparent
            self._node.get_logger().warning(
                f"frame {r.child!r} changed parent {r.old_parent!r} "
                f"({'static' if r.old_static else 'dynamic'}) -> {r.new_parent!r} "
                f"({'static' if r.new_static else 'dynamic'}); are two publishers "
                f"disagreeing about the TF tree?", throttle_duration_sec=WARN_EVERY_S)

    def _add(self, ts, static: bool) -> None:
        tr, rot = ts.transform.translation, ts.transform.rotation
        t = (tr.x, tr.y, tr.z)
        q = (rot.x, rot.y, rot.z, rot.w)
        if not all(math.isfinite(v) for v in t + q):
            raise ValueError("non-finite translation or rotation")
        if not any(q):
            raise ValueError("zero quaternion")
        stamp_ns = ts.header.stamp.sec * 1_000_000_000 + ts.header.stamp.nanosec
        self.tree.set_transform(ts.header.frame_id, ts.child_frame_id, tq_to_matrix(t, q),
                                stamp_ns, static)

    def destroy(self) -> None:
        """Remove the subscriptions (idempotent)."""
        for sub in self._subscriptions:
            self._node.destroy_subscription(sub)
        self._subscriptions = []

"""ImageInput: the node's image subscription, with its reliability chosen to fit the camera.

Why: a best-effort subscription (``sensor_data``) matches every publisher, but with Fast DDS
defaults it loses most large raw images from a camera on the same host: a 640x480 rgb8 image
is ~15 UDP fragments (too big for the default shared-memory segment) and one lost fragment
loses the image. Measured on an idle H200 host at 30 Hz: 84 % of the frames never arrived
best effort, none was lost reliable (docs/performance.md). A reliable subscription, though,
does not match a best-effort publisher at all.

``qos.image: auto`` (default) therefore subscribes reliable when every publisher of the topic
offers reliable (image_transport's default), best effort when any offers best effort (or
there is none yet), and looks again every second: when the publishers change, a subscription
with the fitting reliability is made (logged once per change). The old one is kept until the
new one has matched every publisher, so no image is lost in the hand-over; an image both
deliver meanwhile is passed on once (by stamp). ``sensor_data`` and ``reliable`` fix it.

The aligned depth input of ``scale.source: depth`` is an ``ImageInput`` too (``topic=``,
``label=``): a 640x480 16UC1 image is as many fragments as a colour one (measured on the
H200 host before it was: 790 of 1,487 frames found no depth, docs/performance.md).
"""
from __future__ import annotations

from collections import deque
from typing import Callable, Optional

from rclpy.clock import Clock, ClockType
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from ...image_decode import ImageRejected
from ..params.topics import image_subscription
from .image_cdr import parse_image

AUTO_CHECK_PERIOD_S = 1.0


def fitting_reliability(publisher_reliabilities) -> tuple[ReliabilityPolicy, str]:
    """The reliability ``auto`` picks for publishers offering these policies, and why."""
    offered = list(publisher_reliabilities)
    if not offered:
        return ReliabilityPolicy.BEST_EFFORT, "no publisher yet: best effort matches any"
    if all(r == ReliabilityPolicy.RELIABLE for r in offered):
        return ReliabilityPolicy.RELIABLE, (f"every publisher ({len(offered)}) is reliable: "
                                            "no image lost to a dropped fragment")
    return ReliabilityPolicy.BEST_EFFORT, "a publisher is best effort: only best effort matches"


class ImageInput:
    """Created on activate, destroyed on deactivate (``destroy``)."""

    def __init__(self, node, cfg, callback: Callable, topic: Optional[tuple[str, type]] = None,
                 label: str = "image input",
                 on_malformed: Optional[Callable[[ImageRejected], None]] = None) -> None:
        """``topic``: (resolved name, message type); default the image input's
        (``image_subscription``: remaps, /compressed). ``label`` names it in the log.
        ``on_malformed``: given, and the type is ``sensor_msgs/Image``, the images are taken
        as serialized bytes (``parse_image``: ``callback`` gets a ``RawImage``) and bytes
        that do not parse go to ``on_malformed``."""
        self._node = node
        self._cfg = cfg
        self._callback = callback
        self._label = label
        self.topic, self._msg_type = topic or image_subscription(node, cfg)
        self._on_malformed = on_malformed if self._msg_type is Image else None
        self._sub = None
        self._old_sub = None  # kept during a hand-over, until the new one matched
        self._recent: deque = deque(maxlen=32)  # stamps delivered during a hand-over
        self.reliability = None
        self.why = ""
        self._timer = None
        if cfg.image_qos == "auto":
            self._subscribe(*fitting_reliability(self._offered()))
            self._timer = node.create_timer(  # steady: a paused /clock must not stop it
                AUTO_CHECK_PERIOD_S, self._recheck, clock=Clock(clock_type=ClockType.STEADY_TIME))
        elif cfg.image_qos == "reliable":
            self._subscribe(ReliabilityPolicy.RELIABLE, "qos.image: reliable")
        else:
            self._subscribe(ReliabilityPolicy.BEST_EFFORT, "qos.image: sensor_data")

    def describe(self) -> str:
        """For diagnostics: ``reliable (auto: every publisher (1) is reliable: ...)``."""
        name = "reliable" if self.reliability == ReliabilityPolicy.RELIABLE else "best effort"
        mode = "auto: " if self._cfg.image_qos == "auto" else ""
        return f"{name} ({mode}{self.why})"

    def destroy(self) -> None:
        if self._timer is not None:
            self._node.destroy_timer(self._timer)
            self._timer = None
        for sub in (self._sub, self._old_sub):
            if sub is not None:
                self._node.destroy_subscription(sub)
        self._sub = self._old_sub = None

    def _offered(self) -> list:
        return [info.qos_profile.reliability
                for info in self._node.get_publishers_info_by_topic(self.topic)]

    def _recheck(self) -> None:
        offered = self._offered()
        if self._old_sub is not None and self._sub.get_publisher_count() >= len(offered):
            self._node.destroy_subscription(self._old_sub)  # the new one hears everyone
            self._old_sub = None
        reliability, why = fitting_reliability(offered)
        if reliability != self.reliability:
            self._subscribe(reliability, why)

    def _deliver_raw(self, serialized: bytes) -> None:
        try:
            msg = parse_image(serialized)
        except ImageRejected as exc:
            self._on_malformed(exc)
            return
        self._deliver(msg)

    def _deliver(self, msg) -> None:
        """During a hand-over both subscriptions may deliver an image: pass it on once."""
        if self._old_sub is not None:
            key = (msg.header.stamp.sec, msg.header.stamp.nanosec, msg.header.frame_id)
            if key in self._recent:
                return
            self._recent.append(key)
        self._callback(msg)

    def _subscribe(self, reliability, why: str) -> None:
        if self._old_sub is not None:  # a hand-over still running: the older one goes
            self._node.destroy_subscription(self._old_sub)
        self._old_sub = self._sub
        qos = QoSProfile(depth=self._cfg.image_qos_depth, reliability=reliability)
        raw = self._on_malformed is not None
        self._sub = self._node.create_subscription(
            self._msg_type, self.topic, self._deliver_raw if raw else self._deliver, qos,
            raw=raw)
        changed = self.reliability is not None
        self.reliability, self.why = reliability, why
        self._node.get_logger().info(
            f"{self._label} {self.topic}: {'now ' if changed else ''}{self.describe()}"
            + (" (taken as serialized bytes)" if raw and not changed else ""))

"""The rosbag2 player behind ``lingbot-ros-replay``: :class:`ReplayOptions` (what to play),
:func:`replay` (play it onto ROS 2 in its own rclpy context) and :class:`ReplaySummary`.

Bags are read with ``rosbags``; each message's recorded CDR bytes are published unchanged on
its recorded (or remapped) topic with its recorded type, paced at the recorded receive times
divided by the rate, with /clock from the bag time if asked. Topics of unknown types are
skipped with a warning. The command line is :mod:`lingbot_ros.tools.replay.cli`; see docs/ros.md.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from rosbags.interfaces import QosDurability
from rosbags.rosbag2 import Reader

PROG = "lingbot-ros-replay"
QOS_CHOICES = ("reliable", "sensor")


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """What to play and how. See ``lingbot-ros-replay --help`` for each option."""

    bag: Path
    rate: float = 1.0  # playback speed multiplier
    clock_hz: float = 0.0  # /clock publish rate, wall Hz; 0 = no /clock
    remaps: tuple[tuple[str, str], ...] = ()  # (recorded topic, published topic)
    loop: bool = False
    topics: tuple[str, ...] = ()  # recorded topics to play; empty = all
    qos: str = "reliable"  # 'reliable' (depth `depth`) | 'sensor' (best effort, depth 5)
    depth: int = 10  # keep-last depth of reliable publishers
    wait_for_subscribers: int = 0  # matched subscriptions, summed over topics, before playing
    wait_timeout: float = 10.0  # s
    settle: float = 0.5  # s between the wait and the first message
    linger: float = 0.5  # s to stay up after the last message, so slow readers can drain
    wait_for_all_acked: float = 0.0  # s to wait, then, for reliable readers' acks; 0 = don't
    # ROS arguments (``--ros-args ... [--]``, as launch_ros' Node passes them: node name,
    # namespace, remaps, parameters), handed to rclpy.init unchanged; empty: none.
    ros_args: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not (self.rate > 0 and math.isfinite(self.rate)):
            raise ValueError(f"rate must be a finite number > 0, got {self.rate}")
        if not (self.clock_hz >= 0 and math.isfinite(self.clock_hz)):
            raise ValueError(f"clock_hz must be a finite number >= 0, got {self.clock_hz}")
        if self.qos not in QOS_CHOICES:
            raise ValueError(f"qos must be one of {QOS_CHOICES}, got {self.qos!r}")
        if self.depth < 1 or self.wait_for_subscribers < 0:
            raise ValueError("depth must be >= 1 and wait_for_subscribers >= 0")
        if self.wait_timeout <= 0 or min(self.settle, self.linger, self.wait_for_all_acked) < 0:
            raise ValueError("wait_timeout must be > 0; settle, linger, wait_for_all_acked >= 0")
        for old, new in self.remaps:
            if not old.startswith("/") or not new.startswith("/"):
                raise ValueError(f"remap topics must be absolute, got {old!r}:={new!r}")


@dataclass(slots=True)
class ReplaySummary:
    """What was played: per published topic, messages and bytes; wall and bag spans."""

    messages: dict[str, int] = field(default_factory=dict)
    bytes: dict[str, int] = field(default_factory=dict)
    types: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)  # 'topic (type): why'
    loops: int = 0
    bag_s: float = 0.0  # bag time covered, first to last message, summed over loops
    wall_s: float = 0.0  # wall time from the first to the last message
    stopped_by: Optional[str] = None  # signal name

    def format(self) -> str:
        total = sum(self.messages.values())
        rate = f", {self.bag_s / self.wall_s:.2f}x" if self.wall_s > 0 else ""
        lines = [f"{PROG}: {total} messages on {len(self.messages)} topics in {self.wall_s:.2f} s"
                 f" (bag {self.bag_s:.2f} s{rate}, {self.loops} loop(s))"
                 + (f", stopped by {self.stopped_by}" if self.stopped_by else "")]
        for topic, count in sorted(self.messages.items()):
            hz = f"{(count - 1) / self.wall_s:7.1f} Hz" if self.wall_s > 0 and count > 1 else ""
            lines.append(f"  {topic}  {self.types[topic]}  {count} msgs  {hz}  "
                         f"{self.bytes[topic] / 1e6:.2f} MB")
        lines += [f"  skipped {s}" for s in self.skipped]
        return "\n".join(lines)


class ReplayError(RuntimeError):
    """Nothing was played: ``exit_code`` 2 (nothing playable) or 3 (subscribers timeout)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def replay(options: ReplayOptions, stop: threading.Event, warn=print) -> ReplaySummary:
    """Play the bag once (or until stopped, with loop). Initializes its own rclpy context.

    Args:
        options: what to play.
        stop: set it (e.g. from a signal handler) to stop at the next message or clock tick.
        warn: called with each warning line.
    Returns:
        The summary.
    Raises:
        FileNotFoundError, rosbags.rosbag2.ReaderError: unreadable bag.
        ReplayError: no playable topic (exit_code 2), or --wait-for-subscribers not satisfied
            in time (exit_code 3); nothing was published.
    """
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    summary = ReplaySummary()
    with Reader(options.bag) as reader:
        topics = {t: info for t, info in reader.topics.items()
                  if not options.topics or t in options.topics}
        for missing in sorted(set(options.topics) - set(reader.topics)):
            warn(f"warning: topic {missing} is not in the bag")
        if reader.message_count == 0:
            raise ReplayError(f"{options.bag} holds no messages", 2)
        context = rclpy.Context()
        rclpy.init(args=[PROG, *options.ros_args], context=context,
                   signal_handler_options=SignalHandlerOptions.NO)
        try:
            node = rclpy.create_node(f"lingbot_ros_replay_{os.getpid()}", context=context,
                                     start_parameter_services=False)
            pubs = _make_publishers(node, topics, options, summary, warn)
            if not pubs:
                raise ReplayError("no topic left to play", 2)
            clock = _Clock(node, options.clock_hz) if options.clock_hz > 0 else None
            if clock:
                clock.publish(reader.start_time)
            if not _wait_for_subscribers(pubs, options, stop, clock, reader.start_time):
                raise ReplayError(f"{options.wait_for_subscribers} subscription(s) did not "
                                  f"match within {options.wait_timeout} s", 3)
            start_ns = reader.start_time
            _sleep_until(time.monotonic() + options.settle, stop, clock, lambda _: start_ns)
            last_ns = _play(reader, pubs, options, stop, clock, summary)
            _sleep_until(time.monotonic() + options.linger, stop, clock, lambda _: last_ns)
            if options.wait_for_all_acked > 0 and not stop.is_set():
                _wait_for_acks(pubs, options.wait_for_all_acked, warn)
        finally:
            context.try_shutdown()
    return summary


class _Clock:
    """/clock publisher, ticking at a fixed wall rate (reliable, depth 1: matches any reader)."""

    def __init__(self, node, hz: float) -> None:
        from rclpy.qos import QoSProfile
        from rosgraph_msgs.msg import Clock

        self._msg = Clock()
        self._pub = node.create_publisher(Clock, "/clock", QoSProfile(depth=1))
        self.period = 1.0 / hz
        self.next_tick = time.monotonic()

    def publish(self, bag_ns: int) -> None:
        self._msg.clock.sec, self._msg.clock.nanosec = divmod(int(bag_ns), 1_000_000_000)
        self._pub.publish(self._msg)
        # Missed ticks (a slow loop) are skipped, not caught up in a burst.
        now, tick = time.monotonic(), self.next_tick + self.period
        self.next_tick = tick if tick > now else now + self.period


def _sleep_until(deadline: float, stop: threading.Event, clock: Optional[_Clock],
                 bag_time_at) -> bool:
    """Sleep to ``deadline`` (monotonic s), ticking /clock on the way; False if stopped."""
    while not stop.is_set():
        now = time.monotonic()
        if clock and clock.next_tick <= now:
            clock.publish(bag_time_at(now))
            continue
        if now >= deadline:
            return True
        stop.wait(min(deadline, clock.next_tick if clock else deadline) - now)
    return False


def _wait_for_subscribers(pubs, options, stop, clock, start_ns) -> bool:
    deadline = time.monotonic() + options.wait_timeout
    while sum(p.get_subscription_count() for p, _ in pubs.values()) < options.wait_for_subscribers:
        if time.monotonic() >= deadline:
            return False
        poll = min(time.monotonic() + 0.02, deadline)
        if not _sleep_until(poll, stop, clock, lambda _: start_ns):
            return True  # stopped: fall through to an empty playback and a summary
    return True


def _wait_for_acks(pubs, timeout: float, warn) -> None:
    """Block until reliable readers acknowledged everything (a heartbeat round, ~2 s)."""
    from rclpy.duration import Duration

    deadline = time.monotonic() + timeout
    for publisher, topic in pubs.values():
        left = max(0.0, deadline - time.monotonic())
        if not publisher.wait_for_all_acked(Duration(nanoseconds=int(left * 1e9))):
            warn(f"warning: {topic}: not every subscriber acknowledged the last messages "
                 f"within {timeout} s")


def _play(reader, pubs, options, stop, clock, summary) -> int:
    """Publish the bag's messages on time (looping if asked); returns the last bag time."""
    connections = [c for c in reader.connections if c.topic in pubs]
    first_wall = last_wall = None
    last_ns = reader.start_time
    while not stop.is_set():
        wall0, bag0, bag_first, bag_last = time.monotonic(), reader.start_time, None, None
        bag_time_at = lambda now: bag0 + int((now - wall0) * options.rate * 1e9)  # noqa: E731
        for connection, bag_ns, raw in reader.messages(connections=connections):
            if not _sleep_until(wall0 + (bag_ns - bag0) / 1e9 / options.rate, stop, clock,
                                bag_time_at):
                break
            publisher, topic = pubs[connection.topic]
            publisher.publish(bytes(raw))
            last_wall = time.monotonic()
            first_wall = last_wall if first_wall is None else first_wall
            summary.messages[topic] += 1
            summary.bytes[topic] += len(raw)
            bag_first = bag_ns if bag_first is None else bag_first
            bag_last = last_ns = bag_ns
        if bag_last is not None:
            summary.bag_s += (bag_last - bag_first) / 1e9
            summary.loops += 1
            if clock:
                clock.publish(bag_last)
        if not options.loop or bag_last is None:
            break
    if first_wall is not None:
        summary.wall_s = last_wall - first_wall
    return last_ns


def _make_publishers(node, topics, options, summary, warn) -> dict:
    """Recorded topic -> (publisher, published topic), for topics whose type we have."""
    remap = dict(options.remaps)
    pubs = {}
    for topic, info in sorted(topics.items()):
        out = remap.get(topic, topic)
        try:
            if info.msgtype is None:
                raise ValueError("several types recorded on one topic")
            msg_class = _message_class(info.msgtype)
            qos = _qos(options, info, latched=topic == "/tf_static")
            pubs[topic] = (node.create_publisher(msg_class, out, qos), out)
        except Exception as err:  # noqa: BLE001 -- one bad topic must not stop the others
            summary.skipped.append(f"{topic} ({info.msgtype}): {err}")
            warn(f"warning: skipping {topic} ({info.msgtype}): {err}")
            continue
        summary.messages[out], summary.bytes[out], summary.types[out] = 0, 0, info.msgtype
        hashes = {c.digest for c in info.connections if c.digest.startswith("RIHS01_")}
        installed = _installed_type_hash(info.msgtype)
        if installed and hashes and installed not in hashes:
            warn(f"warning: {topic}: recorded {info.msgtype} differs from this install's "
                 f"definition ({hashes.pop()} vs {installed}); subscribers may misread it")
    return pubs


def _message_class(msgtype: str):
    """'pkg/msg/Name' -> the rclpy message class. ImportError/AttributeError if unknown."""
    package, kind, name = msgtype.split("/")
    try:
        return getattr(importlib.import_module(f"{package}.{kind}"), name)
    except (ImportError, AttributeError) as err:
        raise ImportError(f"message type {msgtype} is not installed ({err})") from None


def _qos(options: ReplayOptions, info, latched: bool):
    """Publisher QoS: the chosen profile; transient-local where the recording was latched."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy, qos_profile_sensor_data

    offered = [q for c in info.connections for q in (getattr(c.ext, "offered_qos_profiles", None)
                                                      or [])]
    if latched or (offered and all(q.durability == QosDurability.TRANSIENT_LOCAL
                                   for q in offered)):
        # /tf_static style: one latched message per broadcaster, so keep all of them.
        return QoSProfile(depth=max(options.depth, min(info.msgcount, 1000)),
                          reliability=ReliabilityPolicy.RELIABLE,
                          durability=DurabilityPolicy.TRANSIENT_LOCAL)
    if options.qos == "sensor":
        return qos_profile_sensor_data
    return QoSProfile(depth=options.depth, reliability=ReliabilityPolicy.RELIABLE)


def _installed_type_hash(msgtype: str) -> Optional[str]:
    """RIHS01 hash from the installed type description (share/<pkg>/<kind>/<Name>.json)."""
    package, kind, name = msgtype.split("/")
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    for prefix in prefixes + [sys.prefix]:
        path = Path(prefix, "share", package, kind, f"{name}.json")
        if path.is_file():
            try:
                hashes = json.loads(path.read_text())["type_hashes"]
                return next(h["hash_string"] for h in hashes if h["type_name"] == msgtype)
            except (ValueError, KeyError, StopIteration):
                return None
    return None

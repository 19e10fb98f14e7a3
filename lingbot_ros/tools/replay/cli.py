"""lingbot-ros-replay BAG: play a rosbag2 (sqlite3 or mcap) onto ROS 2, without ``ros2 bag``.

This module is the command line (:func:`parse_args`, :func:`main`); the player itself
(:class:`~lingbot_ros.tools.replay.player.ReplayOptions`, ``replay``, ``ReplaySummary``) lives in
:mod:`lingbot_ros.tools.replay.player`.

rosbag2_py has no wheels, so this reads bags with ``rosbags`` (a bag directory, or a single
.mcap/.db3 file) and publishes each message's recorded CDR bytes unchanged
(``publisher.publish(bytes(raw))``: no deserialization, byte-identical on the wire) on its
recorded topic with its recorded type, paced at the recorded receive times divided by
``--rate``. ``--clock HZ`` publishes /clock (rosgraph_msgs/Clock) from the bag time, for nodes
run with use_sim_time. A topic whose type this ROS install does not know is skipped with a
warning. SIGINT/SIGTERM stop playback cleanly; a summary is printed either way.

ROS arguments are accepted, so the tool runs as a launch_ros ``Node``:
``lingbot-ros-replay BAG --rate 2 --ros-args -r __node:=player -r /camera/image_raw:=/cam``.
Everything from ``--ros-args`` to ``--`` (or the end) goes to rclpy: node name and namespace,
and topic remaps (recorded topics are absolute, so remap absolute names); the other arguments
are this tool's.

Exit status: 0 played (or stopped by a signal); 2 bad arguments, an unreadable or empty bag,
or no playable topic; 3 not enough subscribers before --wait-timeout. See docs/ros.md.
"""
from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Optional, Sequence

from rclpy.utilities import remove_ros_args

from .player import PROG, QOS_CHOICES, ReplayError, ReplayOptions, replay


def parse_args(argv: Optional[Sequence[str]] = None) -> ReplayOptions:
    """Command line -> ReplayOptions (argparse exits with status 2 on bad arguments)."""
    parser = argparse.ArgumentParser(
        prog=PROG, description="Play a rosbag2 (sqlite3 or mcap) onto ROS 2: recorded bytes, "
        "recorded topics and types, recorded timing. Put BAG first.")
    parser.add_argument("bag", type=Path, help="bag directory, or a single .mcap / .db3 file")
    parser.add_argument("-r", "--rate", type=float, default=1.0, help="speed factor (default 1)")
    parser.add_argument("--clock", type=float, nargs="?", const=100.0, default=0.0,
                        metavar="HZ", help="publish /clock from the bag time (default 100 Hz)")
    parser.add_argument("--remap", action="append", default=[], metavar="FROM:=TO",
                        help="publish recorded topic FROM as TO (repeatable)")
    parser.add_argument("-l", "--loop", action="store_true", help="play until stopped")
    parser.add_argument("--topics", nargs="+", default=[],
                        help="play only these (recorded) topics")
    parser.add_argument("--qos", choices=QOS_CHOICES, default="reliable",
                        help="reliable (default, like most camera drivers) or sensor "
                             "(best effort, depth 5: SensorDataQoS)")
    parser.add_argument("--depth", type=int, default=10,
                        help="keep-last depth of reliable publishers (default 10)")
    parser.add_argument("--wait-for-subscribers", type=int, default=0, metavar="N",
                        help="wait for N matched subscriptions (summed over topics)")
    parser.add_argument("--wait-timeout", type=float, default=10.0, metavar="S",
                        help="give up waiting after S (default 10; exit status 3)")
    parser.add_argument("--settle", type=float, default=0.5, metavar="S",
                        help="pause before the first message, after the wait (default 0.5)")
    parser.add_argument("--linger", type=float, default=0.5, metavar="S",
                        help="stay up after the last message (default 0.5): exiting drops "
                             "what slow subscribers have not taken yet")
    parser.add_argument("--wait-for-all-acked", type=float, default=0.0, metavar="S",
                        help="then wait up to S for every reliable subscriber to acknowledge "
                             "(Fast DDS acks take ~2 s; default: don't)")
    own, ros_args = split_ros_args(sys.argv[1:] if argv is None else argv)
    if ros_args:
        try:  # rcl's own parser checks them (rclpy.init would fail later, mid-setup)
            remove_ros_args([PROG, *ros_args])
        except Exception as err:  # noqa: BLE001 -- rclpy's RCLError: malformed ROS arguments
            parser.error(f"bad ROS arguments: {str(err).splitlines()[0]}")
    args = parser.parse_args(own)
    remaps = []
    for item in args.remap:
        old, sep, new = item.partition(":=")
        if not sep or not old or not new:
            parser.error(f"--remap wants FROM:=TO, got {item!r}")
        remaps.append((_absolute(old), _absolute(new)))
    try:
        return ReplayOptions(bag=args.bag, rate=args.rate, clock_hz=args.clock,
                             remaps=tuple(remaps), loop=args.loop,
                             topics=tuple(_absolute(t) for t in args.topics), qos=args.qos,
                             depth=args.depth, wait_for_subscribers=args.wait_for_subscribers,
                             wait_timeout=args.wait_timeout, settle=args.settle,
                             linger=args.linger, wait_for_all_acked=args.wait_for_all_acked,
                             ros_args=ros_args)
    except ValueError as err:
        parser.error(str(err))


def split_ros_args(argv: Sequence[str]) -> tuple[list[str], tuple[str, ...]]:
    """``(our arguments, ROS arguments)``: every ``--ros-args ... [--]`` section goes to ROS.

    rclpy's remove_ros_args is not used to split: it also takes ROS 1 style ``from:=to``
    words outside any section (deprecated rcl syntax), which are our own ``--remap`` values.
    """
    own: list[str] = []
    ros: list[str] = []
    in_ros = False
    for arg in argv:
        if arg == "--ros-args":
            in_ros = True
            ros.append(arg)
        elif in_ros and arg == "--":
            in_ros = False
            ros.append(arg)
        elif in_ros:
            ros.append(arg)
        else:
            own.append(arg)
    return own, tuple(ros)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Console entry point ``lingbot-ros-replay``; see the module docstring for exit codes."""
    options = parse_args(argv)
    stop = threading.Event()
    stopped_by: list[str] = []

    def on_signal(signum, _frame):
        stopped_by.append(signal.Signals(signum).name)
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    warn = lambda line: print(f"{PROG}: {line}", file=sys.stderr, flush=True)  # noqa: E731
    try:
        summary = replay(options, stop, warn)
    except OSError as err:
        warn(f"error: cannot read {options.bag}: {err}")
        return 2
    except ReplayError as err:
        warn(f"error: {err}")
        return err.exit_code
    except Exception as err:  # rosbags' ReaderError and friends: a bag problem, not a crash
        if type(err).__module__.startswith("rosbags"):
            warn(f"error: cannot read {options.bag}: {err}")
            return 2
        raise
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    summary.stopped_by = stopped_by[0] if stopped_by else None
    print(summary.format(), flush=True)
    return 0


def _absolute(topic: str) -> str:
    return topic if topic.startswith("/") else "/" + topic


if __name__ == "__main__":
    sys.exit(main())

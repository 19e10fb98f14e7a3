#!/usr/bin/env python3
"""ROS 2 smoke test: two processes exchange 10 std_msgs/String messages over DDS on loopback.

    python3 scripts/ros_smoke.py [--count 10] [--timeout 60]

Checks, with whatever interpreter and environment it is started with (a venv made by
scripts/setup_ros.sh, or the bundle of scripts/gpu_ros_bundle.sh sourced through
scripts/gpu_ros_env.sh):
  1. the message packages the node uses import (our lingbot_ros_interfaces and tf2_msgs too);
  2. a subscriber process and a publisher process (this same interpreter) find each other and
     the subscriber receives COUNT messages, in order ("smoke 0" ... "smoke COUNT-1").
Exit status 0 when both children exit 0.

    python3 scripts/ros_smoke.py --node [--device cuda] [--count 10] [--timeout 300]

instead runs the node itself (``python -m lingbot_ros.ros.node``, tiny preset, random weights,
from this checkout) and plays the camera in this process: synthetic rgb8 Images at 10 Hz on
/smoke/image until COUNT poses came back on /lingbot_ros/pose; then SIGINT, and the node must
exit 0. Needs torch (and numpy) in this interpreter. The node's output is shown at the end.

Discovery stays on this machine: ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST and, unless
ROS_DOMAIN_ID is already set, a random domain id are put in the children's environment.
"""
from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import time

TOPIC = "lingbot_ros_smoke"
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _qos(count: int):
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
    # Reliable + transient local, history >= count: a subscriber that is matched late still
    # gets every message.
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=count,
                      reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.TRANSIENT_LOCAL)


def run_sub(count: int, timeout: float) -> int:
    import rclpy
    from std_msgs.msg import String
    rclpy.init()
    node = rclpy.create_node("smoke_sub")
    got: list[str] = []
    node.create_subscription(String, TOPIC, lambda m: got.append(m.data), _qos(count))
    deadline = time.monotonic() + timeout
    try:
        while len(got) < count and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.1)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()
    want = [f"smoke {i}" for i in range(count)]
    if got[:count] != want:
        print(f"sub: FAILED: received {len(got)}/{count}: {got[:count + 2]}", flush=True)
        return 1
    print(f"sub: received {count} messages in order", flush=True)
    return 0


def run_pub(count: int, timeout: float) -> int:
    import rclpy
    from std_msgs.msg import String
    rclpy.init()
    node = rclpy.create_node("smoke_pub")
    pub = node.create_publisher(String, TOPIC, _qos(count))
    deadline = time.monotonic() + timeout
    try:
        while pub.get_subscription_count() < 1 and time.monotonic() < deadline:
            rclpy.spin_once(node, timeout_sec=0.1)
        if pub.get_subscription_count() < 1:
            print("pub: FAILED: no subscriber matched", flush=True)
            return 1
        for i in range(count):
            pub.publish(String(data=f"smoke {i}"))
        acked = pub.wait_for_all_acked(
            rclpy.duration.Duration(seconds=max(1.0, deadline - time.monotonic())))
        print(f"pub: published {count} messages, all acknowledged: {acked}", flush=True)
        return 0 if acked else 1
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


def run_node(count: int, timeout: float, device: str, env: dict) -> int:
    """The node in a child process, this process its camera; ``count`` poses back, clean exit."""
    import numpy as np  # noqa: F401 -- fail here, not in the node, without numpy
    import rclpy
    from geometry_msgs.msg import PoseStamped
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image
    sys.path.insert(0, REPO)
    from lingbot_ros.ros.intake.convert import array_to_image
    from lingbot_ros.tools.synthetic.render import render_sequence
    from std_msgs.msg import Header
    from builtin_interfaces.msg import Time

    width, height, hz, start_ns = 112, 84, 10.0, 1_700_000_000_000_000_000
    seq = render_sequence(40, width, height, fps=hz)
    cmd = [sys.executable, "-m", "lingbot_ros.ros.node", "--ros-args",
           "-p", "model.preset:=tiny", "-p", f"device:={device}", "-p", f"input.width:={width}",
           "-p", "session.num_scale_frames:=2", "-p", "cache.window:=8", "-p", "warmup:=false",
           "-p", "frames.base:=''", "-r", "image:=/smoke/image"]
    log = tempfile.TemporaryFile("w+")
    t0 = time.monotonic()
    node_proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                                 start_new_session=True)
    rclpy.init()
    cam = rclpy.create_node("smoke_camera")
    pub = cam.create_publisher(Image, "/smoke/image",
                               QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    poses: list[float] = []
    cam.create_subscription(PoseStamped, "/lingbot_ros/pose",
                            lambda m: poses.append(time.monotonic()), 100)
    sent, first_sent, next_t, ok = 0, None, time.monotonic(), False
    deadline = t0 + timeout
    try:
        while time.monotonic() < deadline and node_proc.poll() is None:
            rclpy.spin_once(cam, timeout_sec=0.01)
            if len(poses) >= count:
                ok = True
                break
            if time.monotonic() >= next_t and pub.get_subscription_count() > 0:
                t_ns = start_ns + int(sent * 1e9 / hz)
                hdr = Header(stamp=Time(sec=t_ns // 10**9, nanosec=t_ns % 10**9),
                             frame_id="camera_optical_frame")
                pub.publish(array_to_image(seq.images[sent % len(seq.images)], "rgb8",
                                           header=hdr))
                first_sent = first_sent or time.monotonic()
                sent += 1
                next_t = time.monotonic() + 1.0 / hz
    finally:
        cam.destroy_node()
        rclpy.try_shutdown()
        if node_proc.poll() is None:
            node_proc.send_signal(signal.SIGINT)
        try:
            rc = node_proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(node_proc.pid, signal.SIGKILL)
            rc = node_proc.wait()
        log.seek(0)
        out = log.read()
    lines = out.strip().splitlines()
    print("--- node output (last 25 lines) ---\n" + "\n".join(lines[-25:]) + "\n---", flush=True)
    wait_s = (first_sent - t0) if first_sent else float("nan")
    rate = ((len(poses) - 1) / (poses[-1] - poses[0])) if len(poses) > 1 else 0.0
    print(f"node: subscribed after {wait_s:.1f} s, {sent} images sent, {len(poses)} poses "
          f"({rate:.1f} poses/s), exit status {rc}", flush=True)
    passed = ok and rc == 0
    print(f"smoke --node: {'PASSED' if passed else 'FAILED'} ({time.monotonic() - t0:.1f} s)",
          flush=True)
    return 0 if passed else 1


def check_imports() -> None:
    t0 = time.monotonic()
    import rclpy  # noqa: F401
    from builtin_interfaces.msg import Time  # noqa: F401
    from diagnostic_msgs.msg import DiagnosticArray  # noqa: F401
    from geometry_msgs.msg import PoseStamped  # noqa: F401
    from lingbot_ros_interfaces.msg import CacheInfo, TrackingStatus  # noqa: F401
    from lingbot_ros_interfaces.srv import GetCacheInfo, SaveMap, SaveTrajectory  # noqa: F401
    from nav_msgs.msg import Odometry, Path  # noqa: F401
    from rcl_interfaces.msg import SetParametersResult  # noqa: F401
    from rclpy.lifecycle import LifecycleNode  # noqa: F401
    from rosgraph_msgs.msg import Clock  # noqa: F401
    from sensor_msgs.msg import CameraInfo, CompressedImage, Image  # noqa: F401
    from std_msgs.msg import String  # noqa: F401
    from std_srvs.srv import Trigger  # noqa: F401
    from tf2_msgs.msg import TFMessage  # noqa: F401
    # A message round trip through the C type support of our own package.
    TrackingStatus()
    print(f"imports: ok ({time.monotonic() - t0:.2f} s; rclpy from "
          f"{os.path.dirname(rclpy.__file__)})", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", choices=["sub", "pub"], help=argparse.SUPPRESS)
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--timeout", type=float, help="seconds (default 60; --node: 300)")
    ap.add_argument("--node", action="store_true", help="run the node with a camera instead")
    ap.add_argument("--device", default="cpu", help="--node: the node's torch device")
    args = ap.parse_args()
    if args.timeout is None:
        args.timeout = 300.0 if args.node else 60.0
    if args.role:
        # A child stuck in DDS (or its shutdown) shows where, and exits, instead of hanging.
        import faulthandler
        faulthandler.dump_traceback_later(args.timeout + 10, exit=True)
    if args.role == "sub":
        return run_sub(args.count, args.timeout)
    if args.role == "pub":
        return run_pub(args.count, args.timeout)

    env = dict(os.environ)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    env.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))
    os.environ.update(env)
    print(f"smoke: python {sys.version.split()[0]} ({sys.executable}), "
          f"ROS_DOMAIN_ID={env['ROS_DOMAIN_ID']}, RMW_IMPLEMENTATION="
          f"{env.get('RMW_IMPLEMENTATION', '(default)')}", flush=True)
    check_imports()
    if args.node:
        return run_node(args.count, args.timeout, args.device, env)
    t0 = time.monotonic()
    me = [sys.executable, os.path.abspath(__file__), "--count", str(args.count),
          "--timeout", str(args.timeout)]
    sub = subprocess.Popen(me + ["--role", "sub"], env=env)
    pub = subprocess.Popen(me + ["--role", "pub"], env=env)
    rcs = []
    for proc in (sub, pub):
        try:
            rcs.append(proc.wait(timeout=args.timeout + 20))
        except subprocess.TimeoutExpired:
            proc.kill()
            rcs.append(proc.wait())
    ok = rcs == [0, 0]
    print(f"smoke: {'PASSED' if ok else 'FAILED'} (sub rc {rcs[0]}, pub rc {rcs[1]}, "
          f"{time.monotonic() - t0:.1f} s)", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

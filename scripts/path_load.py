#!/usr/bin/env python3
"""Load of ~/path on the node: does a reliable ~/path subscriber slow the node down as the
trajectory grows? (Not part of ``make test``: it takes minutes.)

    ROS_DOMAIN_ID=71 .venv/bin/python scripts/path_load.py [--frames 5000] [--rate 60] \
        [--out f.json] [--no-path-subscriber] [--param NAME:=VALUE ...]

Starts the node (``python -m lingbot_ros.ros.node``, tiny preset with random weights, CPU, one
torch thread, the node tests' small input, 2 anchor frames, a 4-frame window; the default
latest-wins queue of 2 and best-effort image subscription) in a child process. This process's
own rclpy node publishes synthetic rgb8 images at ``--rate`` Hz (a short rendered sequence,
looped, with fresh increasing stamps) while a reliable depth-10 volatile ~/path subscriber
(RViz's Path display profile) and a ~/status subscriber listen. Prints JSON: the input rate
achieved; poses/s, TrackingStatus ``latency_ms`` p50/p99 and ``compute_ms`` p50 over the
frames of the first and of the last 10 % of the input (and poses/s, latency p99 per tenth);
the number of Path messages and their sizes; the node's counters.

Bounded: the whole run stops itself after ``--timeout`` s (the node is stopped with SIGINT,
then killed). ROS traffic stays on loopback: ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST is forced,
ROS_DOMAIN_ID is taken from the environment (71 when unset).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a checkout
NODE = "/lingbot_ros"
IMAGE_TOPIC = "/path_load/image_raw"
START_NS = 1_700_000_000 * 10**9


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--frames", type=int, default=5000, help="images to publish (>= 5000)")
    p.add_argument("--rate", type=float, default=60.0, help="input rate, Hz")
    p.add_argument("--width", type=int, default=56, help="model input width (input.width)")
    p.add_argument("--image-size", default="80x60", help="published image WxH")
    p.add_argument("--loop-frames", type=int, default=120, help="rendered frames, looped")
    p.add_argument("--path-rate-hz", type=float, default=None,
                   help="publish.path_rate_hz for the node (default: the node's)")
    p.add_argument("--param", action="append", default=[],
                   help="extra node parameter NAME:=VALUE (repeatable)")
    p.add_argument("--no-path-subscriber", action="store_true",
                   help="baseline: no ~/path subscriber")
    p.add_argument("--timeout", type=float, default=900.0, help="the run stops after this, s")
    p.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    return p.parse_args(argv)


def percentile(values, q):
    import numpy as np
    return round(float(np.percentile(np.asarray(values, float), q)), 1) if values else None


class Listener:
    """This process's rclpy node: image publisher, ~/path and ~/status subscribers."""

    def __init__(self, path_subscriber: bool = True) -> None:
        self.path_subscriber = path_subscriber
        self.lock = threading.Lock()
        self.status: list[tuple[int, float, float, float]] = []  # stamp, latency, compute, t
        self.paths: list[tuple[int, float]] = []  # (poses, t)
        self.last_status = None

    def start(self) -> None:
        import rclpy
        from nav_msgs.msg import Path as PathMsg
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image

        from lingbot_ros_interfaces.msg import TrackingStatus

        self.context = rclpy.Context()
        rclpy.init(args=[], context=self.context)
        self.node = rclpy.create_node(f"path_load_{os.getpid()}", context=self.context)
        rviz = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE,
                          durability=DurabilityPolicy.VOLATILE)
        if self.path_subscriber:
            self.node.create_subscription(PathMsg, f"{NODE}/path", self._on_path, rviz)
        self.node.create_subscription(
            TrackingStatus, f"{NODE}/status", self._on_status,
            QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
        self.image_pub = self.node.create_publisher(
            Image, IMAGE_TOPIC, QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        while self.context.ok():
            try:
                self.executor.spin_once(timeout_sec=0.05)
            except Exception:  # noqa: BLE001 -- shut down under us
                return

    def _on_path(self, msg) -> None:
        with self.lock:
            self.paths.append((len(msg.poses), time.monotonic()))

    def _on_status(self, msg) -> None:
        stamp = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
        with self.lock:
            self.last_status = msg
            if msg.frames_processed and stamp >= START_NS:
                self.status.append((stamp, float(msg.latency_ms), float(msg.compute_ms),
                                    time.monotonic()))

    def stop(self) -> None:
        self.context.try_shutdown()
        self.thread.join(timeout=5)
        self.executor.shutdown()


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.frames < 10:
        sys.exit("--frames must be at least 10")
    deadline = time.monotonic() + args.timeout
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"  # loopback only
    os.environ.pop("ROS_STATIC_PEERS", None)
    os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 101)))
    os.environ.setdefault("ROS_LOG_DIR", tempfile.mkdtemp(prefix="path_load_log_"))

    from lingbot_ros.ros.intake.convert import array_to_image
    from lingbot_ros.tools.synthetic.render import render_sequence

    w, h = (int(v) for v in args.image_size.lower().split("x"))
    seq = render_sequence(args.loop_frames, w, h, fps=args.rate)
    images = [array_to_image(img, "rgb8") for img in seq.images]
    period_ns = round(1e9 / args.rate)

    # The node tests' tiny configuration (tests/ros/node_harness.py): tens of ms a frame.
    params = {"model.preset": "tiny", "device": "cpu", "input.width": args.width,
              "session.num_scale_frames": 2, "cache.window": 4, "warmup": True,
              "frames.base": "''"}  # a bare camera: no robot TF to wait for
    if args.path_rate_hz is not None:
        params["publish.path_rate_hz"] = args.path_rate_hz
    cmd = [sys.executable, "-m", "lingbot_ros.ros.node", "--ros-args"]
    for name, value in params.items():
        cmd += ["-p", f"{name}:={'true' if value is True else value}"]
    for extra in args.param:
        cmd += ["-p", extra]
    cmd += ["-r", f"image:={IMAGE_TOPIC}"]
    log = tempfile.NamedTemporaryFile("w+", prefix="path_load_node_", suffix=".log",
                                      delete=False)
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    node = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    listener = Listener(path_subscriber=not args.no_path_subscriber)
    result: dict = {"frames_requested": args.frames, "rate_hz": args.rate,
                    "model_input_width": args.width, "image_size": [w, h],
                    "node_params": params, "extra_params": args.param,
                    "path_subscriber": not args.no_path_subscriber,
                    "node_log": log.name}
    sent = 0
    try:
        listener.start()
        # Until the node (configured, warmed up, active) subscribes to the images and
        # publishes ~/status and ~/path.
        while (listener.image_pub.get_subscription_count() < 1
               or listener.node.count_publishers(f"{NODE}/status") < 1
               or listener.node.count_publishers(f"{NODE}/path") < 1):
            if node.poll() is not None:
                raise RuntimeError(f"the node exited with {node.returncode}; see {log.name}")
            if time.monotonic() > deadline:
                raise RuntimeError("the node did not become active in time")
            time.sleep(0.1)
        time.sleep(1.0)  # the node's side of discovery

        t0 = time.monotonic()
        send_times = []
        for i in range(args.frames):
            due = t0 + i / args.rate
            now = time.monotonic()
            if now > deadline:
                result["stopped_early"] = f"timeout after {i} frames"
                break
            if due > now:
                time.sleep(due - now)
            msg = images[i % len(images)]
            stamp = START_NS + i * period_ns
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp, 10**9)
            msg.header.frame_id = "camera_optical_frame"
            listener.image_pub.publish(msg)
            send_times.append(time.monotonic())
            sent += 1
        send_end = time.monotonic()
        # Until the node is idle: no status for 3 s (or the deadline).
        while time.monotonic() < deadline:
            with listener.lock:
                last = listener.status[-1][-1] if listener.status else send_end
            if time.monotonic() - max(last, send_end) > 3.0:
                break
            time.sleep(0.2)
        time.sleep(2.0)  # the last Path (at most a period later)
    finally:
        if node.poll() is None:
            node.send_signal(signal.SIGINT)
            try:
                node.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait(timeout=10)
        if hasattr(listener, "context"):
            listener.stop()

    with listener.lock:
        status, paths, last = list(listener.status), list(listener.paths), listener.last_status
    tenth = max(1, sent // 10)

    def window(lo, hi):
        """Frames sent with index in [lo, hi): poses/s over their input time, latency."""
        rows = [(lat, comp) for s, lat, comp, _ in status
                if lo <= (s - START_NS) // period_ns < hi]
        lat = [r[0] for r in rows]
        span = (send_times[hi - 1] - send_times[lo]) if hi - 1 > lo else 0.0
        return {"frames": hi - lo, "poses": len(lat),
                "poses_per_s": round(len(lat) / (span + 1.0 / args.rate), 2),
                "latency_p50_ms": percentile(lat, 50), "latency_p99_ms": percentile(lat, 99),
                "compute_p50_ms": percentile([r[1] for r in rows], 50)}

    result.update({
        "frames_sent": sent,
        "input_rate_hz": round((sent - 1) / (send_times[-1] - send_times[0]), 2)
        if sent > 1 else None,
        "poses": len(status),
        "first_10pct": window(0, tenth) if sent else None,
        "last_10pct": window(sent - tenth, sent) if sent else None,
        "poses_per_s_by_tenth": [window(k * tenth, min(sent, (k + 1) * tenth))["poses_per_s"]
                                 for k in range(10)] if sent >= 10 else None,
        "latency_p99_ms_by_tenth": [
            window(k * tenth, min(sent, (k + 1) * tenth))["latency_p99_ms"]
            for k in range(10)] if sent >= 10 else None,
        "path_messages": len(paths),
        "path_max_poses_seen": max((n for n, _ in paths), default=0),
        "path_last_poses": paths[-1][0] if paths else 0,
        "path_messages_per_s": round(len(paths) / (paths[-1][1] - paths[0][1]), 2)
        if len(paths) > 1 else None,
        "node_frames_received": int(last.frames_received) if last else None,
        "node_frames_processed": int(last.frames_processed) if last else None,
        "node_frames_dropped": int(last.frames_dropped) if last else None,
        "node_frames_rejected": int(last.frames_rejected) if last else None,
        "node_exit_code": node.returncode,
    })
    text = json.dumps(result, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    return 0 if sent == args.frames and status else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Load and soak of the node over DDS, on loopback: `make soak` (10 minutes by default).

    python scripts/soak.py --minutes 10 --out soak.json

The node runs as its own process (tiny model, CPU, input 112 px); this script is the camera
and the robot's consumers, in another process:
- it calibrates the node's processing rate (20 s at 60 Hz), then publishes images at twice
  that rate for ``--minutes``;
- it subscribes to ~/pose, ~/path (RELIABLE, depth 10, as RViz), ~/status, ~/cache_info and
  /diagnostics, keeping counts only;
- it calls ~/reset every 10 s and times the round trip.

Per minute it records poses/s, the node's RSS, drops by reason and reset round trips, and at
the end checks that nothing grew but the counters (RSS within 10 % of minute 2; poses/s and
latency of the last minute within 25 % of minute 2). Prints a table and writes JSON. Bounded
in time and stops by itself; every packet stays on loopback
(ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST, a random ROS_DOMAIN_ID, set here).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 101)))
for _name in ("ROS_LOCALHOST_ONLY", "ROS_STATIC_PEERS"):
    os.environ.pop(_name, None)

import numpy as np  # noqa: E402

from lingbot_ros.clients.background_node import BackgroundNode  # noqa: E402
from tests.ros.node_data import IMAGE_TOPIC, good_images  # noqa: E402
from tests.ros.node_harness import NODE, NodeProcess, diag_values  # noqa: E402

NODE_PARAMS = {"input.width": 112, "queue_size": 2, "qos.image": "reliable",
               "publish.diagnostics_rate_hz": 2.0, "warmup": True}


class Consumers(BackgroundNode):
    """The robot's side: counts what the node publishes, publishes images, calls reset."""

    def __init__(self) -> None:
        super().__init__("soak_consumers")
        self.lock = threading.Lock()
        self.poses = 0
        self.paths = 0
        self.cache_infos = 0
        self.latencies: list[float] = []  # TrackingStatus.latency_ms since the last take()
        self.diag: dict = {}

    def setup(self, node) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import PoseStamped
        from nav_msgs.msg import Path as PathMsg
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from std_srvs.srv import Trigger

        from lingbot_ros_interfaces.msg import CacheInfo, TrackingStatus
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        node.create_subscription(PoseStamped, f"{NODE}/pose", self._on_pose, reliable)
        node.create_subscription(PathMsg, f"{NODE}/path", self._on_path, reliable)
        node.create_subscription(TrackingStatus, f"{NODE}/status", self._on_status, reliable)
        node.create_subscription(CacheInfo, f"{NODE}/cache_info", self._on_cache, reliable)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, reliable)
        self.image_pub = node.create_publisher(Image, IMAGE_TOPIC, reliable)
        self.reset_client = node.create_client(Trigger, f"{NODE}/reset")

    def _on_pose(self, msg) -> None:
        with self.lock:
            self.poses += 1

    def _on_path(self, msg) -> None:
        with self.lock:
            self.paths += 1

    def _on_cache(self, msg) -> None:
        with self.lock:
            self.cache_infos += 1

    def _on_status(self, msg) -> None:
        if msg.state == msg.STATE_TRACKING:
            with self.lock:
                self.latencies.append(msg.latency_ms)

    def _on_diag(self, msg) -> None:
        values = diag_values(msg)
        if values:
            with self.lock:
                self.diag = values

    def take(self) -> tuple[int, list[float], dict]:
        with self.lock:
            poses, lat, self.latencies = self.poses, self.latencies, []
            return poses, lat, dict(self.diag)

    def reset(self, timeout: float = 30.0) -> float:
        """~/reset round trip in ms."""
        from std_srvs.srv import Trigger
        t0 = time.monotonic()
        future = self.reset_client.call_async(Trigger.Request())
        while not future.done():
            if time.monotonic() - t0 > timeout:
                raise TimeoutError("~/reset did not answer")
            time.sleep(0.001)
        return (time.monotonic() - t0) * 1e3


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def publish_for(consumers: Consumers, images, rate_hz: float, seconds: float, stamp0: int,
                on_tick=None) -> int:
    """Publish cycled images with increasing stamps at ``rate_hz``; returns the next stamp."""
    from builtin_interfaces.msg import Time
    period, t_end = 1.0 / rate_hz, time.monotonic() + seconds
    next_t, stamp, i = time.monotonic(), stamp0, 0
    while time.monotonic() < t_end:
        msg = images[i % len(images)]
        msg.header.stamp = Time(sec=stamp // 10**9, nanosec=stamp % 10**9)
        consumers.image_pub.publish(msg)
        stamp += int(1e9 / rate_hz)
        i += 1
        if on_tick is not None:
            on_tick()
        next_t += period
        time.sleep(max(0.0, next_t - time.monotonic()))
    return stamp


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--reset-every", type=float, default=10.0, help="seconds between resets")
    p.add_argument("--out", default="soak.json")
    args = p.parse_args(argv)
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    images = good_images(30, width=160, height=120)
    report = {"command": "python scripts/soak.py " + " ".join(sys.argv[1:] if argv is None
                                                               else argv),
              "node_params": NODE_PARAMS, "minutes": []}
    with tempfile.TemporaryDirectory() as tmp, \
            NodeProcess(env, Path(tmp), NODE_PARAMS, name="soak_node") as node, \
            Consumers() as consumers:
        deadline = time.monotonic() + 120
        while consumers.image_pub.get_subscription_count() == 0:
            if node.poll() is not None or time.monotonic() > deadline:
                print(node.log()[-3000:], file=sys.stderr)
                return 1
            time.sleep(0.2)
        stamp = 1_700_000_000 * 10**9
        # Until poses and diagnostics flow (discovery of the node's publishers), then 20 s
        # at 60 Hz: the processing rate from the node's own counter.
        while consumers.take()[0] == 0 or "processed" not in consumers.take()[2]:
            if node.poll() is not None or time.monotonic() > deadline:
                print(node.log()[-3000:], file=sys.stderr)
                return 1
            stamp = publish_for(consumers, images, 10.0, 0.5, stamp)
        processed0, t0 = int(consumers.take()[2]["processed"]), time.monotonic()
        stamp = publish_for(consumers, images, 60.0, 20.0, stamp)
        time.sleep(1.0)  # a diagnostics period
        processing_hz = ((int(consumers.take()[2]["processed"]) - processed0)
                         / (time.monotonic() - t0))
        rate = max(2.0, 2.0 * processing_hz)
        report["processing_hz"] = processing_hz
        report["publish_hz"] = rate
        print(f"soak: node processes {processing_hz:.1f} frames/s; publishing at {rate:.1f} Hz "
              f"for {args.minutes:g} min, reset every {args.reset_every:g} s", flush=True)
        resets: list[float] = []
        last_reset = [time.monotonic()]

        def tick() -> None:
            if time.monotonic() - last_reset[0] >= args.reset_every:
                resets.append(consumers.reset())
                last_reset[0] = time.monotonic()

        print(f"{'min':>3} {'poses/s':>8} {'lat p50':>8} {'lat p99':>8} {'RSS MiB':>8} "
              f"{'resets':>6} {'reset p50':>9} {'reset max':>9}  drops", flush=True)
        for minute in range(1, int(np.ceil(args.minutes)) + 1):
            poses_before = consumers.take()[0]
            resets.clear()
            t_start = time.monotonic()
            seconds = min(60.0, args.minutes * 60 - (minute - 1) * 60)
            stamp = publish_for(consumers, images, rate, seconds, stamp, tick)
            poses_after, latencies, diag = consumers.take()
            elapsed = time.monotonic() - t_start
            row = {"minute": minute, "poses_per_s": (poses_after - poses_before) / elapsed,
                   "latency_p50_ms": float(np.percentile(latencies, 50)) if latencies else None,
                   "latency_p99_ms": float(np.percentile(latencies, 99)) if latencies else None,
                   "rss_mib": rss_mib(node.pid), "resets": len(resets),
                   "reset_ms": sorted(round(r, 1) for r in resets),
                   "drops": {k: int(v) for k, v in diag.items()
                             if k.startswith(("dropped_", "rejected_", "restart_"))},
                   "received": int(diag.get("received", 0)),
                   "processed": int(diag.get("processed", 0))}
            report["minutes"].append(row)
            print(f"{minute:>3} {row['poses_per_s']:>8.1f} {row['latency_p50_ms'] or 0:>8.1f} "
                  f"{row['latency_p99_ms'] or 0:>8.1f} {row['rss_mib']:>8.1f} {len(resets):>6} "
                  f"{np.median(resets) if resets else 0:>9.1f} {max(resets, default=0):>9.1f}  "
                  f"{row['drops']}", flush=True)
            if node.poll() is not None:
                print("soak: the node exited\n" + node.log()[-3000:], file=sys.stderr)
                return 1
        with consumers.lock:
            report["path_messages"] = consumers.paths
            report["cache_info_messages"] = consumers.cache_infos
        log = node.log()
        report["node_log_errors"] = [line for line in log.splitlines()
                                     if "[ERROR]" in line or "Traceback" in line][:20]
    rows = report["minutes"]
    ref, last = rows[min(1, len(rows) - 1)], rows[-1]
    checks = {
        "rss_flat": last["rss_mib"] <= 1.10 * ref["rss_mib"],
        "poses_per_s_flat": last["poses_per_s"] >= 0.75 * ref["poses_per_s"],
        "latency_flat": (last["latency_p99_ms"] or 0) <= 1.25 * (ref["latency_p99_ms"] or 0) + 50,
        "no_errors": not report["node_log_errors"],
    }
    report["checks"] = checks
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(f"soak: checks {checks}; wrote {args.out}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

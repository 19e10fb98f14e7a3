#!/usr/bin/env python3
"""The node as a robot runs it: lingbot_ros_node fed by a camera process over DDS, measured.

    python scripts/node_bench.py --device cuda --preset official --out node_bench.json
    python scripts/node_bench.py --preset tiny --width 112 --frames 300 --rates 10,20  # CPU

Three processes on loopback: the node (``python -m lingbot_ros.ros.node``: random weights of
``--preset``, ``--width`` x ``--height`` model input, the fast path on CUDA, every output on);
a camera (this script with ``--camera``: rgb8 ``--image-size`` images, 640x480 as real cameras
send them, so the resize is measured, at each rate of ``--rates`` for ``--frames`` frames,
stamps increasing); and this process, a consumer of every output (pose, odometry, path, TF,
status, camera_info, depth, diagnostics). Per phase (one rate) it reports:

- camera -> pose received latency (the camera's publish time and the pose's receive time,
  both CLOCK_MONOTONIC of this host) p50/p90/p99/max;
- the node's own callback -> published latency (``TrackingStatus.latency_ms``) and its
  compute time (``compute_ms``: the session step), and the ROS overhead per frame, their
  difference (queue wait, decoding, preprocessing, publishing), p50/p99;
- drops by reason and the share of frames processed (the node's counters);
- the node's CPU (user + system, in % of one core, from /proc) and GPU memory (diagnostics);
- latency flatness: p50 of the last 10 % of the phase over the first 10 %;
- stalls (frames whose compute took over 2.5x the median) and what followed them, and the
  node's automatic full garbage collections (``gc``: how many, the longest pause, and the
  frame each was counted at, to set beside the stalls).

``--variants``: the node started afresh once per variant, each with its own extra parameters,
the same phases, in one run (one change at a time against ``base``), e.g.
``--variants "base;gc_freeze=gc_freeze:=true;queue3=queue_size:=3;scale_depth=scale.source:=depth"``
(``NAME`` alone: no extra parameters; several: ``NAME=P:=V+P:=V``). The camera also publishes
a 16UC1 aligned depth image (millimetres, the synthetic scene's metric z-depth, same stamp)
on ``DEPTH_TOPIC``, which the node's ``aligned_depth`` is remapped to, for ``scale.source: depth``.

JSON to ``--out``. Every packet stays on loopback (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST,
a random ROS_DOMAIN_ID), set here for all three processes.
"""
from __future__ import annotations

import argparse
import bisect
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
sys.path.insert(0, str(REPO))
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 101)))
for _name in ("ROS_LOCALHOST_ONLY", "ROS_STATIC_PEERS"):
    os.environ.pop(_name, None)

import numpy as np  # noqa: E402

NODE = "/lingbot_ros"
IMAGE_TOPIC = "/camera/image_raw"
DEPTH_TOPIC = "/camera/aligned_depth_to_color/image_raw"
STAMP0 = 1_700_000_000 * 10**9


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--preset", default="official", help="model.preset (random weights)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--width", type=int, default=504, help="model input width")
    p.add_argument("--height", type=int, default=378, help="model input height")
    p.add_argument("--image-size", default="640x480", help="camera images, WxH (rgb8)")
    p.add_argument("--rates", default="30:3000,60:1500",
                   help="camera phases RATE[:FRAMES] (Hz, frames; default --frames)")
    p.add_argument("--frames", type=int, default=3000, help="frames of a phase without its own")
    p.add_argument("--param", action="append", default=[],
                   help="extra node parameter NAME:=VALUE (repeatable; every variant)")
    p.add_argument("--variants", default="base",
                   help="';'-separated NAME or NAME=P:=V+P:=V: one node start each")
    p.add_argument("--start-timeout", type=float, default=300.0,
                   help="seconds for the node to load, warm up and subscribe")
    p.add_argument("--out", default="node_bench.json")
    p.add_argument("--camera", action="store_true", help=argparse.SUPPRESS)  # child mode
    p.add_argument("--rate", type=float, help=argparse.SUPPRESS)
    p.add_argument("--stamp0", type=int, default=STAMP0, help=argparse.SUPPRESS)
    p.add_argument("--log", help=argparse.SUPPRESS)
    return p.parse_args(argv)


# --- the camera (a child process) ------------------------------------------------------

def camera(args) -> int:
    """Publish ``--frames`` rgb8 images at ``--rate`` once the node subscribes; write
    ``stamp_ns publish_monotonic_ns`` per frame to ``--log``."""
    import rclpy
    from builtin_interfaces.msg import Time
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import Image

    from lingbot_ros.ros.intake.convert import array_to_image
    from lingbot_ros.tools.synthetic.render import render_sequence

    w, h = (int(v) for v in args.image_size.lower().split("x"))
    seq = render_sequence(30, w, h)
    images = [array_to_image(img, "rgb8") for img in seq.images]
    depths = [array_to_image(np.round(d * 1000).clip(0, 65535).astype(np.uint16), "16UC1")
              for d in seq.depths]  # aligned depth in millimetres, as a RealSense sends it
    rclpy.init()
    node = rclpy.create_node("bench_camera")
    # A camera driver's profile (image_transport's default): reliable, keep last 10.
    pub = node.create_publisher(Image, IMAGE_TOPIC,
                                QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE))
    depth_pub = node.create_publisher(Image, DEPTH_TOPIC, QoSProfile(
        depth=10, reliability=ReliabilityPolicy.RELIABLE))
    deadline = time.monotonic() + 60
    while pub.get_subscription_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the subscriber's side of discovery
    period_ns = round(1e9 / args.rate)
    log = open(args.log, "w")
    next_t = time.monotonic_ns()
    for i in range(args.frames):
        msg = images[i % len(images)]
        stamp = args.stamp0 + i * period_ns
        msg.header.stamp = Time(sec=stamp // 10**9, nanosec=stamp % 10**9)
        msg.header.frame_id = "camera_optical_frame"
        depth = depths[i % len(depths)]
        depth.header = msg.header
        if depth_pub.get_subscription_count():
            depth_pub.publish(depth)  # before the colour image: the node pairs them by stamp
        t = time.monotonic_ns()
        pub.publish(msg)
        log.write(f"{stamp} {t}\n")
        next_t += period_ns
        time.sleep(max(0.0, (next_t - time.monotonic_ns()) / 1e9))
    log.close()
    time.sleep(1.0)  # let the last frames go out
    node.destroy_node()
    rclpy.shutdown()
    return 0


# --- the consumer (this process) -------------------------------------------------------

class Consumer:
    """Subscribes to every output; keeps receive times by stamp, statuses and diagnostics."""

    def __init__(self) -> None:
        from lingbot_ros.clients.background_node import BackgroundNode

        outer = self

        class _Node(BackgroundNode):
            def setup(self, node) -> None:
                outer._setup(node)

        self._bg = _Node("bench_consumer", start_parameter_services=False)
        self.lock = threading.Lock()
        self.pose_t: dict[int, int] = {}  # stamp -> receive monotonic ns
        self.status: dict[int, tuple[float, float]] = {}  # stamp -> (latency, compute) ms
        self.counts: dict[str, int] = {}
        self.diag: dict = {}
        # (receive monotonic ns, count) each time the node's gc_full_collections changed
        self.gc_events: list[tuple[int, int]] = []

    def __enter__(self):
        self._bg.__enter__()
        return self

    def __exit__(self, *exc):
        return self._bg.__exit__(*exc)

    def _setup(self, node) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import PoseStamped
        from nav_msgs.msg import Odometry, Path as PathMsg
        from rclpy.qos import QoSProfile, ReliabilityPolicy, qos_profile_sensor_data
        from sensor_msgs.msg import CameraInfo, Image
        from tf2_msgs.msg import TFMessage

        from lingbot_ros_interfaces.msg import TrackingStatus
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        node.create_subscription(PoseStamped, f"{NODE}/pose", self._on_pose, reliable)
        node.create_subscription(TrackingStatus, f"{NODE}/status", self._on_status, reliable)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diag, reliable)
        for topic, msg_type, qos in ((f"{NODE}/odometry", Odometry, reliable),
                                     (f"{NODE}/path", PathMsg, QoSProfile(
                                         depth=10, reliability=ReliabilityPolicy.RELIABLE)),
                                     ("/tf", TFMessage, reliable),
                                     (f"{NODE}/camera_info", CameraInfo, reliable),
                                     (f"{NODE}/depth", Image, qos_profile_sensor_data),
                                     (f"{NODE}/depth/camera_info", CameraInfo, reliable)):
            node.create_subscription(msg_type, topic,
                                     lambda m, k=topic: self._count(k), qos)

    def _count(self, key: str) -> None:
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + 1

    def _on_pose(self, msg) -> None:
        t = time.monotonic_ns()
        s = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
        with self.lock:
            self.pose_t[s] = t

    def _on_status(self, msg) -> None:
        if msg.state != msg.STATE_TRACKING:
            return
        s = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
        with self.lock:
            self.status[s] = (float(msg.latency_ms), float(msg.compute_ms))

    def _on_diag(self, msg) -> None:
        for st in msg.status:
            if st.name.lstrip("/").startswith("lingbot_ros"):
                t = time.monotonic_ns()
                values = {kv.key: kv.value for kv in st.values}
                with self.lock:
                    if values.get("gc_full_collections") != self.diag.get(
                            "gc_full_collections"):
                        self.gc_events.append((t, int(values.get("gc_full_collections", 0))))
                    self.diag = values


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def pct(values, q):
    return float(np.percentile(values, q)) if len(values) else None


def summarise(values) -> dict:
    v = np.asarray(values, float)
    return {"n": int(len(v)), "p50": pct(v, 50), "p90": pct(v, 90), "p99": pct(v, 99),
            "max": float(v.max()) if len(v) else None}


def counters(diag: dict) -> dict:
    out = {}
    for k, v in diag.items():
        if k in ("received", "processed", "rollovers", "gc_full_collections") or k.startswith(
                ("dropped_", "rejected_",
                                                             "failed_", "restart_")):
            try:
                out[k] = int(v)
            except ValueError:
                pass
    return out


def phase(args, consumer: Consumer, node_pid: int, rate: float, frames: int, stamp0: int,
          tmp: Path, env: dict) -> dict:
    log = tmp / f"camera_{rate:g}.log"
    with consumer.lock:
        before = counters(consumer.diag)
    cpu0, t0 = cpu_seconds(node_pid), time.monotonic()
    cam = subprocess.run([sys.executable, __file__, "--camera", "--rate", str(rate),
                          "--frames", str(frames), "--image-size", args.image_size,
                          "--stamp0", str(stamp0), "--log", str(log)], env=env,
                         timeout=frames / rate + 180)
    time.sleep(3.0)  # the last frames through the node, and one diagnostics period
    cpu1, t1 = cpu_seconds(node_pid), time.monotonic()
    with consumer.lock:
        after = counters(consumer.diag)
        pose_t = dict(consumer.pose_t)
        status = dict(consumer.status)
        diag = dict(consumer.diag)
        gc_events = list(consumer.gc_events)
    sent = [tuple(int(x) for x in line.split()) for line in log.read_text().splitlines()]
    e2e, node_lat, compute, overhead, order = [], [], [], [], []
    per_frame = []  # (frame number in the phase, compute ms, overhead ms) of processed frames
    for number, (stamp, t_pub) in enumerate(sent):
        if stamp in pose_t:
            e2e.append((pose_t[stamp] - t_pub) / 1e6)
            order.append(stamp)
        if stamp in status:
            lat, comp = status[stamp]
            node_lat.append(lat)
            compute.append(comp)
            overhead.append(lat - comp)
            per_frame.append((number, comp, lat - comp))
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    n10 = max(1, len(e2e) // 10)
    received, processed = delta.get("received", 0), delta.get("processed", 0)
    return {
        "rate_hz": rate, "frames_sent": len(sent), "camera_exit": cam.returncode,
        "poses_received": len(e2e), "node_received": received, "node_processed": processed,
        "share_processed": processed / received if received else None,
        "drops_by_reason": {k: v for k, v in delta.items()
                            if v and k not in ("received", "processed", "rollovers",
                                               "gc_full_collections")},
        "rollovers": delta.get("rollovers"),
        "latency_camera_to_pose_ms": summarise(e2e),
        "latency_node_ms": summarise(node_lat), "compute_ms": summarise(compute),
        "ros_overhead_ms": summarise(overhead),
        "stalls": stall_attribution(per_frame, len(sent)),
        "gc": gc_attribution(diag, delta, gc_events, sent),
        "latency_last10_over_first10": (float(np.median(e2e[-n10:]) / np.median(e2e[:n10]))
                                        if len(e2e) >= 20 else None),
        "node_cpu_pct_of_one_core": 100.0 * (cpu1 - cpu0) / (t1 - t0),
        "processed_fps": processed / (t1 - t0),
        "gpu_memory_mib": {k: float(v) for k, v in diag.items() if k.startswith("gpu_memory")},
        "attention": diag.get("attention"), "fast_path": diag.get("fast_path"),
        "graph_captures": diag.get("graph_captures"),
    }


def gc_attribution(diag: dict, delta: dict, events, sent) -> dict:
    """The node's automatic full garbage collections in the phase (its /diagnostics
    ``gc_*``): how many, the longest pause since the node started, and for each one the
    number of the last frame sent before the diagnostics that first counted it (the
    collection ran in the half second before: compare with ``stalls``)."""
    def number(value):
        try:
            return float(value)
        except (TypeError, ValueError):
            return None
    t_pub = [t for _, t in sent]  # the camera's publish times, increasing
    near = [bisect.bisect_right(t_pub, t) - 1 for t, _ in events if t_pub and t >= t_pub[0]]
    return {"full_collections": delta.get("gc_full_collections"),
            "pause_max_ms_since_start": number(diag.get("gc_full_pause_max_ms")),
            "frozen_objects": number(diag.get("gc_frozen_objects")),
            "counted_by_frame": near}


def stall_attribution(per_frame, sent: int, after: int = 60) -> dict:
    """Which drops and which ROS overhead follow a stall: a processed frame whose compute
    took over 2.5x the phase's median (a rollover's anchor batch, the first scale phase).
    ``dropped_within_5_of_stall``: frames never processed within 5 frames after a stall
    frame (they arrived while it ran); ``ros_overhead_ms_away_from_stalls``: the overhead of
    the frames more than ``after`` frames after any stall (the backlog drained)."""
    if not per_frame:
        return {}
    median = float(np.median([c for _, c, _ in per_frame]))
    stalls = [(n, round(c, 1)) for n, c, _ in per_frame if c > 2.5 * median]
    processed = {n for n, _, _ in per_frame}
    dropped = [n for n in range(sent) if n not in processed]
    starts = [n for n, _ in stalls]
    near = [d for d in dropped if any(0 < d - s <= 5 for s in starts)]
    away = [o for n, _, o in per_frame if not any(0 <= n - s <= after for s in starts)]
    return {"threshold_ms": round(2.5 * median, 1), "frames": stalls,
            "dropped_frames": dropped, "dropped_within_5_of_stall": len(near),
            f"frames_within_{after}_after_a_stall": len(per_frame) - len(away),
            "ros_overhead_ms_away_from_stalls": summarise(away)}


def parse_variants(text: str) -> list[tuple[str, list[str]]]:
    """``base;gc=gc_freeze:=true;q3=queue_size:=3+gc_freeze:=true`` -> [(name, params)]."""
    out = []
    for item in (v.strip() for v in text.split(";") if v.strip()):
        name, _, params = item.partition("=")
        out.append((name.strip(), [p for p in params.split("+") if p]))
    if not out or len({name for name, _ in out}) != len(out):
        raise SystemExit(f"node_bench: --variants needs distinct names, got {text!r}")
    return out


def run_node(args, extra: list[str], phases, env: dict) -> dict:
    """Start the node with the base and ``extra`` parameters, run every phase, stop it."""
    params = {"model.preset": args.preset, "device": args.device,
              "input.width": args.width, "input.height": args.height,
              "warmup": True, "frames.base": "''", "publish.diagnostics_rate_hz": 2.0}
    cmd = [sys.executable, "-m", "lingbot_ros.ros.node", "--ros-args"]
    for name, value in params.items():
        cmd += ["-p", f"{name}:={'true' if value is True else value}"]
    for item in args.param + extra:
        cmd += ["-p", item]
    cmd += ["-r", f"image:={IMAGE_TOPIC}", "-r", f"aligned_depth:={DEPTH_TOPIC}"]
    report = {"node_params": params, "extra_params": args.param + extra, "phases": []}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        node_log = open(tmp / "node.log", "w")
        node = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=node_log,
                                stderr=subprocess.STDOUT, start_new_session=True)
        try:
            with Consumer() as consumer:
                deadline = time.monotonic() + args.start_timeout
                t_start = time.monotonic()
                while not consumer.diag:  # loaded, warmed up, active: diagnostics flow
                    if node.poll() is not None or time.monotonic() > deadline:
                        print((tmp / "node.log").read_text()[-4000:], file=sys.stderr)
                        report["error"] = "the node did not start"
                        return report
                    time.sleep(0.2)
                report["node_start_s"] = time.monotonic() - t_start
                stamp = STAMP0
                for rate, frames in phases:
                    print(f"node_bench: {frames} frames at {rate:g} Hz ...", flush=True)
                    result = phase(args, consumer, node.pid, rate, frames, stamp, tmp, env)
                    report["phases"].append(result)
                    print(json.dumps(result, indent=1), flush=True)
                    # The next phase's stamps continue (no backwards jump, no 10 s gap).
                    stamp += frames * round(1e9 / rate) + round(1e9 / rate)
                    if node.poll() is not None:
                        break
                with consumer.lock:
                    report["output_messages"] = dict(consumer.counts)
                    report["scale"] = {k: v for k, v in consumer.diag.items()
                                       if k.startswith("scale")}
        finally:
            if node.poll() is None:
                node.send_signal(signal.SIGINT)
                try:
                    node.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    os.killpg(node.pid, signal.SIGKILL)
            node_log.close()
            text = (tmp / "node.log").read_text()
            report["node_exit"] = node.returncode
            report["node_log_errors"] = [line for line in text.splitlines()
                                         if "[ERROR]" in line or "Traceback" in line][:20]
            report["node_log_tail"] = text.splitlines()[-15:]
    return report


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.camera:
        return camera(args)
    # SIGTERM (``timeout``, a CI runner) unwinds like Ctrl-C: each node started here is
    # stopped in run_node's ``finally``, never left running in its ROS domain
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    phases = []
    for item in (r.strip() for r in args.rates.split(",") if r.strip()):
        rate, _, frames = item.partition(":")
        phases.append((float(rate), int(frames) if frames else args.frames))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), "PYTHONUNBUFFERED": "1"}
    report = {"command": "python scripts/node_bench.py " + " ".join(
        sys.argv[1:] if argv is None else argv), "image_size": args.image_size,
        "variants": []}
    for name, extra in parse_variants(args.variants):
        print(f"node_bench: variant {name} {extra}", flush=True)
        result = {"variant": name, **run_node(args, extra, phases, env)}
        report["variants"].append(result)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")  # kept if cut short
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    print(f"node_bench: wrote {args.out}")
    return 0 if all("error" not in v for v in report["variants"]) else 1


if __name__ == "__main__":
    sys.exit(main())

"""lingbot-ros-demo (`make demo`): the node on a synthetic rosbag2, end to end, on loopback.

1. renders a short synthetic rosbag2 (a textured room along a known camera path, ground truth
   beside it); 2. starts ``lingbot_ros_node`` in its own process (tiny preset, random weights
   unless ``--checkpoint``, and it says so) on a robot: the camera sits on base_link
   (robot_state_publisher's /tf_static, played here), so the node publishes
   map -> odom -> base_link; the node's metric scale comes from the bag's aligned depth
   (``scale.source: depth``, ``aligned_depth`` remapped to the bag's 16UC1 topic); 3. replays
   the bag with ``lingbot-ros-replay`` (every frame queued: the numbers do not depend on the
   machine's load); 4. calls ``~/get_cache_info``, ``~/save_trajectory``,
   ``~/save_map`` and ``~/reset``; 5. prints a summary, with the scale as ``~/scale`` last
   said it before the reset. ROS traffic stays on this machine (loopback discovery, a random
   domain).
"""
from __future__ import annotations

import argparse
import math
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

TINY = ["-p", "model.preset:=tiny", "-p", "input.width:=112", "-p",
        "session.num_scale_frames:=4", "-p", "cache.window:=16", "-p",
        "session.rollover_keyframes:=24", "-p", "keyframes.policy:=every_n", "-p",
        "keyframes.n:=2"]


DEPTH_TOPIC = "/camera/aligned_depth_to_color/image_raw"  # the synthetic bag's 16UC1 (mm)

# The demo robot: the camera 0.2 m ahead of base_link and 0.5 m up, looking 10 deg down
# (no lever arm along the view: the ground truth is the camera's path).
CAMERA_HEIGHT_M, CAMERA_PITCH_DEG = 0.5, 10.0


def robot_camera_in_base():
    """4x4 pose of camera_optical_frame in base_link."""
    import numpy as np
    from ..geometry import T_BODY_OPTICAL
    a = math.radians(CAMERA_PITCH_DEG)
    T = np.eye(4)
    T[:3, :3] = [[math.cos(a), 0.0, math.sin(a)], [0.0, 1.0, 0.0],
                 [-math.sin(a), 0.0, math.cos(a)]]  # pitch down about y
    T[:3, 3] = [0.2, 0.0, CAMERA_HEIGHT_M]
    return T @ T_BODY_OPTICAL


def _static_tf() -> list:
    from geometry_msgs.msg import TransformStamped
    from ..geometry import matrix_to_tq
    t, q = matrix_to_tq(robot_camera_in_base()[None])
    msg = TransformStamped(child_frame_id="camera_optical_frame")
    msg.header.frame_id = "base_link"
    tr, rot = msg.transform.translation, msg.transform.rotation
    tr.x, tr.y, tr.z = (float(v) for v in t[0])
    rot.x, rot.y, rot.z, rot.w = (float(v) for v in q[0])
    return [msg]


def _ros_env() -> dict:
    env = dict(os.environ)
    env["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"  # ROS_LOCALHOST_ONLY still multicasts
    env.setdefault("ROS_DOMAIN_ID", str(random.randint(1, 100)))
    env.pop("ROS_LOCALHOST_ONLY", None)
    return env


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lingbot-ros-demo", description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=60, help="frames in the synthetic bag")
    p.add_argument("--out", default="demo_out", help="output folder (default demo_out)")
    p.add_argument("--checkpoint", help="LingBot-Map weights; default: random tiny network")
    p.add_argument("--trust-checkpoint", action="store_true",
                   help="allow full unpickling of the checkpoint (only for a trusted file)")
    p.add_argument("--device", default="cpu")
    p.add_argument("--scale", choices=("depth", "none"), default="depth",
                   help="scale.source: depth (metres from the bag's aligned depth, default) "
                        "or none (model units)")
    args = p.parse_args(argv)
    os.environ.update(_ros_env())  # this process talks ROS too (the probe)
    out = Path(args.out).resolve()
    from ..geometry import PLY_HEADER, TUM_HEADER
    from ..tools.offline.demo import check_demo_out
    from ..tools.out_folder import OurFile, OutRefused
    try:  # before rendering: a new bag, and the node's saves replace only files it wrote
        check_demo_out(out, [OurFile("trajectory.tum", (TUM_HEADER + "\n").encode()),
                             OurFile("map.ply", PLY_HEADER)])
    except OutRefused as exc:
        print(f"[demo] error: {exc}", file=sys.stderr)
        return 2
    from ..tools.synthetic.render import render_sequence
    from ..tools.synthetic.writers import write_bag
    print(f"[demo] rendering {args.frames} frames of a synthetic room (160x120, 30 Hz) ...")
    seq = render_sequence(args.frames, 160, 120)
    bag = write_bag(seq, out / "scene_bag", storage="mcap")
    print(f"[demo] bag {bag.path}, ground truth {bag.gt_path}")
    node_args = [sys.executable, "-m", "lingbot_ros.ros.node", "--ros-args",
                 "-r", "image:=/camera/image_raw", "-p", "qos.image:=reliable",
                 "-p", f"device:={args.device}", "-p", "publish.map_points:=true",
                 "-p", f"files.root:={out}"]  # the saves below go under --out
    node_args += (["-p", f"checkpoint:={args.checkpoint}"] if args.checkpoint else TINY)
    node_args += ["-p", "model.trust_pickle:=true"] if args.trust_checkpoint else []
    node_args += ["-p", f"scale.source:={args.scale}", "-r", f"aligned_depth:={DEPTH_TOPIC}"]
    # Every frame is queued (no latest-wins drops), so that what the summary shows does not
    # depend on the machine's load: at least the last 16 frames find their depth image in
    # the node's buffer however late they are processed, and 10 samples lock the scale.
    queue = min(100, max(2, args.frames))
    node_args += ["-p", f"queue_size:={queue}", "-p", f"qos.image_depth:={queue}"]
    node_env = os.environ.copy()
    if not args.checkpoint:  # the tiny network gains nothing from more threads; OpenMP
        node_env.setdefault("OMP_NUM_THREADS", "1")  # workers spinning on a busy CPU stall it
    node = subprocess.Popen(node_args, env=node_env)
    # SIGTERM unwinds like Ctrl-C: the node is stopped below, never left running
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        from .probe import Probe
        with Probe(static_tf=_static_tf()) as probe:
            last_scale = _LastScale(probe.node)
            if not probe.wait_for_services(timeout=120):
                print("[demo] the node did not come up (see its log above)", file=sys.stderr)
                return 1
            print("[demo] node active; replaying the bag ...")
            t0 = time.monotonic()
            replay = subprocess.run([sys.executable, "-m", "lingbot_ros.tools.replay.cli",
                                     str(bag.path), "--wait-for-subscribers", "1"],
                                    env=os.environ.copy(), timeout=300)
            probe.wait_quiet(idle_s=3.0, timeout=120)
            wall = (probe.last_pose_time or time.monotonic()) - t0
            info = probe.cache_info()
            saved = probe.save_trajectory(str(out / "trajectory.tum"))
            saved_map = probe.save_map(str(out / "map.ply"))
            status, scale = probe.last_status, last_scale.seen()
            reset = probe.reset()
            after = probe.cache_info()
        _summary(args, bag, status, probe.num_poses, wall, info, saved, saved_map, reset,
                 after, replay.returncode, scale)
        from ..tools.view.cli import view_command
        print(f"\nsee it in 3D             {view_command(out)}  (docs/viewer.md)")
    finally:
        node.send_signal(signal.SIGINT)
        try:
            node.wait(timeout=20)
        except subprocess.TimeoutExpired:
            node.kill()
    return 0


def _summary(args, bag, status, num_poses, wall, info, saved, saved_map, reset, after,
             replay_rc, scale) -> None:
    print("\n========== lingbot_ros demo summary ==========")
    print(f"bag frames published     {bag.frames} (replay exit {replay_rc})")
    if status is not None:
        print(f"node received            {status.frames_received}")
        print(f"processed / dropped      {status.frames_processed} / {status.frames_dropped}"
              f"  (rejected {status.frames_rejected})")
    print(f"poses received           {num_poses} in {wall:.1f} s from the start of the replay "
          f"({num_poses / wall:.1f}/s; the bag plays at 30 Hz)")
    if info is not None and info.success:
        i = info.info
        print(f"cache                    {i.frames_cached} frames cached (scale {i.scale_frames} "
              f"+ window {i.window_frames}), {i.special_frames} frames of specials, "
              f"{i.bytes_used / 2**20:.1f} / {i.bytes_reserved / 2**20:.1f} MiB, "
              f"{i.frames_committed} keyframes, {i.frames_rolled_back} rolled back")
    print("TF                       map -> odom -> base_link (the node) -> "
          "camera_optical_frame (/tf_static, the robot)")
    print(f"save_trajectory          {saved.message if saved else 'no answer'}")
    print(f"save_map                 {saved_map.message if saved_map else 'no answer'}")
    if saved is not None and saved.success:
        metric = scale.msg is not None and scale.msg.state == scale.msg.LOCKED
        print("ATE vs ground truth      " + _ape(saved, bag, args.checkpoint, metric))
    print(f"reset                    {reset.message if reset else 'no answer'}")
    if after is not None and after.success:
        print(f"after reset              {after.info.frames_committed} frames committed")
    _scale_summary(args, scale)
    if not args.checkpoint:
        print("NOTE: random weights (no --checkpoint): the poses are NOT meaningful.")


def _scale_summary(args, last: "_ScaleSeen") -> None:
    """The scale as ~/scale said it last before the reset (state, source, value, samples),
    and the frames the source rejected, by reason (/diagnostics)."""
    scale = last.msg
    if scale is None:
        print("scale                    no ~/scale message received")
        return
    names = {scale.UNKNOWN: "UNKNOWN", scale.CONVERGING: "CONVERGING", scale.LOCKED: "LOCKED"}
    locked = scale.state == scale.LOCKED
    held = ("; until the lock pose, TF and odometry were withheld (~/path and the files "
            "cover those frames too)") if scale.source != "none" else ""
    print(f"scale state              {names.get(scale.state, scale.state)} (source "
          f"{scale.source}, {scale.samples} samples, segment {scale.segment}){held}")
    print(f"scale metres_per_unit    {scale.metres_per_unit:.6g} (sigma_log "
          f"{scale.sigma_log:.3g}): " + ("every output and file in metres" if locked else
                                         "outputs in model units, not metres"))
    if last.rejections:
        print("scale rejected frames    " + ", ".join(f"{reason} {n}" for reason, n in
                                                      sorted(last.rejections.items())))
    from ..scale import SOURCES
    sensor_depth = scale.source in SOURCES and SOURCES[scale.source].needs_sensor_depth
    if sensor_depth and not args.checkpoint:
        print("random weights: " + (
            "the sensor/predicted depth ratio is consistent from frame to frame, so the scale "
            "locks, but the predicted depth is not the room's: the value is not meaningful."
            if locked else "the predicted depth is not the room's; the scale did not lock "
            "(samples, sigma_log and the rejections above say why)."))


class _ScaleSeen(NamedTuple):
    msg: object  # the last lingbot_ros_interfaces/ScaleEstimate, or None
    rejections: dict  # reason -> count (strings, from /diagnostics), the non-zero ones


class _LastScale:
    """The node's last ``~/scale`` message and the scale rejection counts of its last
    /diagnostics (subscriptions added to the probe's node)."""

    def __init__(self, node, ns: str = "/lingbot_ros") -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from lingbot_ros_interfaces.msg import ScaleEstimate
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        self.msg = None
        self.rejections: dict[str, str] = {}
        qos = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        node.create_subscription(ScaleEstimate, f"{ns}/scale", self._on_scale, qos)
        node.create_subscription(DiagnosticArray, "/diagnostics", self._on_diagnostics, qos)

    def seen(self) -> "_ScaleSeen":
        """What was received so far (taken before the demo's reset)."""
        return _ScaleSeen(self.msg, dict(self.rejections))

    def _on_scale(self, msg) -> None:
        self.msg = msg

    def _on_diagnostics(self, msg) -> None:
        for status in msg.status:
            values = {kv.key: kv.value for kv in status.values}
            if "scale_state" in values:
                self.rejections = {k[len("scale_rejected_"):]: v for k, v in values.items()
                                   if k.startswith("scale_rejected_") and v != "0"}


def _ape(saved, bag, checkpoint, metric: bool = False) -> str:
    if not checkpoint:
        return "skipped (random weights; pass --checkpoint for a meaningful number)"
    from ..geometry import read_tum
    from ..geometry import ate_rmse
    est_s, est = read_tum(saved.message.split(" to ")[-1])
    gt_s, gt = read_tum(bag.gt_path)
    common = sorted(set(est_s.tolist()) & set(gt_s.tolist()))
    # The node's TUM holds base_link in map: the camera is base_link's camera extrinsic on.
    camera = robot_camera_in_base()
    e = {s: p @ camera for s, p in zip(est_s.tolist(), est)}
    g = {s: p for s, p in zip(gt_s.tolist(), gt)}
    # the ground truth is in the first optical frame, the estimate in map: a Sim(3)
    # alignment absorbs the fixed transform between the two
    est_c, gt_c = [e[s][:3, 3] for s in common], [g[s][:3, 3] for s in common]
    text = f"{ate_rmse(est_c, gt_c):.4f} (Sim(3)-aligned RMSE over {len(common)} poses)"
    if metric:  # the node's metres against the room's: no scale in the alignment
        text += f", {ate_rmse(est_c, gt_c, align='se3'):.4f} m SE(3)-aligned"
    return text


if __name__ == "__main__":
    sys.exit(main())

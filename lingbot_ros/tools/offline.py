"""lingbot-ros-offline: run a recording through the streaming session, no ROS needed.

    lingbot-ros-offline INPUT [--topic /camera/image_raw] [--out out/] [--checkpoint W.pt]

INPUT is an image folder, a video file, or a rosbag2 (sqlite3 or mcap; sensor_msgs/Image or
CompressedImage). Writes ``trajectory.tum`` (evo-readable), ``summary.json`` and optionally
``points.ply`` (keyframe depth, confidence-filtered) and ``trajectory.png``. Without
``--checkpoint`` the network has random weights and the poses mean nothing (it says so).
Bad frames are skipped, counted and reported; the run never stops on one.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

from ..config import (ATTENTION_BACKENDS, FLASHINFER_VARIANTS, KEYFRAME_POLICIES, KeyframeConfig,
                      PreprocessConfig, SessionConfig)
from ..session import (PRESETS, FrameRejected, PointAccumulator, ate_rmse, frame_points,
                       open_session, write_ply)
from .frame_sources import open_source

log = logging.getLogger("lingbot_ros.offline")
RANDOM_WEIGHTS_NOTICE = (
    "*** NO CHECKPOINT: the network has RANDOM weights; poses, depth and points are NOT "
    "meaningful. Pass --checkpoint lingbot-map.pt for real estimates. ***")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="lingbot-ros-offline", description=__doc__.splitlines()[0])
    p.add_argument("input", help="image folder, video file or rosbag2 (dir, .db3 or .mcap)")
    p.add_argument("--topic", help="image topic of a bag (default: the only image topic)")
    p.add_argument("--fps", type=float, default=30.0, help="image folder: frame rate for stamps")
    p.add_argument("--out", default="lingbot_out", help="output folder (default lingbot_out)")
    p.add_argument("--checkpoint", help="LingBot-Map weights (.pt or .safetensors)")
    p.add_argument("--preset", choices=PRESETS, default="tiny",
                   help="network size without a checkpoint (default tiny)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--backend", choices=ATTENTION_BACKENDS, default="auto",
                   help="attention backend (auto: flashinfer on CUDA when installed, else "
                   "torch_ref)")
    p.add_argument("--variant", choices=FLASHINFER_VARIANTS, default="auto",
                   help="flashinfer variant (auto: fa3 on Hopper, else fa2)")
    p.add_argument("--width", type=int, default=518, help="model input width (multiple of 14)")
    p.add_argument("--height", type=int, help="fixed model input height (default: from aspect)")
    p.add_argument("--scale-frames", type=int, default=8, help="anchor frames (start-up)")
    p.add_argument("--window", type=int, default=64, help="frames of full context")
    p.add_argument("--keyframes", choices=KEYFRAME_POLICIES, default="all")
    p.add_argument("--keyframe-n", type=int, default=2, help="every_n interval")
    p.add_argument("--flow-threshold", type=float, default=10.0, help="flow policy, pixels")
    p.add_argument("--max-gap", type=int, default=30, help="flow policy: max frames between")
    p.add_argument("--rollover", type=int, default=320,
                   help="keyframes per window before a new aligned window (0: never)")
    p.add_argument("--ply", action="store_true", help="write points.ply from keyframe depth")
    p.add_argument("--ply-stride", type=int, default=4, help="pixel stride for points")
    p.add_argument("--min-conf", type=float, default=1.5, help="depth confidence threshold")
    p.add_argument("--plot", action="store_true", help="write trajectory.png (needs matplotlib)")
    p.add_argument("--gt", help="ground-truth TUM file: report the Sim(3)-aligned ATE")
    p.add_argument("--max-frames", type=int, help="stop after this many input frames")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def session_config(args) -> SessionConfig:
    return SessionConfig(
        num_scale_frames=args.scale_frames, window=args.window,
        rollover_keyframes=args.rollover or None,
        keyframes=KeyframeConfig(policy=args.keyframes, n=args.keyframe_n,
                                 flow_threshold=args.flow_threshold, max_gap=args.max_gap),
        preprocess=PreprocessConfig(width=args.width, height=args.height),
        with_depth=True, return_depth=args.ply, attention_backend=args.backend,
        flashinfer_variant=args.variant, device=args.device)


def _progress(total, disabled):
    try:
        from tqdm import tqdm
    except ImportError:  # optional: plain runs still work
        return None
    return tqdm(total=total, unit="frame", disable=disabled, dynamic_ncols=True)


def run(args) -> dict:
    config = session_config(args)
    source = open_source(args.input, topic=args.topic, fps=args.fps)
    session, random_weights = open_session(config, args.preset, args.checkpoint)
    if random_weights:
        log.warning(RANDOM_WEIGHTS_NOTICE)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    points = PointAccumulator() if args.ply else None
    total = len(source) if hasattr(source, "__len__") else None
    bar = _progress(args.max_frames or total, args.no_progress)
    peak = {"bytes_reserved": 0, "tokens_visible": 0}
    t0 = time.perf_counter()
    frames_read = 0
    for frame in source:
        if args.max_frames is not None and frames_read >= args.max_frames:
            break
        frames_read += 1
        try:
            results = session.push(frame.image, frame.stamp_ns, frame.encoding)
        except FrameRejected as exc:
            log.warning("frame at %d ns skipped: %s", frame.stamp_ns, exc)
            results = []
        for r in results:
            if points is not None and r.keyframe:
                points.add(*frame_points(r, args.ply_stride, args.min_conf))
        cache = session.info()["cache"]
        if cache:
            for key in peak:
                peak[key] = max(peak[key], cache[key])
        if bar is not None:
            bar.update(1)
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    info = session.info()
    summary = {
        "input": str(args.input), "random_weights": random_weights,
        "checkpoint": args.checkpoint, "preset": None if args.checkpoint else args.preset,
        "frames_read": frames_read, "frames_skipped_by_source": source.stats.total_skipped,
        "source_skipped_by_reason": dict(source.stats.skipped),
        "frames_rejected_by_session": info["rejected_by_reason"],
        "frames_processed": info["frames_processed"], "keyframes": info["keyframes"],
        "non_keyframes": info["non_keyframes"], "rollovers": info["rollovers"],
        "fps": info["frames_processed"] / wall if wall > 0 else None, "wall_s": wall,
        "latency_ms": info["latency_ms"], "model_hw": info["model_hw"],
        "cache_peak": peak, "outputs": {},
    }
    tum = session.trajectory.save_tum(out / "trajectory.tum")
    summary["outputs"]["trajectory"] = str(tum)
    if args.gt:
        summary["ape_rmse_sim3"] = _ape(session, args.gt)
    if points is not None:
        xyz, rgb = points.arrays()
        write_ply(out / "points.ply", xyz, rgb)
        summary["outputs"]["points"] = str(out / "points.ply")
        summary["num_points"] = int(len(xyz))
    if args.plot:
        from .plot import plot_trajectory
        gt = _gt_centres(args.gt) if args.gt else None
        plot_trajectory(out / "trajectory.png", session.trajectory.poses[:, :3, 3], gt,
                        title=Path(args.input).name + (" (random weights)" if random_weights
                                                       else ""))
        summary["outputs"]["plot"] = str(out / "trajectory.png")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    return summary


def _gt_centres(path) -> np.ndarray:
    from ..session.poses import read_tum
    _, poses = read_tum(path)
    return poses[:, :3, 3]


def _ape(session, gt_path) -> float | None:
    """Sim(3)-aligned ATE RMSE, associating poses by exact stamp."""
    from ..session.poses import read_tum
    gt_stamps, gt_poses = read_tum(gt_path)
    est = dict(zip(session.trajectory.stamps_ns.tolist(), session.trajectory.poses))
    pairs = [(est[s][:3, 3], p[:3, 3]) for s, p in zip(gt_stamps.tolist(), gt_poses) if s in est]
    if len(pairs) < 3:
        log.warning("fewer than 3 estimated poses share a stamp with %s: no ATE", gt_path)
        return None
    e, g = (np.array(x) for x in zip(*pairs))
    return float(ate_rmse(e, g, align="sim3"))


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        summary = run(args)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        log.error("%s", exc)
        return 2
    print(json.dumps({k: summary[k] for k in ("frames_read", "frames_processed", "keyframes",
                                             "rollovers", "fps", "outputs")}, default=str))
    if summary["random_weights"]:
        log.warning(RANDOM_WEIGHTS_NOTICE)
    return 0


if __name__ == "__main__":
    sys.exit(main())

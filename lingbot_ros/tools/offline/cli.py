"""lingbot-ros-offline: run a recording through the streaming session, no ROS needed.

    lingbot-ros-offline INPUT [--out out/] [--checkpoint W.pt] [--plot] [--ply]

INPUT is a dataset sequence as published (TUM RGB-D, EuRoC MAV, KITTI odometry, 7-Scenes:
detected from its layout, or ``--format``), an image folder (stamps from the file names or
``--fps``), a video file, or a rosbag2 (sqlite3 or mcap; sensor_msgs/Image or
CompressedImage). Writes ``trajectory.tum`` (evo-readable; the first camera's optical frame
as world, named in its header), ``summary.json`` (settings, version, checkpoint hash, stamp
range, evaluation), with ground truth (the dataset's, or ``--gt``) ``groundtruth.tum`` (the
same camera, TUM) and ATE/RPE as evo computes them, and optionally ``points.ply``
(keyframe depth, confidence-filtered, one point per voxel: the node's map, finer and larger)
and ``trajectory.png`` (aligned over the ground
truth). Without ``--checkpoint`` the network has random weights and the poses mean nothing
(it says so). Bad frames are skipped, counted and reported; the run never stops on one.

Units: the model's are arbitrary (monocular). ``--scale fixed:K|depth|camera_height[:H]``
(:mod:`lingbot_ros.tools.offline.scale_args`) estimates metres per model unit over the run and
converts the trajectory, the points and the evaluation once, at write time, with the final
estimate (the summary then also has the SE(3) ATE in metres). Every file states its units,
the scale source and the value in its header; a scale that never locks leaves the files in
model units, and they and the summary say so.

``--out`` is checked before the run (it replaces only files we wrote); exit 0, 2 (nothing
run), 3 (a truncated bag: the frames before the cut), 130 (Ctrl-C): :mod:`.outputs`.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Optional

import numpy as np

from ... import __version__
from ...config import (ATTENTION_BACKENDS, FLASHINFER_VARIANTS, HEAD_PRECISIONS,
                      KEYFRAME_POLICIES, ROLLOVER_MODES, KeyframeConfig, PreprocessConfig,
                      SessionConfig)
from ...geometry import VoxelMap, frame_points, read_tum, write_atomic, write_ply, write_tum
from ...scale import ScaleConfig
from ...session import (PRESETS, FrameRejected, StreamingSession,
                       load_session_model)
from ..metrics.trajectory import evaluate
from ..out_folder import check_out_folder
from ..sources.datasets import FORMATS, open_dataset
from ..sources.frame import Strided
from .outputs import (EXIT_ENDED_EARLY, EXIT_FAILED, EXIT_INTERRUPTED, SUMMARY_BEGINS,
                      SUMMARY_FORMAT, RunState, checkpoint_identity, planned_outputs,
                      progress_bar, settings_of, source_total, stamp_range)
from .run_spec import OfflineRun
from .loop_run import OfflineLoop, add_loop_args, check_loop_options, reoptimize
from .save_resume import OfflineSnapshots, add_snapshot_args
from .scale_args import (OfflineScale, add_scale_args, parse_scale, parse_scale_params,
                            scale_config)
from ..view.live import add_view_args, offline_view

log = logging.getLogger("lingbot_ros.offline")
SESSION_DEFAULTS = SessionConfig()  # the session's own defaults, for those not set here
RANDOM_WEIGHTS_NOTICE = (
    "*** NO CHECKPOINT: the network has RANDOM weights; poses, depth and points are NOT "
    "meaningful. Pass --checkpoint lingbot-map.pt for real estimates. ***")
GT_FRAME = "the dataset's camera (the images read) in the dataset's world"
GT_UNITS = ["units: the dataset's (metres for TUM RGB-D, EuRoC, KITTI, 7-Scenes)"]
TRAJECTORY_FRAME = ("camera_optical (x right, y down, z forward) in world = the first "
                    "frame's camera_optical")


def add_input_args(p: argparse.ArgumentParser) -> None:
    """How a sequence is read, and its ground truth (shared with lingbot-ros-eval)."""
    p.add_argument("--format", choices=("auto",) + FORMATS, default="auto",
                   help="input layout; auto: detected (rgb.txt: tum_rgbd, mav0/: euroc, "
                   "image_2/ + times.txt: kitti, frame-*.color.png: seven_scenes, else a "
                   "folder, video or bag)")
    p.add_argument("--stamps", choices=("auto", "filename", "fps"), default="auto",
                   help="image folders: stamps from the file names (seconds like "
                   "1305031102.175304, or integer ns) or from --fps; auto: the names when "
                   "every one is a time")
    p.add_argument("--fps", type=float, default=30.0,
                   help="frame rate for stamps where the input has none (folders of "
                   "frame_001.png, 7-Scenes, videos without timestamps)")
    p.add_argument("--stride", type=int, default=1, help="run every N-th frame of the input "
                   "(the first, then every N on; a benchmark's frame sampling)")
    p.add_argument("--topic", help="image topic of a bag (default: the only image topic)")
    p.add_argument("--gt", help="ground-truth TUM file of the camera (default: the dataset's "
                   "own, when it has one)")
    p.add_argument("--max-diff", type=float, default=0.01,
                   help="association: largest stamp difference between an estimate and its "
                   "ground-truth pose, seconds (evo's --t_max_diff)")
    p.add_argument("--offset", type=float, default=0.0,
                   help="association: seconds added to the estimate's stamps (evo's "
                   "--t_offset)")


def add_model_args(p: argparse.ArgumentParser) -> None:
    """The network and the streaming session (shared with lingbot-ros-eval)."""
    p.add_argument("--checkpoint", help="LingBot-Map weights (.pt or .safetensors); without "
                   "it, random weights")
    p.add_argument("--trust-checkpoint", action="store_true",
                   help="allow full unpickling of a .pt that the safe loader refuses (runs "
                   "code from the file: only for a trusted file; better convert it once with "
                   "lingbot-ros-convert-checkpoint)")
    p.add_argument("--preset", choices=PRESETS, default="tiny",
                   help="network size without a checkpoint")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--camera-head-precision", choices=HEAD_PRECISIONS, default="fp32",
                   help="camera head: fp32 (the reference) | bf16 (faster on a GPU, pose "
                   "within ~1e-2)")
    p.add_argument("--backend", choices=ATTENTION_BACKENDS, default="auto",
                   help="attention backend (auto: flashinfer on CUDA when installed, else "
                   "torch_ref)")
    p.add_argument("--variant", choices=FLASHINFER_VARIANTS, default="auto",
                   help="flashinfer variant (auto: fa3 on Hopper, else fa2)")
    p.add_argument("--width", type=int, default=518, help="model input width (multiple of 14)")
    p.add_argument("--height", type=int, help="fixed model input height (default: from the "
                   "aspect)")
    p.add_argument("--scale-frames", type=int, default=8, help="anchor frames (start-up)")
    p.add_argument("--window", type=int, default=64, help="frames of full context")
    p.add_argument("--keyframe-n", type=int, default=2, help="every_n interval")
    p.add_argument("--flow-threshold", type=float, default=10.0, help="flow policy, pixels")
    p.add_argument("--max-gap", type=int, default=30, help="flow policy: max frames between "
                   "keyframes")
    p.add_argument("--rollover", type=int, default=320,
                   help="keyframes per segment before a new aligned one (0: never)")
    p.add_argument("--rollover-mode", choices=ROLLOVER_MODES,
                   default=SESSION_DEFAULTS.rollover_mode,
                   help="how a rollover's anchor step runs (the node's "
                   "session.rollover_mode): blocking (on the frame that ends the segment) or "
                   "sliced (beside the stream, a few blocks per frame; a node at camera rate "
                   "runs it so)")
    p.add_argument("--rollover-slices", type=int,
                   default=SESSION_DEFAULTS.rollover_slices_per_frame,
                   help="sliced rollovers: anchor-step slices run per frame")
    p.add_argument("--max-frames", type=int, help="stop after this many input frames")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="lingbot-ros-offline", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("input", help="dataset sequence, image folder, video file or rosbag2 "
                   "(dir, .db3 or .mcap)")
    p.add_argument("--out", default="lingbot_out", help="output folder")
    add_input_args(p)
    add_model_args(p)
    p.add_argument("--keyframes", choices=KEYFRAME_POLICIES, default="all",
                   help="keyframe policy")
    p.add_argument("--ply", action="store_true", help="write points.ply from keyframe depth")
    p.add_argument("--ply-stride", type=int, default=4, help="pixel stride for points")
    p.add_argument("--ply-voxel", type=float, default=0.005, help="points.ply keeps one point "
                   "per voxel of this edge (model units), the first one seen: finer than the "
                   "points of one keyframe, so it drops mostly re-observations")
    p.add_argument("--ply-max-points", type=int, default=2_000_000, help="points.ply's bound: "
                   "beyond it the voxel edge doubles (the map coarsens, it forgets no place)")
    p.add_argument("--min-conf", type=float, default=1.5, help="depth confidence threshold")
    p.add_argument("--plot", action="store_true", help="write trajectory.png: the estimate "
                   "Sim(3)-aligned over the ground truth (SE(3)-aligned, the scale kept, "
                   "with a locked metric --scale) (top and side views), the ATE over "
                   "time, keyframes marked (needs matplotlib)")
    add_scale_args(p)
    add_snapshot_args(p)
    add_loop_args(p)
    add_view_args(p)
    return p.parse_args(argv)


def session_config(args, return_depth: Optional[bool] = None) -> SessionConfig:
    """``return_depth``: the results carry the predicted depth (default: for ``--ply``);
    ``--loop-closure`` adds the depth and the patch features the back end keeps."""
    loop = getattr(args, "loop_closure", False) or bool(getattr(args, "localize_in", None))
    return SessionConfig(
        num_scale_frames=args.scale_frames, window=args.window,
        rollover_keyframes=args.rollover or None,
        rollover_mode=args.rollover_mode, rollover_slices_per_frame=args.rollover_slices,
        keyframes=KeyframeConfig(policy=args.keyframes, n=args.keyframe_n,
                                 flow_threshold=args.flow_threshold, max_gap=args.max_gap),
        preprocess=PreprocessConfig(width=args.width, height=args.height),
        with_depth=True,
        return_depth=(getattr(args, "ply", False) if return_depth is None else return_depth)
        or loop, return_features=loop,
        attention_backend=args.backend, flashinfer_variant=args.variant, device=args.device)


def check_before_run(args) -> None:
    """What would fail only after the whole sequence: fail now instead. ``--out``: a folder
    we can write in (or can create), where each output is absent or one we wrote
    (:func:`~lingbot_ros.tools.out_folder.check_out_folder`; OutRefused says why not)."""
    check_options(args)
    check_out_folder(args.out, planned_outputs(args))


def check_options(args) -> None:
    """The options that can fail a run: ``--plot``'s matplotlib, ``--gt``, ``--scale``."""
    if getattr(args, "plot", False):
        from ..metrics.plot import require_matplotlib
        require_matplotlib()
    if args.gt and not Path(args.gt).is_file():
        raise FileNotFoundError(f"--gt {args.gt} does not exist")
    if getattr(args, "stride", 1) < 1:
        raise ValueError(f"--stride must be >= 1, got {args.stride}")
    check_loop_options(args)
    choice = parse_scale(getattr(args, "scale", "none") or "none")
    ScaleConfig(source=choice.source, factor=choice.factor or 1.0,  # checks the values
                **parse_scale_params(getattr(args, "scale_param", None)))


def point_map(args) -> Optional[VoxelMap]:
    """The accumulator of ``points.ply`` (with ``--ply``): the node's bounded voxel map, with a
    finer voxel and a larger bound by default. ValueError for a bad voxel edge or bound."""
    if not getattr(args, "ply", False):
        return None
    return VoxelMap(args.ply_voxel, args.ply_max_points)


def load_model(args):
    """``(model, random_weights)`` for the run ``args`` (an :class:`OfflineRun`; one load
    can serve several runs)."""
    model, random_weights = load_session_model(
        session_config(args), args.preset, args.checkpoint,
        camera_head_precision=args.camera_head_precision,
        trust_pickle=getattr(args, "trust_checkpoint", False))
    if random_weights:
        log.warning(RANDOM_WEIGHTS_NOTICE)
    return model, random_weights


def run(args: OfflineRun, model=None, state: Optional[RunState] = None) -> dict:
    """One sequence through a fresh session; writes the outputs and returns the summary.
    ``model``: ``(model, random_weights)`` from :func:`load_model` (else loaded here);
    ``state``: follows the run (for the line an interruption ends on). Raises
    :class:`~.run_spec.OfflineRunError` (CannotResume, BadRunOptions), OSError, ValueError."""
    if not isinstance(args, OfflineRun):
        raise TypeError(f"run() takes an OfflineRun, not {type(args).__name__}")
    state = state if state is not None else RunState(str(args.out))
    check_before_run(args)
    points = point_map(args)
    dataset = open_dataset(args.input, args.format, args.stamps, args.fps, args.topic,
                           depth_topic=args.depth_topic)
    log.info("%s", dataset.description)
    scale = OfflineScale(scale_config(args, dataset), dataset.depth, args.min_conf)
    config = session_config(args, args.ply or scale.needs_depth or args.view)
    source = dataset.source if args.stride == 1 else Strided(dataset.source, args.stride)
    model, random_weights = model or load_model(args)
    session = StreamingSession(model, config)
    backend = (OfflineLoop(args, config, lambda c: StreamingSession(model, c))
               if args.loop_closure or args.localize_in else None)
    snaps = OfflineSnapshots(args, session, points, scale)  # --resume, --save-session
    total = source_total(source)
    if args.max_frames is not None:
        total = min(total, args.max_frames) if total is not None else args.max_frames
    state.total, state.snapshot_dir = total, args.save_session
    state.snapshots = snaps
    bar = state.bar = progress_bar(total, args.no_progress, Path(args.input).name)
    peak = {"bytes_reserved": 0, "tokens_visible": 0}
    keyframe_flags: list[bool] = snaps.keyframe_flags
    view = offline_view(args)  # --view: the run in the browser as it streams (tools/view)
    t0 = time.perf_counter()
    frames_read = 0
    for frame in source:
        if args.max_frames is not None and frames_read >= args.max_frames:
            break
        frames_read += 1
        state.frames_read, state.last_stamp_ns = frames_read, int(frame.stamp_ns)
        if snaps.skip(frames_read, frame):
            continue
        try:
            results = session.push(frame.image, frame.stamp_ns, frame.encoding)
        except FrameRejected as exc:
            log.warning("frame at %d ns skipped: %s", frame.stamp_ns, exc)
            results = []
        for r in results:
            scale.feed(r)
            keyframe_flags.append(r.keyframe)
            if points is not None and r.keyframe:
                points.add(*frame_points(r, args.ply_stride, args.min_conf))
            if backend is not None:
                backend.feed(r, scale)
        info = session.info()
        if view is not None:
            view.frame(frame, results, info, frames_read, source.stats.total_skipped +
                       sum(info.rejected_by_reason.values()), scale.estimate)
        cache = info.stream.cache
        if cache:
            for key in peak:
                peak[key] = max(peak[key], getattr(cache, key))
        if bar is not None:
            bar.update(1)
        state.saving(frames_read)
        snaps.after_frame(frames_read, frame, keyframe_flags)
    state.saving(frames_read)
    snaps.finish(frames_read, keyframe_flags)
    state.writing = True
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)  # created now: an interrupted run leaves no trace
    wall = time.perf_counter() - t0
    if bar is not None:
        bar.close()
    info = session.info()
    stamps, poses = session.trajectory.snapshot()
    # A stream that restarted itself (stamps going back) keeps only its last part: the last
    # results are the trajectory's poses.
    keyframe_flags = keyframe_flags[len(keyframe_flags) - len(stamps):]
    summary = {
        "summary_format": SUMMARY_FORMAT,  # first: how a summary is recognised as ours
        "input": str(args.input), "format": dataset.format, "dataset": dataset.description,
        "version": __version__, "random_weights": random_weights,
        "checkpoint": checkpoint_identity(args.checkpoint),
        "preset": None if args.checkpoint else args.preset,
        "settings": settings_of(args, config, info),
        "frames_read": frames_read, "frames_skipped_by_source": source.stats.total_skipped,
        "source_skipped_by_reason": dict(source.stats.skipped),
        "frames_rejected_by_session": dict(info.rejected_by_reason),
        "frames_processed": info.frames_processed, "keyframes": info.keyframes,
        "non_keyframes": info.non_keyframes, "rollovers": info.rollovers,
        "fps": info.frames_processed / wall if wall > 0 else None, "wall_s": wall,
        "latency_ms": info.latency_ms.as_dict(), "cache_peak": peak,
        "stamps": stamp_range(stamps), "trajectory_frame": "camera_optical in world = the "
        f"first frame's camera_optical (OpenCV axes); {scale.units}",
        "scale": scale.summary(), "outputs": {}, "snapshot": snaps.summary(),
        "input_ended_early": getattr(source, "ended_early", None),
    }
    # Converted once, here, with the final estimate (all frames, also those before the lock).
    header = scale.header_lines()
    if scale.config.metric and scale.factor is None:
        log.warning("%s", summary["scale"]["note"])
    elif scale.factor is not None:
        log.info("%s", header[1])
    model_poses, poses = poses, scale.poses(poses)
    summary["outputs"]["trajectory"] = str(write_tum(out / "trajectory.tum", stamps, poses,
                                                     frame=TRAJECTORY_FRAME, header=header))
    state.written.append("trajectory.tum")
    gt = _ground_truth(args, dataset)
    metric = scale.factor is not None
    if gt is not None:
        summary["outputs"]["ground_truth"] = str(write_tum(out / "groundtruth.tum", *gt,
                                                           frame=GT_FRAME, header=GT_UNITS))
        state.written.append("groundtruth.tum")
        summary["evaluation"] = evaluate(stamps, poses, gt[0], gt[1],
                                         max_diff_ns=round(args.max_diff * 1e9),
                                         offset_ns=round(args.offset * 1e9), metric=metric)
    if backend is not None:
        summary["loop_closure"] = backend.write(
            out, stamps, model_poses, scale, gt, dict(max_diff_ns=round(args.max_diff * 1e9),
                                                      offset_ns=round(args.offset * 1e9),
                                                      metric=metric), state.written)
    if points is not None:
        xyz, rgb = points.arrays()
        xyz = scale.points(xyz)
        write_ply(out / "points.ply", xyz, rgb, comments=header)
        state.written.append("points.ply")
        summary["outputs"]["points"] = str(out / "points.ply")
        summary["num_points"] = int(len(xyz))
        summary["point_map"] = {"units": scale.units,
                                "voxel_size": scale.length(points.voxel_size),
                                "initial_voxel_size": scale.length(points.initial_voxel_size),
                                "coarsenings": points.coarsenings,
                                "max_points": points.max_points,
                                "dropped_nonfinite": points.dropped_nonfinite,
                                "dropped_out_of_range": points.dropped_out_of_range}
    if args.plot:
        from ..metrics.plot import plot_evaluation
        plot_evaluation(out / "trajectory.png", stamps, poses,
                        gt[0] if gt is not None else None, gt[1] if gt is not None else None,
                        keyframe_mask=np.array(keyframe_flags, bool),
                        title=Path(args.input).name + (" (random weights)" if random_weights
                                                       else ""),
                        max_diff_ns=round(args.max_diff * 1e9),
                        offset_ns=round(args.offset * 1e9),
                        align="se3" if metric else "sim3", units=scale.units)
        summary["outputs"]["plot"] = str(out / "trajectory.png")
        state.written.append("trajectory.png")
        summary["plot_alignment"] = "se3" if metric else "sim3"
    write_atomic(out / "summary.json",  # replaces only a summary we wrote
                 (json.dumps(summary, indent=2, default=str) + "\n").encode(),
                 replaces=SUMMARY_BEGINS)
    state.written.append("summary.json")
    if view is not None:  # the last frames shown; --view-keep: served until Ctrl-C
        view.close(hold=args.view_keep)
    return summary


def _ground_truth(args, dataset):
    """``(stamps_ns, poses)`` of the camera: ``--gt`` (TUM) over the dataset's own."""
    if args.gt:
        return read_tum(args.gt)
    return dataset.ground_truth


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    ns = parse_args(argv)
    if ns.reoptimize:
        return _reoptimize(ns)
    args = OfflineRun.from_namespace(ns)
    state = RunState(args.out)
    try:
        summary = run(args, state=state)
    except KeyboardInterrupt:
        log.error("%s", state.interrupted())
        return EXIT_INTERRUPTED
    except (OSError, ValueError, RuntimeError) as exc:  # OSError: FileRefused, OutRefused...
        log.error("%s", state.failed(_one_line(exc)))
        return EXIT_FAILED
    print(json.dumps({k: summary[k] for k in ("frames_read", "frames_processed", "keyframes",
                                             "rollovers", "fps", "outputs")}, default=str))
    print(json.dumps({"scale": {k: summary["scale"][k] for k in
                                ("source", "state", "units", "metres_per_unit", "samples")}}))
    evaluation = summary.get("evaluation")
    if evaluation is not None:
        print(json.dumps({"evaluation": evaluation}, default=str))
    if summary["random_weights"]:
        log.warning(RANDOM_WEIGHTS_NOTICE)
    if summary["input_ended_early"]:
        log.error("the input ended early: %s; the outputs cover the %d frames read",
                  summary["input_ended_early"], summary["frames_read"])
        return EXIT_ENDED_EARLY
    return 0


def _reoptimize(ns) -> int:
    try:
        doc = reoptimize(ns.input, ns.loop_param, round(ns.max_diff * 1e9),
                         round(ns.offset * 1e9))
    except (OSError, ValueError, RuntimeError) as exc:
        log.error("--reoptimize %s: %s", ns.input, _one_line(exc))
        return EXIT_FAILED
    print(json.dumps({k: doc.get(k) for k in ("keyframes", "loops", "ate_ratio", "outputs")}))
    return 0


def _one_line(exc: BaseException) -> str:
    """An error's message on one line (its type's name when it has none)."""
    return " ".join(str(exc).split()) or type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())

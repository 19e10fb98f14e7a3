"""lingbot-ros-offline-demo: the pipeline without ROS on the embedded default, on the CPU, in about a minute.

Renders a short synthetic rosbag2 (a textured room seen along a known camera path, ground
truth beside it), then streams it through the whole pipeline: preprocessing, the scale-frame
phase, keyframe transactions on the paged KV cache, window rollovers with Sim(3) alignment.
It writes the trajectory (TUM), a point cloud and a summary, and prints the cache state.

The embedded default is the tiny network with random weights: poses are NOT meaningful and
the demo says so. With ``--checkpoint lingbot-map.pt`` the official network runs instead
(a GPU is advised) and the ATE against the ground truth means something.
"""
from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from ...geometry import TUM_HEADER
from ..out_folder import OurFile, OutRefused, check_out_folder
from ..synthetic.render import render_sequence
from ..synthetic.writers import write_bag
from ..view.cli import view_command
from .cli import RANDOM_WEIGHTS_NOTICE, parse_args as offline_args, run
from .run_spec import OfflineRun
from .outputs import EXIT_FAILED, planned_outputs


def check_demo_out(out, files, run_files=()) -> None:
    """A demo's ``--out`` before it renders (this one and ``lingbot-ros-demo``): ``scene_bag``
    absent (a new bag is recorded there), ``scene_bag.gt.tum`` and ``files`` ours,
    ``run_files`` (the offline run's) in ``out/run``. OutRefused (one line) otherwise."""
    gt = OurFile("scene_bag.gt.tum", (TUM_HEADER + "\n").encode())
    check_out_folder(out, [gt, *files])
    if (Path(out) / "scene_bag").exists() or (Path(out) / "scene_bag").is_symlink():
        raise OutRefused(f"--out {out}: scene_bag exists; the demo records a new bag there: "
                         "remove it or choose another --out", out)
    if run_files:
        check_out_folder(Path(out) / "run", run_files)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lingbot-ros-offline-demo", description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=60, help="frames to render (default 60)")
    p.add_argument("--out", default="demo_out", help="output folder (default demo_out)")
    p.add_argument("--checkpoint", help="LingBot-Map weights; default: random tiny network")
    p.add_argument("--trust-checkpoint", action="store_true",
                   help="allow full unpickling of the checkpoint (only for a trusted file)")
    p.add_argument("--device", default="cpu")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    try:  # before rendering: the bag is new, the ground truth and the run's files ours
        run_args = offline_args([str(out / "scene_bag"), "--out", str(out / "run"), "--ply"])
        check_demo_out(out, [], planned_outputs(run_args))
    except OutRefused as exc:
        logging.getLogger("lingbot_ros.demo").error("%s", exc)
        return EXIT_FAILED
    print(f"lingbot-ros-demo: rendering {args.frames} frames of a synthetic room ...")
    seq = render_sequence(args.frames, 160, 120)
    bag = write_bag(seq, out / "scene_bag", storage="mcap")
    print(f"  bag: {bag.path} (mcap, /camera/image_raw rgb8 160x120 @ {seq.fps:g} Hz), "
          f"ground truth: {bag.gt_path}")
    run_args = [str(bag.path), "--out", str(out / "run"), "--gt", str(bag.gt_path), "--ply",
                "--device", args.device, "--no-progress"]
    if args.checkpoint:
        run_args += ["--checkpoint", args.checkpoint]
        run_args += ["--trust-checkpoint"] if args.trust_checkpoint else []
    else:  # the tiny network at a small input: 84x112 = 6x8 patches per frame
        run_args += ["--width", "112", "--scale-frames", "4", "--window", "16",
                     "--rollover", "24", "--keyframes", "every_n", "--keyframe-n", "2"]
    summary = run(OfflineRun.from_namespace(offline_args(run_args)))
    print(json.dumps({k: summary[k] for k in (
        "frames_read", "frames_processed", "keyframes", "non_keyframes", "rollovers", "fps",
        "cache_peak", "num_points", "outputs")}, indent=2, default=str))
    evaluation = summary.get("evaluation") or {}
    if evaluation.get("error") is None and "ate_sim3" in evaluation:
        print(f"ATE (Sim(3)-aligned) RMSE {evaluation['ate_sim3']['rmse']:.4f} over "
              f"{evaluation['associated']} poses")
    if summary["random_weights"]:
        print(RANDOM_WEIGHTS_NOTICE)
    print(f"see it in 3D: {view_command(out / 'run')}  (docs/viewer.md)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What ``lingbot-ros-offline --view`` costs the stream, on the CPU (docs/viewer.md).

1. ``hook_us``: the per-frame call the runner makes (``OfflineView.frame``: the frame's
   results and facts handed over to the viewer's threads), timed over the FrameResults of a
   real tiny-model run of the synthetic room, with the viewer serving (viser, no browser) and
   its feeder turning keyframes into points beside it: median and p90, microseconds.
2. ``run_fps``: the same offline run (tiny network, random weights) without and with
   ``--view``: frames per second, median over ``--repeats`` runs each.

    python scripts/bench_viewer.py [--frames 24] [--repeats 3] > viewer_bench.json

Prints one JSON object. Needs the view extra (viser).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from lingbot_ros.session import StreamingSession  # noqa: E402
from lingbot_ros.tools.offline.cli import load_model, parse_args, run, session_config  # noqa: E402
from lingbot_ros.tools.offline.run_spec import OfflineRun  # noqa: E402
from lingbot_ros.tools.synthetic.render import render_sequence  # noqa: E402
from lingbot_ros.tools.synthetic.writers import write_image_folder  # noqa: E402
from lingbot_ros.tools.view.live import OfflineView  # noqa: E402

FAST = ["--width", "112", "--scale-frames", "4", "--window", "16", "--keyframes", "every_n",
        "--no-progress", "--ply-stride", "2"]


class _Frame:
    def __init__(self, image, encoding):
        self.image, self.encoding = image, encoding


def hook_cost(folder: Path, frames: int, port: int) -> dict:
    """Time OfflineView.frame over a real run's results (the viewer serving meanwhile)."""
    args = OfflineRun.from_namespace(parse_args([str(folder), "--out", "unused", *FAST]))
    model, _ = load_model(args)
    session = StreamingSession(model, session_config(args, return_depth=True))
    seq = render_sequence(frames, 160, 120)
    per_frame = []
    for image, stamp in zip(seq.images, seq.stamps_ns):
        per_frame.append((_Frame(image, "rgb8"), session.push(image, int(stamp), "rgb8"),
                          session.info()))
    view = OfflineView("127.0.0.1", port, 200_000, 2, 1.5)
    times = []
    try:
        for i, (frame, results, info) in enumerate(per_frame):
            t0 = time.perf_counter_ns()
            view.frame(frame, results, info, i + 1, 0, None)
            times.append((time.perf_counter_ns() - t0) / 1e3)
    finally:
        view.close()
    return {"frames": len(times), "median_us": statistics.median(times),
            "p90_us": float(np.percentile(times, 90)), "max_us": max(times),
            "results_per_frame": statistics.mean(len(r) for _, r, _ in per_frame)}


def run_fps(folder: Path, out: Path, view: bool, port: int) -> float:
    argv = [str(folder), "--out", str(out), *FAST]
    argv += ["--view", "--view-port", str(port)] if view else []
    summary = run(OfflineRun.from_namespace(parse_args(argv)))
    return float(summary["fps"])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=24)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--port", type=int, default=8090)
    args = p.parse_args(argv)
    # stdout is the JSON report alone: what the runs print goes to stderr
    with tempfile.TemporaryDirectory(prefix="lingbot-view-bench-") as tmp, \
            contextlib.redirect_stdout(sys.stderr):
        tmp = Path(tmp)
        seq = render_sequence(args.frames, 160, 120)
        folder = write_image_folder(seq, tmp / "frames").path
        hook = hook_cost(folder, args.frames, args.port)
        fps = {"without_view": [], "with_view": []}
        for i in range(args.repeats):  # interleaved: the machine's load hits both alike
            fps["without_view"].append(run_fps(folder, tmp / f"a{i}", False, args.port))
            fps["with_view"].append(run_fps(folder, tmp / f"b{i}", True, args.port))
    print(json.dumps({
        "what": "lingbot-ros-offline --view: per-frame hook cost and run rate, CPU",
        "machine": {"python": platform.python_version(), "cpu": platform.processor()
                    or platform.machine()},
        "settings": {"frames": args.frames, "image": "160x120", "model_width": 112,
                     "network": "tiny, random weights", "repeats": args.repeats},
        "hook_us": hook,
        "run_fps": {k: {"median": statistics.median(v), "runs": v} for k, v in fps.items()},
    }, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A synthetic ``--loop-closure`` run folder: the room loop with injected drift as a front
end, its ground truth, and loops measured from the ground truth, as ``lingbot-ros-offline
--loop-closure`` writes them (``trajectory.tum``, ``groundtruth.tum``, ``loop_graph.json``).

    python -m lingbot_ros.tools.synthetic.loop_run OUT [--keyframes 200] [--seed 1]
    lingbot-ros-offline OUT --reoptimize        # -> trajectory_optimized.tum, reoptimize.json

The model with random weights cannot make a drifted loop whose truth is known, nor verify a
loop; this folder is the back end's input a model with weights would give, made exactly:
``loop/synthetic.py``'s room (8 degrees of heading and 8 % of scale drift over the loop)
and three loops at its end (measured with 1 cm and 0.1 degree of seeded noise, their sigmas
twice that). It exercises the offline CLI's graph, correction, files and evaluation.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from ...geometry import rotation_exp, write_tum
from ...loop.graph_record import GraphRecord, RecordedLoop, write_graph_record
from ...loop.graph_types import EdgeSigmas
from ...loop.synthetic import drifted, loop_measurement, loop_path

__all__ = ["write_loop_run", "main"]

STEP_NS = 100_000_000  # 10 keyframes a second
NOISE_M, NOISE_DEG = 0.01, 0.1
SIGMAS = EdgeSigmas(2 * NOISE_M, 2 * NOISE_DEG, 0.01)
FRAME = "camera in the room's world (synthetic)"


def write_loop_run(out, keyframes: int = 200, seed: int = 1) -> dict:
    """Write the run folder ``out`` (created; files in it replaced only if we wrote them);
    return what was written (paths, the loops)."""
    if keyframes < 20:
        raise ValueError(f"keyframes must be at least 20, got {keyframes}")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n = keyframes
    truth = loop_path(n + 1, per_lap=n)  # (n + 1, 4, 4): keyframe n is back at keyframe 0
    front_end, units = drifted(truth, seed=seed)
    stamps = [1_000_000_000 + k * STEP_NS for k in range(n + 1)]
    rng = np.random.default_rng(seed + 1000)
    loops = []
    for a, b in ((0, n), (1, n - 1), (2, n)):
        m = loop_measurement(truth, units, a, b)
        noise = rotation_exp(np.radians(NOISE_DEG) * rng.standard_normal(3))
        m[:3, :3] = m[:3, :3] @ noise
        m[:3, 3] += units[a] * NOISE_M * rng.standard_normal(3)
        loops.append(RecordedLoop(a, b, m, SIGMAS))
    record = GraphRecord(tuple(range(n + 1)), tuple(stamps), (0,) * (n + 1), front_end,
                         tuple(loops))
    header = ["units: model (synthetic: the front end's drifting units)"]
    paths = {
        "trajectory": str(write_tum(out / "trajectory.tum", stamps, front_end, frame=FRAME,
                                    header=header)),
        "ground_truth": str(write_tum(out / "groundtruth.tum", stamps, truth, frame=FRAME,
                                      header=["units: m"])),
        "loop_graph": str(write_graph_record(out / "loop_graph.json", record)),
    }
    return {"outputs": paths, "keyframes": n + 1,
            "loops": [[lp.id_a, lp.id_b] for lp in loops]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m lingbot_ros.tools.synthetic.loop_run",
                                description=__doc__.splitlines()[0])
    p.add_argument("out", help="the run folder to write")
    p.add_argument("--keyframes", type=int, default=200, help="keyframes around the loop")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    try:
        print(json.dumps(write_loop_run(args.out, args.keyframes, args.seed)))
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

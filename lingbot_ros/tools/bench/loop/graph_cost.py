"""The pose graph's CPU cost per accepted loop (iSAM2), at 1,000 and 10,000 keyframes.

    python -m lingbot_ros.tools.bench.loop.graph_cost --keyframes 1000 10000 [--loops 10]

A camera patrols a room-sized circle (3 m radius, 200 keyframes a lap, 9.4 cm apart) with
the front end's drift injected (:mod:`lingbot_ros.loop.synthetic`: the tests' biases, the
scale 8 % up over one lap and down over the next); each lap ends with a loop to the same
place one lap before, as a robot closes them while it drives. The graph
is fed as the node feeds it: keyframes as they come, ``optimize()`` every 100 keyframes and
at each loop. At N keyframes, ``--loops`` more loops, each after 20 more keyframes (fed
first, untimed), each timed alone:

* ``recent``: to the same place one lap before (the common loop: 200 keyframes back);
* ``first_lap``: to the same place in the first lap (the whole graph in the loop).

Per kind: ``isam2_ms`` (the iSAM2 updates of the optimize() that feeds the loop,
``GraphResult.time_s``) and ``optimize_ms`` (the whole call: also the estimate of every
keyframe read back and the loops' residuals), median, p90 and max, and the updates each
took. Besides: the optimize() of 20 keyframes without a loop, the build, and the snapshot
(``state_dict``, and ``load_state_dict``: the graph rebuilt at the saved estimate in one
batch). ``accuracy``: the tests' synthetic loop (200 keyframes, 3 loops to the start, and
a 4th 3 m wrong) optimised with each robust kernel, and with the scale pinned (an
SE(3)-like graph): Sim(3)-aligned ATE, drifted and optimised. Prints JSON (and writes it
to ``--out``). Numbers, not assertions.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import numpy as np

from ....geometry import ate_rmse
from ...out_folder import OutRefused, check_out_file, json_report_begins, write_json_report
from .common import cpu_model, stats

__all__ = ["main", "bench_graph", "bench_accuracy"]

TOOL = "lingbot-ros-bench-graph"
LAP = 200  # keyframes a lap
GAP = 20  # keyframes between two timed loops
BATCH = 100  # keyframes between two optimize() calls without a loop


def _stats(values_s: list[float]) -> dict:
    return stats(values_s, 1e3, digits=3)  # ms: median, p90, max, n


def bench_graph(keyframes: int, loops: int = 10, seed: int = 0) -> dict:
    """The section of one graph size: build ``keyframes`` keyframes (loops each lap), then
    ``loops`` timed loops of each kind. JSON-ready."""
    from ....loop.pose_graph import PoseGraph
    from ....loop.synthetic import drifted, loop_measurement, loop_path
    if keyframes < 2 * LAP or loops < 1:
        raise ValueError(f"keyframes must be >= {2 * LAP} and loops >= 1, got {keyframes}, "
                         f"{loops}")
    total = keyframes + 2 * loops * GAP
    laps = -(-total // LAP)
    truth = loop_path(laps * LAP, per_lap=LAP)  # (laps * LAP, 4, 4)
    # the scale drifts up 8 % over a lap and back down over the next (bounded over many laps)
    up = (np.arange(len(truth) - 1) // LAP) % 2 == 0  # (N - 1,)
    fe, units = drifted(truth, log_scale_per_step=np.where(up, 4e-4, -4e-4), seed=seed)
    graph = PoseGraph()
    count = 0

    def add(n_new: int) -> None:
        nonlocal count
        for _ in range(n_new):
            graph.add_keyframe(count, count * 100_000_000, fe[count], 0)
            count += 1
            newest = count - 1
            if newest >= LAP and newest % LAP == 0:  # a lap done: its loop
                graph.add_loop(newest - LAP, newest,
                               loop_measurement(truth, units, newest - LAP, newest))
                graph.optimize()
            elif count % BATCH == 0:
                graph.optimize()

    start = time.perf_counter()
    add(keyframes)
    graph.optimize()
    build_s = time.perf_counter() - start
    timed: dict[str, dict[str, list[float]]] = {}
    plain: list[float] = []
    for kind in ("recent", "first_lap"):
        runs = timed.setdefault(kind, {"isam2": [], "optimize": [], "iterations": []})
        for _ in range(loops):
            add(GAP)
            plain.append(graph.optimize().time_s)
            newest = count - 1
            older = newest - LAP if kind == "recent" else newest % LAP
            graph.add_loop(older, newest, loop_measurement(truth, units, older, newest))
            t0 = time.perf_counter()
            result = graph.optimize()
            runs["optimize"].append(time.perf_counter() - t0)
            runs["isam2"].append(result.time_s)
            runs["iterations"].append(result.iterations)
    t0 = time.perf_counter()
    state = graph.state_dict()
    save_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    PoseGraph().load_state_dict(state)
    load_s = time.perf_counter() - t0
    return {"keyframes": keyframes, "keyframes_at_end": count,
            "loops_in_graph": len(result.loops),
            "loop_update_ms": {kind: {"isam2_ms": _stats(r["isam2"]),
                                      "optimize_ms": _stats(r["optimize"]),
                                      "iterations": r["iterations"]}
                               for kind, r in timed.items()},
            "keyframes_update_ms": _stats(plain), "build_s": round(build_s, 3),
            "state_dict_s": round(save_s, 4), "load_state_dict_s": round(load_s, 3)}


def bench_accuracy(n: int = 200, seed: int = 1) -> dict:
    """Sim(3)-aligned ATE (m) of the tests' synthetic loop (``n`` keyframes, 3 loops from
    the last keyframes to the first, from the ground truth): drifted, and optimised with
    each robust kernel, with and without a 4th loop 3 m wrong; with the scale pinned
    (odometry log-scale sigma 1e-6, the loops' scale ignored: an SE(3)-like graph); with
    Huber under 2 and 3 times the drift (``ratio``: of that drifted ATE)."""
    from ....loop.synthetic import loop_path
    truth = loop_path(n + 1, per_lap=n)
    cases = {f"{k}{w}": (k, bool(w), False, 1.0)
             for k in ("huber", "cauchy") for w in ("", "_wrong_loop")}
    cases.update(scale_pinned=("huber", False, True, 1.0), huber_drift_x2=("huber", False,
                 False, 2.0), huber_drift_x3=("huber", False, False, 3.0))
    out: dict = {"keyframes": n + 1}
    for name, case in cases.items():
        out[name] = _accuracy_case(truth, seed, *case)
    out["drifted_ate_m"] = out["huber"]["drifted_ate_m"]
    return out


def _accuracy_case(truth: np.ndarray, seed: int, kernel: str, wrong: bool, pinned: bool,
                   factor: float) -> dict:
    from ....loop.config import LoopConfig
    from ....loop.pose_graph import EdgeSigmas, PoseGraph
    from ....loop.synthetic import drifted, loop_measurement
    n = len(truth) - 1
    fe, units = drifted(truth, rot_deg_per_step=(0.004 * factor, 0.004 * factor,
                                                  0.04 * factor),
                        trans_m_per_step=(0.0, 0.002 * factor, 0.0004 * factor),
                        log_scale_per_step=0.0004 * factor, seed=seed)
    graph = PoseGraph(LoopConfig(loop_robust_kernel=kernel))
    for k in range(n + 1):
        graph.add_keyframe(k, k, fe[k], 0, scale_sigma_log=1e-6 if pinned else None)
    graph.optimize()
    sigmas = EdgeSigmas(0.01, 0.1, 1e3 if pinned else 0.005)
    for a, b in ((0, n), (1, n - 1), (2, n)):
        graph.add_loop(a, b, loop_measurement(truth, units, a, b), sigmas)
    if wrong:
        bad = loop_measurement(truth, units, 3, n - 2)
        bad[:3, 3] += (3.0, 0.0, 0.0)
        graph.add_loop(3, n - 2, bad, sigmas)
    r = graph.optimize()
    est = np.stack([r.poses[i][:3, 3] for i in r.ids])  # (n + 1, 3)
    gt = truth[:, :3, 3]
    ate, before = ate_rmse(est, gt), ate_rmse(fe[:, :3, 3], gt)
    return {"drifted_ate_m": round(before, 4), "ate_m": round(ate, 4),
            "ratio": round(ate / before, 3), "iterations": r.iterations,
            "loop_residuals_m": [round(x.residual_m, 3) for x in r.loops],
            "loop_weights": [round(x.weight, 3) for x in r.loops]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=TOOL, description=__doc__.splitlines()[0])
    p.add_argument("--keyframes", type=int, nargs="+", default=[1000, 10000],
                   help="graph sizes (default 1000 10000)")
    p.add_argument("--loops", type=int, default=10, help="timed loops of each kind (default 10)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="also write the JSON here")
    args = p.parse_args(argv)
    try:
        if args.out:
            check_out_file(args.out, json_report_begins(TOOL))
        report = {"machine": {"cpu": cpu_model(), "cores": os.cpu_count(),
                              "python": platform.python_version(),
                              "system": platform.platform()},
                  "graphs": [bench_graph(n, args.loops, args.seed) for n in args.keyframes],
                  "accuracy": bench_accuracy()}
    except (OutRefused, ValueError) as exc:
        print(f"{TOOL}: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=2))
    if args.out:
        write_json_report(args.out, TOOL, report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

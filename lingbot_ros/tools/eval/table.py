"""lingbot-ros-eval: several sequences x keyframe policies in one call, one table.

    lingbot-ros-eval SEQ [SEQ ...] [--policies all,every_n,flow] [--out eval_out]
                     [--checkpoint W.pt] [--device cuda] [offline options]
                     [--ray ADDRESS [--gpus-per-worker 1] [--workers N]] [--resume]
                     [--loop-closure [--save-maps]]
    lingbot-ros-eval --benchmark lingbot-map --data-root ROOT [--loop-closure] [...]

Each sequence (a dataset folder, image folder, video or bag; its ground truth as
``lingbot-ros-offline`` finds it) runs once per policy -- a work unit -- through a fresh
streaming session, with the outputs of each unit in ``OUT/<sequence>/<policy>/`` (written
in a staging folder, renamed into place when complete). Then ``OUT/table.md`` and
``OUT/table.csv`` hold one row per unit: ATE (Sim(3) and SE(3); with a locked ``--scale``
also the SE(3) ATE in metres and the metres per model unit), RPE (1 frame, 1 m, drift
%), FPS, keyframes and the worker that ran it; ``OUT/results.json`` the full summaries,
``OUT/manifest.json`` each finished unit's files with their SHA-256. A unit that fails is a
row with its error; the others go on (exit status 1 then).

Locally the model is loaded once. With ``--ray`` the units run on a Ray cluster: one worker
(actor) per GPU loads the model once; a unit whose worker dies is rerun on another (or the
restarted) worker, a failing unit is retried ``--retries`` times. ``--resume`` skips units
that the manifest lists as finished with the same settings, the same sequence (an absolute
path) whose first frames have the same fingerprint (pixels and stamps), and whose files
still match their digests. The numbers are the same either way. Unit snapshots
(``--snapshot-every``) are keyed by that fingerprint; a run without ``--resume`` removes
the ones an earlier run left.

``--loop-closure`` runs each unit with the back end (``lingbot-ros-offline --loop-closure``)
and adds columns: the optimised trajectory's ATE / RPE beside the front end's, and the loops
accepted (tools/eval/loop_columns.py); with ``--save-maps`` each unit also writes its place
map as ``OUT/<sequence>/<policy>/place_map/`` (its summary's ``outputs.place_map``; its files
are in the manifest, so ``--resume`` redoes a unit whose map was altered or removed).
``--benchmark lingbot-map`` runs upstream LingBot-Map's benchmark protocol on the datasets
under ``--data-root`` and prints our numbers beside its published ones
(tools/eval/benchmark.py; also ``OUT/benchmark.md``).
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import logging
import os
import sys
from pathlib import Path

from ...config import KEYFRAME_POLICIES
from ...geometry import write_atomic
from ..offline.cli import (RANDOM_WEIGHTS_NOTICE, add_input_args, add_model_args,
                      check_options, load_model)
from ..offline.cli import parse_args as offline_args
from ..offline.outputs import EXIT_INTERRUPTED
from ..offline.scale_args import add_scale_args
from ..out_folder import OurFile, check_our_folder, check_out_folder
from .fleet import (Manifest, OutputTree, UnitProgress, execute_unit, input_fingerprint,
                    plan_units, run_settings, settings_digest, unit_run, worker_table)
from .fleet.manifest import FORMAT as MANIFEST_FORMAT, MANIFEST
from .loop_columns import LOOP_COLUMNS, loop_row, unit_files
from .benchmark import BENCHMARKS, benchmark_rows, benchmark_table, plan_benchmark

log = logging.getLogger("lingbot_ros.eval")

# (column, header, how a summary gives it); None: not available for that run.
COLUMNS = (
    ("sequence", "sequence"), ("policy", "policy"), ("frames", "frames"),
    ("keyframes", "keyframes"), ("fps", "FPS"), ("associated", "matched"),
    ("ate_sim3_rmse", "ATE Sim(3) RMSE"), ("ate_se3_rmse", "ATE SE(3) RMSE"),
    ("scale", "Sim(3) scale"), ("ate_se3_metres_rmse", "ATE SE(3) metres RMSE"),
    ("metres_per_unit", "m per model unit"), ("rpe_1f_trans_rmse", "RPE 1 frame trans RMSE"),
    ("rpe_1f_rot_rmse_deg", "RPE 1 frame rot RMSE (deg)"),
    ("rpe_1m_trans_rmse", "RPE 1 m trans RMSE"), ("drift_pct", "drift (%)"),
    ("worker", "worker"), ("error", "note"))
LOCAL_WORKER = "local"
# The files lingbot-ros-eval writes at the top of OUT, by how each begins (a file there that
# begins otherwise is not ours and is never replaced).
EVAL_FILES = (
    OurFile("table.md", b"| sequence | policy |"), OurFile("table.csv", b"sequence,policy,"),
    OurFile("results.json", b'[\n  {\n    "sequence": '),
    OurFile("workers.json", b'[\n  {\n    "worker": '),
    OurFile("benchmark.md", b"| dataset | sequences run |"),
    OurFile(MANIFEST, b"{", b'"' + MANIFEST_FORMAT.rsplit("/", 1)[0].encode() + b"/"))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="lingbot-ros-eval", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("sequences", nargs="*", help="dataset sequences, image folders, videos or "
                   "bags (or --benchmark)")
    p.add_argument("--benchmark", choices=tuple(BENCHMARKS),
                   help="a published benchmark's protocol: its datasets' sequences (under "
                   "--data-root), widths, strides and keyframe settings; prints our numbers "
                   "beside the published ones")
    p.add_argument("--data-root", help="--benchmark: the folder holding the datasets "
                   "(tum_rgbd/, seven_scenes/, kitti/; docs/evaluation.md)")
    p.add_argument("--loop-closure", action="store_true",
                   help="run each unit with the loop-closure back end; adds the optimised "
                   "trajectory's ATE/RPE and the loops accepted")
    p.add_argument("--save-maps", action="store_true",
                   help="with --loop-closure: each unit also writes its run's place map "
                   "(lingbot-ros-offline --save-map) as OUT/<sequence>/<policy>/place_map/")
    p.add_argument("--loop-param", action="append", default=[], metavar="NAME=VALUE",
                   help="with --loop-closure or --localize-in: a loop.* setting of every "
                   "unit (lingbot-ros-offline --loop-param); repeatable")
    p.add_argument("--localize-in", metavar="MAP",
                   help="relocalize every unit in this stored place map (a path every "
                   "worker sees; needs a metric --scale): each unit writes "
                   "localization.json and, once localized, trajectory_in_map.tum")
    p.add_argument("--policies", default="all,every_n,flow",
                   help=f"comma-separated keyframe policies, of {', '.join(KEYFRAME_POLICIES)}")
    p.add_argument("--out", default="eval_out", help="output folder")
    p.add_argument("--ply", action="store_true", help="each unit also writes points.ply "
                   "(lingbot-ros-offline --ply, its defaults): a sequence without ground "
                   "truth is then a reconstruction job (trajectory, points, summary)")
    add_input_args(p)
    add_model_args(p)
    add_scale_args(p)  # a work unit's setting like the others (run_settings)
    fleet = p.add_argument_group("fleet (a Ray cluster; pip install 'lingbot_ros[fleet]')")
    fleet.add_argument("--ray", metavar="ADDRESS",
                       help="run the work units on the Ray cluster at ADDRESS (the head's "
                       "host:port, or auto: RAY_ADDRESS); sequences must be paths every "
                       "node sees, OUT a folder every node can write")
    fleet.add_argument("--gpus-per-worker", type=float,
                       help="GPUs of one worker (one model each); default 1 with --device "
                       "cuda, else 0")
    fleet.add_argument("--cpus-per-worker", type=float, default=1.0,
                       help="CPUs of one worker (CPU-only clusters: the worker's threads)")
    fleet.add_argument("--workers", type=int,
                       help="workers to start (default: as many as the cluster holds, at "
                       "most one per unit)")
    fleet.add_argument("--retries", type=int, default=2,
                       help="attempts beyond the first for a unit that fails or whose "
                       "worker dies")
    fleet.add_argument("--snapshot-every", type=int, default=0,
                       help="save each unit's stream every N input frames (OUT/.fleet/"
                       "snapshots/); a rerun unit resumes from its last snapshot, scale "
                       "estimate and point map included (0: never)")
    p.add_argument("--resume", action="store_true",
                   help="skip the units OUT/manifest.json lists as finished with the same "
                   "settings and whose files match their digests; redo the others")
    args = p.parse_args(argv)
    if bool(args.benchmark) == bool(args.sequences):
        p.error("give sequences or --benchmark (not both)")
    if args.benchmark and not args.data_root:
        p.error("--benchmark needs --data-root")
    if args.save_maps and not args.loop_closure:
        p.error("--save-maps needs --loop-closure (a unit's place map is its back end's)")
    if args.snapshot_every < 0:
        p.error("--snapshot-every must be >= 0")
    if args.ray is None and (args.workers is not None or args.gpus_per_worker is not None):
        p.error("--workers / --gpus-per-worker need --ray")
    if args.gpus_per_worker is None:
        args.gpus_per_worker = 1.0 if str(args.device).startswith("cuda") else 0.0
    # lingbot-ros-offline's other options at their defaults: each unit is that run.
    for key, value in vars(offline_args(["-"])).items():
        if key != "input" and not hasattr(args, key):
            setattr(args, key, value)
    args.policies = [x.strip() for x in args.policies.split(",") if x.strip()]
    args.keyframes = args.policies[0] if args.policies else "all"  # each run sets its own
    bad = [x for x in args.policies if x not in KEYFRAME_POLICIES]
    if bad or not args.policies:
        p.error(f"--policies: unknown {bad or 'none given'}; choose from "
                f"{', '.join(KEYFRAME_POLICIES)}")
    return args


def sequence_names(paths) -> list[str]:
    """A folder name per sequence, made unique (``seq``, ``seq_2``) for the output tree."""
    names, seen = [], {}
    for path in paths:
        p = Path(path)
        base = p.stem if p.is_file() else (p.name or "sequence")
        seen[base] = seen.get(base, 0) + 1
        names.append(base if seen[base] == 1 else f"{base}_{seen[base]}")
    return names


def row_of(sequence: str, policy: str, summary: dict) -> dict:
    """The table's row of one run's summary (the offline runner's summary.json); its note
    starts with the input's early end (a truncated bag) when it had one."""
    row = _row_of(sequence, policy, summary)
    extra = loop_row(summary)
    note = extra.pop("error", None)
    row.update(extra)
    if note:
        row["error"] = "; ".join(x for x in (row.get("error"), note) if x)
    if summary.get("input_ended_early"):
        row["error"] = "; ".join(x for x in (f"input ended early: "
                                             f"{summary['input_ended_early']}", row["error"])
                                 if x)
    return row


def _row_of(sequence: str, policy: str, summary: dict) -> dict:
    row = {"sequence": sequence, "policy": policy,
           "frames": summary.get("frames_processed"), "keyframes": summary.get("keyframes"),
           "fps": summary.get("fps"), "error": summary.get("error"),
           "metres_per_unit": (summary.get("scale") or {}).get("metres_per_unit")}
    ev = summary.get("evaluation")
    if ev is None:
        row["error"] = row["error"] or "no ground truth"
        return row
    row["associated"] = ev.get("associated")
    if ev.get("error"):
        row["error"] = ev["error"]
        return row
    row.update(ate_sim3_rmse=ev["ate_sim3"]["rmse"], ate_se3_rmse=ev["ate_se3"]["rmse"],
               scale=ev["ate_sim3"]["scale"],
               ate_se3_metres_rmse=(ev.get("ate_se3_metres") or {}).get("rmse"),
               rpe_1f_trans_rmse=ev["rpe_1_frame"]["trans_rmse"],
               rpe_1f_rot_rmse_deg=ev["rpe_1_frame"]["rot_rmse_deg"])
    one_metre = ev.get("rpe_1_m") or {}
    if "error" in one_metre:
        row["error"] = one_metre["error"]
    else:
        row.update(rpe_1m_trans_rmse=one_metre.get("trans_rmse"),
                   drift_pct=one_metre.get("drift_pct"))
    return row


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table_columns(loop_closure: bool = False) -> tuple:
    """The table's columns; with loop closure its four after the front end's RPE."""
    if not loop_closure:
        return COLUMNS
    at = [k for k, _ in COLUMNS].index("worker")
    return COLUMNS[:at] + LOOP_COLUMNS + COLUMNS[at:]


def markdown_table(rows: list[dict], columns=COLUMNS) -> str:
    lines = ["| " + " | ".join(h for _, h in columns) + " |",
             "|" + "|".join("---" for _ in columns) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(k)).replace("|", "\\|")
                                       for k, _ in columns) + " |")
    return "\n".join(lines) + "\n"


def csv_table(rows: list[dict], columns=COLUMNS) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([k for k, _ in columns])
    for row in rows:
        writer.writerow([row.get(k, "") if row.get(k) is not None else "" for k, _ in columns])
    return buf.getvalue()


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    # Absolute paths: a unit names its sequence for good (--resume from another directory
    # must not take another recording of the same relative name for it).
    args.sequences = [os.path.abspath(s) for s in args.sequences]
    out = Path(os.path.abspath(args.out))
    settings = run_settings(args)
    args.planned = None
    if args.benchmark:
        planned, missing = plan_benchmark(args.benchmark, args.data_root, settings)
        for line in missing:
            log.warning("%s", line)
        if not planned:
            log.error("--benchmark %s: no dataset found under %s", args.benchmark,
                      args.data_root)
            return 2
        args.planned = planned
        args.sequences = [p.path for p in planned]
        names, policies = [p.name for p in planned], [[p.policy] for p in planned]
        overrides = [p.overrides for p in planned]
    else:
        names, policies = sequence_names(args.sequences), args.policies
        overrides = None
    fingerprints = {s: input_fingerprint(s, settings) for s in dict.fromkeys(args.sequences)}
    units = plan_units(args.sequences, names, policies, args.snapshot_every,
                       [fingerprints[s] for s in args.sequences], overrides)
    tree = OutputTree(out)
    try:
        check_options(args)
        check_eval_out(args.out, units)
        tree.acquire()
    except (FileNotFoundError, ValueError, RuntimeError, OSError) as exc:
        log.error("%s", exc)
        return 2
    if not args.resume:  # a stale unit snapshot is never continued by a fresh run
        tree.drop_snapshots()
    try:
        return _run_all(args, units, settings, tree)
    except KeyboardInterrupt:
        log.error("interrupted (SIGINT): the units finished so far are in %s (manifest.json); "
                  "the table was not written; --resume runs the others", out)
        return EXIT_INTERRUPTED
    finally:
        tree.release()


def check_eval_out(out, units) -> None:
    """Before the run: OUT can be written, its files are ours, and each unit's folder (which
    a finished unit replaces whole) holds only files a run writes, each ours. OutRefused
    (one line) otherwise."""
    check_out_folder(out, EVAL_FILES)
    for unit in units:
        check_our_folder(out, unit.key, unit_files())


def _run_all(args, units, settings, tree) -> int:
    out = tree.root
    manifest = Manifest.load(out, settings_digest(settings)) if args.resume else \
        Manifest(out, settings_digest(settings))
    results = {}  # unit index -> (summary, worker, attempts, status)
    todo = []
    for unit in units:
        entry = manifest.finished(unit) if args.resume else None
        if entry is None:
            todo.append(unit)
            continue
        summary = json.loads((tree.unit_dir(unit.key) / "summary.json").read_text())
        results[unit.index] = (summary, entry["worker"], entry.get("attempts", 1), "ok")
    if args.resume:
        log.info("resume: %d of %d units finished and intact, %d to run", len(results),
                 len(units), len(todo))
    progress = None

    def on_result(unit, result):
        manifest.record(unit, result)
        results[unit.index] = (result.summary, result.worker, result.attempts, result.status)
        if result.status != "ok":
            log.error("%s (%s): %s", unit.sequence, unit.policy, result.error)
        if progress is not None:
            progress.unit_done(result.frames)

    stats = []
    if todo and args.ray:
        try:
            from .fleet.cluster import FleetError, FleetOptions, RayRunner
        except ImportError as exc:
            log.error("%s", exc)
            return 2
        try:
            runner = RayRunner(FleetOptions(args.ray, args.gpus_per_worker,
                                            args.cpus_per_worker, args.workers, args.retries),
                               settings, tree)
            n = runner.start(len(todo))
        except (FleetError, ValueError) as exc:
            log.error("%s", exc)
            return 2
        log.info("%d units on %d Ray workers", len(todo), n)
        manifest.save()  # a fresh run: earlier entries no longer describe this folder
        progress = UnitProgress(len(units), args.no_progress, done=len(results))
        try:
            runner.run(todo, on_result)
        except FleetError as exc:
            log.error("%s", exc)
            return 2
        finally:
            progress.close()
            runner.stop()
        stats = list(runner.stats.values())
    elif todo:
        try:
            model = load_model(unit_run(settings))
        except (FileNotFoundError, ValueError, RuntimeError) as exc:
            log.error("%s", exc)
            return 2
        manifest.save()
        for unit in todo:
            log.info("%s, policy %s -> %s", unit.sequence, unit.policy,
                     tree.unit_dir(unit.key))
            result = execute_unit(unit, settings, model, tree, LOCAL_WORKER,
                                  show_progress=not args.no_progress)
            on_result(unit, result)
    rows, table_results, failed = [], [], 0
    for unit in units:
        summary, worker, attempts, status = results[unit.index]
        failed += status != "ok"
        row = row_of(unit.name, unit.policy, summary)
        row["worker"] = worker
        rows.append(row)
        table_results.append({"sequence": unit.name, "policy": unit.policy, "worker": worker,
                              "attempts": attempts, "summary": summary})
    columns = table_columns(bool(args.loop_closure))
    table = markdown_table(rows, columns)
    ours = {spec.name: spec.begins for spec in EVAL_FILES}  # replaced only if ours
    write_atomic(out / "table.md", table.encode(), replaces=ours["table.md"])
    write_atomic(out / "table.csv", csv_table(rows, columns).encode(),
                 replaces=ours["table.csv"])
    write_atomic(out / "results.json",
                 (json.dumps(table_results, indent=2, default=str) + "\n").encode(),
                 replaces=ours["results.json"])
    print(table, end="")
    if stats:
        write_atomic(out / "workers.json", (json.dumps([s.as_dict() for s in stats],
                                                       indent=2) + "\n").encode(),
                     replaces=ours["workers.json"])
        print(worker_table(stats), end="")
    if args.planned:
        bench = benchmark_table(benchmark_rows(args.benchmark, args.planned,
                                               {r["sequence"]: r for r in rows}),
                                bool(args.loop_closure))
        write_atomic(out / "benchmark.md", bench.encode(), replaces=ours["benchmark.md"])
        print(bench, end="")
    print(f"written: {out / 'table.md'}, {out / 'table.csv'}, {out / 'results.json'}")
    if not settings.get("checkpoint"):
        log.warning(RANDOM_WEIGHTS_NOTICE)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

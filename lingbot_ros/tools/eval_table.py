"""lingbot-ros-eval: several sequences x keyframe policies in one call, one table.

    lingbot-ros-eval SEQ [SEQ ...] [--policies all,every_n,flow] [--out eval_out]
                     [--checkpoint W.pt] [--device cuda] [offline options]

Each sequence (a dataset folder, image folder, video or bag; its ground truth as
``lingbot-ros-offline`` finds it) runs once per policy through a fresh streaming session
(the model is loaded once), with the outputs of each run in ``OUT/<sequence>/<policy>/``.
Then ``OUT/table.md`` and ``OUT/table.csv`` hold one row per run: ATE (Sim(3) and SE(3)),
RPE (1 frame, 1 m, drift %), FPS and keyframes; ``OUT/results.json`` the full summaries. A
run that fails is a row with its error; the others go on (exit status 1 then).
"""
from __future__ import annotations

import argparse
import copy
import csv
import io
import json
import logging
import sys
from pathlib import Path

from ..config import KEYFRAME_POLICIES
from .offline import (RANDOM_WEIGHTS_NOTICE, add_input_args, add_model_args,
                      check_before_run, load_model, run)

log = logging.getLogger("lingbot_ros.eval")

# (column, header, how a summary gives it); None: not available for that run.
COLUMNS = (
    ("sequence", "sequence"), ("policy", "policy"), ("frames", "frames"),
    ("keyframes", "keyframes"), ("fps", "FPS"), ("associated", "matched"),
    ("ate_sim3_rmse", "ATE Sim(3) RMSE"), ("ate_se3_rmse", "ATE SE(3) RMSE"),
    ("scale", "Sim(3) scale"), ("rpe_1f_trans_rmse", "RPE 1 frame trans RMSE"),
    ("rpe_1f_rot_rmse_deg", "RPE 1 frame rot RMSE (deg)"),
    ("rpe_1m_trans_rmse", "RPE 1 m trans RMSE"), ("drift_pct", "drift (%)"),
    ("error", "note"))


def parse_args(argv):
    p = argparse.ArgumentParser(prog="lingbot-ros-eval", description=__doc__.splitlines()[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("sequences", nargs="+", help="dataset sequences, image folders, videos or "
                   "bags")
    p.add_argument("--policies", default="all,every_n,flow",
                   help=f"comma-separated keyframe policies, of {', '.join(KEYFRAME_POLICIES)}")
    p.add_argument("--out", default="eval_out", help="output folder")
    add_input_args(p)
    add_model_args(p)
    args = p.parse_args(argv)
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
    """The table's row of one run's summary (the offline runner's summary.json)."""
    row = {"sequence": sequence, "policy": policy,
           "frames": summary.get("frames_processed"), "keyframes": summary.get("keyframes"),
           "fps": summary.get("fps"), "error": summary.get("error")}
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


def markdown_table(rows: list[dict]) -> str:
    lines = ["| " + " | ".join(h for _, h in COLUMNS) + " |",
             "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row.get(k)).replace("|", "\\|")
                                       for k, _ in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def csv_table(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([k for k, _ in COLUMNS])
    for row in rows:
        writer.writerow([row.get(k, "") if row.get(k) is not None else "" for k, _ in COLUMNS])
    return buf.getvalue()


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    args = parse_args(argv)
    try:
        check_before_run(args)
        model = load_model(args)
    except (FileNotFoundError, ValueError, RuntimeError) as exc:
        log.error("%s", exc)
        return 2
    out = Path(args.out)
    rows, results, failed = [], [], 0
    for sequence, name in zip(args.sequences, sequence_names(args.sequences)):
        for policy in args.policies:
            run_args = copy.copy(args)
            run_args.input, run_args.keyframes = sequence, policy
            run_args.out = str(out / name / policy)
            log.info("%s, policy %s -> %s", sequence, policy, run_args.out)
            try:
                summary = run(run_args, model)
            except (FileNotFoundError, ValueError, RuntimeError, OSError) as exc:
                failed += 1
                log.error("%s (%s): %s", sequence, policy, exc)
                summary = {"input": sequence, "error": f"{type(exc).__name__}: {exc}"}
            rows.append(row_of(name, policy, summary))
            results.append({"sequence": name, "policy": policy, "summary": summary})
    out.mkdir(parents=True, exist_ok=True)
    table = markdown_table(rows)
    (out / "table.md").write_text(table)
    (out / "table.csv").write_text(csv_table(rows))
    (out / "results.json").write_text(json.dumps(results, indent=2, default=str) + "\n")
    print(table, end="")
    print(f"written: {out / 'table.md'}, {out / 'table.csv'}, {out / 'results.json'}")
    if model[1]:
        log.warning(RANDOM_WEIGHTS_NOTICE)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

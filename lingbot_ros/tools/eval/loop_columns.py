"""``lingbot-ros-eval --loop-closure``: what a unit's back end adds, as table columns.

A run with ``--loop-closure`` leaves, beside ``trajectory.tum`` (the front end),
``trajectory_optimized.tum`` (the back end's corrected trajectory) and ``loops.json`` (its
loops and counts: :mod:`lingbot_ros.tools.metrics.loops`). :func:`loop_summary` reads them
from the unit's folder and evaluates the optimised trajectory against the run's
``groundtruth.tum`` exactly as the front end's is (the same association knobs, Sim(3) ATE,
RPE): the unit's summary gets it as ``loop_closure``, and the table the columns below.

With ``--save-maps`` each unit also writes its run's place map (``lingbot-ros-offline
--save-map``) as the folder ``place_map/`` of its unit folder (:data:`PLACE_MAP`): a unit
folder may hold it when it is a place map of ours (``loop/map_folder.py``).
"""
from __future__ import annotations

from pathlib import Path

from ...geometry import read_tum
from ...loop.map_folder import check_replaceable as check_place_map
from ..metrics.loops import read_loops
from ..metrics.trajectory import evaluate
from ..offline.outputs import OFFLINE_FILES
from ..offline.run_spec import UNIT_PLACE_MAP
from ..out_folder import OurFile, OurFolder

__all__ = ["LOOP_FILES", "LOOP_COLUMNS", "PLACE_MAP", "unit_files", "loop_summary",
           "loop_row"]

OPTIMIZED = "trajectory_optimized.tum"
LOOPS = "loops.json"
# A unit folder may hold these too (begins: the TUM header every trajectory of ours has;
# loops.json is a JSON object)
LOOP_FILES = {OPTIMIZED: OurFile(OPTIMIZED, OFFLINE_FILES["trajectory.tum"].begins),
              LOOPS: OurFile(LOOPS, b"{")}
# --save-maps: the unit's place map, a folder of ours ("map", or "empty"; else refused)
PLACE_MAP = UNIT_PLACE_MAP  # where OfflineRun.from_settings puts a unit's save_map
LOOP_FOLDERS = {PLACE_MAP: OurFolder(PLACE_MAP, check_place_map)}
LOOP_COLUMNS = (
    ("opt_ate_sim3_rmse", "ATE Sim(3) RMSE optimised"),
    ("opt_rpe_1f_trans_rmse", "RPE 1 frame trans RMSE optimised"),
    ("opt_rpe_1f_rot_rmse_deg", "RPE 1 frame rot RMSE (deg) optimised"),
    ("loops_accepted", "loops accepted"))


def unit_files() -> dict:
    """The files a unit's folder may hold: the offline run's and the loop-closure ones (the
    offline runner's own list wins where it names them), and the folder ``place_map``."""
    return {**LOOP_FILES, **OFFLINE_FILES, **LOOP_FOLDERS}


def loop_summary(folder, summary: dict) -> dict:
    """The back end's part of a unit's summary, from the files in ``folder``: ``loops``
    (loops.json's counts), ``loops_accepted``, and ``evaluation`` of
    trajectory_optimized.tum against groundtruth.tum (None without ground truth), computed
    with the run's ``--max-diff`` / ``--offset``, in the estimate's units as the front
    end's. ``error`` (one line) instead when a file is missing or invalid."""
    folder = Path(folder)
    try:
        report = read_loops(folder / LOOPS)
        if not (folder / OPTIMIZED).is_file():
            raise FileNotFoundError(f"{folder / OPTIMIZED}: missing (was the run made with "
                                    "--loop-closure?)")
        est = read_tum(folder / OPTIMIZED)
        out = {"loops": report.as_dict(), "loops_accepted": report.accepted,
               "evaluation": None, "error": None}
        gt_file = folder / "groundtruth.tum"
        if gt_file.is_file():
            settings = summary.get("settings") or {}
            front = summary.get("evaluation") or {}
            out["evaluation"] = evaluate(
                *est, *read_tum(gt_file),
                max_diff_ns=round(float(settings.get("max_diff_s", 0.01)) * 1e9),
                offset_ns=round(float(settings.get("offset_s", 0.0)) * 1e9),
                metric=front.get("estimate_units") == "m")
    except (OSError, ValueError) as exc:  # named by file, not by the folder it was read in
        return {"loops": None, "loops_accepted": None, "evaluation": None,
                "error": f"loop closure: {str(exc).replace(f'{folder}/', '')}"}
    return out


def loop_row(summary: dict) -> dict:
    """The loop columns of a unit's row from its summary's ``loop_closure`` (empty when the
    unit ran without it); ``error``: a note to add."""
    lc = summary.get("loop_closure")
    if not lc:
        return {}
    row = {"loops_accepted": lc.get("loops_accepted")}
    if lc.get("error"):
        row["error"] = lc["error"]
        return row
    ev = lc.get("evaluation") or {}
    if ev and not ev.get("error"):
        row.update(opt_ate_sim3_rmse=ev["ate_sim3"]["rmse"],
                   opt_rpe_1f_trans_rmse=ev["rpe_1_frame"]["trans_rmse"],
                   opt_rpe_1f_rot_rmse_deg=ev["rpe_1_frame"]["rot_rmse_deg"])
    elif ev.get("error"):
        row["error"] = f"optimised: {ev['error']}"
    return row

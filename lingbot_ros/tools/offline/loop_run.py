"""The back end beside an offline run (docs/loop.md): ``--loop-closure``, ``--loop-param``,
``--reoptimize``.

With ``--loop-closure`` every committed keyframe goes to a ``LoopBackend`` (retrieval,
verification on the pair, the pose graph) as the run goes, and the run writes, beside
``trajectory.tum`` (the front end's, unchanged):

* ``trajectory_optimized.tum``: every frame moved with its keyframe's optimised Sim(3) node
  (``loop.graph_record.corrected_poses``), in the same units as ``trajectory.tum``;
* ``loops.json``: the accepted loops and the back end's counters;
* ``loop_graph.json``: the graph's inputs (keyframes, loops and their sigmas), which
  ``lingbot-ros-offline RUN --reoptimize`` replays without the model.

The summary gets ``loop_closure`` (counts, loops, and with ground truth the ATE/RPE of the
optimised trajectory beside the front end's ``evaluation``).
"""
from __future__ import annotations

import dataclasses
import json
import logging
from functools import partial
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from ...geometry import read_tum, read_tum_header, write_atomic, write_tum
from ...loop.config import LoopConfig
from ...loop.graph_record import (GraphRecordError, corrected_poses, read_graph_record,
                                  record_of, replay, scaled, write_graph_record)
from ..metrics.trajectory import evaluate
from .run_spec import BadRunOptions

log = logging.getLogger("lingbot_ros.offline")

OPTIMIZED = "trajectory_optimized.tum"
LOOPS = "loops.json"
GRAPH = "loop_graph.json"
REOPTIMIZED = "reoptimize.json"
MAP_FRAME = "camera_optical in map = the optimised world (the first keyframe's camera_optical)"
LOOPS_FORMAT = "lingbot_ros_loops"
_LOOPS_BEGINS = b'{\n  "format": "' + LOOPS_FORMAT.encode()
_FIELDS = {f.name: f for f in dataclasses.fields(LoopConfig)}


def add_loop_args(p) -> None:
    g = p.add_argument_group("loop closure (the back end beside the stream: docs/loop.md)")
    g.add_argument("--loop-closure", action="store_true",
                   help="run the back end: keyframe database, verification of candidates on "
                   "the pair, pose graph; also writes trajectory_optimized.tum, loops.json and "
                   "loop_graph.json")
    g.add_argument("--loop-param", action="append", default=[], metavar="NAME=VALUE",
                   help="a loop.* setting (docs/loop.md), e.g. min_age_s=10; repeatable")
    g.add_argument("--reoptimize", action="store_true",
                   help="INPUT is the output folder of a --loop-closure run: replay its "
                   "loop_graph.json (with --loop-param's settings) without the model; writes "
                   "trajectory_optimized.tum and reoptimize.json there")


def loop_config(params: Sequence[str]) -> LoopConfig:
    """``LoopConfig`` with ``enable`` on and each ``NAME=VALUE`` of ``--loop-param``;
    BadRunOptions naming an unknown name or a bad value."""
    values: dict = {"enable": True}
    for item in params or ():
        name, sep, text = str(item).partition("=")
        name = name.strip().removeprefix("loop.")
        if not sep or name not in _FIELDS or name == "enable":
            raise BadRunOptions(f"--loop-param {item!r}: expected NAME=VALUE with NAME one of "
                                f"{', '.join(n for n in _FIELDS if n != 'enable')}")
        values[name] = _parse(name, text.strip())
    try:
        return LoopConfig(**values)
    except ValueError as exc:
        raise BadRunOptions(f"--loop-param: {exc}") from None


def _parse(name: str, text: str):
    kind = type(getattr(LoopConfig(), name))
    try:
        if kind is bool:
            if text.lower() not in ("true", "false", "1", "0"):
                raise ValueError(text)
            return text.lower() in ("true", "1")
        return kind(text)
    except ValueError:
        raise BadRunOptions(f"--loop-param {name}={text!r}: not a valid {kind.__name__}") from None


class OfflineLoop:
    """The back end of one offline run: fed each result, written at the end."""

    def __init__(self, run, stream, make_session) -> None:
        from ...loop.backend import LoopBackend
        from ...loop.pair_runner import run_pair
        self.config = loop_config(run.loop_param)
        pair = partial(run_pair, make_session, stream)
        self.backend = LoopBackend(self.config, pair=pair, window=stream.window)

    def feed(self, result) -> None:
        """A result of the stream: a keyframe goes to the back end."""
        from ...loop.backend import keyframe_input
        if result.keyframe:
            step = self.backend.offer(keyframe_input(result))
            for event in step.loops:
                log.info("loop closed: keyframe %d -> %d, map -> odom moved %.3f / %.2f deg",
                         event.keyframe_id, event.matched_id, event.jump_m, event.jump_deg)

    def write(self, out: Path, stamps, model_poses, scale, gt, eval_args: dict,
              written: list) -> dict:
        """The back end's files in ``out``; ``model_poses``: the front end's trajectory in
        model units (the graph's), converted here by ``scale`` as ``trajectory.tum`` is.
        Returns the summary's ``loop_closure``."""
        record = record_of(self.backend.graph_state())  # model units
        factor = scale.factor
        files = {"loop_graph": str(write_graph_record(
            out / GRAPH, record if factor is None else scaled(record, factor)))}
        written.append(GRAPH)
        counts, events = self.backend.counts, self.backend.events
        doc = loops_document(events, counts, 1.0 if factor is None else factor)
        write_atomic(out / LOOPS, (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode(),
                     replaces=_LOOPS_BEGINS)
        written.append(LOOPS)
        files["loops"] = str(out / LOOPS)
        summary = {"counts": doc["counts"], "loops": len(events), "outputs": files}
        if record.ids:
            optimized = scale.poses(corrected_poses(self.backend.graph_result(), record,
                                                    stamps, model_poses))
            files["trajectory_optimized"] = str(write_tum(
                out / OPTIMIZED, stamps, optimized, frame=MAP_FRAME,
                header=scale.header_lines()))
            written.append(OPTIMIZED)
            if gt is not None:
                summary["evaluation"] = evaluate(stamps, optimized, gt[0], gt[1], **eval_args)
        return summary


def loops_document(events, counts, metres_per_unit: float) -> dict:
    """``loops.json``: the accepted loops (distances in the files' units) and the counters."""
    loops = [{"stamp_ns": e.stamp_ns, "keyframe_id": e.keyframe_id,
              "matched_id": e.matched_id, "matched_stamp_ns": e.matched_stamp_ns,
              "jump_m": e.jump_m * metres_per_unit, "jump_deg": e.jump_deg,
              "residual_m": e.residual_m * metres_per_unit, "residual_deg": e.residual_deg,
              "inlier_fraction": e.inlier_fraction, "relative_scale": e.relative_scale}
             for e in events]
    return {"format": LOOPS_FORMAT, "schema": 1, "loops": _finite(loops),
            "counts": {"keyframes": counts.keyframes, "kept": counts.kept,
                       "candidates": counts.candidates, "verified": counts.verified,
                       "accepted": counts.accepted, "rejected": dict(counts.rejected)}}


def _finite(loops: list) -> list:
    """JSON has no nan: a value the loop did not measure is null."""
    return [{k: (None if isinstance(v, float) and not np.isfinite(v) else v)
             for k, v in lp.items()} for lp in loops]


def reoptimize(run_dir, params: Sequence[str], max_diff_ns: int, offset_ns: int) -> dict:
    """``lingbot-ros-offline RUN --reoptimize``: RUN's ``loop_graph.json`` replayed with
    ``params``; RUN's ``trajectory.tum`` corrected into ``trajectory_optimized.tum`` (the
    same units), evaluated against RUN's ``groundtruth.tum`` when it has one. Writes
    ``reoptimize.json``; returns it."""
    run_dir = Path(run_dir)
    config = loop_config(params)
    try:
        record = read_graph_record(run_dir / GRAPH)
    except FileNotFoundError:
        raise BadRunOptions(f"{run_dir} has no {GRAPH}: --reoptimize replays the folder of a "
                            "--loop-closure run") from None
    except GraphRecordError as exc:
        raise BadRunOptions(str(exc)) from None
    stamps, poses = read_tum(run_dir / "trajectory.tum")
    header = [h for h in read_tum_header(run_dir / "trajectory.tum")
              if not h.startswith("frame:")]
    result = replay(record, config)
    optimized = corrected_poses(result, record, stamps, poses)
    write_tum(run_dir / OPTIMIZED, stamps, optimized, frame=MAP_FRAME, header=header)
    doc: dict = {"format": "lingbot_ros_reoptimize", "schema": 1,
                 "keyframes": len(record.ids), "loops": len(record.loops),
                 "loop_config": dataclasses.asdict(config), "iterations": result.iterations,
                 "outputs": {"trajectory_optimized": str(run_dir / OPTIMIZED)}}
    gt_path = run_dir / "groundtruth.tum"
    if gt_path.is_file():
        gt = read_tum(gt_path)
        kw = dict(max_diff_ns=max_diff_ns, offset_ns=offset_ns,
                  metric=record.units == "m")
        doc["evaluation_front_end"] = evaluate(stamps, poses, *gt, **kw)
        doc["evaluation_optimized"] = evaluate(stamps, optimized, *gt, **kw)
        doc["ate_ratio"] = _ratio(doc)
    write_atomic(run_dir / REOPTIMIZED,
                 (json.dumps(doc, indent=2, default=str) + "\n").encode(),
                 replaces=b'{\n  "format": "lingbot_ros_reoptimize"')
    return doc


def _ratio(doc: dict) -> Optional[float]:
    try:
        return (doc["evaluation_optimized"]["ate_sim3"]["rmse"]
                / doc["evaluation_front_end"]["ate_sim3"]["rmse"])
    except (KeyError, TypeError, ZeroDivisionError):
        return None

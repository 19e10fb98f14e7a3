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
from ...scale import ScaleConfig
from ...loop.graph_record import (GraphRecordError, corrected_poses, read_graph_record,
                                  record_of, replay, scaled, write_graph_record)
from ..metrics.trajectory import evaluate
from .run_spec import BadRunOptions
from .scale_args import parse_scale

log = logging.getLogger("lingbot_ros.offline")

OPTIMIZED = "trajectory_optimized.tum"
LOOPS = "loops.json"
GRAPH = "loop_graph.json"
REOPTIMIZED = "reoptimize.json"
IN_MAP = "trajectory_in_map.tum"
LOCALIZATION = "localization.json"
LOCALIZATION_FORMAT = "lingbot_ros_localization"
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
    g.add_argument("--save-map", metavar="DIR",
                   help="with --loop-closure: write the place map (every kept keyframe at its "
                   "optimised pose: descriptor, image, depth; in metres when --scale locked) "
                   "to the folder DIR, replaced only if it is a place map we wrote")
    g.add_argument("--localize-in", metavar="MAP",
                   help="relocalize the run in a stored place map (needs a metric --scale that "
                   "locks): writes localization.json and, once localized, "
                   "trajectory_in_map.tum (the run in the map's frame, metres)")
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


def check_loop_options(run) -> None:
    """What would fail only after the run: fail now (BadRunOptions)."""
    if getattr(run, "save_map", None) and not getattr(run, "loop_closure", False):
        raise BadRunOptions("--save-map needs --loop-closure (the map is the back end's)")
    if getattr(run, "save_map", None):
        from ...loop.map_folder import check_replaceable
        check_replaceable(Path(run.save_map))  # MapNotReplaced: not a map of ours
    choice = parse_scale(getattr(run, "scale", None) or "none")
    metric = ScaleConfig(source=choice.source, factor=choice.factor or 1.0).metric
    if getattr(run, "localize_in", None) and not metric:
        raise BadRunOptions("--localize-in needs a metric --scale (the stored map is in "
                            "metres): e.g. --scale depth")
    if getattr(run, "loop_closure", False) or getattr(run, "localize_in", None):
        loop_config(run.loop_param)


class OfflineLoop:
    """The back end of one offline run (``--loop-closure``) and its relocalization in a
    stored map (``--localize-in``): fed each result, written at the end."""

    def __init__(self, run, stream, make_session) -> None:
        from ...loop.backend import LoopBackend
        from ...loop.pair_runner import run_pair
        self.run = run
        self.config = loop_config(run.loop_param)
        pair = partial(run_pair, make_session, stream)
        self.backend = (LoopBackend(self.config, pair=pair, window=stream.window)
                        if run.loop_closure else None)
        self.relocalizer, self.localized = None, None
        self.waited_for_scale = 0  # keyframes before the scale locked (not offered)
        if getattr(run, "localize_in", None):
            from ...loop.place_map import read_place_map
            from ...loop.relocalize import Relocalizer
            place_map = read_place_map(Path(run.localize_in))  # PlaceMapError: refused
            self.relocalizer = Relocalizer(self.config, place_map, pair)

    def feed(self, result, scale) -> None:
        """A result of the stream: a keyframe goes to the back end, and to the relocalizer
        (in metres, by the scale's estimate now) until it is localized."""
        from ...loop.backend import keyframe_input
        if not result.keyframe:
            return
        kf = keyframe_input(result)
        if self.backend is not None:
            for event in self.backend.offer(kf).loops:
                log.info("loop closed: keyframe %d -> %d, map -> odom moved %.3f / %.2f deg",
                         event.keyframe_id, event.matched_id, event.jump_m, event.jump_deg)
        if self.relocalizer is not None and self.localized is None:
            factor = scale.factor
            if factor is None:
                self.waited_for_scale += 1
                return
            outcome = self.relocalizer.offer(metric_keyframe(kf, factor))
            if outcome.localized:
                self.localized = (outcome, kf.stamp_ns, factor)
                log.info("localized in %s at keyframe %d (stored keyframe %d)",
                         self.run.localize_in, kf.keyframe_id, outcome.matched_id)

    def write(self, out: Path, stamps, model_poses, scale, gt, eval_args: dict,
              written: list) -> dict:
        """The back end's files in ``out``; ``model_poses``: the front end's trajectory in
        model units (the graph's), converted here by ``scale`` as ``trajectory.tum`` is.
        Returns the summary's ``loop_closure``."""
        summary: dict = {}
        if self.backend is not None:
            summary.update(self._write_loops(out, stamps, model_poses, scale, gt, eval_args,
                                             written))
        if self.relocalizer is not None:
            summary["localization"] = self._write_localization(out, stamps, model_poses,
                                                               scale, written)
        return summary

    def _write_loops(self, out, stamps, model_poses, scale, gt, eval_args, written) -> dict:
        result = self.backend.optimize()  # every keyframe's node (None: no keyframe)
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
        if result is not None and len(stamps):
            optimized = scale.poses(corrected_poses(result, record, stamps, model_poses))
            files["trajectory_optimized"] = str(write_tum(
                out / OPTIMIZED, stamps, optimized, frame=MAP_FRAME,
                header=scale.header_lines()))
            written.append(OPTIMIZED)
            if gt is not None:
                summary["evaluation"] = evaluate(stamps, optimized, gt[0], gt[1], **eval_args)
        if getattr(self.run, "save_map", None):
            files["place_map"] = str(self._save_map(scale))
        return summary

    def _save_map(self, scale) -> Path:
        """``--save-map``: the kept keyframes at their optimised poses; in metres when the
        scale locked (the manifest says which, and the source)."""
        from ...loop.place_map import place_map_from, to_metres, write_place_map
        place_map = place_map_from(self.backend.database, self.backend.keyframe_poses(),
                                   "model", intrinsics=self.backend.intrinsics)
        if scale.factor is not None:
            place_map = to_metres(place_map, scale.factor, scale.config.source)
        else:
            log.warning("--save-map: the scale never locked: the place map is in model units "
                        "and cannot be relocalized in")
        path = write_place_map(Path(self.run.save_map), place_map)
        log.info("place map of %d keyframes written to %s (%s)", len(place_map), path,
                 place_map.units)
        return path

    def _write_localization(self, out, stamps, model_poses, scale, written) -> dict:
        """``localization.json`` and, once localized, ``trajectory_in_map.tum``: the run's
        metric poses moved by the localization's ``T_map_odom``."""
        reloc = self.relocalizer
        doc: dict = {"format": LOCALIZATION_FORMAT, "schema": 1,
                     "map": str(self.run.localize_in), "map_id": reloc.place_map.map_id,
                     "localized": self.localized is not None,
                     "keyframes_before_scale_locked": self.waited_for_scale,
                     "counts": dict(reloc.counts),
                     "candidate_counts": dict(reloc.candidate_counts)}
        if self.localized is not None and scale.factor is not None and len(stamps):
            outcome, stamp_ns, factor = self.localized
            T = np.asarray(outcome.T_map_odom, np.float64)
            doc.update(stamp_ns=stamp_ns, matched_id=outcome.matched_id,
                       metres_per_unit_then=factor, T_map_odom=T.reshape(-1).tolist())
            in_map = T @ scale.poses(model_poses)
            write_tum(out / IN_MAP, stamps, in_map, frame=f"camera_optical in the stored "
                      f"map {reloc.place_map.map_id}'s frame", header=scale.header_lines())
            written.append(IN_MAP)
            doc["trajectory_in_map"] = str(out / IN_MAP)
        write_atomic(out / LOCALIZATION,
                     (json.dumps(doc, indent=2, allow_nan=False) + "\n").encode(),
                     replaces=b'{\n  "format": "' + LOCALIZATION_FORMAT.encode())
        written.append(LOCALIZATION)
        return doc


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


def metric_keyframe(kf, metres_per_unit: float):
    """``kf`` with its pose's translation and its depth in metres."""
    T = np.array(kf.T_odom_cam, np.float64)
    T[:3, 3] *= metres_per_unit
    return dataclasses.replace(kf, T_odom_cam=T,
                               depth=np.asarray(kf.depth, np.float32) * np.float32(
                                   metres_per_unit))


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

"""Work units: one sequence with one configuration, run by whoever holds a model.

A unit is planned by the driver (:func:`plan_units`), executed where a model is loaded
(:func:`execute_unit`, the same function on the local machine and on a Ray worker) and its
outputs land in ``OUT/<sequence>/<policy>/`` by one directory rename (:class:`OutputTree`).
Nothing here imports Ray.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from ....geometry import write_atomic
from ....session import fingerprint_key
from ...offline.cli import run
from ...offline.run_spec import CannotResume, OfflineRun
from ...offline.save_resume import recording_fingerprint
from ...sources.datasets import open_dataset
from ..loop_columns import PLACE_MAP, loop_summary
from .tree import OutputTree

log = logging.getLogger("lingbot_ros.eval")

# Driver-side options: they decide where and how units run, never their numbers.
DRIVER_ONLY = frozenset({
    "sequences", "policies", "out", "keyframes", "no_progress", "ray", "workers",
    "gpus_per_worker", "cpus_per_worker", "retries", "resume", "snapshot_every",
    "save_session", "benchmark", "data_root",
    "reoptimize",  # lingbot-ros-offline's other mode (a run folder replayed), never a unit's
    "save_map",  # each unit's own path (--save-maps: its folder's place_map/), never shared
    # lingbot-ros-offline --view: a browser view of one run, never a unit's (off in units)
    "view", "view_host", "view_port", "view_max_points", "view_keep"})


@dataclass(frozen=True)
class WorkUnit:
    """One sequence (a path every worker sees) with one keyframe policy; ``index`` is its
    place in the table (sequences x policies, in the order given)."""
    index: int
    sequence: str
    name: str
    policy: str
    # Stream snapshots: every this many input frames the unit's session is saved to
    # ``OUT/.fleet/snapshots/``; a rerun of the unit (a retry, another worker, a resumed
    # driver) continues from the last one instead of frame 0. 0: no snapshots.
    snapshot_every: int = 0
    # The fingerprint of the sequence's first frames (``input_fingerprint``): the key of the
    # unit's snapshot and of its manifest entry ("" until known: the worker computes it).
    fingerprint: str = ""
    # (option, value) pairs over the run's settings for this unit alone (a benchmark's width,
    # stride, keyframe interval per dataset), sorted; part of its manifest entry
    overrides: tuple = ()

    @property
    def key(self) -> str:
        return f"{self.name}/{self.policy}"


@dataclass(frozen=True)
class UnitResult:
    """What one attempt of a unit gave: ``status`` ``"ok"`` (its outputs committed, their
    SHA-256 in ``files``) or ``"error"`` (``error`` says why; nothing committed)."""
    key: str
    status: str
    summary: dict
    worker: str
    error: Optional[str] = None
    files: dict = field(default_factory=dict)
    attempts: int = 1

    @property
    def frames(self) -> int:
        return int(self.summary.get("frames_processed") or 0)


def plan_units(sequences, names, policies, snapshot_every: int = 0,
               fingerprints=None, overrides=None) -> list[WorkUnit]:
    """Sequences x policies in table order; ``fingerprints``: one per sequence
    (``input_fingerprint``), else computed where the unit runs; ``overrides``: one per
    sequence (``WorkUnit.overrides``), else none. ``policies``: one list for every sequence,
    or one list per sequence."""
    units = []
    fingerprints = list(fingerprints) if fingerprints is not None else [""] * len(sequences)
    overrides = list(overrides) if overrides is not None else [()] * len(sequences)
    if policies and isinstance(policies[0], str):
        policies = [policies] * len(sequences)
    for sequence, name, fingerprint, extra, pols in zip(sequences, names, fingerprints,
                                                        overrides, policies):
        for policy in pols:
            units.append(WorkUnit(len(units), str(sequence), name, policy, snapshot_every,
                                  fingerprint, tuple(extra)))
    return units


def input_fingerprint(sequence, settings) -> str:
    """The fingerprint of ``sequence``'s first frames, read as its run reads them (the
    settings' --format, --stamps, --fps, --topic): ``fingerprint_key`` of their digests
    (session/fingerprint.py), "" when it cannot be read (the unit's run then says why).
    ``settings``: ``run_settings``' dict or an argparse namespace."""
    get = settings.get if isinstance(settings, dict) else (
        lambda key, default=None: getattr(settings, key, default))
    try:
        dataset = open_dataset(sequence, get("format", "auto"), get("stamps", "auto"),
                               get("fps", 30.0), get("topic"))
        digests = recording_fingerprint(dataset.source)
    except Exception as exc:  # noqa: BLE001 -- a unreadable input is its unit's error row
        log.info("%s: no input fingerprint (%s: %s)", sequence, type(exc).__name__, exc)
        return ""
    return fingerprint_key(digests) if digests else ""


def run_settings(args: argparse.Namespace) -> dict:
    """The options that decide a unit's numbers (JSON-able): what every worker runs with."""
    return {k: v for k, v in sorted(vars(args).items()) if k not in DRIVER_ONLY}


def unit_run(settings: dict, policy: str = "all", overrides=(), **unit) -> OfflineRun:
    """The offline run of ``settings`` (with the unit's ``overrides``: a benchmark's width,
    stride, keyframe interval) with keyframe policy ``policy`` (the model itself does not
    depend on the policy); ``unit``: the unit's own fields (input, out, snapshots). With
    ``save_maps`` (``--save-maps``) the run writes its place map into ``out/place_map``
    (execute_unit's ``out``: the unit's staging folder)."""
    return OfflineRun.from_settings(dict(settings, **dict(overrides)), keyframes=policy,
                                    **unit)


def settings_digest(settings: dict) -> str:
    """SHA-256 of the settings, with the checkpoint's size and mtime (a replaced checkpoint
    file under the same name is a different configuration)."""
    ident = dict(settings)
    ckpt = settings.get("checkpoint")
    if ckpt and Path(ckpt).is_file():
        st = Path(ckpt).stat()
        ident["checkpoint_stat"] = [st.st_size, st.st_mtime_ns]
    blob = json.dumps(ident, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()


def sha256_file(path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def unit_digests(folder: Path) -> dict:
    """The SHA-256 of every file of a unit's folder, by name: its regular files, and each
    file of its place map (``place_map/<name>``), so that ``--resume`` redoes a unit whose
    map was altered or removed."""
    files = {p.name: sha256_file(p) for p in sorted(folder.iterdir()) if p.is_file()}
    place_map = folder / PLACE_MAP
    if place_map.is_dir() and not place_map.is_symlink():
        files.update({f"{PLACE_MAP}/{p.name}": sha256_file(p)
                      for p in sorted(place_map.iterdir()) if p.is_file()})
    return files


def execute_unit(unit: WorkUnit, settings: dict, model, tree: OutputTree, worker: str,
                 show_progress: bool = False) -> UnitResult:
    """Run ``unit`` through a fresh session on ``model`` into a staging folder of ``tree``,
    then commit it. Any failure is an ``"error"`` result (the caller decides on retries)."""
    staging = tree.new_staging(unit.key, worker)
    snapshots, snapshot_args = unit_snapshot_args(unit, settings, tree)
    final = tree.unit_dir(unit.key)
    try:
        run_args = unit_run(settings, unit.policy, unit.overrides, input=unit.sequence,
                            out=str(staging), no_progress=not show_progress, **snapshot_args)
        summary = run(run_args, model)
        if settings.get("loop_closure"):  # the back end's files, read where they were written
            summary["loop_closure"] = loop_summary(staging, summary)
        # The files' final place, not the staging folder they were written in.
        summary["outputs"] = {k: str(final / Path(v).name)
                              for k, v in summary.get("outputs", {}).items()}
        if run_args.save_map:  # --save-maps: written by the back end into staging/place_map
            if not (staging / PLACE_MAP).is_dir():
                raise FileNotFoundError(f"the run wrote no place map ({PLACE_MAP}/)")
            summary["outputs"]["place_map"] = str(final / PLACE_MAP)
        write_atomic(staging / "summary.json",
                     (json.dumps(summary, indent=2, default=str) + "\n").encode())
        files = unit_digests(staging)
        tree.commit(staging, unit.key)
        if snapshots is not None:  # done: its snapshot has served
            shutil.rmtree(snapshots, ignore_errors=True)
    except Exception as exc:  # a unit's failure is its row, never the fleet's
        tree.discard(staging)
        if snapshots is not None and isinstance(exc, CannotResume):
            # an unusable snapshot (other settings, corrupted): the next attempt starts over
            log.warning("unit %s: %s; its snapshot is dropped", unit.key, exc)
            shutil.rmtree(snapshots, ignore_errors=True)
        return UnitResult(unit.key, "error", {"input": unit.sequence,
                                               "error": f"{type(exc).__name__}: {exc}"},
                          worker, error=f"{type(exc).__name__}: {exc}")
    return UnitResult(unit.key, "ok", summary, worker, files=files)


def unit_snapshot_args(unit: WorkUnit, settings: dict,
                       tree: OutputTree) -> tuple[Optional[Path], dict]:
    """The offline run's snapshot fields for ``unit``: save every ``unit.snapshot_every``
    frames to the unit's snapshot folder, and resume from it when an earlier attempt left
    one. Returns that folder (None without snapshots) and the fields (save_session,
    snapshot_every, resume). The snapshot holds the run's own accumulators too
    (``--scale``'s estimate, ``--ply``'s point map: lingbot_ros.tools.offline.save_resume),
    so a resumed unit writes the files of one run."""
    none = {"save_session": None, "snapshot_every": 0, "resume": None}
    if not unit.snapshot_every:
        return None, none
    folder = unit_snapshot_folder(unit, tree, settings)
    if folder is None:  # the input cannot be read: its run fails and says why
        return None, none
    folder.parent.mkdir(parents=True, exist_ok=True)
    resume = None
    if folder.exists():  # the offline run checks it (marker, settings, the input's frames)
        resume = str(folder)
        log.info("unit %s resumes from its snapshot %s", unit.key, folder)
    return folder, {"save_session": str(folder), "snapshot_every": unit.snapshot_every,
                    "resume": resume}


def unit_snapshot_folder(unit: WorkUnit, tree: OutputTree, settings) -> Optional[Path]:
    """Where ``unit``'s stream snapshots go: ``OUT/.fleet/snapshots/<seq>__<policy>.<input
    fingerprint>``, so a snapshot of another recording (the same folder name elsewhere, or
    the recording replaced) is never the unit's. None when the input cannot be read."""
    fingerprint = unit.fingerprint or input_fingerprint(unit.sequence, settings)
    if not fingerprint:
        return None
    return tree.state / "snapshots" / f"{unit.key.replace('/', '__')}.{fingerprint}"


def error_result(unit: WorkUnit, error: str, worker: str, attempts: int) -> UnitResult:
    return UnitResult(unit.key, "error", {"input": unit.sequence, "error": error}, worker,
                      error=error, attempts=attempts)


"""``loops.json``: the loop closures of one ``lingbot-ros-offline --loop-closure`` run, read
back and checked.

The offline runner writes it beside ``trajectory.tum`` and ``trajectory_optimized.tum``::

    {"schema": 1,
     "loops": [{"stamp_ns", "keyframe_id", "matched_id", "matched_stamp_ns", "jump_m",
                "jump_deg", "residual_m", "residual_deg", "inlier_fraction",
                "relative_scale"}, ...],
     "counts": {"keyframes", "kept", "candidates", "verified", "accepted",
                "rejected": {reason: n}}}

:func:`read_loops` returns a :class:`LoopsReport` (typed, frozen) or raises ValueError naming
the file and the field that is wrong: a missing key, a wrong type, a negative count, an
``accepted`` count that is not the number of loops listed. Unknown extra keys are allowed (a
later writer may add fields), an unknown ``schema`` is not.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Union

__all__ = ["LOOPS_SCHEMA", "LOOP_INT_FIELDS", "LOOP_FLOAT_FIELDS", "COUNT_FIELDS", "LoopRecord",
           "LoopsReport", "read_loops", "parse_loops"]

LOOPS_SCHEMA = 1
LOOP_INT_FIELDS = ("stamp_ns", "keyframe_id", "matched_id", "matched_stamp_ns")
LOOP_FLOAT_FIELDS = ("jump_m", "jump_deg", "residual_m", "residual_deg", "inlier_fraction",
                     "relative_scale")
COUNT_FIELDS = ("keyframes", "kept", "candidates", "verified", "accepted")
MAX_BYTES = 64 << 20  # a loops.json is small; a bigger file is not one


@dataclass(frozen=True)
class LoopRecord:
    """One accepted loop: the current keyframe (``keyframe_id`` at ``stamp_ns``) matched with
    an older one; the jump of the correction it brought, the residual after optimisation
    (metres / degrees, in the trajectory's units), its inlier fraction and the pair's scale
    relative to the map."""
    stamp_ns: int
    keyframe_id: int
    matched_id: int
    matched_stamp_ns: int
    jump_m: float
    jump_deg: float
    residual_m: float
    residual_deg: float
    inlier_fraction: float
    relative_scale: float


@dataclass(frozen=True)
class LoopsReport:
    """A run's loops and the back end's counts (``rejected``: reason -> n, sorted)."""
    loops: tuple[LoopRecord, ...]
    keyframes: int
    kept: int
    candidates: int
    verified: int
    accepted: int
    rejected: tuple[tuple[str, int], ...]

    @property
    def rejected_total(self) -> int:
        return sum(n for _, n in self.rejected)

    def as_dict(self) -> dict:
        return {"keyframes": self.keyframes, "kept": self.kept, "candidates": self.candidates,
                "verified": self.verified, "accepted": self.accepted,
                "rejected": dict(self.rejected)}


def _int(where: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{where} must be an integer, got {value!r}")
    return value


def _count(where: str, value) -> int:
    n = _int(where, value)
    if n < 0:
        raise ValueError(f"{where} must be >= 0, got {n}")
    return n


def _float(where: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            not math.isfinite(value):
        raise ValueError(f"{where} must be a finite number, got {value!r}")
    return float(value)


def _object(where: str, value, keys) -> dict:
    if not isinstance(value, dict):
        raise ValueError(f"{where} must be an object, got {type(value).__name__}")
    missing = [k for k in keys if k not in value]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    return value


def parse_loops(data, where: str = "loops.json") -> LoopsReport:
    """The report of ``data`` (loops.json's parsed JSON); ValueError naming ``where`` and the
    field otherwise."""
    data = _object(where, data, ("schema", "loops", "counts"))
    if data["schema"] != LOOPS_SCHEMA:
        raise ValueError(f"{where}: schema {data['schema']!r} is not {LOOPS_SCHEMA} (written "
                         "by another version)")
    if not isinstance(data["loops"], list):
        raise ValueError(f"{where}: loops must be a list, got {type(data['loops']).__name__}")
    loops = []
    for i, item in enumerate(data["loops"]):
        at = f"{where}: loops[{i}]"
        item = _object(at, item, LOOP_INT_FIELDS + LOOP_FLOAT_FIELDS)
        values = {k: _int(f"{at}.{k}", item[k]) for k in LOOP_INT_FIELDS}
        values.update({k: _float(f"{at}.{k}", item[k]) for k in LOOP_FLOAT_FIELDS})
        loops.append(LoopRecord(**values))
    counts = _object(f"{where}: counts", data["counts"], COUNT_FIELDS + ("rejected",))
    numbers = {k: _count(f"{where}: counts.{k}", counts[k]) for k in COUNT_FIELDS}
    rejected = counts["rejected"]
    if not isinstance(rejected, dict):
        raise ValueError(f"{where}: counts.rejected must be an object (reason: n)")
    reasons = tuple(sorted((str(k), _count(f"{where}: counts.rejected.{k}", v))
                           for k, v in rejected.items()))
    if numbers["accepted"] != len(loops):
        raise ValueError(f"{where}: counts.accepted is {numbers['accepted']} but "
                         f"{len(loops)} loops are listed")
    return LoopsReport(tuple(loops), rejected=reasons, **numbers)


def read_loops(path: Union[str, Path]) -> LoopsReport:
    """Read and check ``path`` (a loops.json). FileNotFoundError when absent; ValueError
    naming the file for anything else wrong with it."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no loops.json (was the run made with "
                                "--loop-closure?)")
    if path.stat().st_size > MAX_BYTES:
        raise ValueError(f"{path}: {path.stat().st_size} bytes, more than a loops.json holds")
    try:
        data = json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not JSON ({exc})") from None
    return parse_loops(data, str(path))

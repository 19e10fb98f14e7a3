"""The confirmation of verified loops: one is accepted only when a second agrees (docs/loop.md,
"Confirmation").

A verified loop (``verify.py``'s :class:`~lingbot_ros.loop.verify.VerifyResult`) is a single
model step's opinion of where the robot is; a wrong one that passed every gate would bend the
map. :class:`LoopConfirmation` keeps verified loops pending until a second one says the same
(its docstring); the back end and the relocalizer both use it. Numpy and
lingbot_ros.geometry only.
"""
from __future__ import annotations

import math
from collections import Counter, deque
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..geometry import rotation_angle
from .config import LoopConfig
from .verify import VerifyResult

__all__ = ["ConfirmOutcome", "LoopConfirmation"]


@dataclass(frozen=True)
class ConfirmOutcome:
    """What :meth:`LoopConfirmation.offer` did: ``confirmed`` with ``loops`` (the earlier
    pending loop, the new one), or ``pending`` (kept, waiting), or ``not_verified`` (a
    rejected result, ignored). ``distance`` / ``angle_deg``: the disagreement with the
    closest pending loop (nan if none was comparable)."""

    confirmed: bool
    reason: str
    loops: tuple[VerifyResult, ...] = ()
    distance: float = math.nan
    angle_deg: float = math.nan


class LoopConfirmation:
    """Verified loops wait here until a second agrees; only then are they accepted.

    Agreement: the pending loop's correction (``VerifyResult.correction()``) applied to the
    new loop's front-end pose, ``C_p @ T_fe_new``, against the new loop's implied pose:
    their positions within ``loop.confirm_m`` and the angle between their rotations within
    ``loop.confirm_deg``. Both loops then say the same about where the robot is now. A
    pending loop of the same keyframe and stamp is not a second opinion and is skipped.
    Bounded: pending loops older than ``loop.confirm_window_s`` before the new one's stamp
    (or after it: a restarted stream) are dropped, and at most
    ``loop.confirm_max_pending`` are kept (the oldest dropped first)."""

    def __init__(self, config: LoopConfig) -> None:
        if not isinstance(config, LoopConfig):
            raise ValueError(f"config must be a LoopConfig, got {type(config).__name__}")
        self.config = config
        self._pending: deque[VerifyResult] = deque(maxlen=config.confirm_max_pending)
        self._window_ns = round(config.confirm_window_s * 1e9)
        self.counts: Counter = Counter()

    @property
    def pending(self) -> tuple[VerifyResult, ...]:
        return tuple(self._pending)

    def offer(self, result: VerifyResult) -> ConfirmOutcome:
        if not isinstance(result, VerifyResult):
            raise ValueError(f"result must be a VerifyResult, got {type(result).__name__}")
        if not result.accepted:
            self.counts["not_verified"] += 1
            return ConfirmOutcome(False, "not_verified")
        now = result.stamp_ns
        kept = [p for p in self._pending if now - self._window_ns <= p.stamp_ns <= now]
        self.counts["expired"] += len(self._pending) - len(kept)
        best: Optional[tuple[float, float, VerifyResult]] = None
        for p in kept:
            if (p.keyframe_id, p.stamp_ns) == (result.keyframe_id, result.stamp_ns):
                continue
            predicted = p.correction() @ result.front_end_pose
            d = float(np.linalg.norm(predicted[:3, 3] - result.implied_pose[:3, 3]))
            a = math.degrees(float(rotation_angle(predicted[:3, :3].T
                                                  @ result.implied_pose[:3, :3])))
            if best is None or (d, a) < best[:2]:
                best = (d, a, p)
        self._pending.clear()
        if best is not None and best[0] <= self.config.confirm_m \
                and best[1] <= self.config.confirm_deg:
            self._pending.extend(p for p in kept if p is not best[2])
            self.counts["confirmed"] += 1
            return ConfirmOutcome(True, "confirmed", (best[2], result), best[0], best[1])
        self.counts["dropped"] += max(0, len(kept) + 1 - self._pending.maxlen)
        self._pending.extend(kept)
        self._pending.append(result)
        self.counts["pending"] += 1
        d, a = (best[0], best[1]) if best is not None else (math.nan, math.nan)
        return ConfirmOutcome(False, "pending", (), d, a)

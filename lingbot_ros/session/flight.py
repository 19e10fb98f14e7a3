"""The pipeline's step records (``StreamingSession``): the streaming frame whose step is on
the GPU (``Flight``), a step that closed with its outcome not yet reported (``Closed``), and
the check that turns a step's non-finite pose into its ``FrameFailed``."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..model import StepOutputs
from .results import Frame
from .step_txn import StepTxn
from .types import FrameFailed

__all__ = ["Flight", "Closed", "non_finite"]


@dataclass(frozen=True)
class Flight:
    """The streaming frame whose step is queued on the GPU: the session's one in-flight
    step (its outputs are being read back by ``HostReadback``)."""

    frame: Frame
    outputs: StepOutputs  # on the device
    txn: StepTxn  # open until the step closes
    known: Optional[bool]  # keyframe decided before the forward, else None


@dataclass(frozen=True)
class Closed:
    """A step that closed (committed or rolled back), its outcome not yet reported."""

    frame: Frame
    outputs: Optional[StepOutputs]
    host: Optional[dict]  # its outputs on the host (``HostReadback`` views: valid one frame more)
    keyframe: bool
    rollover_due: bool  # its commit completes the segment: roll over before the next step
    failed: Optional[FrameFailed] = None  # its pose was not finite (rolled back)


def non_finite(host: dict, what: str, frames: list[Frame]) -> Optional[FrameFailed]:
    """The ``FrameFailed`` of a step whose pose is not finite (diverged weights, a bf16
    overflow: such a frame must not enter the caches or the trajectory), else None. Checked
    on the pose read back for the result: no extra wait."""
    if np.isfinite(host["pose_enc"]).all():
        return None
    return FrameFailed("non_finite", f"{what}: the model's pose is not finite; the step "
                                     "was rolled back", [f.stamp_ns for f in frames],
                       [f.ticket for f in frames])

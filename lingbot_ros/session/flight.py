"""The pipeline's step records (``StreamingSession``): a frame past its checks (``Staged``),
its streaming step begun (``Opened``), the streaming frame whose step is on the GPU
(``Flight``), a step that closed with its outcome not yet reported (``Closed``); the check
that turns a step's non-finite pose into its ``FrameFailed``; a stream's step run alone
(``run_alone``) and a closing step's keyframe decision (``decide``)."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..cache import StepKind
from ..model import StepOutputs
from .graph_step import GraphCaptureError
from .results import Frame
from .step_txn import StepTxn
from .types import FrameFailed

__all__ = ["Staged", "Opened", "Flight", "Closed", "non_finite", "run_alone", "decide"]


@dataclass(frozen=True)
class Staged:
    """A frame past its checks and preprocessing; the previous step closed, its outcome
    (``closed``) reported once this frame's step is queued (None: reported already)."""

    image: torch.Tensor  # (3, H, W) on the device
    stamp_ns: int
    crop: object  # preprocess.CropInfo
    t0: float  # hand-in time (perf_counter)
    with_depth: Optional[bool]  # what the caller asked for
    closed: Optional["Closed"]


@dataclass(frozen=True)
class Opened:
    """A streaming frame whose single-frame step is begun (``txn`` pending), not yet run."""

    frame: Frame
    txn: StepTxn
    kind: StepKind
    known: Optional[bool]  # keyframe decided before the forward, else None
    with_depth: bool  # the depth head runs (outputs, flow policy, next anchors)


def run_alone(runner, opened: Opened) -> tuple[Opened, StepOutputs]:
    """``opened``'s step on its own ``StreamRunner`` (as ``StreamRunner.step``: a failed
    graph capture is retried once eagerly, on a step begun anew)."""
    image = opened.frame.image[None]
    try:
        return opened, runner.run(image, opened.txn, with_depth=opened.with_depth)
    except GraphCaptureError:
        opened = dataclasses.replace(opened, txn=runner.begin(1, opened.kind))
        return opened, runner.run(image, opened.txn, with_depth=opened.with_depth)


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


def decide(flight: Flight, host: dict, policy, segments) -> Closed:
    """Close ``flight``'s finite step: its keyframe decision (known before, else the policy's
    from its outputs), then commit (the policy and the segment count it) or rollback."""
    frame, outputs, txn = flight.frame, flight.outputs, flight.txn
    depth = outputs.depth[0, ..., 0] if outputs.depth is not None else None
    keyframe = flight.known if flight.known is not None else policy.decide(
        frame.index, depth, outputs.intrinsics[0], outputs.c2w[0])
    rollover_due = False
    if keyframe:
        txn.commit()
        policy.on_keyframe(frame.index, depth, outputs.intrinsics[0], outputs.c2w[0])
        rollover_due = segments.count_keyframe()
    else:
        txn.rollback()
    return Closed(frame, outputs, host, keyframe, rollover_due)

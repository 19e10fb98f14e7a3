"""NextSegment: a rollover's anchor step built beside the stream (``rollover_mode: sliced``).

A blocking rollover runs the next segment's anchor step (all anchors together: about four
frames of GPU time at the released size) between two frames, and a camera's frames queue
behind it. Here the step runs on a runner of its own, a few slices (a block each) queued
behind each streaming frame, while the current segment goes on; once the last slice is
queued, the next frame boundary hands its caches to the stream's runner (a device copy)
and the new segment starts there. Drained at once, the slices run exactly the kernels of the
blocking step, in its order, so the two give the same anchors (tested).

State it owns: the side runner (allocated at the first rollover, kept: a window of one
frame, eager), the anchors of the build, its open step and its remaining slices.
"""
from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from ..cache import StepKind
from ..config import ROLLOVER_SLACK_KEYFRAMES, SessionConfig
from ..model import Slices, StepOutputs
from .segments import AnchorFrame, Rollover, Segments, anchor_of, anchor_state
from .step_txn import StepTxn
from .stream_runner import StreamRunner

__all__ = ["NextSegment"]


class NextSegment:
    def __init__(self, model, config: SessionConfig,
                 image_hw: Optional[tuple[int, int]] = None) -> None:
        """``image_hw``: the stream's model input size, which a build restored by
        ``load_state_dict`` runs at (None: the stream has none yet); ``start`` sets it."""
        self.model = model
        self.config = config
        self.image_hw = None if image_hw is None else tuple(image_hw)
        self._runner: Optional[StreamRunner] = None
        self._anchors: list[AnchorFrame] = []
        self._txn: Optional[StepTxn] = None
        self._slices: Optional[Slices[StepOutputs]] = None
        self._outputs: Optional[StepOutputs] = None
        self.slices_run = 0  # of the current build

    @property
    def pending(self) -> bool:
        """A build was started and not yet taken (``take``) or dropped."""
        return self._txn is not None

    @property
    def built(self) -> bool:
        """Every slice of the build is queued: the next frame boundary can take it."""
        return self._outputs is not None

    def start(self, anchors: list[AnchorFrame], image_hw: tuple[int, int]) -> None:
        """Open the anchor step of ``anchors`` (model inputs on the device) on the side
        runner (for ``image_hw`` inputs); nothing runs until ``advance``."""
        self.drop()
        self.image_hw = image_hw = tuple(image_hw)
        runner = self._runner
        if runner is None or runner.image_hw != image_hw:
            self._runner = None  # free the old size's memory first
            side = dataclasses.replace(self.config, window=1, cuda_graphs=False)
            runner = self._runner = StreamRunner(self.model, side, image_hw)
        runner.reset()
        images = torch.stack([a.image for a in anchors])
        txn = runner.begin(len(anchors), StepKind.KEYFRAME)
        self._slices = runner.run_slices(images, txn)
        self._anchors, self._txn, self.slices_run = anchors, txn, 0

    def advance(self, slices: Optional[int] = None) -> bool:
        """Queue up to ``slices`` more slices (None: all that are left); True once built."""
        if self._slices is None:
            return self.built
        for _ in range(slices if slices is not None else 1 << 30):
            try:
                next(self._slices)
                self.slices_run += 1
            except StopIteration as stop:
                self._outputs, self._slices = stop.value, None
                break
            except Exception:
                self._slices = None
                self.drop()
                raise
        return self.built

    def take(self, runner: StreamRunner) -> tuple[list[AnchorFrame], StepOutputs]:
        """Finish the build (its remaining slices run now), commit it and move its caches
        into ``runner`` (the stream's; its own frames are dropped). Returns the anchors and
        their outputs (on the device) for the new segment's alignment."""
        self.advance()
        anchors, outputs, txn = self._anchors, self._outputs, self._txn
        txn.commit()
        runner.adopt(self._runner)
        self._runner.reset()
        self._anchors, self._txn, self._outputs = [], None, None
        return anchors, outputs

    def segment_complete(self, segments: Segments, image_hw: tuple[int, int]) -> None:
        """The current segment is complete: its successor's anchor step starts building
        beside the stream, or, past the caches' slack, is finished now (taken next frame)."""
        if not self.pending:
            self.start(segments.next_anchors(), image_hw)
        elif segments.keyframes >= self.config.rollover_keyframes + ROLLOVER_SLACK_KEYFRAMES:
            self.advance()

    def adopt(self, runner: StreamRunner, policy, segments: Segments) -> Rollover:
        """Between two frames: the build becomes the stream's new segment (``take`` into
        ``runner``; the keyframe ``policy`` starts fresh, as at a blocking rollover)."""
        anchors, outputs = self.take(runner)
        policy.reset()
        return segments.start_next(anchors, outputs)

    def drop(self) -> None:
        """Forget the build (a reset, a restart, a restore): its step is rolled back."""
        slices, self._slices = self._slices, None
        if slices is not None:
            slices.close()  # rolls a started step back
        if self._txn is not None and self._txn.state == "pending":
            self._txn.rollback()
        self._anchors, self._txn, self._outputs = [], None, None
        if self._runner is not None:
            self._runner.reset()

    # -- snapshot --------------------------------------------------------------------------
    def state_dict(self) -> Optional[dict]:
        """The build as snapshot data (None: none running): its anchors and how far it got.
        Its caches are not saved: the slices are deterministic, so ``load_state_dict`` runs
        the same ones again and the build switches at the frame it would have."""
        if not self.pending:
            return None
        return {"anchors": [anchor_state(a) for a in self._anchors],
                "slices_run": self.slices_run, "built": self.built}

    def load_state_dict(self, state: Optional[dict]) -> None:
        """Take back ``state_dict``'s output: the build starts again on its anchors (on the
        stream's device) at ``image_hw`` and runs as many slices as it had (queued on the
        device now). ``ValueError`` for a build without a model input size."""
        self.drop()
        if state is None:
            return
        if self.image_hw is None:
            raise ValueError("the state has a rollover being built but no model input size")
        device = torch.device(self.config.device)
        self.start([anchor_of(a, device) for a in state["anchors"]], self.image_hw)
        self.advance(None if state["built"] else int(state["slices_run"]))

    def info(self) -> dict:
        return {"rollover_building": self.pending, "rollover_slices_run": self.slices_run}

"""Segments: where an unbounded stream's world frame comes from, and when it rolls over.

A segment is the stretch of a stream between two rollovers (not the KV window of
``SessionConfig.window``). The first one starts with the scale phase: its world is the first
frame's camera exactly. After ``rollover_keyframes`` keyframes a new segment starts whose
anchors are the last ``num_scale_frames`` keyframes, re-run as its scale phase on emptied
caches; it is aligned to the published trajectory by Sim(3) (rotation and centre of the
latest anchor, scale from the median depth ratio), so the trajectory stays continuous while
memory, the RoPE time index and the per-frame cost stay bounded.

One owner: ``Segments`` holds the alignment, the segment number, its keyframe count, the
recent keyframes (the next anchors) and the record of rollovers; the session asks it and
tells it what happened (``start``, ``count_keyframe``, ``remember``, ``roll_over``).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..cache import StepKind
from ..config import SessionConfig
from ..geometry import Sim3
from .alignment import reference_alignment


@dataclass(frozen=True)
class AnchorFrame:
    """A committed keyframe kept for the next segment's anchors."""

    image: torch.Tensor  # (3, H, W) model input on the device
    index: int
    c2w: np.ndarray  # (4, 4) float64, world frame (as published)
    depth: Optional[torch.Tensor]  # (H, W) world-scale depth on the device


@dataclass(frozen=True)
class Rollover:
    """A segment change, for diagnostics: the Sim(3) and how well the anchor stayed put."""

    segment: int  # the new segment's number
    frame_index: int  # the anchor frame (latest keyframe of the previous segment)
    alignment: Sim3  # new segment -> world
    anchor_c2w_published: np.ndarray  # (4, 4) as published in the previous segment
    anchor_c2w_aligned: np.ndarray  # (4, 4) the new segment's estimate, aligned


class Segments:
    def __init__(self, config: SessionConfig) -> None:
        self.device = torch.device(config.device)  # where ``load_state_dict`` puts tensors
        self.num_anchors = config.num_scale_frames
        self.rollover_keyframes = config.rollover_keyframes
        self.rollovers: deque[Rollover] = deque(maxlen=64)  # the most recent segment changes
        self.reset()

    def reset(self) -> None:
        """Forget the stream: no segment until the next scale phase."""
        self.started = False  # the first scale phase ran: streaming frames come next
        self.align = Sim3.identity()  # the current segment's frame -> world
        self.number = 0  # rollovers since the stream started
        self.keyframes = 0  # keyframes in the current segment (its anchors included)
        self._recent: deque[AnchorFrame] = deque(maxlen=self.num_anchors)
        self.rollovers.clear()

    def start(self, first_c2w: np.ndarray, num_frames: int) -> None:
        """The stream's first scale phase ran: the world is its first frame's camera exactly
        (the network's own estimate of frame 0 is only close to the identity)."""
        self.align = Sim3.from_matrix(np.linalg.inv(first_c2w.astype(np.float64)))
        self.started = True
        self.keyframes = num_frames

    def near_rollover(self) -> bool:
        """The next keyframes may become the next segment's anchors (their depth is kept)."""
        return (self.rollover_keyframes is not None
                and self.keyframes >= self.rollover_keyframes - self.num_anchors)

    def count_keyframe(self) -> bool:
        """A streaming frame was committed; True if its commit completes the segment."""
        self.keyframes += 1
        return self.keyframes >= (self.rollover_keyframes or 1 << 62)

    def remember(self, image: torch.Tensor, index: int, c2w_world: np.ndarray,
                 depth: Optional[torch.Tensor]) -> None:
        """A keyframe (its model input, index, published pose and model-frame depth) that
        may anchor the next segment."""
        if depth is not None:
            depth = self.align.apply_depth(depth.float())
        self._recent.append(AnchorFrame(image, index, c2w_world, depth))

    def next_anchors(self) -> list[AnchorFrame]:
        """The recent keyframes: the next segment's anchors, oldest first."""
        return list(self._recent)

    def roll_over(self, runner, policy) -> Rollover:
        """Start the next segment on the recent keyframes (the stream's caches and keyframe
        policy restart) and align it to the current one."""
        anchors = self.next_anchors()
        runner.reset()
        policy.reset()
        outputs, txn = runner.step(torch.stack([a.image for a in anchors]), StepKind.KEYFRAME)
        txn.commit()
        return self.start_next(anchors, outputs)

    def start_next(self, anchors: list[AnchorFrame], outputs) -> Rollover:
        """The next segment starts on ``anchors``, whose anchor step gave ``outputs`` (its
        caches hold them): aligned to the current one, counted, recorded."""
        last = len(anchors) - 1
        prev_depths = [a.depth for a in anchors]
        paired = [i for i, d in enumerate(prev_depths) if d is not None]
        curr_c2w = outputs.c2w.double().cpu().numpy()
        self.align = reference_alignment(
            anchors[last].c2w, curr_c2w[last],
            torch.stack([prev_depths[i] for i in paired]) if paired else None,
            outputs.depth[paired, ..., 0].float() if paired else None)
        self.number += 1
        self.keyframes = len(anchors)
        rollover = Rollover(self.number, anchors[last].index, self.align, anchors[last].c2w,
                            self.align.apply_c2w(curr_c2w[last]))
        self.rollovers.append(rollover)
        # The anchors keep their published poses and depths (they are not emitted again);
        # the policy restarts, so the next frame is the new segment's first keyframe.
        return rollover

    # -- snapshot --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The segment state: JSON-able values, numpy arrays and host tensors (the recent
        keyframes' model inputs and depths, copied from the device)."""
        return {
            "started": self.started, "number": self.number, "keyframes": self.keyframes,
            "align": _sim3_state(self.align),
            "recent": [anchor_state(a) for a in self._recent],
            "rollovers": [{"segment": r.segment, "frame_index": r.frame_index,
                           "alignment": _sim3_state(r.alignment),
                           "anchor_c2w_published": np.array(r.anchor_c2w_published),
                           "anchor_c2w_aligned": np.array(r.anchor_c2w_aligned)}
                          for r in self.rollovers],
        }

    def load_state_dict(self, state: dict) -> None:
        """Take back ``state_dict``'s output; its tensors go to the stream's device
        (``config.device``)."""
        recent = [anchor_of(a, self.device) for a in state["recent"]]
        rollovers = [Rollover(int(r["segment"]), int(r["frame_index"]),
                              _sim3_of(r["alignment"]),
                              np.asarray(r["anchor_c2w_published"], dtype=np.float64),
                              np.asarray(r["anchor_c2w_aligned"], dtype=np.float64))
                     for r in state["rollovers"]]
        align = _sim3_of(state["align"])
        self.reset()
        self.started = bool(state["started"])
        self.number = int(state["number"])
        self.keyframes = int(state["keyframes"])
        self.align = align
        self._recent.extend(recent)
        self.rollovers.extend(rollovers)


def anchor_state(anchor: AnchorFrame) -> dict:
    """A kept keyframe as snapshot data (host copies)."""
    return {"image": anchor.image.detach().cpu().clone(), "index": anchor.index,
            "c2w": np.array(anchor.c2w, dtype=np.float64),
            "depth": None if anchor.depth is None else anchor.depth.detach().cpu().clone()}


def anchor_of(state: dict, device) -> AnchorFrame:
    """``anchor_state``'s output back, its tensors on ``device``."""
    return AnchorFrame(torch.as_tensor(state["image"]).to(device), int(state["index"]),
                       np.asarray(state["c2w"], dtype=np.float64),
                       None if state["depth"] is None
                       else torch.as_tensor(state["depth"]).to(device))


def _sim3_state(sim3: Sim3) -> dict:
    return {"scale": np.float64(sim3.scale).reshape(1), "rotation": np.array(sim3.rotation),
            "translation": np.array(sim3.translation)}


def _sim3_of(state: dict) -> Sim3:
    return Sim3(float(np.asarray(state["scale"]).reshape(-1)[0]),
                np.asarray(state["rotation"], dtype=np.float64),
                np.asarray(state["translation"], dtype=np.float64))

"""The back end's contracts with its front ends (the node, the offline runner): what goes in
per committed keyframe, what comes out of each step, its counters. Numpy only; frozen.

    backend = LoopBackend(config, pair=run, window=stream.window)     # loop/backend.py
    step = backend.offer(keyframe_input(result))                      # a BackendStep
    for event in step.loops: publish(event)                           # LoopEvent
    T_map_odom = backend.correction_at(T_odom_cam)                    # REP-105 map -> odom

Units: the stream's (model units; metres when the front end hands metric poses and depth).
Frames: ``odom`` is the front end's stream world, ``map`` the optimised one.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping, Optional

import numpy as np

__all__ = ["KeyframeInput", "LoopEvent", "BackendStep", "LoopCounts", "REJECT_REASONS"]

# why a candidate did not become an accepted loop: verify.LoopReason's gates, then the
# confirmation's and the graph's (one vocabulary for counters, diagnostics and loops.json)
REJECT_REASONS = ("non_finite", "too_few_pixels", "little_overlap", "inconsistent",
                  "implausible", "unconfirmed", "graph_rejected", "pair_failed", "busy")


@dataclass(frozen=True)
class KeyframeInput:
    """A keyframe the front end committed, as the back end takes it (``keyframe_input``
    builds it from a ``FrameResult`` with features, depth and image)."""

    keyframe_id: int  # the frame's index in its stream (FrameResult.index)
    stamp_ns: int
    segment: int
    T_odom_cam: np.ndarray  # (4, 4) float64 rigid camera-to-world, the front end's world
    K_model: np.ndarray  # (3, 3) float64 intrinsics at the model's resolution
    features: np.ndarray = field(repr=False)  # (P, C) the model's patch features of the frame
    image: np.ndarray = field(repr=False)  # (H, W, 3) uint8, the model's input
    depth: np.ndarray = field(repr=False)  # (H, W) float32, the front end's depth (its units)
    depth_conf: Optional[np.ndarray] = field(default=None, repr=False)  # (H, W) float32


@dataclass(frozen=True)
class LoopEvent:
    """One accepted loop, as ``~/loop_closures`` and ``loops.json`` report it."""

    stamp_ns: int  # the current keyframe's stamp
    keyframe_id: int  # the current keyframe
    matched_id: int  # the stored keyframe it closes on
    matched_stamp_ns: int
    correction: np.ndarray  # (4, 4) rigid T_map_odom at the current keyframe, after the loop
    jump_m: float  # how far map -> odom moved at this loop (its translation's change)
    jump_deg: float  # ... and its rotation's
    residual_m: float  # the loop's residual in the optimised graph
    residual_deg: float
    inlier_fraction: float  # of the verification's geometric check
    relative_scale: float  # the measured Sim(3)'s scale (1 once metres are locked)


@dataclass(frozen=True)
class BackendStep:
    """What one ``offer`` did."""

    keyframe_id: int
    kept: bool  # added to the place database (False: thinned, near a kept one)
    candidates: tuple  # PlaceCandidate, best first
    verified: tuple  # VerifyResult of each candidate verified (accepted or not)
    loops: tuple[LoopEvent, ...]  # accepted by this step (confirmed pairs)
    correction: np.ndarray  # (4, 4) rigid T_map_odom at this keyframe
    optimized: bool  # the graph was optimised in this step (a loop was accepted)


@dataclass(frozen=True)
class LoopCounts:
    """Cumulative since the back end started (a new stream, after a reset, starts anew)."""

    keyframes: int = 0  # offered
    kept: int = 0  # in the place database
    candidates: int = 0  # retrieved
    verified: int = 0  # passed every verification gate
    accepted: int = 0  # confirmed and in the graph
    rejected: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType({r: 0 for r in REJECT_REASONS}))
    optimize_ms_last: float = float("nan")
    localized: Optional[bool] = None  # None: no stored map loaded

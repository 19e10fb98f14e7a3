"""The window rollover's Sim(3): the reference's rule (``gct_stream_window_v2``'s pairwise
alignment) between a segment and the next.

Rotation from one anchor frame pair ``R = R_prev @ R_curr^T``, scale = median of per-pixel
depth ratios prev/curr over the paired keyframes (finite, |curr| > eps) clamped to
[1e-3, 1e3], translation from the anchor centres ``t = c_prev - s R c_curr``.
:func:`select_anchor` picks the anchor (the latest overlap frame that is a keyframe in both
windows) and the pairs. The depth ratios are taken with torch on the depths' device (one host
sync); the rest is the numpy :class:`~lingbot_ros.geometry.Sim3`.
"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np
import torch

from ..geometry import Sim3

__all__ = ["SCALE_CLAMP", "select_anchor", "depth_ratio_scale", "reference_alignment"]

SCALE_CLAMP = (1e-3, 1e3)  # the reference clamps the median depth ratio to this range


def select_anchor(prev_is_keyframe: Sequence[bool], curr_is_keyframe: Sequence[bool]
                  ) -> tuple[int, list[int]]:
    """Anchor and depth pairs inside a window overlap (the reference's rule).

    ``prev_is_keyframe[i]`` / ``curr_is_keyframe[i]``: whether overlap frame i (the same
    physical frame; i = 0 is the oldest) is a keyframe in the previous / current window.
    Returns ``(anchor, pairs)``: the latest offset that is a keyframe in both and every such
    offset (ascending); ``(0, [0])`` when none is (the reference's fallback).
    """
    prev, curr = list(prev_is_keyframe), list(curr_is_keyframe)
    n = min(len(prev), len(curr))
    if n == 0:
        raise ValueError("the overlap is empty: nothing to align on")
    pairs = [i for i in range(n) if prev[i] and curr[i]]
    return (pairs[-1], pairs) if pairs else (0, [0])


def depth_ratio_scale(prev_depths, curr_depths,
                      clamp: tuple[float, float] = SCALE_CLAMP) -> float:
    """Median of per-pixel ratios prev/curr over all given pixels where both are finite and
    |curr| > eps (of float32), clamped to ``clamp``; 1.0 if no pixel qualifies.

    The shapes must match (e.g. (P, H, W) for P paired keyframes); tensors or arrays. torch's
    median (the lower of the two middle values, as the reference) in float32, or float64 for
    float64 input. One host sync (the returned float)."""
    a = torch.as_tensor(prev_depths)
    b = torch.as_tensor(curr_depths)
    if a.shape != b.shape:
        raise ValueError(f"depth shapes differ: {tuple(a.shape)} vs {tuple(b.shape)}")
    dtype = torch.float64 if torch.float64 in (a.dtype, b.dtype) else torch.float32
    a, b = a.to(dtype).reshape(-1), b.to(device=a.device, dtype=dtype).reshape(-1)
    ok = torch.isfinite(a) & torch.isfinite(b) & (b.abs() > torch.finfo(torch.float32).eps)
    ratios = a[ok] / b[ok]
    if ratios.numel() == 0:
        return 1.0
    return min(max(float(ratios.median()), clamp[0]), clamp[1])


def reference_alignment(prev_anchor_c2w, curr_anchor_c2w,
                        prev_depths: Optional[torch.Tensor] = None,
                        curr_depths: Optional[torch.Tensor] = None,
                        clamp: tuple[float, float] = SCALE_CLAMP) -> Sim3:
    """The Sim(3) mapping the current window's world into the previous (already aligned)
    window's world, by the reference rule.

    ``*_anchor_c2w``: the anchor frame's 4x4 c2w in each window (host arrays). ``*_depths``:
    depth maps of the paired keyframes, the same frames in the same order in both (see
    :func:`select_anchor`); without them the scale is 1 (the reference does the same).
    """
    pa = np.asarray(prev_anchor_c2w, dtype=np.float64).reshape(4, 4)
    pb = np.asarray(curr_anchor_c2w, dtype=np.float64).reshape(4, 4)
    r = pa[:3, :3] @ pb[:3, :3].T
    # re-orthonormalise: float32 model rotations are only nearly orthonormal
    u, _, vt = np.linalg.svd(r)
    r = u @ np.diag([1.0, 1.0, np.sign(np.linalg.det(u @ vt))]) @ vt
    s = 1.0
    if prev_depths is not None and curr_depths is not None:
        s = depth_ratio_scale(prev_depths, curr_depths, clamp)
    t = pa[:3, 3] - s * (r @ pb[:3, 3])
    return Sim3(s, r, t)

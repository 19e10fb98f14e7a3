"""Keyframe policies: which streaming frames stay in the KV cache (the others roll back).

A policy is a small stateful object per stream. The session, for each *streaming* frame
(scale-phase frames never reach the policy):

    known = policy.known_before_forward(i)      # True / False, or None: decided from outputs
    txn = runner.begin(1, KEYFRAME if known else SPECULATIVE)   # what the step sees
    ... forward ...
    if known if known is not None else policy.decide(i, depth, K, c2w):   # pure queries
        txn.commit();   policy.on_keyframe(i, depth, K, c2w)
    else:
        txn.rollback()

A keyframe known before its forward evicts, then attends; every other frame attends to the
un-evicted window (the reference's deferred eviction: ``cache.StepKind``).

and ``policy.reset()`` when the stream restarts (reset service, window rollover). After a
reset the first ``decide`` is always True (the reference's "first streaming frame"). Frame
indices only need to increase; gaps (dropped frames) count as frames.

Policies (``KeyframeConfig.policy``): ``all``, ``every_n`` (a keyframe ``n`` frames after
the last one; with consecutive indices this is the reference's ``(i - S0) % n == 0``) and
``flow`` (the reference v2 flow mode: :func:`camera_motion_flow` > threshold, or a gap of
``max_gap`` frames).

Host syncs: ``all`` and ``every_n`` never touch tensors. ``flow`` makes exactly one
device->host sync (``bool(flow > threshold)``) per decided frame, and none when the gap rule
or the first-frame rule already decides. ``last_flow`` keeps the last flow as a 0-d tensor
(on the device) for diagnostics; reading it as a float is the caller's sync.

No rclpy, no model import: depth/K/c2w are whatever tensors the session has.

Snapshots: ``state_dict()`` / ``load_state_dict(state)`` (the snapshot part protocol,
``snapshot_parts.py``); a loaded state's tensors go to the policy's ``device``
(``make_policy(config, device)``).
"""
from __future__ import annotations

from typing import Optional, Protocol, runtime_checkable

import torch
from torch import Tensor

from ..config import KeyframeConfig, check_positive_int

__all__ = ["KeyframePolicy", "AllFrames", "EveryN", "FlowKeyframes", "camera_motion_flow",
           "make_policy"]


def _depth_hw(depth: Tensor) -> Tensor:
    """Accept (H, W), (H, W, 1), (1, H, W), (1, H, W, 1), (1, 1, H, W, 1)... -> (H, W)."""
    d = depth
    while d.ndim > 2 and d.shape[0] == 1:
        d = d[0]
    while d.ndim > 2 and d.shape[-1] == 1:
        d = d[..., 0]
    if d.ndim != 2:
        raise ValueError(f"depth must be one (H, W) map (singleton dims allowed), "
                         f"got shape {tuple(depth.shape)}")
    return d


def _single(mat: Tensor, n: int, name: str) -> Tensor:
    m = mat.reshape(-1, n, n) if mat.numel() == n * n else None
    if m is None:
        raise ValueError(f"{name} must be one {n}x{n} matrix, got shape {tuple(mat.shape)}")
    return m[0]


@torch.no_grad()
def camera_motion_flow(depth: Tensor, K: Tensor, c2w: Tensor, ref_c2w: Tensor,
                       ref_K: Optional[Tensor] = None, stride: int = 8,
                       min_depth: float = 1e-6) -> Tensor:
    """Mean pixel displacement that the camera motion from ``ref`` to the current frame
    induces, as a 0-d tensor (no host sync).

    The current frame's depth (z along the optical axis, at model resolution) is sampled
    every ``stride`` pixels at integer pixel coordinates (u, v) = (x, y), unprojected with
    ``K`` and ``c2w`` (camera-to-world, OpenCV axes), moved into the reference camera
    (``ref_c2w``) and projected with ``ref_K`` (default ``K``). The result is the mean
    ``|projected - (u, v)|`` over points with depth > ``min_depth`` that land in front of
    the reference camera (z > ``min_depth``), as in the reference's
    ``_compute_flow_magnitude`` (``gct_stream_window_v2.py``).

    Degenerate cases: no valid depth at all -> 0 (as the reference: nothing says the camera
    moved); valid depth but every point behind the reference camera -> +inf (it turned away).
    Math in float32 at least (float64 stays float64).
    """
    if stride < 1:
        raise ValueError(f"stride must be >= 1, got {stride}")
    d = _depth_hw(depth)
    dtype = torch.promote_types(d.dtype, torch.float32)
    dev = d.device
    K = _single(K, 3, "K").to(device=dev, dtype=dtype)
    ref_K = K if ref_K is None else _single(ref_K, 3, "ref_K").to(device=dev, dtype=dtype)
    c2w = _single(c2w, 4, "c2w").to(device=dev, dtype=dtype)
    ref_c2w = _single(ref_c2w, 4, "ref_c2w").to(device=dev, dtype=dtype)

    z = d[::stride, ::stride].to(dtype)
    v = torch.arange(0, d.shape[0], stride, device=dev, dtype=dtype)
    u = torch.arange(0, d.shape[1], stride, device=dev, dtype=dtype)
    vv, uu = torch.meshgrid(v, u, indexing="ij")
    pix = torch.stack([uu, vv, torch.ones_like(uu)], -1)  # (h, w, 3)
    cam = (pix @ torch.linalg.inv(K).T) * z[..., None]  # points in the current camera
    # current camera -> reference camera: ref_c2w^-1 @ c2w, rigid inverse without a solve
    r_ref, t_ref = ref_c2w[:3, :3], ref_c2w[:3, 3]
    rel_r = r_ref.T @ c2w[:3, :3]
    rel_t = r_ref.T @ (c2w[:3, 3] - t_ref)
    ref_pts = cam @ rel_r.T + rel_t
    ref_z = ref_pts[..., 2]
    proj = (ref_pts / ref_z.clamp(min=min_depth)[..., None]) @ ref_K.T
    mag = (proj[..., :2] - pix[..., :2]).norm(dim=-1)

    depth_ok = torch.isfinite(z) & (z > min_depth)
    valid = depth_ok & (ref_z > min_depth) & torch.isfinite(mag)
    n_valid = valid.sum()
    mean = torch.where(valid, mag, torch.zeros_like(mag)).sum() / n_valid.clamp(min=1)
    inf = torch.full_like(mean, float("inf"))
    return torch.where(n_valid > 0, mean,
                       torch.where(depth_ok.any(), inf, torch.zeros_like(mean)))


@runtime_checkable
class KeyframePolicy(Protocol):
    """Per-stream keyframe decision. ``decide`` is a pure query; ``on_keyframe`` records a
    committed keyframe; ``reset`` forgets everything (the next decide is True)."""

    def decide(self, frame_index: int, depth: Optional[Tensor] = None,
               K: Optional[Tensor] = None, c2w: Optional[Tensor] = None) -> bool: ...

    def known_before_forward(self, frame_index: int) -> Optional[bool]: ...

    def known_after(self, frame_index: int, keyframe: bool, next_index: int) -> Optional[bool]:
        """What ``known_before_forward(next_index)`` will say once ``frame_index`` is decided
        (``keyframe``) and recorded; a pure query (a pipelined session plans ahead)."""
        ...

    def on_keyframe(self, frame_index: int, depth: Optional[Tensor] = None,
                    K: Optional[Tensor] = None, c2w: Optional[Tensor] = None) -> None: ...

    def reset(self) -> None: ...


class _Base:
    def __init__(self, device="cpu") -> None:
        self.device = torch.device(device)  # where ``load_state_dict`` puts its tensors
        self.last_keyframe_index: Optional[int] = None
        self.num_keyframes = 0  # committed since the last reset

    def reset(self) -> None:
        self.last_keyframe_index = None
        self.num_keyframes = 0

    def state_dict(self) -> dict:
        """The policy's state: JSON-able values and host tensors (``load_state_dict``)."""
        return {"last_keyframe_index": self.last_keyframe_index,
                "num_keyframes": self.num_keyframes}

    def load_state_dict(self, state: dict) -> None:
        """Take back ``state_dict``'s output; its tensors go to the policy's ``device``."""
        last = state["last_keyframe_index"]
        self.last_keyframe_index = None if last is None else int(last)
        self.num_keyframes = int(state["num_keyframes"])

    def _check_index(self, frame_index: int) -> None:
        if not isinstance(frame_index, int) or isinstance(frame_index, bool):
            raise ValueError(f"frame_index must be an int, got {frame_index!r}")
        last = self.last_keyframe_index
        if last is not None and frame_index <= last:
            raise ValueError(f"frame_index {frame_index} is not after the last keyframe {last}")

    def on_keyframe(self, frame_index: int, depth: Optional[Tensor] = None,
                    K: Optional[Tensor] = None, c2w: Optional[Tensor] = None) -> None:
        self._check_index(frame_index)
        self.last_keyframe_index = frame_index
        self.num_keyframes += 1


class AllFrames(_Base):
    """Every streaming frame is a keyframe (known before its forward). ``device``: where a
    loaded state's tensors go (every policy takes it; only ``flow`` has tensors)."""

    def known_before_forward(self, frame_index: int) -> Optional[bool]:
        return self.decide(frame_index)

    def known_after(self, frame_index: int, keyframe: bool, next_index: int) -> Optional[bool]:
        return True

    def decide(self, frame_index: int, depth: Optional[Tensor] = None,
               K: Optional[Tensor] = None, c2w: Optional[Tensor] = None) -> bool:
        self._check_index(frame_index)
        return True


class EveryN(_Base):
    """The first frame after a reset, then every frame ``n`` or more after the last keyframe.

    Decided by the index alone, so before the forward: keyframes evict first, the frames
    between them are speculative steps that are rolled back.
    """

    def __init__(self, n: int, device="cpu") -> None:
        super().__init__(device)
        check_positive_int("n", n)
        self.n = n

    def decide(self, frame_index: int, depth: Optional[Tensor] = None,
               K: Optional[Tensor] = None, c2w: Optional[Tensor] = None) -> bool:
        self._check_index(frame_index)
        last = self.last_keyframe_index
        return last is None or frame_index - last >= self.n

    def known_before_forward(self, frame_index: int) -> Optional[bool]:
        return self.decide(frame_index)

    def known_after(self, frame_index: int, keyframe: bool, next_index: int) -> Optional[bool]:
        last = frame_index if keyframe else self.last_keyframe_index
        return last is None or next_index - last >= self.n


class FlowKeyframes(_Base):
    """Keyframe when the camera-motion flow to the last keyframe exceeds ``threshold`` pixels,
    when ``max_gap`` frames have passed since it, or on the first frame after a reset.

    ``on_keyframe`` needs ``c2w`` (and takes ``K``; without it the current frame's K is used
    for the reference camera too). ``decide`` needs ``depth``, ``K`` and ``c2w`` unless the
    gap or first-frame rule decides first.
    """

    def __init__(self, threshold: float, max_gap: int = 30, stride: int = 8,
                 device="cpu") -> None:
        super().__init__(device)
        KeyframeConfig(policy="flow", flow_threshold=threshold, max_gap=max_gap,
                       flow_stride=stride)  # validation
        self.threshold = float(threshold)
        self.max_gap = max_gap
        self.stride = stride
        self._ref_c2w: Optional[Tensor] = None
        self._ref_K: Optional[Tensor] = None
        self.last_flow: Optional[Tensor] = None  # 0-d tensor of the last computed flow

    def reset(self) -> None:
        super().reset()
        self._ref_c2w = self._ref_K = None
        self.last_flow = None

    def state_dict(self) -> dict:
        state = super().state_dict()
        for name, t in (("ref_c2w", self._ref_c2w), ("ref_K", self._ref_K),
                        ("last_flow", self.last_flow)):
            state[name] = None if t is None else t.detach().cpu().clone()
        return state

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        ref_c2w, ref_K, last_flow = (None if state.get(name) is None
                                     else torch.as_tensor(state[name]).to(self.device)
                                     for name in ("ref_c2w", "ref_K", "last_flow"))
        self._ref_c2w, self._ref_K, self.last_flow = ref_c2w, ref_K, last_flow

    def known_before_forward(self, frame_index: int) -> Optional[bool]:
        """None: every frame's fate comes after its forward (the reference's v2 flow mode
        defers the eviction of every frame, even one the gap rule will keep)."""
        self._check_index(frame_index)
        return None

    def known_after(self, frame_index: int, keyframe: bool, next_index: int) -> Optional[bool]:
        return None

    def decide(self, frame_index: int, depth: Optional[Tensor] = None,
               K: Optional[Tensor] = None, c2w: Optional[Tensor] = None) -> bool:
        self._check_index(frame_index)
        last = self.last_keyframe_index
        if last is None or self._ref_c2w is None or frame_index - last >= self.max_gap:
            self.last_flow = None
            return True
        if depth is None or K is None or c2w is None:
            raise ValueError("the flow policy needs depth, K and c2w to decide")
        flow = camera_motion_flow(depth, K, c2w, self._ref_c2w, self._ref_K, self.stride)
        self.last_flow = flow
        return bool(flow > self.threshold)  # the one host sync per frame

    def on_keyframe(self, frame_index: int, depth: Optional[Tensor] = None,
                    K: Optional[Tensor] = None, c2w: Optional[Tensor] = None) -> None:
        if c2w is None:
            raise ValueError("the flow policy needs the keyframe's c2w")
        ref_c2w = _single(c2w, 4, "c2w").detach().clone()
        ref_K = None if K is None else _single(K, 3, "K").detach().clone()
        super().on_keyframe(frame_index)
        self._ref_c2w, self._ref_K = ref_c2w, ref_K


def make_policy(config: KeyframeConfig, device="cpu") -> KeyframePolicy:
    """A fresh policy object for one stream from its config (``device``: the stream's, where
    a loaded state's tensors go)."""
    if config.policy == "all":
        return AllFrames(device)
    if config.policy == "every_n":
        return EveryN(config.n, device)
    return FlowKeyframes(config.flow_threshold, config.max_gap, config.flow_stride, device)

"""A handed-in frame and the ``FrameResult`` made of its step's outputs: pure functions.

Nothing here changes the session: ``host_tensors`` says what to read back for a step (on
the device), ``frame_result`` builds one frame's result from what was read back. The session
applies a result (trajectory, counters, latency) in one place.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..config import SessionConfig
from ..geometry import Sim3
from ..preprocess import CropInfo
from .types import FrameResult


@dataclass(frozen=True)
class Frame:
    """A frame the session took: its model input and what its outcome will carry."""

    image: torch.Tensor  # (3, H, W) model input on the device, in [0, 1]
    stamp_ns: int
    crop: CropInfo
    index: int  # frames taken since the stream (re)started
    ticket: int  # what ``submit`` returned for it
    t0: float  # perf_counter when the frame was handed in


def host_tensors(frames: list[Frame], outputs, align: Sim3,
                 config: SessionConfig) -> dict[str, torch.Tensor]:
    """What the results of a step need on the host, still on the device (``HostReadback``
    copies it): pose, c2w and K; with ``config.return_depth`` the world-scale depth, its
    confidence and the model input as uint8 RGB; with ``config.return_features`` the DINO
    patch tokens as float32 (exact from bf16). Reading them is all that changes: the step's
    kernels are the same either way."""
    out = {"pose_enc": outputs.pose_enc, "c2w": outputs.c2w, "K": outputs.intrinsics}
    if config.return_features:
        if outputs.patch_tokens is None:
            raise ValueError("return_features is on but the model's outputs have no "
                             "patch_tokens")
        out["features"] = outputs.patch_tokens.float()  # (n, P, C)
    if config.return_depth and outputs.depth is not None:
        out["depth"] = align.apply_depth(outputs.depth[..., 0].float())  # (n, H, W)
        out["depth_conf"] = outputs.depth_conf.float()
        images = torch.stack([f.image for f in frames])  # (n, 3, H, W) in [0, 1]
        out["rgb"] = (images.permute(0, 2, 3, 1) * 255.0).round().byte()  # (n, H, W, 3)
    return out


def frame_result(frame: Frame, host: dict, i: int, keyframe: bool, segment: int,
                 align: Sim3, now: float) -> FrameResult:
    """Frame ``i`` of a step's outputs read back to the host (``host_tensors``), posed in the
    world by ``align``; ``now``: perf_counter at which the result is ready (its latency)."""
    c2w = align.apply_c2w(host["c2w"][i].astype(np.float64))
    K_model = host["K"][i].astype(np.float64)
    # copies: ``host`` holds views of the readback buffers, which later frames reuse
    depth = host["depth"][i].copy() if "depth" in host else None
    conf = host["depth_conf"][i].copy() if "depth_conf" in host else None
    rgb = host["rgb"][i].copy() if "rgb" in host else None
    features = (np.array(host["features"][i], dtype=np.float32)  # (P, C), a copy
                if "features" in host else None)
    return FrameResult(index=frame.index, ticket=frame.ticket, stamp_ns=frame.stamp_ns,
                       keyframe=keyframe, segment=segment, c2w=c2w,
                       pose_enc=host["pose_enc"][i].astype(np.float32, copy=True),
                       K=frame.crop.K_to_original(K_model), K_model=K_model, crop=frame.crop,
                       latency_ms=(now - frame.t0) * 1e3, depth=depth, depth_conf=conf,
                       rgb=rgb, features=features)

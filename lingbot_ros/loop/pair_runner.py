"""Run the model on a loop candidate's pair: the stored keyframe, then the current frame, in a
fresh two-frame stream (docs/loop.md, "Verification").

A new ``StreamingSession`` per pair shares the stream's (stateless) model; the stream's
own session, caches and window are untouched. Its settings (:func:`pair_config`): the
stream's, with ``num_scale_frames=2``. The session buffers its first ``num_scale_frames``
frames and runs them together in one scale-phase (anchor) step, both frames seeing each
other, and returns both results at the second push; with the default 8 a two-frame stream
would return nothing. Keyframes ``all``, no rollover, a window of 2, no CUDA graphs (a
fresh session per pair would capture them again each time).

The stored image is compact (the mean of ``image_stride``-square blocks): it is brought
back to the model resolution by nearest-neighbour upsampling (each block's mean repeated
over its block; a stride 1 image is the model's image itself), then padded by repeating
its last row / column when the model size is not a whole number of blocks. The current
image is given at the model resolution (the front end's ``FrameResult.rgb``), so neither
goes through a resize in the pair's preprocessing.

The caller makes the session (``make_session(config)``, e.g. ``lambda c:
StreamingSession(model, c)``, the session's public API): loop/ imports neither the session
nor torch, so ``import lingbot_ros.loop`` loads no torch.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from ..config import KeyframeConfig, SessionConfig
from .place_db import PlaceKeyframe
from .verify import PairOutputs

__all__ = ["pair_config", "stored_image", "run_pair", "PAIR_STAMPS_NS"]

PAIR_STAMPS_NS = (1, 2)  # the pair's own stamps: the keyframe's, then the current frame's


def pair_config(stream: SessionConfig) -> SessionConfig:
    """The pair's session settings: the stream's (size, device, backend, precision rules),
    with both frames in one scale-phase step and no memory beyond them."""
    if not isinstance(stream, SessionConfig):
        raise ValueError(f"stream must be a SessionConfig, got {type(stream).__name__}")
    return dataclasses.replace(
        stream, num_scale_frames=2, window=2, max_special_frames=None,
        rollover_keyframes=None, rollover_mode="blocking", keyframes=KeyframeConfig(),
        with_depth=True, return_depth=True, cuda_graphs=False,
        kv_splits=min(stream.kv_splits, 4), on_stamp_backwards="reset", max_gap_s=None)


def stored_image(keyframe: PlaceKeyframe) -> np.ndarray:
    """The keyframe's compact image at ``keyframe.image_hw`` (H, W, 3) uint8: each block's
    mean repeated over its block, the last row / column repeated to fill a remainder."""
    s = keyframe.image_stride
    up = np.repeat(np.repeat(keyframe.image, s, axis=0), s, axis=1)  # (h s, w s, 3)
    h, w = keyframe.image_hw
    return np.pad(up, ((0, h - up.shape[0]), (0, w - up.shape[1]), (0, 0)), mode="edge")


def run_pair(make_session: Callable[[SessionConfig], object], stream: SessionConfig,
             keyframe: PlaceKeyframe, current_image: np.ndarray) -> PairOutputs:
    """The model on (the stored keyframe's image, ``current_image``) in a fresh session,
    ``make_session(pair_config(stream))`` (a ``StreamingSession`` on the stream's model:
    ``lambda c: StreamingSession(model, c)``); ``current_image`` uint8 (H, W, 3) at the
    keyframe's ``image_hw``. ValueError for a mismatched image or a pair the session did
    not return whole."""
    if not isinstance(keyframe, PlaceKeyframe):
        raise ValueError(f"keyframe must be a PlaceKeyframe, got {type(keyframe).__name__}")
    img = np.asarray(current_image)
    if img.dtype != np.uint8 or img.shape != tuple(keyframe.image_hw) + (3,):
        raise ValueError(f"current_image must be uint8 {tuple(keyframe.image_hw) + (3,)} (the "
                         f"keyframe's model size), got {img.dtype} {img.shape}")
    session = make_session(pair_config(stream))
    first = session.push(stored_image(keyframe), PAIR_STAMPS_NS[0])
    results = first + session.push(img, PAIR_STAMPS_NS[1])
    if len(results) != 2 or any(r.depth is None for r in results):
        raise ValueError(f"the pair's session returned {len(results)} results with depth; "
                         "expected both frames")
    kf, cur = results
    if kf.model_hw != tuple(keyframe.image_hw):
        raise ValueError(f"the pair ran at {kf.model_hw}, the keyframe is {keyframe.image_hw}: "
                         "verify with the stream's preprocessing")
    return PairOutputs(c2w_kf=kf.c2w, c2w_cur=cur.c2w, depth_kf=kf.depth,
                       conf_kf=kf.depth_conf, depth_cur=cur.depth, conf_cur=cur.depth_conf,
                       K_kf=kf.K_model, K_cur=cur.K_model)

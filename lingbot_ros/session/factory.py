"""Building a session for a front end: the model (checkpoint or random weights) + config."""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..config import SessionConfig
from ..model.presets import PRESETS, build_model
from .session import StreamingSession

__all__ = ["PRESETS", "open_session", "load_session_model", "warm_up"]


def load_session_model(config: SessionConfig, preset: str = "tiny",
                       checkpoint: Optional[str] = None, precision: str = "auto",
                       seed: int = 0, camera_head_precision: str = "fp32",
                       trust_pickle: bool = False, depth_head_precision: str = "fp32",
                       mlp_precision: str = "aggregator"):
    """``(model, random_weights)`` on ``config.device``; say loudly when ``random_weights``.
    ``trust_pickle``: unpickle a checkpoint that needs it (only from a trusted source)."""
    return build_model(preset, checkpoint, config.device, precision, seed,
                       camera_head_precision, trust_pickle, depth_head_precision,
                       mlp_precision)


def open_session(config: SessionConfig, preset: str = "tiny", checkpoint: Optional[str] = None,
                 precision: str = "auto", seed: int = 0, camera_head_precision: str = "fp32",
                 trust_pickle: bool = False) -> tuple[StreamingSession, bool]:
    """A fresh ``StreamingSession`` and whether its weights are random."""
    model, random_weights = load_session_model(config, preset, checkpoint, precision, seed,
                                               camera_head_precision, trust_pickle)
    return StreamingSession(model, config), random_weights


def warm_up(session: StreamingSession) -> None:
    """Stream a few dummy frames through ``session`` at its configured size, then reset it,
    so the first real frame does not pay for allocator growth, kernel selection, FlashInfer's
    JIT or the CUDA-graph capture. The session keeps its caches and captured graphs; a camera
    whose model input size differs (height from the aspect) reallocates on its first frame."""
    config = session.config
    width = config.preprocess.width
    height = config.preprocess.height or (width * 3 // 4)
    image = np.full((height, width, 3), 127, np.uint8)
    for i in range(config.num_scale_frames + 2):
        session.push(image, i + 1)
    if config.with_depth:  # a front end may skip the depth head per frame: its own graph
        session.submit(image, config.num_scale_frames + 3, with_depth=False)
        session.collect()
    session.reset()

"""Building a session for a front end: the model (checkpoint or random weights) + config."""
from __future__ import annotations

from typing import Optional

from ..config import SessionConfig
from ..model.presets import PRESETS, build_model
from .session import StreamingSession

__all__ = ["PRESETS", "open_session", "load_session_model"]


def load_session_model(config: SessionConfig, preset: str = "tiny",
                       checkpoint: Optional[str] = None, precision: str = "auto",
                       seed: int = 0):
    """``(model, random_weights)`` on ``config.device``; say loudly when ``random_weights``."""
    return build_model(preset, checkpoint, config.device, precision, seed)


def open_session(config: SessionConfig, preset: str = "tiny", checkpoint: Optional[str] = None,
                 precision: str = "auto", seed: int = 0) -> tuple[StreamingSession, bool]:
    """A fresh ``StreamingSession`` and whether its weights are random."""
    model, random_weights = load_session_model(config, preset, checkpoint, precision, seed)
    return StreamingSession(model, config), random_weights

"""The identity of a model's weights, as snapshots record and check it:

    weights = WeightsIdentity(model)   # nothing computed yet
    weights.origin()                   # ``sha256:<hex>`` of the checkpoint file, ``random
                                       # weights, preset P, seed N``, or ``weights
                                       # sha256:<hex>`` of the parameters (a model built in code)

The digest is computed once, on the first call, and kept here: the model is shared between
sessions and stays stateless (nothing is written on it). A front end that opens several
sessions on one model hands them the same ``WeightsIdentity`` (``StreamingSession(model,
config, weights=...)``), so the weights are hashed once.
"""
from __future__ import annotations

import hashlib
import threading
from typing import Optional

import torch

__all__ = ["WeightsIdentity"]


class WeightsIdentity:
    def __init__(self, model) -> None:
        self._model = model
        self._origin: Optional[str] = None
        self._lock = threading.Lock()  # a save's thread and the executor may both ask

    def origin(self) -> str:
        """Where the weights come from (computed on the first call, then kept)."""
        with self._lock:
            if self._origin is None:
                self._origin = _describe(self._model)
            return self._origin


def _describe(model) -> str:
    origin = getattr(model, "origin", None) or {}
    if origin.get("kind") == "random":
        return f"random weights, preset {origin['preset']}, seed {origin['seed']}"
    digest = hashlib.sha256()
    if origin.get("kind") == "checkpoint":
        with open(origin["path"], "rb") as f:
            for block in iter(lambda: f.read(1 << 24), b""):
                digest.update(block)
        return f"sha256:{digest.hexdigest()}"
    for name, t in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(str(t.dtype).encode())
        # flat first: a size-1 dim may keep any stride, which ``contiguous`` leaves as is
        # (a prepared CUDA model has such views) and a byte view refuses
        t = t.detach().cpu().reshape(-1).contiguous()
        digest.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return f"weights sha256:{digest.hexdigest()}"

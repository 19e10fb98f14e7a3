"""Named network sizes and the random-weight builder used when no checkpoint is given."""
from __future__ import annotations

from typing import Optional

import torch

from .config import GCTConfig
from .device import check_device
from .gct import GCTModel
from .loader import load_model

PRESETS = ("tiny", "official")


def preset_config(name: str) -> GCTConfig:
    """``tiny`` (embedded, ~4.6 M parameters, CPU-friendly) or ``official`` (the release)."""
    if name == "tiny":
        return GCTConfig.tiny()
    if name == "official":
        return GCTConfig.official()
    raise ValueError(f"unknown model preset {name!r}; choose one of {PRESETS}")


def random_model(config: GCTConfig, seed: int = 0, device: str = "cpu") -> GCTModel:
    """Seeded random weights (meaningless poses): for demos, tests and benchmarks.

    The special tokens get unit-variance values so their first/other variants differ, as
    they do in trained weights (PyTorch's default init leaves some parameters at zero).
    ``device``: where the weights are drawn (the official size takes ~25 s on a CPU and a
    second on a GPU; the values differ between devices, each is reproducible).
    """
    device = torch.device(device)
    gen_state = torch.random.get_rng_state()
    cuda_state = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    torch.manual_seed(seed)
    try:
        with device:
            model = GCTModel(config)
        agg = model.aggregator
        for token in (agg.camera_token, agg.register_token, agg.scale_token):
            torch.nn.init.normal_(token)
    finally:
        torch.random.set_rng_state(gen_state)
        if cuda_state is not None:
            torch.cuda.set_rng_state(cuda_state, device)
    return model


def build_model(preset: str = "tiny", checkpoint: Optional[str] = None, device: str = "cpu",
                precision: str = "auto", seed: int = 0,
                camera_head_precision: str = "fp32",
                trust_pickle: bool = False, depth_head_precision: str = "fp32",
                mlp_precision: str = "aggregator") -> tuple[GCTModel, bool]:
    """The model for a run: the checkpoint's (official architecture) or random weights.

    Returns ``(model, random_weights)``; callers must say loudly when ``random_weights``.
    ``device`` is checked first (``DeviceError``: e.g. cuda on a CPU-only torch);
    ``trust_pickle``: see ``read_state_dict`` (only for a file from a trusted source).
    """
    check_device(device)
    if checkpoint:
        # The file's tensor shapes pick the architecture: the release's, else the preset's
        # (the embedded tiny network's weights, e.g. the golden fixture, load too).
        candidates = [GCTConfig.official()] + ([preset_config(preset)] if preset != "official"
                                               else [])
        model = load_model(checkpoint, candidates, device=device, precision=precision,
                           trust_pickle=trust_pickle,
                           camera_head_precision=camera_head_precision,
                           depth_head_precision=depth_head_precision,
                           mlp_precision=mlp_precision)
        model.origin = {"kind": "checkpoint", "path": str(checkpoint)}  # snapshots name it
        return model, False
    model = random_model(preset_config(preset), seed)
    model.origin = {"kind": "random", "preset": preset, "seed": seed}
    return model.prepare(device, precision, camera_head_precision, depth_head_precision,
                         mlp_precision), True

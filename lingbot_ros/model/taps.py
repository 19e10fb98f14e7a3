"""Intermediate tensors of a step, recorded with forward hooks (for golden parity checks).

The model's forward knows nothing about this: hooks are attached for the duration of a
``with`` block and removed afterwards, so the streaming hot path has no debug branches.

    with record_intermediates(model) as taps:
        model(images, ...)
    taps["global_block0_out"]        # (n, T, C), each key below has a leading frame axis
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import torch
from torch import Tensor

from .aggregator import AggregatorOutputs

TAP_KEYS = ("dino_patch_tokens", "frame_block0_out", "global_block0_attn_out",
            "global_block0_out", "aggregator_selected_layers")


@contextmanager
def record_intermediates(model) -> Iterator[dict[str, Tensor]]:
    """Record ``TAP_KEYS`` of the next forward of ``model`` (a ``GCTModel``) into a dict.

    Shapes: ``dino_patch_tokens`` (n, h*w, C); ``frame_block0_out``,
    ``global_block0_attn_out`` and ``global_block0_out`` (n, T, C);
    ``aggregator_selected_layers`` (4, n, T, 2C).
    """
    agg = model.aggregator
    taps: dict[str, Tensor] = {}
    frames: list[int] = []  # n of the step, from the patch embedding

    def keep(name, reshape_flat=False):
        def hook(_module, _inputs, output):
            if isinstance(output, tuple):  # a block's (x, next norm of x)
                output = output[0]
            if isinstance(output, AggregatorOutputs):
                output = output.layers
            if isinstance(output, list):  # the aggregator's selected layers
                output = torch.stack(output)  # (4, n, T, 2C)
            elif reshape_flat:  # (n*T, C) -> (n, T, C)
                output = output.reshape(frames[0], -1, output.shape[-1])
            taps[name] = output.detach().clone()
        return hook

    def count_frames(_module, inputs, _output):
        frames[:] = [inputs[0].shape[0]]

    handles = [
        agg.patch_embed.register_forward_hook(count_frames),
        agg.patch_embed.register_forward_hook(keep("dino_patch_tokens")),
        agg.frame_blocks[0].register_forward_hook(keep("frame_block0_out")),
        agg.global_blocks[0].attn.proj.register_forward_hook(
            keep("global_block0_attn_out", reshape_flat=True)),
        agg.global_blocks[0].register_forward_hook(keep("global_block0_out", reshape_flat=True)),
        agg.register_forward_hook(keep("aggregator_selected_layers")),
    ]
    try:
        yield taps
    finally:
        for handle in handles:
            handle.remove()

"""FusedKernels: which fused Triton kernels a stream's steps use.

The model holds no switch (one model serves several streams): the stream that runs it
passes this to every call. Each kernel computes what the torch ops it replaces compute
(bit-exact or within one unit in the last place; tests/model, tests/attention), so turning
one off changes speed only. ``SessionConfig.fused_kernels_off`` turns single ones off to
measure each alone (``lingbot-ros-bench``).
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import FUSED_KERNEL_NAMES as KERNEL_NAMES


@dataclass(frozen=True)
class FusedKernels:
    qk_rope: bool = False  # q/k LayerNorm + RoPE + cast in one launch (qk_fused)
    add_norm: bool = False  # LayerScale residual + the next LayerNorm (add_norm)
    kv_write: bool = False  # global blocks: K/V written to the cache and q repeated for
    #                         split-KV inside the q/k kernel (needs qk_rope)
    split_merge: bool = False  # split-KV partial results merged in one launch (split_merge)

    @classmethod
    def select(cls, enabled: bool, off: tuple[str, ...] = ()) -> "FusedKernels":
        """All kernels when ``enabled`` (the stream's resolved ``fused_kernels``), but those
        named in ``off``; none otherwise."""
        unknown = sorted(set(off) - set(KERNEL_NAMES))
        if unknown:
            raise ValueError(f"unknown fused kernel(s) {unknown}; choose from {KERNEL_NAMES}")
        return cls(**{name: enabled and name not in off for name in KERNEL_NAMES})

    def names(self) -> list[str]:
        """The kernels that are on."""
        return [name for name in KERNEL_NAMES if getattr(self, name)]


UNFUSED = FusedKernels()

"""Typed, frozen configuration objects, validated once with clear errors.

Stdlib only: this module is imported by every layer, including the pure-Python cache
bookkeeping, so it must not pull in torch or rclpy.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

DTYPES = ("float32", "bfloat16", "float16")
BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2, "float16": 2}


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")


def _non_negative(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError(f"{name} must be an integer >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Shape and retention policy of the paged KV cache of the global-attention layers.

    Defaults are the released model at 378x504 (27 x 36 = 972 patches per frame) with the
    reference's window of 64 frames and 8 pinned scale frames.
    """

    num_layers: int = 24  # global-attention layers sharing one page table
    num_heads: int = 16  # KV heads per layer
    head_dim: int = 64  # channels per head
    page_size: int = 972  # tokens per page == patch tokens per frame, exactly (no padding)
    num_special: int = 6  # special tokens per frame: camera, 4 registers, scale
    scale_frames: int = 8  # the first N committed frames keep their patch page forever
    window: int = 64  # the last N frames (the current one included) keep their patch page
    max_special_frames: Optional[int] = None  # None: keep every frame's specials (reference)
    special_chunk_frames: int = 1024  # unbounded specials: initial capacity and growth step, frames
    max_cache_bytes: Optional[int] = None  # byte budget for the whole pool; None: no cap
    dtype: str = "float32"  # storage dtype: float32 | bfloat16 | float16
    device: str = "cpu"  # torch device string of the storage

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_heads", "head_dim", "page_size", "num_special",
                     "window", "special_chunk_frames"):
            _positive(name, getattr(self, name))
        _non_negative("scale_frames", self.scale_frames)
        if self.max_special_frames is not None:
            _positive("max_special_frames", self.max_special_frames)
        if self.max_cache_bytes is not None:
            _positive("max_cache_bytes", self.max_cache_bytes)
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not isinstance(self.device, str) or not self.device:
            raise ValueError(f"device must be a torch device string such as 'cpu' or 'cuda:0', "
                             f"got {self.device!r}")

    @property
    def tokens_per_frame(self) -> int:
        """Tokens one frame writes: its specials, then its patches."""
        return self.num_special + self.page_size

    @property
    def bytes_per_page(self) -> int:
        """Bytes one page takes over all layers (K and V)."""
        return (self.num_layers * 2 * self.page_size * self.num_heads * self.head_dim
                * BYTES_PER_ELEMENT[self.dtype])


def _optional(value):
    """ROS parameters have no None: -1 (or a negative number) stands for "unset"."""
    return None if isinstance(value, (int, float)) and value < 0 else value


CACHE_PARAMS = ("scale_frames", "window", "max_special_frames", "special_chunk_frames",
                "max_cache_bytes", "dtype")


def cache_overrides(params: dict) -> dict:
    """Map ``cache.*`` node parameters onto ``CacheConfig`` keyword arguments.

    Unknown ``cache.*`` keys are an error (a typo must not be silently ignored).
    """
    out = {}
    for key, value in params.items():
        if not key.startswith("cache."):
            continue
        name = key[len("cache."):]
        if name not in CACHE_PARAMS:
            raise ValueError(f"unknown parameter {key!r}; known: "
                             f"{', '.join('cache.' + p for p in CACHE_PARAMS)}")
        out[name] = _optional(value) if name in ("max_special_frames", "max_cache_bytes") \
            else value
    return out

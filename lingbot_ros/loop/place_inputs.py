"""The keyframe database's inputs, checked and made compact (``place_db.py``).

Every input of ``PlaceDatabase.add`` is checked here, with a ValueError naming what is wrong:
integers (ids, stamps in ns: never a float), a finite non-zero descriptor of
``DESCRIPTOR_DIM``; its pose is checked rigid to ``POSE_TOL`` by
``lingbot_ros.geometry.check_rigid``. The image and depth become what is kept: the uint8
image averaged over ``stride`` x ``stride`` blocks (rounded; an area mean, so no aliasing),
the depth's every ``stride``-th pixel as float16 (a sample, not a mean: a mean across a
depth edge would invent a surface). ``bytes_per_keyframe`` states what one kept keyframe
holds. Numpy only.
"""
from __future__ import annotations

import math

import numpy as np

from .place_descriptor import DESCRIPTOR_DIM

__all__ = ["POSE_TOL", "bytes_per_keyframe", "checked_integer", "compact_depth",
           "compact_image", "stored_depth_shape", "stored_image_shape", "unit_descriptor"]

_INT64 = (-(1 << 63), 1 << 63)
_FLOAT16_MAX = float(np.finfo(np.float16).max)
# A kept pose is rigid (lingbot_ros.geometry.check_rigid) with |R^T R - I| at most this and
# its last row exactly [0, 0, 0, 1] (last_row_tol 0).
POSE_TOL = 1e-4


def stored_image_shape(hw, stride: int) -> tuple[int, int, int]:
    """The kept image's shape for an (H, W) image: whole blocks only."""
    return (hw[0] // stride, hw[1] // stride, 3)


def stored_depth_shape(hw, stride: int) -> tuple[int, int]:
    """The kept depth's shape for an (H, W) depth: every ``stride``-th pixel from 0."""
    return (-(-hw[0] // stride), -(-hw[1] // stride))


def bytes_per_keyframe(image_hw, depth_hw, image_stride: int = 2,
                       depth_stride: int = 4) -> dict:
    """The payload of one kept keyframe, in bytes, by part (and ``total``)."""
    image = int(np.prod(stored_image_shape(image_hw, image_stride)))
    depth = 2 * int(np.prod(stored_depth_shape(depth_hw, depth_stride)))
    parts = {"descriptor": DESCRIPTOR_DIM + 4, "pose": 128, "id_stamp_segment": 24,
             "image": image, "depth": depth}
    return {**parts, "total": sum(parts.values())}


def checked_integer(value, name: str, low: int = _INT64[0]) -> int:
    """``value`` as an int (a Python or numpy integer, never a bool or a float) in
    [low, 2**63)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if not low <= int(value) < _INT64[1]:
        raise ValueError(f"{name} must be in [{low}, 2**63), got {value}")
    return int(value)


def unit_descriptor(descriptor, name: str = "descriptor") -> np.ndarray:
    """A (256,) float descriptor, finite and non-zero, as a float64 unit vector."""
    d = descriptor if isinstance(descriptor, np.ndarray) else None
    if d is None or d.shape != (DESCRIPTOR_DIM,) or d.dtype.kind != "f":
        raise ValueError(f"{name} must be a float array ({DESCRIPTOR_DIM},) "
                         f"(place_descriptor), got {getattr(descriptor, 'shape', descriptor)!r}")
    d = d.astype(np.float64)
    size = float(np.linalg.norm(d)) if np.isfinite(d).all() else math.nan
    if not size > 0:
        raise ValueError(f"{name} must be finite and non-zero")
    return d / size


def compact_image(image, stride: int) -> np.ndarray:
    """A uint8 (H, W, 3) image -> its ``stride``-block means (H // s, W // s, 3) uint8."""
    if not isinstance(image, np.ndarray) or image.dtype != np.uint8 or image.ndim != 3 \
            or image.shape[2] != 3 or min(image.shape[:2]) < stride:
        raise ValueError(f"image must be uint8 (H, W, 3) with H, W >= {stride}, got "
                         f"{getattr(image, 'dtype', type(image).__name__)} "
                         f"{getattr(image, 'shape', '')}")
    if stride == 1:
        return image.copy()
    h, w, _ = stored_image_shape(image.shape, stride)
    sums = np.zeros((h, w, 3), np.uint32)
    for i in range(stride):  # one strided view per offset: 10x faster than a reshaped sum
        for j in range(stride):
            sums += image[i:h * stride:stride, j:w * stride:stride]
    n = stride * stride
    return ((sums + n // 2) // n).astype(np.uint8)  # the block mean, rounded


def compact_depth(depth, stride: int) -> np.ndarray:
    """A float (H, W) depth -> ``depth[::s, ::s]`` as float16 (finite, in range)."""
    if not isinstance(depth, np.ndarray) or depth.ndim != 2 or depth.dtype.kind != "f" \
            or min(depth.shape) < 1:
        raise ValueError(f"depth must be a float (H, W) array, got "
                         f"{getattr(depth, 'dtype', type(depth).__name__)} "
                         f"{getattr(depth, 'shape', '')}")
    kept = depth[::stride, ::stride]
    if not (np.isfinite(kept).all() and np.abs(kept).max() <= _FLOAT16_MAX):
        raise ValueError(f"depth must be finite and within float16's range (|d| <= "
                         f"{_FLOAT16_MAX:g})")
    return kept.astype(np.float16)

"""Where the scale is applied: model units -> metres at the boundary (pure numpy).

Inside a stream everything stays in model units; these helpers convert what leaves it.
A pose's rotation has no unit: only translations (and depth, points) are scaled.

The REP-105 algebra: with ``T_bo`` the camera's optical frame in the base frame (metres,
from the URDF), a model pose ``c2w`` (model units) gives the base in the map as

    T_map_base = T_bo · S(c2w) · T_bo⁻¹,     S(c2w) = c2w with its translation x metres_per_unit

so the lever arm of a camera mounted away from the base is composed in metres.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from .estimator import ScaleEstimate
from .se3 import rigid_inverse
from .sources import source_kind

__all__ = ["c2w_to_metres", "depth_to_metres", "points_to_metres", "base_in_map_metres",
           "check_factor", "units_header", "MODEL_UNITS"]

MODEL_UNITS = "model units"  # what a file not in metres says it is in


def check_factor(metres_per_unit: float) -> float:
    """``metres_per_unit`` as a float; ValueError unless finite and > 0."""
    number = isinstance(metres_per_unit, (int, float, np.floating)) \
        and not isinstance(metres_per_unit, bool)
    if not number or not math.isfinite(metres_per_unit) or metres_per_unit <= 0:
        raise ValueError(f"metres_per_unit must be a finite number > 0, got {metres_per_unit!r}")
    return float(metres_per_unit)


def c2w_to_metres(c2w, metres_per_unit: float) -> np.ndarray:
    """(..., 4, 4) poses in model units -> float64 poses in metres (translation scaled)."""
    k = check_factor(metres_per_unit)
    out = np.array(c2w, dtype=np.float64)
    if out.shape[-2:] != (4, 4):
        raise ValueError(f"c2w must have shape (..., 4, 4), got {out.shape}")
    out[..., :3, 3] *= k
    return out


def depth_to_metres(depth, metres_per_unit: float) -> np.ndarray:
    """Depth in model units -> float32 metres (REP-118 32FC1); NaN/inf stay invalid."""
    k = check_factor(metres_per_unit)
    return np.asarray(depth, dtype=np.float32) * np.float32(k)


def points_to_metres(points, metres_per_unit: float) -> np.ndarray:
    """(..., 3) points in model units -> metres, keeping a float dtype (float32 stays)."""
    k = check_factor(metres_per_unit)
    pts = np.asarray(points)
    if pts.shape[-1:] != (3,):
        raise ValueError(f"points must have shape (..., 3), got {pts.shape}")
    if pts.dtype.kind != "f":
        pts = pts.astype(np.float64)
    return pts * pts.dtype.type(k)


def base_in_map_metres(c2w, T_base_optical, metres_per_unit: float) -> np.ndarray:
    """``T_map_base = T_bo · S(c2w) · T_bo⁻¹`` for (..., 4, 4) ``c2w`` in model units and
    ``T_base_optical`` (4, 4) in metres: the base's pose in the map, in metres."""
    bo = np.asarray(T_base_optical, dtype=np.float64)
    if bo.shape != (4, 4):
        raise ValueError(f"T_base_optical must be 4x4, got {bo.shape}")
    return bo @ c2w_to_metres(c2w, metres_per_unit) @ rigid_inverse(bo)


def units_header(estimate: Optional[ScaleEstimate], *, final: bool = False,
                 setting: str = "scale.source") -> list[str]:
    """The header lines every saved file (TUM, PLY) states, the node's and the offline
    runner's alike: its units, the scale source and the value. ``final``: written with the
    stream's last estimate (the offline runner: a scale not locked then "never locked");
    ``setting``: how the source is set (the node's ``scale.source``, the offline runner's
    ``--scale``). ``estimate`` None: the file holds nothing the scale applied to (the node's
    map after a reset)."""
    if estimate is None:
        return [f"units: {MODEL_UNITS} (no scale estimate: nothing was scaled)", "scale: none"]
    if not source_kind(estimate.source).metric:
        return [f"units: {MODEL_UNITS} (no metric scale: {setting} none)", "scale: none"]
    source, factor = estimate.source, estimate.output_factor
    if factor is not None:
        return ["units: m",
                f"scale: {source}, {factor!r} m per model unit ({estimate.state.value}, "
                f"sigma_log {estimate.sigma_log:.3g}, {estimate.samples} samples)"]
    value = "nan" if math.isnan(estimate.metres_per_unit) else f"{estimate.metres_per_unit!r}"
    never = "never locked" if final else "has not locked yet"
    return [f"units: {MODEL_UNITS} (the {source} scale {never}: "
            f"{estimate.samples}/{estimate.min_samples} samples)",
            f"scale: {source}, not locked ({estimate.state.value}, last value "
            f"{value} m per model unit, not applied)"]

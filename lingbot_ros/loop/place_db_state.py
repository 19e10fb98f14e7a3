"""The keyframe database's snapshot format (``place_db.py``): its columns, its schema and the
check of a saved state.

``PlaceDatabase.state_dict()`` holds the settings the database was kept with (schema,
descriptor version and size, strides), the counters, one array per column of ``COLUMNS``
(one row per kept keyframe), the image and depth sizes per keyframe, and every compact image
and depth concatenated flat. :func:`checked_state` reads such a state back for
``load_state_dict``: every field checked (ValueError naming it, the database unchanged), the
images and depths split per keyframe. Numpy and lingbot_ros.geometry only.
"""
from __future__ import annotations

import numpy as np

from ..geometry import check_rigid
from .place_descriptor import DESCRIPTOR_DIM, DESCRIPTOR_VERSION
from .place_inputs import POSE_TOL, checked_integer, stored_depth_shape, stored_image_shape

__all__ = ["COLUMNS", "STATE_SCHEMA", "checked_state"]

STATE_SCHEMA = 1  # of PlaceDatabase.state_dict()
# name -> (shape of one row, dtype): the columns, grown together by doubling
COLUMNS = {"ids": ((), np.int64), "stamps_ns": ((), np.int64), "segments": ((), np.int64),
           "poses": ((4, 4), np.float64), "codes": ((DESCRIPTOR_DIM,), np.int8),
           "scales": ((), np.float32)}


def checked_state(state, image_stride: int, depth_stride: int) -> dict:
    """A saved database's arrays, checked, with its images and depths split per keyframe."""
    if not isinstance(state, dict):
        raise ValueError(f"a place database state must be a dict, got {type(state).__name__}")
    expected = {"schema": STATE_SCHEMA, "descriptor": DESCRIPTOR_VERSION, "dim": DESCRIPTOR_DIM,
                "image_stride": image_stride, "depth_stride": depth_stride}
    for key, value in expected.items():
        if state.get(key) != value:
            raise ValueError(f"the place database state has {key} {state.get(key)!r}; this "
                             f"database needs {value!r}")
    out = {key: checked_integer(state.get(key), f"state {key}", low=0) for key in ("offered",
                                                                             "thinned")}
    arrays = dict(COLUMNS, image_hw=((2,), np.int64), depth_hw=((2,), np.int64))
    n = len(state["ids"]) if isinstance(state.get("ids"), np.ndarray) else -1
    for name, (shape, dtype) in arrays.items():
        a = state.get(name)
        if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != (n,) + shape:
            raise ValueError(f"the place database state's {name} must be {np.dtype(dtype)} "
                             f"{(n,) + shape}, got {getattr(a, 'dtype', type(a).__name__)} "
                             f"{getattr(a, 'shape', '')}")
        out[name] = a
    if len(np.unique(out["ids"])) != n:
        raise ValueError("the place database state has repeated keyframe ids")
    check_rigid(out["poses"], "the place database state's poses", tol=POSE_TOL,
                last_row_tol=0.0, batch=True)
    if (out["segments"] < 0).any() or not (np.isfinite(out["scales"])
                                           & (out["scales"] > 0)).all():
        raise ValueError("the place database state has negative segments or bad scales")
    if (out["image_hw"] < image_stride).any() or (out["depth_hw"] < 1).any():
        raise ValueError("the place database state has image or depth sizes below a stride")
    image_shapes = [stored_image_shape(hw, image_stride) for hw in out["image_hw"]]
    depth_shapes = [stored_depth_shape(hw, depth_stride) for hw in out["depth_hw"]]
    out["image_list"] = _split(state.get("images"), np.uint8, image_shapes, "images")
    out["depth_list"] = _split(state.get("depths"), np.float16, depth_shapes, "depths")
    out["hw"] = [((int(a), int(b)), (int(c), int(d)))
                 for (a, b), (c, d) in zip(out["image_hw"], out["depth_hw"])]
    return out


def _split(flat, dtype, shapes, name: str) -> list[np.ndarray]:
    """A flat array -> read-only arrays of ``shapes`` (one copy of the whole, then views)."""
    sizes = [int(np.prod(s)) for s in shapes]
    if not isinstance(flat, np.ndarray) or flat.dtype != dtype or flat.shape != (sum(sizes),):
        raise ValueError(f"the place database state's {name} must be {np.dtype(dtype)} "
                         f"({sum(sizes)},), got {getattr(flat, 'dtype', type(flat).__name__)} "
                         f"{getattr(flat, 'shape', '')}")
    whole = flat.copy()
    whole.flags.writeable = False
    if whole.dtype.kind == "f" and not np.isfinite(whole).all():
        raise ValueError(f"the place database state's {name} has non-finite values")
    ends = np.cumsum([0] + sizes)
    return [whole[a:b].reshape(s) for a, b, s in zip(ends[:-1], ends[1:], shapes)]

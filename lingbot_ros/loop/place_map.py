"""Stored place maps: the keyframe database and its optimised poses, on disk (docs/loop.md,
"Stored place maps").

    m = place_map_from(db, backend.keyframe_poses(), units="model")   # a PlaceMap, frozen
    m = to_metres(m, metres_per_unit, "scale.locked")                   # once metres are locked
    write_place_map("maps/lab", m)        # a folder: marker, manifest.json, .npy arrays
    m = read_place_map("maps/lab")        # every digest and the schema checked
    db = database_from(m, config)         # a fresh PlaceDatabase, poses = the map's

The folder holds ``manifest.json`` (format, version, map id, frame, creation time, units,
scale and its source, the descriptor recipe, the strides, and per array file its dtype,
shape, size and SHA-256), one ``.npy`` file per array (``_ARRAYS``: the keyframes' ids,
stamps, segments, optimised poses ``T_map_cam``, int8 descriptor codes and their scales, the
image and depth sizes, the compact images and downsampled depths flat, and ``K`` when given)
and our marker ``lingbot_ros_place_map`` with the manifest's SHA-256 (``map_folder.py``: what
a save may replace, the atomic replace, safe reading). Arrays are written by ``np.save`` and
read by ``np.load(allow_pickle=False)``: nothing is ever unpickled. A reader refuses a
foreign folder, another format version, a link or non-regular file, a missing, truncated or
corrupted file, a file the schema does not name or a wrong dtype or shape, each with a
``PlaceMapError`` (a ValueError) naming the reason. Paths are not confined here: callers do
(``geometry/file_rules.FileRoot``). Numpy and lingbot_ros.geometry only.
"""
from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping, Optional

import numpy as np

from ..geometry import check_rigid
from ..geometry.atomic_file import write_new_file
from .config import LoopConfig
from .map_folder import (FORMAT, FORMAT_VERSION, MANIFEST, MapNotReplaced, PlaceMapError,
                         TempFolder, check_replaceable, fsync_dir, read_map_file,
                         read_marked_manifest, sweep_stale)
from .place_db import STATE_SCHEMA, PlaceDatabase
from .place_descriptor import DESCRIPTOR_DIM, DESCRIPTOR_VERSION
from .place_inputs import POSE_TOL, stored_depth_shape, stored_image_shape

__all__ = ["PlaceMap", "PlaceMapError", "MapNotReplaced", "UNITS", "write_place_map",
           "read_place_map", "place_map_from", "database_from", "to_metres", "FORMAT",
           "FORMAT_VERSION"]

UNITS = ("m", "model")
_FLOAT16_MAX = float(np.finfo(np.float16).max)
# array field -> (dtype, shape of one keyframe's row; None: flat, the images' / depths')
_ARRAYS = {"ids": (np.int64, ()), "stamps_ns": (np.int64, ()), "segments": (np.int64, ()),
           "poses": (np.float64, (4, 4)), "codes": (np.int8, (DESCRIPTOR_DIM,)),
           "desc_scales": (np.float32, ()), "image_hw": (np.int64, (2,)),
           "depth_hw": (np.int64, (2,)), "images": (np.uint8, None),
           "depths": (np.float16, None), "K": (np.float64, (3, 3))}
_OPTIONAL = ("K",)


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


def _frozen(a: np.ndarray) -> np.ndarray:
    """``a`` itself when it is read-only and owns its data (another map's array, a file's
    just read: nobody else holds it writeable), else a read-only copy."""
    return a if not a.flags.writeable and a.base is None else _read_only(a.copy())


@dataclass(frozen=True, eq=False)
class PlaceMap:
    """A stored place map (arrays: read-only copies). Per keyframe (n of them, rows in the
    same order): ``ids``, ``stamps_ns``, ``segments``, ``poses`` (optimised ``T_map_cam``,
    in ``units``), the descriptor as ``PlaceDatabase`` keeps it (``codes`` int8 (n, 256)
    and ``desc_scales`` float32 (n,)), ``image_hw`` / ``depth_hw`` (the model-resolution
    sizes), ``images`` / ``depths`` (the compact images, uint8, and the downsampled depths,
    float16, flattened one after another: ``image(i)`` / ``depth(i)``) and ``K`` (n, 3, 3)
    at the model resolution, or None. ``scale``: metres per model unit when known (the
    scale applied when ``units`` is "m"), else None; ``scale_source`` says where it came
    from."""

    map_id: str  # a UUID
    frame_id: str  # the map's frame name, e.g. "map"
    created_ns: int  # wall clock, ns since the epoch
    units: str  # "m" | "model"
    scale: Optional[float]
    scale_source: str
    descriptor_version: str
    image_stride: int
    depth_stride: int
    ids: np.ndarray = field(repr=False)
    stamps_ns: np.ndarray = field(repr=False)
    segments: np.ndarray = field(repr=False)
    poses: np.ndarray = field(repr=False)
    codes: np.ndarray = field(repr=False)
    desc_scales: np.ndarray = field(repr=False)
    image_hw: np.ndarray = field(repr=False)
    depth_hw: np.ndarray = field(repr=False)
    images: np.ndarray = field(repr=False)
    depths: np.ndarray = field(repr=False)
    K: Optional[np.ndarray] = field(default=None, repr=False)

    def __post_init__(self) -> None:
        _check_header(self)
        n = len(self.ids) if isinstance(self.ids, np.ndarray) and self.ids.ndim == 1 else -1
        for name, (dtype, row) in _ARRAYS.items():
            a = getattr(self, name)
            if a is None and name in _OPTIONAL:
                continue
            shape = (n,) + row if row is not None else None
            if not isinstance(a, np.ndarray) or a.dtype != dtype or (
                    shape is not None and a.shape != shape) or (shape is None and a.ndim != 1):
                want = shape if shape is not None else "(flat,)"
                raise ValueError(f"PlaceMap.{name} must be {np.dtype(dtype)} {want}, got "
                                 f"{getattr(a, 'dtype', type(a).__name__)} "
                                 f"{getattr(a, 'shape', '')}")
            object.__setattr__(self, name, _frozen(a))
        if len(np.unique(self.ids)) != n:
            raise ValueError("PlaceMap.ids has repeated keyframe ids")
        check_rigid(self.poses, "PlaceMap.poses", tol=POSE_TOL, last_row_tol=0.0, batch=True)
        if not (np.isfinite(self.desc_scales) & (self.desc_scales > 0)).all() or (
                self.segments < 0).any():
            raise ValueError("PlaceMap has negative segments or bad descriptor scales")
        if (self.image_hw < self.image_stride).any() or (self.depth_hw < 1).any():
            raise ValueError("PlaceMap has image or depth sizes below a stride")
        if self.K is not None and not (np.isfinite(self.K).all()
                                       and (np.abs(np.linalg.det(self.K)) > 0).all()):
            raise ValueError("PlaceMap.K must be finite and invertible")
        if not np.isfinite(self.depths).all():
            raise ValueError("PlaceMap.depths has non-finite values")
        ends = {}
        for name, hw, fn, stride in (("images", self.image_hw, stored_image_shape,
                                      self.image_stride),
                                     ("depths", self.depth_hw, stored_depth_shape,
                                      self.depth_stride)):
            shapes = [fn(tuple(int(v) for v in s), stride) for s in hw]
            sizes = np.cumsum([0] + [int(np.prod(s)) for s in shapes])
            if len(getattr(self, name)) != sizes[-1]:
                raise ValueError(f"PlaceMap.{name} holds {len(getattr(self, name))} values; "
                                 f"its sizes and stride make {sizes[-1]}")
            ends[name] = (sizes, shapes)
        object.__setattr__(self, "_ends", ends)

    def __len__(self) -> int:
        return len(self.ids)

    def image(self, row: int) -> np.ndarray:
        """The compact image of the keyframe in row ``row`` (h, w, 3) uint8, read-only."""
        return self._part("images", row)

    def depth(self, row: int) -> np.ndarray:
        """The downsampled depth of the keyframe in row ``row`` (h, w) float16, read-only."""
        return self._part("depths", row)

    def _part(self, name: str, row: int) -> np.ndarray:
        sizes, shapes = self._ends[name]
        return getattr(self, name)[sizes[row]:sizes[row + 1]].reshape(shapes[row])


def _check_header(m: PlaceMap) -> None:
    try:
        if str(uuid.UUID(m.map_id)) != m.map_id:
            raise ValueError
    except (ValueError, TypeError, AttributeError):
        raise ValueError(f"PlaceMap.map_id must be a UUID (canonical form), got "
                         f"{m.map_id!r}") from None
    for name in ("frame_id", "scale_source", "descriptor_version"):
        v = getattr(m, name)
        if not isinstance(v, str) or not 0 < len(v) <= 256 or not v.isprintable():
            raise ValueError(f"PlaceMap.{name} must be printable text of 1-256 characters, "
                             f"got {v!r}")
    if m.units not in UNITS:
        raise ValueError(f"PlaceMap.units must be one of {UNITS}, got {m.units!r}")
    ok = m.scale is None or (isinstance(m.scale, float) and math.isfinite(m.scale)
                             and m.scale > 0)
    if not ok or (m.units == "m" and m.scale is None):
        raise ValueError(f"PlaceMap.scale must be None or a finite float > 0 (required when "
                         f"units is 'm'), got {m.scale!r}")
    for name, low in (("created_ns", 0), ("image_stride", 1), ("depth_stride", 1)):
        v = getattr(m, name)
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v < 1 << 63:
            raise ValueError(f"PlaceMap.{name} must be an integer >= {low}, got {v!r}")


# -- building ---------------------------------------------------------------------------------
def place_map_from(db: PlaceDatabase, poses: Mapping[int, np.ndarray], units: str,
                   scale: Optional[float] = None, scale_source: str = "none",
                   frame_id: str = "map", intrinsics: Optional[Mapping[int, np.ndarray]] = None,
                   map_id: Optional[str] = None, created_ns: Optional[int] = None) -> PlaceMap:
    """The place map of every keyframe of ``db``, at its optimised pose ``poses[id]`` (a
    rigid (4, 4) ``T_map_cam`` for each kept keyframe: ValueError naming one missing), in
    ``units`` (the poses' and depths': "model", or "m" with its ``scale``); ``intrinsics``:
    a (3, 3) K for every keyframe, or None. A new UUID and the time now unless given."""
    if not isinstance(db, PlaceDatabase):
        raise ValueError(f"db must be a PlaceDatabase, got {type(db).__name__}")
    state = db.state_dict()
    ids = [int(i) for i in state["ids"]]
    missing = [i for i in ids if i not in poses]
    if missing:
        raise ValueError(f"no optimised pose for keyframe {missing[0]} (and {len(missing) - 1} "
                         "more): every kept keyframe needs one")
    stacked = np.stack([np.asarray(poses[i], np.float64) for i in ids]) if ids \
        else np.zeros((0, 4, 4))  # (n, 4, 4)
    K = None
    if intrinsics is not None:
        absent = [i for i in ids if i not in intrinsics]
        if absent:
            raise ValueError(f"no K for keyframe {absent[0]}: give every keyframe's or none")
        K = np.stack([np.asarray(intrinsics[i], np.float64) for i in ids]) if ids \
            else np.zeros((0, 3, 3))  # (n, 3, 3)
    return PlaceMap(
        map_id=map_id or str(uuid.uuid4()), frame_id=frame_id,
        created_ns=time.time_ns() if created_ns is None else created_ns, units=units,
        scale=None if scale is None else float(scale), scale_source=scale_source,
        descriptor_version=state["descriptor"], image_stride=state["image_stride"],
        depth_stride=state["depth_stride"], ids=state["ids"], stamps_ns=state["stamps_ns"],
        segments=state["segments"], poses=stacked, codes=state["codes"],
        desc_scales=state["scales"], image_hw=state["image_hw"], depth_hw=state["depth_hw"],
        images=state["images"], depths=state["depths"], K=K)


def to_metres(m: PlaceMap, metres_per_unit: float, scale_source: str) -> PlaceMap:
    """The model-unit map ``m`` in metres: translations and depths times
    ``metres_per_unit`` (the stream's locked scale), units "m", the scale and its source
    recorded. Rotations, images, descriptors and K (pixels) are unchanged."""
    if not isinstance(m, PlaceMap):
        raise ValueError(f"m must be a PlaceMap, got {type(m).__name__}")
    if m.units != "model":
        raise ValueError(f"the map is already in {m.units!r}: to_metres takes a model-unit map")
    s = metres_per_unit
    if isinstance(s, bool) or not isinstance(s, (int, float)) or not (math.isfinite(s)
                                                                      and s > 0):
        raise ValueError(f"metres_per_unit must be a finite number > 0, got {s!r}")
    poses = m.poses.copy()
    poses[:, :3, 3] *= s
    depths = m.depths.astype(np.float32) * np.float32(s)  # (flat,); then rounded to float16
    if np.abs(depths).max(initial=0.0) > _FLOAT16_MAX:
        raise ValueError(f"depths times {s} leave float16's range")
    return dataclasses.replace(m, units="m", scale=float(s), scale_source=scale_source,
                               poses=poses, depths=depths.astype(np.float16))


def database_from(m: PlaceMap, config: LoopConfig) -> PlaceDatabase:
    """A fresh ``PlaceDatabase`` holding every keyframe of the map (no thinning on load),
    its poses the map's (``T_map_cam``, the map's units); PlaceMapError for descriptors of
    another recipe than this build's."""
    if not isinstance(m, PlaceMap):
        raise ValueError(f"m must be a PlaceMap, got {type(m).__name__}")
    if m.descriptor_version != DESCRIPTOR_VERSION:
        raise PlaceMapError(f"the map's descriptors are of recipe {m.descriptor_version!r}; "
                            f"this build computes {DESCRIPTOR_VERSION!r}: not comparable")
    db = PlaceDatabase(config, image_stride=m.image_stride, depth_stride=m.depth_stride)
    db.load_state_dict({
        "schema": STATE_SCHEMA, "descriptor": m.descriptor_version, "dim": DESCRIPTOR_DIM,
        "image_stride": m.image_stride, "depth_stride": m.depth_stride, "offered": len(m),
        "thinned": 0, "ids": m.ids, "stamps_ns": m.stamps_ns, "segments": m.segments,
        "poses": m.poses, "codes": m.codes, "scales": m.desc_scales, "image_hw": m.image_hw,
        "depth_hw": m.depth_hw, "images": m.images, "depths": m.depths})
    return db


# -- the folder -------------------------------------------------------------------------------
def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(a), allow_pickle=False)
    return buf.getvalue()


def write_place_map(path, m: PlaceMap) -> Path:
    """Write ``m`` as the folder ``path`` (module docstring), atomically: complete beside
    it, then swapped in. Replaces only nothing, an empty folder or a complete place map of
    ours (``MapNotReplaced`` otherwise, checked before a byte is written and again just
    before the swap). A missing parent folder raises FileNotFoundError."""
    if not isinstance(m, PlaceMap):
        raise ValueError(f"m must be a PlaceMap, got {type(m).__name__}")
    target = Path(path)
    sweep_stale(target)
    check_replaceable(target)
    manifest = {"format": FORMAT, "version": FORMAT_VERSION, "map_id": m.map_id,
                "frame_id": m.frame_id, "created_ns": m.created_ns, "units": m.units,
                "scale": m.scale, "scale_source": m.scale_source,
                "descriptor": {"version": m.descriptor_version, "dim": DESCRIPTOR_DIM},
                "image_stride": m.image_stride, "depth_stride": m.depth_stride,
                "keyframes": len(m), "files": {}}
    with TempFolder(target) as tmp:
        for name in _ARRAYS:
            a = getattr(m, name)
            if a is None:
                continue
            blob = _npy(a)
            write_new_file(tmp.path / f"{name}.npy", blob)
            manifest["files"][f"{name}.npy"] = {
                "dtype": a.dtype.str, "shape": list(a.shape), "bytes": len(blob),
                "sha256": hashlib.sha256(blob).hexdigest()}
        text = json.dumps(manifest, indent=1, sort_keys=True, allow_nan=False).encode()
        write_new_file(tmp.path / MANIFEST, text)
        fsync_dir(tmp.path)
        tmp.seal(hashlib.sha256(text).hexdigest())
        kind = check_replaceable(target)  # again last, just before the swap
        old = tmp.install(kind)
    fsync_dir(target.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return target


def _refuse_constant(name: str):
    raise PlaceMapError(f"the manifest holds {name}, which is not JSON")


def read_place_map(path) -> PlaceMap:
    """The place map in the folder ``path``, every file's size and SHA-256 and the schema
    checked (module docstring); ``PlaceMapError`` naming the reason otherwise."""
    path = Path(path)
    blob = read_marked_manifest(path)
    try:
        manifest = json.loads(blob, parse_constant=_refuse_constant)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlaceMapError(f"{path}/{MANIFEST} is not JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise PlaceMapError(f"{path}/{MANIFEST} is not a JSON object")
    if manifest.get("format") != FORMAT or manifest.get("version") != FORMAT_VERSION:
        raise PlaceMapError(f"{path}: the manifest says format {manifest.get('format')!r} "
                            f"version {manifest.get('version')!r}; this build reads {FORMAT!r} "
                            f"version {FORMAT_VERSION}")
    files = manifest.get("files")
    known = {f"{n}.npy" for n in _ARRAYS}
    required = known - {f"{n}.npy" for n in _OPTIONAL}
    if not isinstance(files, dict) or not required <= set(files) <= known:
        listed = sorted(files) if isinstance(files, dict) else files
        raise PlaceMapError(f"{path}: the manifest's files {listed!r} are not this schema's "
                            f"({sorted(known)}, K optional)")
    arrays = {name[:-4]: _load_array(path, name, files[name]) for name in sorted(files)}
    descriptor = manifest.get("descriptor")
    try:
        if not isinstance(descriptor, dict) or descriptor.get("dim") != DESCRIPTOR_DIM:
            raise ValueError(f"descriptor {descriptor!r}: dim must be {DESCRIPTOR_DIM}")
        if manifest.get("keyframes") != len(arrays["ids"]):
            raise ValueError(f"keyframes {manifest.get('keyframes')!r} but "
                             f"{len(arrays['ids'])} ids")
        scale = manifest.get("scale")
        return PlaceMap(map_id=manifest.get("map_id"), frame_id=manifest.get("frame_id"),
                        created_ns=manifest.get("created_ns"), units=manifest.get("units"),
                        scale=float(scale) if isinstance(scale, int) and not isinstance(
                            scale, bool) else scale,
                        scale_source=manifest.get("scale_source"),
                        descriptor_version=descriptor.get("version"),
                        image_stride=manifest.get("image_stride"),
                        depth_stride=manifest.get("depth_stride"), **arrays)
    except ValueError as exc:
        raise PlaceMapError(f"{path}: the place map breaks its schema: {exc}") from None


def _load_array(path: Path, name: str, entry) -> np.ndarray:
    """One array file: its size and digest (``read_map_file``), then ``np.load`` without
    pickle, its dtype and shape the manifest's."""
    ok = isinstance(entry, dict) and isinstance(entry.get("bytes"), int) and not isinstance(
        entry.get("bytes"), bool) and entry["bytes"] >= 0 and isinstance(
        entry.get("sha256"), str) and isinstance(entry.get("shape"), list)
    if not ok:
        raise PlaceMapError(f"{path}: the manifest's entry for {name} is malformed")
    blob = read_map_file(path, name, entry["bytes"], entry["sha256"])
    try:
        a = np.load(io.BytesIO(blob), allow_pickle=False)
    except (ValueError, OSError, EOFError) as exc:
        raise PlaceMapError(f"{path}/{name} is not a numpy array file: {exc}") from None
    if a.dtype.str != entry.get("dtype") or list(a.shape) != entry["shape"]:
        raise PlaceMapError(f"{path}/{name} holds {a.dtype.str} {list(a.shape)}; the manifest "
                            f"says {entry.get('dtype')} {entry['shape']}")
    return _read_only(a) if a.base is None else _read_only(a.copy())  # PlaceMap keeps it

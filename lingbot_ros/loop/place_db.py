"""The keyframe database: what the back end keeps of each kept keyframe, and place retrieval
(docs/loop.md, "Keyframe database").

Per kept keyframe (a :class:`PlaceKeyframe`): its id, stamp (integer ns), pose (4x4 in the
stream world, the units of the poses given), segment, place descriptor
(``place_descriptor.py``), a compact image (the model-resolution uint8 image averaged over
``image_stride`` x ``image_stride`` blocks) and a downsampled depth (every ``depth_stride``-th
pixel, float16).

* **Thinning** (``add``): a keyframe closer than ``min_keyframe_distance_m`` *and*
  ``min_keyframe_angle_deg`` to one already kept is not added, so the database grows with
  the area covered, not with time. Positions are hashed into cubic cells of the distance's
  size; the check reads the 27 cells around a position only.
* **Retrieval** (``candidates``): the top-k kept keyframes by cosine similarity, never one
  younger than ``min_age_s`` (by stamps) nor one the caller excludes (the front end's window).
  Descriptors are stored as int8 codes with one float32 scale per row (``1 / |codes|``: the
  stored descriptor is exactly unit) in one contiguous matrix grown by doubling; a query is
  one blocked int8 -> float32 matrix-vector product (a quarter of float32's memory traffic;
  the query quantised alike, so every dot product is an exact integer) and a top-k
  selection (block maxima bound the k-th score; a few rows are then sorted).
* **Snapshots**: ``state_dict()`` / ``load_state_dict(state)``, JSON values and numpy arrays,
  a bit-identical round trip (the format and its checks: ``place_db_state.py``).

Not thread safe (a query reuses scratch buffers): one thread, the back end's, owns it.
Numpy and lingbot_ros.geometry only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Optional

import numpy as np

from ..geometry import check_rigid
from ..geometry.poses import rotation_angle
from .config import LoopConfig
from .place_db_state import COLUMNS, STATE_SCHEMA, checked_state
from .place_descriptor import DESCRIPTOR_DIM, DESCRIPTOR_VERSION
from .place_inputs import (POSE_TOL, bytes_per_keyframe, checked_integer, compact_depth,
                           compact_image, unit_descriptor)

__all__ = ["AddOutcome", "PlaceCandidate", "PlaceDatabase", "PlaceKeyframe", "STATE_SCHEMA",
           "bytes_per_keyframe"]

_BLOCK = 4096  # rows per block of a query: 4 MiB of float32 scratch, cache-sized
_POOL_BLOCK = 64  # scores per block of the top-k pre-selection (_pool)
_NEIGHBOURS = [(i, j, k) for i in (-1, 0, 1) for j in (-1, 0, 1) for k in (-1, 0, 1)]


@dataclass(frozen=True)
class PlaceCandidate:
    """A retrieved keyframe: its id and the cosine similarity of the descriptors."""
    keyframe_id: int
    score: float


@dataclass(frozen=True)
class AddOutcome:
    """Whether ``add`` kept the keyframe; if not (``reason`` "near_kept"), the kept one it
    is near (``near_id``), at ``distance`` (the poses' units) and ``angle_deg``."""
    kept: bool
    reason: str  # "kept" | "near_kept"
    near_id: Optional[int] = None
    distance: Optional[float] = None
    angle_deg: Optional[float] = None


@dataclass(frozen=True, eq=False)
class PlaceKeyframe:
    """One kept keyframe (arrays read-only). ``image`` is ``image_hw`` averaged over
    ``image_stride``-square blocks; ``depth`` is ``depth[::depth_stride, ::depth_stride]``
    of a ``depth_hw`` depth; ``descriptor`` the stored (quantised) one, unit norm."""
    keyframe_id: int
    stamp_ns: int
    pose: np.ndarray  # (4, 4) float64, stream world
    segment: int
    descriptor: np.ndarray = field(repr=False)  # (256,) float32
    image: np.ndarray = field(repr=False)  # (h, w, 3) uint8
    image_hw: tuple[int, int]
    image_stride: int
    depth: np.ndarray = field(repr=False)  # (h, w) float16
    depth_hw: tuple[int, int]
    depth_stride: int


def _quantise(unit: np.ndarray) -> tuple[np.ndarray, np.float32]:
    """A unit vector -> (int8 codes, scale) with codes * scale of unit norm."""
    codes = np.rint(unit * (127.0 / np.abs(unit).max())).astype(np.int8)
    return codes, np.float32(1.0 / np.linalg.norm(codes.astype(np.float64)))


def _read_only(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class PlaceDatabase:
    def __init__(self, config: LoopConfig, image_stride: int = 2, depth_stride: int = 4):
        """``image_stride``: the compact image is the given one averaged over blocks of this
        size (2: a quarter of the bytes); ``depth_stride``: every this-th depth pixel."""
        if not isinstance(config, LoopConfig):
            raise ValueError(f"config must be a LoopConfig, got {type(config).__name__}")
        for name, s in (("image_stride", image_stride), ("depth_stride", depth_stride)):
            if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= 64:
                raise ValueError(f"{name} must be an integer in [1, 64], got {s!r}")
        self.config = config
        self.image_stride, self.depth_stride = image_stride, depth_stride
        self._cell = float(config.min_keyframe_distance_m)
        self._thinning = self._cell > 0 and config.min_keyframe_angle_deg > 0
        self._min_age_ns = round(config.min_age_s * 1e9)
        self._scratch = np.empty((0, DESCRIPTOR_DIM), np.float32)
        self._clear()

    def _clear(self) -> None:
        self._n = 0
        self._cols = {k: np.empty((0,) + shape, dtype) for k, (shape, dtype) in COLUMNS.items()}
        self._scores = np.empty(0, np.float32)
        self._images: list[np.ndarray] = []
        self._depths: list[np.ndarray] = []
        self._hw: list[tuple[tuple[int, int], tuple[int, int]]] = []  # (image_hw, depth_hw)
        self._rows: dict[int, int] = {}  # keyframe id -> row
        self._cells: dict[tuple[int, int, int], list[int]] = {}  # cell -> rows
        self.offered = 0  # keyframes given to add
        self.thinned = 0  # of them, not kept (near a kept one)

    def __len__(self) -> int:
        return self._n

    def __contains__(self, keyframe_id) -> bool:
        return keyframe_id in self._rows

    def ids(self) -> np.ndarray:
        """The kept keyframes' ids, in the order they were added (a copy)."""
        return self._cols["ids"][:self._n].copy()

    def nbytes(self) -> int:
        """Bytes of the stored arrays (columns at their capacity, images, depths)."""
        return (sum(c.nbytes for c in self._cols.values()) + self._scores.nbytes
                + sum(a.nbytes for a in self._images) + sum(a.nbytes for a in self._depths))

    # -- adding ----------------------------------------------------------------------------------
    def add(self, keyframe_id: int, stamp_ns: int, pose, segment: int, descriptor, image,
            depth) -> AddOutcome:
        """Offer a committed keyframe; kept unless it is within both thinning thresholds of
        one already kept. ValueError (nothing changed) for a bad input or a known id."""
        kid = checked_integer(keyframe_id, "keyframe_id")
        stamp = checked_integer(stamp_ns, "stamp_ns")
        seg = checked_integer(segment, "segment", low=0)
        if not isinstance(pose, np.ndarray):  # numpy inputs only, as the image's and depth's
            raise ValueError(f"pose must be a numpy (4, 4) transform, got "
                             f"{type(pose).__name__}")
        m = check_rigid(pose, "pose", tol=POSE_TOL, last_row_tol=0.0)
        unit = unit_descriptor(descriptor)
        small_image = compact_image(image, self.image_stride)
        small_depth = compact_depth(depth, self.depth_stride)
        if kid in self._rows:
            raise ValueError(f"keyframe {kid} is already in the database")
        self.offered += 1
        near = self._near_kept(m)
        if near is not None:
            self.thinned += 1
            return near
        self._grow(self._n + 1)
        row, self._n = self._n, self._n + 1
        codes, scale = _quantise(unit)
        for name, value in (("ids", kid), ("stamps_ns", stamp), ("segments", seg),
                            ("poses", m), ("codes", codes), ("scales", scale)):
            self._cols[name][row] = value
        self._images.append(_read_only(small_image))
        self._depths.append(_read_only(small_depth))
        self._hw.append((tuple(image.shape[:2]), tuple(depth.shape)))
        self._rows[kid] = row
        if self._thinning:
            self._cells.setdefault(self._cell_of(m[:3, 3]), []).append(row)
        return AddOutcome(True, "kept")

    def _cell_of(self, t: np.ndarray) -> tuple[int, int, int]:
        i, j, k = np.floor(t / self._cell)
        return int(i), int(j), int(k)

    def _near_kept(self, pose: np.ndarray) -> Optional[AddOutcome]:
        """The nearest kept keyframe within both thresholds, as a "near_kept" outcome."""
        if not self._thinning:
            return None
        i, j, k = self._cell_of(pose[:3, 3])
        rows = [r for di, dj, dk in _NEIGHBOURS for r in self._cells.get((i + di, j + dj,
                                                                          k + dk), ())]
        if not rows:
            return None
        kept = self._cols["poses"][np.asarray(rows)]  # (M, 4, 4)
        dist = np.linalg.norm(kept[:, :3, 3] - pose[:3, 3], axis=1)  # (M,)
        rel = np.swapaxes(kept[:, :3, :3], -1, -2) @ pose[:3, :3]  # (M, 3, 3)
        angle = np.degrees(rotation_angle(rel))  # (M,)
        near = np.flatnonzero((dist < self._cell)
                              & (angle < self.config.min_keyframe_angle_deg))
        if not len(near):
            return None
        best = near[np.argmin(dist[near])]
        return AddOutcome(False, "near_kept", int(self._cols["ids"][rows[best]]),
                          float(dist[best]), float(angle[best]))

    def _grow(self, need: int) -> None:
        cap = len(self._cols["ids"])
        if need <= cap:
            return
        cap = max(64, 2 * cap, need)  # amortised doubling
        for name, col in self._cols.items():
            grown = np.zeros((cap,) + col.shape[1:], col.dtype)
            grown[:self._n] = col[:self._n]
            self._cols[name] = grown
        self._scores = np.empty(cap, np.float32)

    # -- reading ---------------------------------------------------------------------------------
    def get(self, keyframe_id: int) -> PlaceKeyframe:
        """The kept keyframe ``keyframe_id`` (KeyError if none)."""
        row = self._rows[keyframe_id]
        c = self._cols
        image_hw, depth_hw = self._hw[row]
        descriptor = (c["codes"][row].astype(np.float32) * c["scales"][row])
        return PlaceKeyframe(int(c["ids"][row]), int(c["stamps_ns"][row]),
                             _read_only(c["poses"][row].copy()), int(c["segments"][row]),
                             _read_only(descriptor), self._images[row], image_hw,
                             self.image_stride, self._depths[row], depth_hw,
                             self.depth_stride)

    def candidates(self, descriptor, now_stamp_ns: int, exclude_ids: Iterable[int] = (),
                   k: Optional[int] = None) -> tuple[PlaceCandidate, ...]:
        """The top ``k`` (default ``loop.top_k``) kept keyframes by cosine similarity to
        ``descriptor``, best first (ties: the smaller id), among those at least
        ``loop.min_age_s`` older than ``now_stamp_ns`` and not in ``exclude_ids``; fewer
        when fewer qualify."""
        query, query_scale = _quantise(unit_descriptor(descriptor))
        now = checked_integer(now_stamp_ns, "now_stamp_ns")
        k = self.config.top_k if k is None else checked_integer(k, "k", low=1)
        excluded = [self._rows[i] for i in (checked_integer(x, "an id of exclude_ids")
                                            for x in exclude_ids) if i in self._rows]
        n = self._n
        if n == 0:
            return ()
        scores = self._all_scores(query, query_scale)  # (n,) float32, a scratch buffer
        young = self._cols["stamps_ns"][:n] > now - self._min_age_ns  # age < min_age
        scores[young] = -np.inf
        scores[excluded] = -np.inf
        eligible = n - int(np.count_nonzero(scores == -np.inf))
        kk = min(k, eligible)
        if kk <= 0:
            return ()
        pool = _pool(scores, kk)  # rows holding the kk best
        ids = self._cols["ids"][pool]
        best = np.lexsort((ids, -scores[pool]))[:kk]  # by score, then by id
        return tuple(PlaceCandidate(int(ids[o]), float(scores[pool[o]])) for o in best)

    def _all_scores(self, query: np.ndarray, query_scale: np.float32) -> np.ndarray:
        """Cosine similarity of every kept descriptor with the quantised query (int8 codes
        and scale) (n,): blocks of int8 codes widened to float32 in cache-sized scratch,
        times the query's codes, times the scales. Each dot product of two int8 code vectors
        is an integer below 256 * 127^2 < 2^24, exact in float32 in any summation order: a
        score does not depend on the BLAS, the machine or the row's place (equal
        descriptors score equally, so ties go by id)."""
        n, codes = self._n, self._cols["codes"]
        query = query.astype(np.float32)
        if len(self._scratch) < min(n, _BLOCK):
            self._scratch = np.empty((min(max(n, 64), _BLOCK), DESCRIPTOR_DIM), np.float32)
        out = self._scores[:n]
        for start in range(0, n, _BLOCK):
            stop = min(start + _BLOCK, n)
            block = self._scratch[:stop - start]  # (b, 256)
            np.copyto(block, codes[start:stop], casting="unsafe")  # int8 -> float32, exact
            np.matmul(block, query, out=out[start:stop])
        out *= self._cols["scales"][:n]
        out *= query_scale
        return out

    # -- snapshots ---------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """The database as JSON values and numpy arrays (copies): the settings it was kept
        with, the columns, and the images and depths concatenated flat with their shapes."""
        n = self._n
        state = {"schema": STATE_SCHEMA, "descriptor": DESCRIPTOR_VERSION,
                 "dim": DESCRIPTOR_DIM, "image_stride": self.image_stride,
                 "depth_stride": self.depth_stride, "offered": self.offered,
                 "thinned": self.thinned}
        state.update({name: col[:n].copy() for name, col in self._cols.items()})
        state["image_hw"] = np.array([hw[0] for hw in self._hw], np.int64).reshape(n, 2)
        state["depth_hw"] = np.array([hw[1] for hw in self._hw], np.int64).reshape(n, 2)
        state["images"] = (np.concatenate([a.ravel() for a in self._images]) if n
                           else np.zeros(0, np.uint8))
        state["depths"] = (np.concatenate([a.ravel() for a in self._depths]) if n
                           else np.zeros(0, np.float16))
        return state

    def load_state_dict(self, state) -> None:
        """Continue a saved database (thinning under this one's thresholds); ValueError, and
        nothing changed, for a state of another descriptor, strides or a malformed one."""
        loaded = checked_state(state, self.image_stride, self.depth_stride)
        saved_scratch = self._scratch
        self._clear()
        self._scratch = saved_scratch
        n = len(loaded["ids"])
        self._grow(n)
        for name in COLUMNS:
            self._cols[name][:n] = loaded[name]
        self._n = n
        self.offered, self.thinned = loaded["offered"], loaded["thinned"]
        self._images, self._depths, self._hw = loaded["image_list"], loaded["depth_list"], \
            loaded["hw"]
        self._rows = {int(i): row for row, i in enumerate(loaded["ids"])}
        if self._thinning:
            for row in range(n):
                self._cells.setdefault(self._cell_of(self._cols["poses"][row, :3, 3]),
                                       []).append(row)


def _pool(scores: np.ndarray, k: int) -> np.ndarray:
    """Rows of ``scores`` (n,) that include every one of the ``k`` largest (and any tied
    with the k-th), few in general: the k-th largest of the maxima of blocks of
    ``_POOL_BLOCK`` is a lower bound of the k-th largest score (k blocks reach it), so only
    the scores at or above it are kept. A tenth of an ``argpartition`` over all n."""
    n = len(scores)
    blocks = n // _POOL_BLOCK
    threshold = -np.inf
    if blocks >= max(k, 4):
        maxima = scores[:blocks * _POOL_BLOCK].reshape(blocks, _POOL_BLOCK).max(axis=1)
        threshold = np.partition(maxima, blocks - k)[blocks - k]
    if threshold == -np.inf:  # too few blocks, or fewer than k with an eligible row
        return np.flatnonzero(scores > -np.inf)
    return np.flatnonzero(scores >= threshold)

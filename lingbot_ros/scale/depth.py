"""The ``depth`` source: an aligned sensor depth image against the model's predicted depth.

Per frame: the depth image nearest in stamp (``DepthBuffer``: exact, or within
``depth_max_dt_s``) is cut to the model's pixels exactly as preprocessing cuts the colour
image (the :class:`~lingbot_ros.preprocess.CropInfo` resize + crop), by *nearest neighbour*
so that holes never blend into valid readings. Invalid readings (0, NaN, inf, outside
``[depth_min_m, depth_max_m]``) and low-confidence model pixels (``depth_conf <
depth_min_conf``) are masked; the sample is the median of sensor / predicted depth over at
least ``min_pixels`` pixels of the evaluation grid (every ``depth_stride``-th model pixel
along x and y). Units: 16UC1 / mono16 in millimetres, 32FC1 in metres, or
``depth_unit_m`` metres per sensor unit. Bad input gives a :class:`Rejection`, never raises.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional, Protocol, Union

import numpy as np

from ..image_decode import DEPTH_ENCODINGS as _DEPTH_FORMATS
from .config import ScaleConfig
from .samples import Rejection, SampleResult, ScaleSample, ns_of

__all__ = ["DEPTH_ENCODINGS", "CropLike", "DepthImage", "DepthBuffer", "DepthSource",
           "crop_indices", "crop_depth", "sensor_depth_m", "depth_sample"]

# encoding (the name exact, as image_decode's one table names it) -> (numpy dtype, metres per
# unit by default)
_UNIT_M = {"16UC1": 1e-3, "mono16": 1e-3, "32FC1": 1.0}
DEPTH_ENCODINGS = {name: (np.dtype(fmt.dtype), _UNIT_M[name])
                   for name, fmt in _DEPTH_FORMATS.items()}


_INVALID_RATIO = np.float32(3e38)  # > any valid ratio: sorts after the valid pixels


class CropLike(Protocol):
    """What the depth source reads of a :class:`~lingbot_ros.preprocess.CropInfo` (duck
    typed, so that this package imports neither torch nor the preprocessing)."""

    input_hw: tuple[int, int]
    resized_hw: tuple[int, int]
    crop_xy: tuple[int, int]
    output_hw: tuple[int, int]


@lru_cache(maxsize=16)
def _indices(input_hw, resized_hw, crop_xy, output_hw, stride):
    def axis(n_in, n_res, start, n_out):
        model = np.arange(stride // 2, n_out, stride, dtype=np.float64)
        # the model pixel's centre in original pixels: (m + crop + 0.5) * n_in / n_res - 0.5;
        # the nearest original pixel is floor of that + 0.5
        idx = np.floor((model + start + 0.5) * (n_in / n_res)).astype(np.intp)
        idx = np.clip(idx, 0, n_in - 1)
        idx.flags.writeable = False
        return idx
    return (axis(input_hw[0], resized_hw[0], crop_xy[1], output_hw[0]),
            axis(input_hw[1], resized_hw[1], crop_xy[0], output_hw[1]))


def crop_indices(crop: CropLike, stride: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols): the original pixel nearest to each evaluated model pixel (every
    ``stride``-th model pixel from ``stride // 2``), so ``image[rows][:, cols]`` is the image
    on the model's pixel grid."""
    return _indices(tuple(crop.input_hw), tuple(crop.resized_hw), tuple(crop.crop_xy),
                    tuple(crop.output_hw), int(stride))


def crop_depth(depth: np.ndarray, crop: CropLike, stride: int = 1) -> np.ndarray:
    """A depth image of ``crop.input_hw`` -> the model's pixel grid (nearest neighbour, no
    interpolation: a hole stays a hole and never blends into its neighbours)."""
    rows, cols = crop_indices(crop, stride)
    return depth.take(rows, axis=0).take(cols, axis=1)


def sensor_depth_m(image: np.ndarray, encoding: str, depth_unit_m: Optional[float] = None
                   ) -> np.ndarray:
    """A depth image (16UC1/mono16 mm, 32FC1 m, or ``depth_unit_m``) -> float32 metres
    (invalid readings stay 0 / NaN / inf). ValueError for an unsupported encoding or dtype."""
    dtype, unit = _check_encoding(image, encoding)
    unit = unit if depth_unit_m is None else depth_unit_m
    return image.astype(np.float32) * np.float32(unit) if unit != 1.0 or dtype.kind != "f" \
        else image.astype(np.float32, copy=False)


def _unit(encoding: str, depth_unit_m: Optional[float]) -> float:
    return DEPTH_ENCODINGS[encoding][1] if depth_unit_m is None \
        else float(depth_unit_m)


@lru_cache(maxsize=16)
def _flat_indices(input_hw, resized_hw, crop_xy, output_hw, stride):
    rows, cols = _indices(input_hw, resized_hw, crop_xy, output_hw, stride)
    flat = (rows[:, None] * input_hw[1] + cols[None, :]).astype(np.intp)
    flat.flags.writeable = False
    return flat


def _raw_range(dtype: np.dtype, lo: float, hi: float):
    """[lo, hi] (sensor units, lo > 0) as scalars of the image's dtype, so the comparison
    runs in that dtype."""
    if dtype.kind == "u":
        top = np.iinfo(dtype).max
        return (dtype.type(min(top, max(1, math.ceil(lo)))),
                dtype.type(min(top, math.floor(hi))))
    return dtype.type(max(lo, np.finfo(dtype).tiny)), dtype.type(hi)


def _gather(depth: np.ndarray, crop: CropLike, stride: int) -> np.ndarray:
    """crop_depth through one flat take (the hot path)."""
    flat = _flat_indices(tuple(crop.input_hw), tuple(crop.resized_hw), tuple(crop.crop_xy),
                         tuple(crop.output_hw), int(stride))
    return np.ravel(depth).take(flat)


def _check_encoding(image, encoding) -> tuple[np.dtype, float]:
    key = encoding if isinstance(encoding, str) else None
    if key not in DEPTH_ENCODINGS:
        raise ValueError(f"depth encoding {encoding!r} is not one of 16UC1, mono16, 32FC1")
    dtype, unit = DEPTH_ENCODINGS[key]
    if not isinstance(image, np.ndarray) or image.dtype.newbyteorder("=") != dtype:
        got = image.dtype if isinstance(image, np.ndarray) else type(image).__name__
        raise ValueError(f"depth encoding {encoding!r} needs {dtype} pixels, got {got}")
    return dtype, unit


@dataclass(frozen=True, slots=True)
class DepthImage:
    """A received depth image (the message's array, encoding and stamp)."""

    stamp_ns: int
    image: np.ndarray
    encoding: str


class DepthBuffer:
    """The last ``capacity`` depth images; ``match`` finds the one for a colour stamp."""

    def __init__(self, max_dt_s: float, capacity: int = 16) -> None:
        self._max_dt_s = float(max_dt_s)
        self._max_dt_ns = ns_of(max_dt_s)
        self._images: deque[DepthImage] = deque(maxlen=int(capacity))

    def __len__(self) -> int:
        return len(self._images)

    def clear(self) -> None:
        self._images.clear()

    def push(self, stamp_ns: int, image: np.ndarray, encoding: str) -> None:
        self._images.append(DepthImage(int(stamp_ns), image, encoding))

    def match(self, stamp_ns: int) -> Union[DepthImage, Rejection]:
        """The image with the same stamp, else the nearest within ``max_dt_s``, else a
        Rejection (``no_depth`` when none was ever received, else ``out_of_sync``)."""
        stamp_ns = int(stamp_ns)
        if not self._images:
            return Rejection(stamp_ns, "no_depth", "no depth image received")
        best = min(self._images, key=lambda d: abs(d.stamp_ns - stamp_ns))
        dt_ns = abs(best.stamp_ns - stamp_ns)
        if not dt_ns <= self._max_dt_ns:
            return Rejection(stamp_ns, "out_of_sync", f"nearest depth is {dt_ns / 1e9:.3f} s "
                             f"away (max {self._max_dt_s} s)")
        return best


def depth_sample(stamp_ns: int, depth: np.ndarray, encoding: str, predicted_depth: np.ndarray,
                 depth_conf: Optional[np.ndarray], crop: CropLike,
                 config: ScaleConfig = ScaleConfig(source="depth")) -> SampleResult:
    """One frame's sample: median of sensor / predicted depth over the valid, confident
    pixels. ``depth``: the sensor image at ``crop.input_hw`` (HxW or HxWx1);
    ``predicted_depth`` / ``depth_conf``: the model's, at ``crop.output_hw`` (model units).
    Returns a ScaleSample or a Rejection (never raises on bad input)."""
    try:
        _check_encoding(depth, encoding)
    except ValueError as err:
        return Rejection(stamp_ns, "wrong_encoding", str(err))
    if depth.ndim == 3 and depth.shape[2] == 1:
        depth = depth[:, :, 0]
    if depth.shape != tuple(crop.input_hw):
        return Rejection(stamp_ns, "wrong_size", f"depth image is {depth.shape}, the colour "
                         f"image {tuple(crop.input_hw)}")
    pred = np.asarray(predicted_depth)
    if pred.ndim == 3 and pred.shape[-1] == 1:
        pred = pred[..., 0]
    conf = None if depth_conf is None else np.asarray(depth_conf)
    if conf is not None and conf.ndim == 3 and conf.shape[-1] == 1:
        conf = conf[..., 0]
    out_hw = tuple(crop.output_hw)
    if pred.shape != out_hw or (conf is not None and conf.shape != out_hw):
        return Rejection(stamp_ns, "wrong_size", f"predicted depth {pred.shape} / confidence "
                         f"{None if conf is None else conf.shape} is not the model's {out_hw}")
    s = config.depth_stride
    grid = (slice(s // 2, None, s), slice(s // 2, None, s))
    try:
        pred = np.ascontiguousarray(pred[grid], dtype=np.float32)
    except (TypeError, ValueError) as err:
        return Rejection(stamp_ns, "wrong_size", f"predicted depth is not numeric: {err}")
    top = pred.max()  # NaN and inf propagate: one pass instead of isfinite + all
    if not np.isfinite(top):
        return Rejection(stamp_ns, "non_finite", "the predicted depth has NaN/inf")
    unit = _unit(encoding, config.depth_unit_m)
    raw = _gather(depth, crop, s)
    lo, hi = _raw_range(raw.dtype, config.depth_min_m / unit, config.depth_max_m / unit)
    valid = (raw >= lo) & (raw <= hi)  # in sensor units: no conversion; NaN compares False
    if not valid.any():
        return Rejection(stamp_ns, "all_invalid", "no valid sensor depth in the model's view")
    valid &= pred > 0
    if conf is not None:  # NaN confidence compares False: masked
        valid &= np.ascontiguousarray(conf[grid]) >= config.depth_min_conf
    n = int(np.count_nonzero(valid))
    if n < config.min_pixels:
        return Rejection(stamp_ns, "too_few_pixels", f"{n} valid, confident pixels "
                         f"(min_pixels {config.min_pixels})")
    # no boolean indexing or masked copy (slow, branchy on random masks): invalid ratios
    # become 3e38, which sorts last, so the (n // 2)-th smallest of the whole grid is the
    # valid pixels' median. fmax also replaces the NaN of 0 / 0.
    ratio = raw.astype(np.float32).ravel()
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        ratio /= pred.ravel()
    penalty = np.logical_not(valid.ravel()).astype(np.float32)
    penalty *= _INVALID_RATIO
    np.fmax(ratio, penalty, out=ratio)
    ratio.partition(n // 2)
    median = float(ratio[n // 2]) * unit
    if not (np.isfinite(median) and 0 < median < _INVALID_RATIO * unit):  # overflowed ratios
        return Rejection(stamp_ns, "non_finite", f"median depth ratio {median}")
    return ScaleSample(stamp_ns, median, "depth", support=n)


class DepthSource:
    """The depth source of one stream: buffers depth images, samples each colour frame."""

    def __init__(self, config: ScaleConfig, capacity: int = 16) -> None:
        self._config = config
        self._buffer = DepthBuffer(config.depth_max_dt_s, capacity)
        # depth matched when its colour frame was handed in (``pin``): stamp -> image. A
        # slow pipeline's result may come after ``capacity`` newer depth images.
        self._pinned: dict[int, DepthImage] = {}

    def pin(self, stamp_ns: int) -> None:
        """A colour frame at ``stamp_ns`` was handed to the model: keep its depth image (if
        one matches now) until its ``sample``; if none does yet, ``sample`` looks again."""
        match = self._buffer.match(stamp_ns)
        if not isinstance(match, Rejection):
            self._pinned[int(stamp_ns)] = match
            while len(self._pinned) > 32:  # frames that never came back (dropped, failed)
                del self._pinned[next(iter(self._pinned))]

    def push_depth(self, stamp_ns: int, image: np.ndarray, encoding: str) -> None:
        self._buffer.push(stamp_ns, image, encoding)

    def reset(self) -> None:
        self._buffer.clear()
        self._pinned.clear()

    def sample(self, stamp_ns: int, predicted_depth: np.ndarray,
               depth_conf: Optional[np.ndarray], crop: CropLike) -> SampleResult:
        match = self._pinned.pop(int(stamp_ns), None) or self._buffer.match(stamp_ns)
        if isinstance(match, Rejection):
            return match
        return depth_sample(stamp_ns, match.image, match.encoding, predicted_depth, depth_conf,
                            crop, self._config)

"""Cost of the per-frame scale work on the CPU at the model's 518x378, per source.

For ``lingbot-ros-bench`` (JSON-ready dicts: microseconds per frame, p50/p99/mean; one
warm-up frame first, synthetic inputs cycled over a few variants):

* :func:`bench_depth_source` -- what the node's worker does per frame with
  ``scale.source: depth`` (``ScaleStream.on_frame``): the depth source's ``sample`` (the depth
  image matched by stamp in a buffer of 16, cut to the model's pixels, masked, the median
  ratio) and the estimator's ``add`` (the window's median and spread, a new snapshot), each
  timed too. 640x480 16UC1 depth images with 10 % holes arriving at 30 Hz, the model's depth
  = sensor / k with 1 % noise, its confidence.
* :func:`bench_camera_height_source` -- ``scale.source: camera_height``:
  :func:`~lingbot_ros.scale.camera_height_depth_sample` (the predicted depth's grid
  unprojected, the RANSAC floor, its refinement) and the estimator's ``add``. A room
  ray-cast at 518x378 from a camera 1.2 m over the floor, pitched down 15-25 deg: the
  floor, a table top 0.75 m high, the walls and the ceiling; the model's depth = metres / k
  with 1 % noise, 2 % wild pixels, 5 % low-confidence pixels.
* :func:`bench_odometry_source` -- ``scale.source: odometry``: the odometry poses pushed (not
  timed), the source's ``sample`` (the window's frames interpolated, the fit) and ``add``.
  A base driving an arc at 0.5 m/s, odometry at 50 Hz, images at 30 Hz, a lever arm.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np

from ..geometry import T_BODY_OPTICAL
from .camera_height import camera_height_depth_sample
from .config import ScaleConfig
from .depth import DepthSource
from .estimator import ScaleEstimator
from .odometry import OdometrySource
from .samples import ScaleSample
from .se3 import rigid_inverse, rotation_exp

__all__ = ["bench_depth_source", "bench_camera_height_source", "bench_odometry_source"]

FPS = 30.0  # the depth images' (and colour frames') rate
VARIANTS = 4  # distinct synthetic frames, cycled
MODEL_HW = (378, 518)
CAMERA_HEIGHT_M = 1.2  # camera_height: the camera's optical centre over the floor
ODOM_HZ = 50.0  # odometry: the odometry's rate


@dataclass(frozen=True)
class _Crop:  # the CropInfo preprocessing gives 640x480 -> 518x378 (resize 518x388, crop y 5)
    input_hw: tuple = (480, 640)
    resized_hw: tuple = (388, 518)
    crop_xy: tuple = (0, 5)
    output_hw: tuple = MODEL_HW


def _frames(crop: _Crop, k: float, rng) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """(sensor 16UC1 mm, predicted depth, confidence) per synthetic frame."""
    rows = np.floor((np.arange(378) + 5 + 0.5) * 480 / 388).astype(int)
    cols = np.floor((np.arange(518) + 0.5) * 640 / 518).astype(int)
    out = []
    for _ in range(VARIANTS):
        sensor = rng.uniform(500, 5000, size=crop.input_hw).astype(np.uint16)
        sensor[rng.random(crop.input_hw) < 0.1] = 0  # holes
        pred = sensor[rows][:, cols].astype(np.float32) * 1e-3 / k
        pred *= rng.normal(1.0, 0.01, size=pred.shape).astype(np.float32)
        pred[pred <= 0] = 1.0
        conf = rng.uniform(1.0, 5.0, size=pred.shape).astype(np.float32)
        out.append((sensor, pred, conf))
    return out


def _stats(times_us: list[float]) -> dict:
    t = np.asarray(times_us)
    return {"p50": float(np.percentile(t, 50)), "p99": float(np.percentile(t, 99)),
            "mean": float(t.mean())}


def _check_frames(frames) -> None:
    if not isinstance(frames, int) or isinstance(frames, bool) or frames < 1:
        raise ValueError(f"frames must be an integer >= 1, got {frames!r}")


def _report(frames: int, total: list, sample_us: list, add_us: list, result,
            estimate) -> dict:
    stats = _stats(total)
    return {"frames": int(frames), "model_hw": list(MODEL_HW), "p50_us": stats["p50"],
            "p99_us": stats["p99"], "mean_us": stats["mean"], "sample_us": _stats(sample_us),
            "estimator_us": _stats(add_us),
            "metres_per_unit": result.metres_per_unit if isinstance(result, ScaleSample)
            else None, "state": estimate.state.value}


def _ns(seconds: float) -> int:
    """A stamp in seconds -> integer ns (the sources' stamps)."""
    return round(seconds * 1e9)


def _timed_run(frames: int, estimator: ScaleEstimator, prepare, sample) -> dict:
    """Per frame i: ``prepare(i)`` (the executor's side, not timed) -> args, then timed
    ``sample(*args)`` -> the frame's SampleResult and ``estimator.add`` of it. Frame 0 is the
    warm-up (caches, first allocations), not timed."""
    total, sample_us, add_us = [], [], []
    result = estimate = None
    for i in range(int(frames) + 1):
        args = prepare(i)
        t0 = time.perf_counter_ns()
        result = sample(*args)
        t1 = time.perf_counter_ns()
        estimate = estimator.add(result)
        t2 = time.perf_counter_ns()
        if i:
            sample_us.append((t1 - t0) / 1e3)
            add_us.append((t2 - t1) / 1e3)
            total.append((t2 - t0) / 1e3)
    return _report(frames, total, sample_us, add_us, result, estimate)


def bench_depth_source(frames: int = 200, config: ScaleConfig = ScaleConfig(source="depth"),
                       seed: int = 0) -> dict:
    """Time the depth source + estimator per frame; returns {"frames", "model_hw",
    "sensor_hw", "p50_us", "p99_us", "mean_us" (sample + add), "sample_us", "estimator_us"
    ({"p50", "p99", "mean"} each), "metres_per_unit" (the last sample's), "state" (the
    estimate's after the run)}."""
    _check_frames(frames)
    if config.source != "depth":
        raise ValueError(f"bench_depth_source needs a depth config, got {config.source!r}")
    rng = np.random.default_rng(seed)
    crop = _Crop()
    data = _frames(crop, 2.5, rng)
    source = DepthSource(config)

    def prepare(i):
        sensor, pred, conf = data[i % VARIANTS]
        source.push_depth(_ns(i / FPS), sensor, "16UC1")
        return _ns(i / FPS), pred, conf, crop

    out = _timed_run(frames, ScaleEstimator(config), prepare, source.sample)
    out["sensor_hw"] = list(crop.input_hw)
    return out


def _mount(height_m: float, pitch_down_rad: float, roll_rad: float) -> np.ndarray:
    """T_base_optical: the camera 0.2 m ahead of base_link (on the floor), ``height_m`` up,
    pitched down and rolled a little."""
    T = np.eye(4)
    T[:3, :3] = rotation_exp(np.array([roll_rad, 0.0, 0.0])) @ \
        rotation_exp(np.array([0.0, pitch_down_rad, 0.0]))
    T[:3, 3] = (0.2, 0.0, height_m)
    return T @ T_BODY_OPTICAL


def _room_depth(T_base_optical: np.ndarray, K: np.ndarray) -> np.ndarray:
    """Metric z-depth (MODEL_HW) of a room seen from ``T_base_optical``: the floor z = 0, a
    table top at 0.75 m (x 2-3 m, y -0.6-0.9 m), walls at x = 6 m and y = +-3 m, a 2.8 m
    ceiling."""
    h, w = MODEL_HW
    vs, us = np.mgrid[0:h, 0:w]
    rays = np.stack([(us - K[0, 2]) / K[0, 0], (vs - K[1, 2]) / K[1, 1], np.ones((h, w))],
                    axis=-1)  # optical, z = 1: the ray's length along it is the z-depth
    d = rays @ T_base_optical[:3, :3].T
    o = T_base_optical[:3, 3]
    t = np.full((h, w), np.inf)
    with np.errstate(divide="ignore", invalid="ignore"):
        for axis, level in ((2, 0.0), (2, 2.8), (0, 6.0), (1, 3.0), (1, -3.0)):
            hit = (level - o[axis]) / d[..., axis]
            t = np.where((hit > 0) & np.isfinite(hit), np.minimum(t, hit), t)
        hit = (0.75 - o[2]) / d[..., 2]
        x, y = o[0] + hit * d[..., 0], o[1] + hit * d[..., 1]
        table = (hit > 0) & (x >= 2.0) & (x <= 3.0) & (y >= -0.6) & (y <= 0.9)
        t = np.where(table, np.minimum(t, hit), t)
    return t


def bench_camera_height_source(frames: int = 200,
                               config: ScaleConfig = ScaleConfig(
                                   source="camera_height", camera_height_m=CAMERA_HEIGHT_M),
                               seed: int = 0) -> dict:
    """Time the camera_height source + estimator per frame (the keys of
    :func:`bench_depth_source` but ``sensor_hw``; ``metres_per_unit`` should be 2.5)."""
    _check_frames(frames)
    if config.source != "camera_height" or config.camera_height_m is None:
        raise ValueError(f"bench_camera_height_source needs a camera_height config with "
                         f"camera_height_m, got {config.source!r}, {config.camera_height_m!r}")
    rng = np.random.default_rng(seed)
    k = 2.5
    h, w = MODEL_HW
    K = np.array([[0.8 * w, 0.0, (w - 1) / 2], [0.0, 0.8 * w, (h - 1) / 2], [0.0, 0.0, 1.0]])
    data = []
    for v in range(VARIANTS):
        T_bo = _mount(config.camera_height_m, math.radians(15.0 + 10.0 * v / VARIANTS),
                      math.radians(rng.uniform(-3.0, 3.0)))
        depth = _room_depth(T_bo, K) / k
        depth *= rng.normal(1.0, 0.01, size=depth.shape)
        wild = rng.random(depth.shape) < 0.02
        depth[wild] = rng.uniform(0.1, 4.0, size=int(wild.sum()))
        conf = rng.uniform(2.0, 10.0, size=depth.shape).astype(np.float32)
        conf[rng.random(depth.shape) < 0.05] = 1.1
        data.append((depth.astype(np.float32), conf, T_bo))

    def prepare(i):
        depth, conf, T_bo = data[i % VARIANTS]
        return _ns(i / FPS), depth, K, T_bo, None, config, conf

    return _timed_run(frames, ScaleEstimator(config), prepare, camera_height_depth_sample)


def bench_odometry_source(frames: int = 200,
                          config: ScaleConfig = ScaleConfig(source="odometry"),
                          seed: int = 0) -> dict:
    """Time the odometry source + estimator per frame (the keys of
    :func:`bench_depth_source` but ``sensor_hw``; ``metres_per_unit`` should be 2.5)."""
    _check_frames(frames)
    if config.source != "odometry":
        raise ValueError(f"bench_odometry_source needs an odometry config, got "
                         f"{config.source!r}")
    rng = np.random.default_rng(seed)
    k = 2.5
    T_bo = _mount(0.5, math.radians(10.0), 0.0)

    def base(t):  # an arc at 0.5 m/s, 0.3 rad/s, a little noise-free wobble in z
        yaw = 0.3 * t
        T = np.eye(4)
        T[:3, :3] = rotation_exp(np.array([0.0, 0.0, yaw]))
        T[:3, 3] = (0.5 / 0.3 * math.sin(yaw), 0.5 / 0.3 * (1 - math.cos(yaw)), 0.0)
        return T

    first = rigid_inverse(base(0.0) @ T_bo)
    source = OdometrySource(config, T_bo)
    pushed = [0]  # odometry poses pushed so far

    def prepare(i):
        stamp = i / FPS
        while pushed[0] / ODOM_HZ <= stamp + 0.05:  # odometry a little ahead of the image
            source.push_odometry(_ns(pushed[0] / ODOM_HZ), base(pushed[0] / ODOM_HZ))
            pushed[0] += 1
        c2w = first @ base(stamp) @ T_bo
        c2w[:3, 3] = c2w[:3, 3] / k + rng.normal(0.0, 1e-4, 3)
        return _ns(stamp), c2w

    return _timed_run(frames, ScaleEstimator(config), prepare, source.sample)

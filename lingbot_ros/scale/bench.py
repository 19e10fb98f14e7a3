"""Cost of the per-frame scale work on the CPU: the depth source at the model's 518x378.

``bench_depth_source()`` returns a JSON-ready dict (p50/p99/mean microseconds per frame),
for ``lingbot-ros-bench``. Synthetic inputs: a 640x480 16UC1 depth image with holes, the
model's depth = sensor / k with noise, its confidence; one warm-up call, then timed calls.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .config import ScaleConfig
from .depth import depth_sample
from .samples import ScaleSample

__all__ = ["bench_depth_source"]


@dataclass(frozen=True)
class _Crop:  # the CropInfo preprocessing gives 640x480 -> 518x378 (resize 518x388, crop y 5)
    input_hw: tuple = (480, 640)
    resized_hw: tuple = (388, 518)
    crop_xy: tuple = (0, 5)
    output_hw: tuple = (378, 518)


def bench_depth_source(frames: int = 200, config: ScaleConfig = ScaleConfig(source="depth"),
                       seed: int = 0) -> dict:
    """Time ``depth_sample`` per frame; returns {"p50_us", "p99_us", "mean_us", "frames",
    "model_hw", "sensor_hw", "metres_per_unit"}."""
    rng = np.random.default_rng(seed)
    crop = _Crop()
    k = 2.5
    sensor = rng.uniform(500, 5000, size=crop.input_hw).astype(np.uint16)
    sensor[rng.random(crop.input_hw) < 0.1] = 0  # holes
    rows = np.floor((np.arange(378) + 5 + 0.5) * 480 / 388).astype(int)
    cols = np.floor((np.arange(518) + 0.5) * 640 / 518).astype(int)
    pred = sensor[rows][:, cols].astype(np.float32) * 1e-3 / k
    pred *= rng.normal(1.0, 0.01, size=pred.shape).astype(np.float32)
    pred[pred <= 0] = 1.0
    conf = rng.uniform(1.0, 5.0, size=pred.shape).astype(np.float32)
    times = []
    result = depth_sample(0.0, sensor, "16UC1", pred, conf, crop, config)  # warm-up
    for i in range(int(frames)):
        t0 = time.perf_counter_ns()
        result = depth_sample(float(i), sensor, "16UC1", pred, conf, crop, config)
        times.append((time.perf_counter_ns() - t0) / 1e3)
    t = np.array(times)
    return {"frames": int(frames), "model_hw": list(crop.output_hw),
            "sensor_hw": list(crop.input_hw), "p50_us": float(np.percentile(t, 50)),
            "p99_us": float(np.percentile(t, 99)), "mean_us": float(t.mean()),
            "metres_per_unit": result.metres_per_unit if isinstance(result, ScaleSample)
            else None}

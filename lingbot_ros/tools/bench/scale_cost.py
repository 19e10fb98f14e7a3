"""``lingbot-ros-bench``'s scale section: the metric-scale estimator's CPU cost per frame.

With a ``scale.source`` the node's worker runs, per frame, the source's sample and the
estimator's update on the host beside the GPU step. The section times each source on
synthetic frames at the model's 518x378 (:mod:`lingbot_ros.scale.bench`):

* ``depth``: the aligned depth image matched by stamp, cut to the model's pixels, masked,
  the median ratio;
* ``camera_height``: the predicted depth's grid unprojected, the RANSAC floor below the
  camera, its least-squares refinement;
* ``odometry``: the window's frames interpolated in the odometry, the fit.

The budget is 1 ms p99 per frame (issue 22), sample + update. CPU only: it runs without
CUDA, and on a GPU machine it measures the host's CPU. The section's top-level figures are
the depth source's (``source``: ``depth``); ``by_source`` has every source's.
"""
from __future__ import annotations

from ...scale import bench_camera_height_source, bench_depth_source, bench_odometry_source

__all__ = ["BUDGET_P99_US", "SOURCES", "run_scale_bench", "scale_line"]

BUDGET_P99_US = 1000.0  # the per-frame budget of the scale work (p99, microseconds)
SOURCES = {"depth": bench_depth_source, "camera_height": bench_camera_height_source,
           "odometry": bench_odometry_source}


def _source_entry(r: dict) -> dict:
    return {"cpu_us_per_frame": {"p50": r["p50_us"], "p99": r["p99_us"], "mean": r["mean_us"]},
            "sample_us": r["sample_us"], "estimator_update_us": r["estimator_us"],
            "within_budget": r["p99_us"] <= BUDGET_P99_US, "state": r["state"],
            "metres_per_unit": r["metres_per_unit"]}


def run_scale_bench(frames: int) -> dict:
    """The JSON section ``scale_estimator``: CPU microseconds per frame at 518x378 (p50/p99/
    mean of sample + update, and of each) per source in ``by_source`` (the synthetic truth
    is 2.5 metres per model unit); the depth source's at the top level (``source``,
    ``cpu_us_per_frame``, ``depth_sample_us``, ``estimator_update_us``, ``within_budget``,
    ``state``), the budget, and ``all_within_budget``."""
    runs = {name: bench(frames) for name, bench in SOURCES.items()}
    by_source = {name: _source_entry(r) for name, r in runs.items()}
    depth = runs["depth"]
    return {"source": "depth", "frames": depth["frames"], "model_hw": depth["model_hw"],
            "sensor_hw": depth["sensor_hw"],
            "cpu_us_per_frame": by_source["depth"]["cpu_us_per_frame"],
            "depth_sample_us": depth["sample_us"], "estimator_update_us": depth["estimator_us"],
            "budget_p99_us": BUDGET_P99_US, "within_budget": depth["p99_us"] <= BUDGET_P99_US,
            "state": depth["state"], "by_source": by_source,
            "all_within_budget": all(e["within_budget"] for e in by_source.values())}


def scale_line(section: dict) -> str:
    """One printed line of the section."""
    h, w = section["model_hw"]
    parts = []
    for name, entry in section.get("by_source", {"depth": section}).items():
        cpu = entry["cpu_us_per_frame"]
        parts.append(f"{name} p50 {cpu['p50']:.0f} us, p99 {cpu['p99']:.0f} us"
                     f"{'' if entry['within_budget'] else ' (OVER)'}")
    within = section.get("all_within_budget", section["within_budget"])
    return (f"scale estimator ({w}x{h}, CPU, {section['frames']} frames, per frame): "
            f"{'; '.join(parts)} (budget p99 {section['budget_p99_us']:.0f} us: "
            f"{'within' if within else 'OVER'})")

"""``lingbot-ros-eval --benchmark lingbot-map --data-root ROOT``: upstream LingBot-Map's
trajectory benchmark protocol, on the datasets we read, beside its published numbers.

Upstream (Robbyant/lingbot-map ``benchmark/``, README "Benchmark Results", lingbot-map.pt,
streaming mode) reports per dataset the mean over its scenes of the Sim(3)-aligned ATE RMSE,
RPE-trans and RPE-rot (frame to frame). Its protocol, as our offline options: image width
518 (KITTI 504x280), frame stride (7-Scenes 5), 8 scale frames, a 64-frame window and
``keyframe_interval: auto`` -- every frame a keyframe up to 320 frames, else one every
ceil(N / 320) (our ``every_n`` policy with that n). docs/evaluation.md cites each figure.

Expected layout under ROOT (each dataset as published; a missing one is named, the others
run)::

    ROOT/tum_rgbd/rgbd_dataset_freiburg1_xyz/{rgb.txt, rgb/, groundtruth.txt}   (9 of them)
    ROOT/seven_scenes/<scene>/seq-NN/frame-NNNNNN.{color.png,pose.txt}         (18)
    ROOT/kitti/sequences/NN/{image_2/, times.txt, calib.txt}, ROOT/kitti/poses/NN.txt (11)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ..sources.datasets import open_dataset

__all__ = ["BenchmarkDataset", "PlannedSequence", "BENCHMARKS", "UPSTREAM_SOURCE",
           "plan_benchmark", "auto_keyframes", "benchmark_rows", "benchmark_table"]

UPSTREAM_SOURCE = ("Robbyant/lingbot-map benchmark/README.md (commit 6e6b063), "
                   "\"Benchmark Results\" / Trajectory")
AUTO_KEYFRAME_THRESHOLD = 320  # upstream's _auto_keyframe_threshold


@dataclass(frozen=True)
class BenchmarkDataset:
    """One dataset of a benchmark: where its sequences lie under the data root, how they run
    (our offline options) and upstream's published dataset-level figures."""
    name: str                   # our --format and the folder under the data root
    label: str                  # as upstream's table names it
    folder: str
    sequences: tuple[str, ...]  # paths under ROOT/folder
    layout: str                 # the expected layout, for the missing-data message
    width: int
    height: Optional[int]
    stride: int
    published_ate: float        # m, Sim(3)-aligned ATE RMSE, mean over scenes
    published_rpe_trans: float
    published_rpe_rot_deg: float

    def unit_name(self, sequence: str) -> str:
        """The unit's folder and row name: ``tum_rgbd_fr1_xyz``, ``seven_scenes_chess_seq-03``,
        ``kitti_07``."""
        short = sequence.replace("rgbd_dataset_freiburg", "fr").removeprefix("sequences/")
        return f"{self.name}_{short.replace('/', '_')}"


TUM_FR1 = tuple(f"rgbd_dataset_freiburg1_{s}" for s in
                ("360", "desk", "desk2", "floor", "plant", "room", "rpy", "teddy", "xyz"))
SEVEN_SCENES_TEST = tuple(
    f"{scene}/seq-{n:02d}" for scene, ns in (
        ("chess", (3, 5)), ("fire", (3, 4)), ("heads", (1,)), ("office", (2, 6, 7, 9)),
        ("pumpkin", (1, 7)), ("redkitchen", (3, 4, 6, 12, 14)), ("stairs", (1, 4)))
    for n in ns)
KITTI_GT = tuple(f"sequences/{n:02d}" for n in range(11))

BENCHMARKS = {
    "lingbot-map": (
        BenchmarkDataset("tum_rgbd", "TUM RGB-D", "tum_rgbd", TUM_FR1,
                         "ROOT/tum_rgbd/rgbd_dataset_freiburg1_<name>/ with rgb.txt, rgb/, "
                         "groundtruth.txt (the 9 freiburg1 sequences, unpacked)",
                         518, None, 1, 0.045, 0.013, 0.513),
        BenchmarkDataset("seven_scenes", "7-Scenes", "seven_scenes", SEVEN_SCENES_TEST,
                         "ROOT/seven_scenes/<scene>/seq-NN/ with frame-NNNNNN.color.png and "
                         ".pose.txt (the 18 test sequences, unzipped)",
                         518, None, 5, 0.079, 0.020, 0.579),
        BenchmarkDataset("kitti", "KITTI (504x280)", "kitti", KITTI_GT,
                         "ROOT/kitti/sequences/NN/ with image_2/, times.txt, calib.txt and "
                         "ROOT/kitti/poses/NN.txt (odometry sequences 00-10)",
                         504, 280, 1, 24.046, 2.861, 0.696),
    ),
}


@dataclass(frozen=True)
class PlannedSequence:
    """A sequence of a benchmark that is on disk, with the settings it runs with."""
    dataset: BenchmarkDataset
    path: str
    name: str
    frames: int       # after the stride
    policy: str       # "all" or "every_n"
    overrides: tuple  # (option, value) pairs over the run's settings, sorted


def auto_keyframes(frames: int) -> tuple[str, int]:
    """Upstream's ``keyframe_interval: auto`` as our policy: every frame up to 320 frames,
    else every ceil(frames / 320)-th."""
    if frames <= AUTO_KEYFRAME_THRESHOLD:
        return "all", 1
    return "every_n", math.ceil(frames / AUTO_KEYFRAME_THRESHOLD)


def plan_benchmark(name: str, root, settings: dict) -> tuple[list[PlannedSequence], list[str]]:
    """The benchmark's sequences found under ``root`` with their settings, and one message per
    dataset with sequences missing (naming the expected layout and which are missing)."""
    if name not in BENCHMARKS:
        raise ValueError(f"--benchmark {name!r}: unknown; choose from {', '.join(BENCHMARKS)}")
    planned, missing = [], []
    for ds in BENCHMARKS[name]:
        absent = []
        for seq in ds.sequences:
            path = Path(root) / ds.folder / seq
            if not path.is_dir():
                absent.append(seq)
                continue
            try:
                dataset = open_dataset(path, ds.name, settings.get("stamps", "auto"),
                                       settings.get("fps", 30.0))
                frames = -(-len(dataset.source) // ds.stride)
            except (OSError, ValueError) as exc:
                absent.append(f"{seq} (unreadable: {exc})")
                continue
            policy, n = auto_keyframes(frames)
            overrides = {"format": ds.name, "width": ds.width, "height": ds.height,
                         "stride": ds.stride, "scale_frames": 8, "window": 64,
                         "rollover": AUTO_KEYFRAME_THRESHOLD}
            if policy == "every_n":
                overrides["keyframe_n"] = n
            planned.append(PlannedSequence(ds, str(path.resolve()), ds.unit_name(seq),
                                           frames, policy, tuple(sorted(overrides.items()))))
        if absent:
            found = len(ds.sequences) - len(absent)
            missing.append(f"{ds.label}: {len(absent)} of {len(ds.sequences)} sequences "
                           f"missing under {Path(root) / ds.folder} ({', '.join(absent)}); "
                           f"expected layout: {ds.layout}" +
                           ("; the dataset is left out" if not found else
                            f"; its row averages the {found} found"))
    return planned, missing


def _mean(values) -> Optional[float]:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def benchmark_rows(name: str, planned: list[PlannedSequence], rows_by_name: dict) -> list:
    """One row per dataset of the benchmark: sequences run of declared, our means over them
    (front end, and the optimised trajectory when loop closure ran), upstream's figures."""
    out = []
    for ds in BENCHMARKS[name]:
        rows = [rows_by_name[p.name] for p in planned if p.dataset is ds
                and p.name in rows_by_name]
        ok = [r for r in rows if r.get("ate_sim3_rmse") is not None]
        out.append({
            "dataset": ds.label, "sequences": f"{len(ok)}/{len(ds.sequences)}",
            "width": f"{ds.width}x{ds.height}" if ds.height else str(ds.width),
            "stride": ds.stride,
            "ate": _mean(r.get("ate_sim3_rmse") for r in ok),
            "ate_opt": _mean(r.get("opt_ate_sim3_rmse") for r in ok),
            "rpe_trans": _mean(r.get("rpe_1f_trans_rmse") for r in ok),
            "rpe_rot": _mean(r.get("rpe_1f_rot_rmse_deg") for r in ok),
            "loops": sum(r.get("loops_accepted") or 0 for r in ok) if any(
                r.get("loops_accepted") is not None for r in ok) else None,
            "published_ate": ds.published_ate, "published_rpe_trans": ds.published_rpe_trans,
            "published_rpe_rot": ds.published_rpe_rot_deg})
    return out


BENCH_COLUMNS = (
    ("dataset", "dataset"), ("sequences", "sequences run"), ("width", "width"),
    ("stride", "stride"), ("ate", "ATE ours"), ("ate_opt", "ATE ours + loops"),
    ("loops", "loops accepted"), ("published_ate", "ATE upstream"),
    ("rpe_trans", "RPE-t ours"), ("published_rpe_trans", "RPE-t upstream"),
    ("rpe_rot", "RPE-r deg ours"), ("published_rpe_rot", "RPE-r deg upstream"))


def benchmark_table(rows: list, loop_closure: bool) -> str:
    """The benchmark's table, Markdown; without loop closure its two loop columns are left
    out. Means over the sequences that ran with ground truth; upstream's as published."""
    cols = [c for c in BENCH_COLUMNS if loop_closure or c[0] not in ("ate_opt", "loops")]
    lines = ["| " + " | ".join(h for _, h in cols) + " |",
             "|" + "|".join("---" for _ in cols) + "|"]
    for row in rows:
        cells = []
        for key, _ in cols:
            v = row.get(key)
            cells.append("" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + f"\n\nupstream: {UPSTREAM_SOURCE}\n"

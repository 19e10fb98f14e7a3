"""TUM RGB-D (Sturm et al., 2012) sequence folders, as published::

    rgbd_dataset_freiburg1_xyz/
        rgb.txt           # "# ..." comments, then "1305031102.175304 rgb/1305031102.175304.png"
        rgb/*.png
        groundtruth.txt   # optional: "timestamp tx ty tz qx qy qz qw"

Stamps are rgb.txt's, in seconds with microseconds, read to integer ns exactly. Ground truth
is the pose of the RGB camera's optical frame in the motion-capture world (the benchmark's
own convention), quaternion x, y, z, w: used as is. Depth (depth.txt) is not read.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ..frame_sources import ImageListSource
from .common import (Dataset, require_auto_stamps, GroundTruth, count, line_error, make_ground_truth, parse_finite,
                     parse_seconds, read_index_lines, require_some_image)

__all__ = ["NAME", "LOOKS_FOR", "locate", "missing", "open_tum_rgbd", "read_tum_ground_truth"]

NAME = "tum_rgbd"
LOOKS_FOR = "rgb.txt"


def locate(path: Path) -> Optional[Path]:
    """The sequence folder when ``path`` is one, else None."""
    return path if (path / "rgb.txt").is_file() else None


def missing(path: Path) -> str:
    return f"{path / 'rgb.txt'} does not exist"


def read_tum_ground_truth(path: Path) -> GroundTruth:
    """groundtruth.txt -> GroundTruth; a line without 8 numbers or with a zero quaternion is
    a ValueError naming ``file:line``."""
    stamps, rows, labels = [], [], []
    for no, line in read_index_lines(path):
        fields = line.split()
        if len(fields) != 8:
            raise line_error(path, no, f"expected 8 fields (timestamp tx ty tz qx qy qz qw), "
                                       f"got {len(fields)}")
        stamps.append(parse_seconds(fields[0], path, no))
        row = parse_finite(fields[1:], path, no)
        if not any(row[3:]):
            raise line_error(path, no, "zero quaternion")
        rows.append(row)
        labels.append(f"{path}:{no}")
    from ...session.poses import tq_to_matrix  # lazily: torch
    arr = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
    return make_ground_truth(stamps, tq_to_matrix(arr[:, :3], arr[:, 3:]), labels)


def open_tum_rgbd(root: Path, *, stamps: str = "auto", fps: float = 30.0,
                  topic: Optional[str] = None) -> Dataset:
    require_auto_stamps("tum_rgbd", "rgb.txt", stamps)
    index = root / "rgb.txt"
    entries = []
    for no, line in read_index_lines(index):
        fields = line.split()
        if len(fields) != 2:
            raise line_error(index, no, f"expected 'timestamp filename', got "
                                        f"{len(fields)} fields")
        entries.append((parse_seconds(fields[0], index, no), root / fields[1]))
    source = ImageListSource(entries, index=str(index))
    require_some_image(source.entries, index)
    gt_file = root / "groundtruth.txt"
    gt = read_tum_ground_truth(gt_file) if gt_file.is_file() else None
    desc = (f"TUM RGB-D {root.resolve().name}: {count(len(entries), 'image')}, "
            + (f"ground truth {count(len(gt.stamps_ns), 'pose')}" if gt is not None
               else "no ground truth (no groundtruth.txt)"))
    return Dataset(source, gt, NAME, desc, root)

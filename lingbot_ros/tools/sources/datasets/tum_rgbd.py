"""TUM RGB-D (Sturm et al., 2012) sequence folders, as published::

    rgbd_dataset_freiburg1_xyz/
        rgb.txt           # "# ..." comments, then "1305031102.175304 rgb/1305031102.175304.png"
        rgb/*.png
        groundtruth.txt   # optional: "timestamp tx ty tz qx qy qz qw"

Stamps are rgb.txt's, in seconds with microseconds, read to integer ns exactly. Ground truth
is the pose of the RGB camera's optical frame in the motion-capture world (the benchmark's
own convention), quaternion x, y, z, w: used as is.

Depth: ``depth.txt`` (``timestamp filename``, its own stamps) lists 16-bit PNGs of 5000 units
per metre (0 = no reading), registered to the RGB camera: read as ``Dataset.depth``
(:class:`~.depth.DepthFileList`, 32FC1 metres), associated by nearest stamp (for
``--scale depth``). An absent or empty depth.txt: no depth.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ....geometry import tq_to_matrix
from ..files import ImageListSource
from .common import (Dataset, GroundTruth, count, line_error, make_ground_truth, parse_finite,
                     parse_seconds, read_index_lines, require_auto_stamps, require_some_image)
from .depth import DepthFileList, read_tum_depth

__all__ = ["NAME", "LOOKS_FOR", "locate", "missing", "open_tum_rgbd", "read_tum_ground_truth",
           "read_stamped_list"]

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
    arr = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
    return make_ground_truth(stamps, tq_to_matrix(arr[:, :3], arr[:, 3:]), labels)


def open_tum_rgbd(root: Path, *, stamps: str = "auto", fps: float = 30.0,
                  topic: Optional[str] = None) -> Dataset:
    require_auto_stamps("tum_rgbd", "rgb.txt", stamps)
    index = root / "rgb.txt"
    entries = read_stamped_list(index, root)
    source = ImageListSource(entries, index=str(index))
    require_some_image(source.entries, index)
    gt_file = root / "groundtruth.txt"
    gt = read_tum_ground_truth(gt_file) if gt_file.is_file() else None
    depth_index = root / "depth.txt"
    depth_entries = read_stamped_list(depth_index, root) if depth_index.is_file() else []
    depth = (DepthFileList(depth_entries, read_tum_depth, f"TUM depth.txt: "
                           f"{count(len(depth_entries), 'depth image')}, 5000 per metre")
             if depth_entries else None)
    desc = (f"TUM RGB-D {root.resolve().name}: {count(len(entries), 'image')}, "
            + (f"ground truth {count(len(gt.stamps_ns), 'pose')}" if gt is not None
               else "no ground truth (no groundtruth.txt)")
            + (f", {count(len(depth_entries), 'depth image')}" if depth is not None else ""))
    return Dataset(source, gt, NAME, desc, root, depth=depth)


def read_stamped_list(index: Path, root: Path) -> list[tuple[int, Path]]:
    """rgb.txt / depth.txt -> ``[(stamp_ns, root / filename)]``; a line that is not
    ``timestamp filename`` is a ValueError naming ``file:line``."""
    entries = []
    for no, line in read_index_lines(index):
        fields = line.split()
        if len(fields) != 2:
            raise line_error(index, no, f"expected 'timestamp filename', got "
                                        f"{len(fields)} fields")
        entries.append((parse_seconds(fields[0], index, no), root / fields[1]))
    return entries

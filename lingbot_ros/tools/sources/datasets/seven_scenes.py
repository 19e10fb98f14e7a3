"""Microsoft 7-Scenes (Shotton et al., 2013) sequence folders, as published::

    chess/seq-01/
        frame-000000.color.png   # the images read
        frame-000000.depth.png   # 16-bit millimetres, 65535 = no reading
        frame-000000.pose.txt    # 4x4 camera-to-world, whitespace separated

There are no timestamps: frame n is stamped ``round(n * 1e9 / fps)`` (30 Hz by default, the
Kinect's rate; ``fps=`` / ``--fps`` sets it), from the number in its name, so a gap in the
numbering keeps its place on the timeline. The frames are the union of the numbers that have
a colour image or a pose: a pose without its image counts as a missing image.

Ground truth: the pose files, camera-to-world of the (colour) camera in the scene's world,
used as is, at the stamps of their frame numbers. A pose file holding a NaN or an infinity
(no pose for that frame) is left out of the ground truth and logged.

Depth: the ``frame-N.depth.png`` files (16-bit millimetres, 65535 = no reading), at their
frame's stamp, as ``Dataset.depth`` (32FC1 metres) for ``--scale depth``. Note: the
published 7-Scenes depth is *not* registered to the colour camera (the Kinect's depth
camera sits beside it): a depth scale from it is approximate.
"""
from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Optional

import numpy as np

from ..files import ImageListSource
from .common import (Dataset, count, line_error, make_ground_truth, read_index_lines,
                     require_some_image)
from .depth import DepthFileList, read_seven_scenes_depth

__all__ = ["NAME", "LOOKS_FOR", "locate", "missing", "open_seven_scenes", "read_pose_file"]

NAME = "seven_scenes"
LOOKS_FOR = "frame-XXXXXX.color.png"
log = logging.getLogger("lingbot_ros.datasets")
_FRAME = re.compile(r"frame-(\d+)\.(color\.png|pose\.txt|depth\.png)")


def _has_color(path: Path) -> bool:
    return path.is_dir() and any(_FRAME.fullmatch(p.name) and p.name.endswith(".color.png")
                                 for p in path.iterdir())


def locate(path: Path) -> Optional[Path]:
    return path if _has_color(path) else None


def missing(path: Path) -> str:
    return f"no frame-XXXXXX.color.png files in {path}"


def read_pose_file(path: Path) -> Optional[np.ndarray]:
    """A frame-XXXXXX.pose.txt -> float64 (4, 4), or None when it holds a NaN/infinity.
    Text that is not 16 numbers is a ValueError naming ``file:line``."""
    values = []
    for no, line in read_index_lines(path):
        for f in line.split():
            try:
                values.append(float(f))
            except ValueError:
                raise line_error(path, no, f"{f!r} is not a number") from None
        if len(values) > 16:
            raise line_error(path, no, "more than 16 numbers (a 4x4 pose)")
    if len(values) != 16:
        raise ValueError(f"{path}: expected 16 numbers (a 4x4 pose), got {len(values)}")
    if not all(math.isfinite(v) for v in values):
        return None
    return np.asarray(values, dtype=np.float64).reshape(4, 4)


def open_seven_scenes(seq: Path, *, stamps: str = "auto", fps: float = 30.0,
                      topic: Optional[str] = None) -> Dataset:
    if stamps not in ("auto", "fps"):
        raise ValueError(f"seven_scenes frames have no stamps, they are frame number / fps: "
                         f"stamps must be 'auto' or 'fps', got {stamps!r}")
    if not (isinstance(fps, (int, float)) and math.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be a positive number, got {fps!r}")
    colors, poses, depths = {}, {}, {}
    kinds = {"color.png": colors, "pose.txt": poses, "depth.png": depths}
    for p in seq.iterdir():
        m = _FRAME.fullmatch(p.name)
        if m and p.is_file():
            kinds[m.group(2)][int(m.group(1))] = p
    numbers = sorted(set(colors) | set(poses))

    def stamp(n: int) -> int:
        return round(n * 1e9 / fps)

    entries = [(stamp(n), colors.get(n, seq / f"frame-{n:06d}.color.png")) for n in numbers]
    source = ImageListSource(entries, index=f"{seq} (frame-XXXXXX.pose.txt)")
    require_some_image(source.entries, seq)
    gt_stamps, gt_poses, labels, invalid = [], [], [], 0
    for n in sorted(poses):
        pose = read_pose_file(poses[n])
        if pose is None:
            invalid += 1
            log.warning("%s: not finite, left out of the ground truth", poses[n])
            continue
        gt_stamps.append(stamp(n))
        gt_poses.append(pose)
        labels.append(str(poses[n]))
    gt = (make_ground_truth(gt_stamps, np.asarray(gt_poses).reshape(-1, 4, 4), labels)
          if gt_poses else None)
    gt_text = (f"ground truth {count(len(gt_poses), 'pose')}" if gt is not None
               else "no ground truth (no finite frame-XXXXXX.pose.txt)")
    if invalid:
        gt_text += f" ({invalid} not finite, left out)"
    depth = (DepthFileList([(stamp(n), p) for n, p in depths.items()],
                           read_seven_scenes_depth,
                           f"7-Scenes depth: {count(len(depths), 'depth image')}, mm")
             if depths else None)
    desc = (f"7-Scenes {seq.resolve().parent.name}/{seq.resolve().name}: "
            f"{count(len(entries), 'image')} at {fps:g} fps, {gt_text}"
            + (f", {count(len(depths), 'depth image')}" if depths else ""))
    return Dataset(source, gt, NAME, desc, seq, depth=depth)

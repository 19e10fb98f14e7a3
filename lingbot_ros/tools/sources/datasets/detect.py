"""The front door: :func:`open_dataset` and :func:`detect_format` (see the package
docstring)."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

from ..frame import PathLike
from . import bag, euroc, folder, kitti, seven_scenes, tum_rgbd, video
from .common import Dataset

__all__ = ["FORMATS", "STAMPS", "detect_format", "open_dataset"]

FORMATS = ("tum_rgbd", "euroc", "kitti", "seven_scenes", "folder", "video", "bag")
STAMPS = ("auto", "filename", "fps", "header", "bag")  # which apply depends on the format

LAYOUTS = {m.NAME: m for m in (tum_rgbd, euroc, kitti, seven_scenes, folder, video, bag)}
OPENERS = {"tum_rgbd": tum_rgbd.open_tum_rgbd, "euroc": euroc.open_euroc,
           "kitti": kitti.open_kitti, "seven_scenes": seven_scenes.open_seven_scenes,
           "folder": folder.open_folder, "video": video.open_video, "bag": bag.open_bag}
# Auto-detection order: the published layouts (each has a file that names it) before the
# bag, the bag before a plain folder of images, and any other file is a video.
DETECT_ORDER = ("tum_rgbd", "euroc", "kitti", "seven_scenes", "bag", "folder", "video")
INDEX_SUFFIXES = (".txt", ".csv", ".yaml")  # rgb.txt, data.csv, ...: never read as a video
assert set(FORMATS) == set(LAYOUTS) == set(OPENERS) == set(DETECT_ORDER)


def detect_format(path: PathLike) -> tuple[str, Path]:
    """``(format, root)`` of the layout at ``path`` (root: the folder the layout is read
    from, e.g. ``mav0`` for EuRoC). FileNotFoundError when nothing is there; ValueError
    naming every format and what was looked for when no layout matches."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"{p} does not exist")
    if p.is_file() and p.suffix.lower() in INDEX_SUFFIXES:
        raise ValueError(f"{p} is an index file, not a sequence: pass the folder of the "
                         f"sequence ({p.parent}), or format= one of {', '.join(FORMATS)}")
    for name in DETECT_ORDER:
        root = LAYOUTS[name].locate(p)
        if root is not None:
            return name, root
    looked = "; ".join(f"{n}: {LAYOUTS[n].LOOKS_FOR}" for n in DETECT_ORDER if n != "video")
    raise ValueError(f"cannot tell the dataset format of {p}: looked for ({looked}), found "
                     f"none (a file would be read as a video). Pass format= one of "
                     f"{', '.join(FORMATS)}")


def open_dataset(path: PathLike, format: str = "auto", stamps: str = "auto",
                 fps: float = 30.0, topic: Optional[str] = None,
                 depth_topic: Optional[str] = None) -> Dataset:
    """Open a sequence as published: its frames with its own stamps and its ground truth
    converted to the read camera's camera-to-world poses. See the package docstring.
    ``depth_topic``: a bag's aligned depth topic (bags only; ValueError elsewhere)."""
    if format != "auto" and format not in FORMATS:
        raise ValueError(f"unknown format {format!r}: one of auto, {', '.join(FORMATS)}")
    if stamps not in STAMPS:
        raise ValueError(f"unknown stamps {stamps!r}: one of {', '.join(STAMPS)}")
    if not (isinstance(fps, (int, float)) and not isinstance(fps, bool)
            and math.isfinite(fps) and fps > 0):
        raise ValueError(f"fps must be a positive number, got {fps!r}")
    p = Path(path)
    if format == "auto":
        format, root = detect_format(p)
    else:
        if not p.exists():
            raise FileNotFoundError(f"{p} does not exist")
        root = LAYOUTS[format].locate(p)
        if root is None:
            raise ValueError(f"{p} is not a {format} dataset: "
                             f"{LAYOUTS[format].missing(p)}")
    if format == "bag":
        return OPENERS[format](root, stamps=stamps, fps=fps, topic=topic,
                               depth_topic=depth_topic)
    if depth_topic is not None:
        raise ValueError(f"a depth topic ({depth_topic}) applies to bags only, not to a "
                         f"{format} sequence")
    return OPENERS[format](root, stamps=stamps, fps=fps, topic=topic)

"""A video file (``--format video``), read by
:class:`lingbot_ros.tools.sources.files.VideoSource`: stamps are the container's presentation
times (``stamps='auto'``), or ``round(i * 1e9 / fps)`` with ``stamps='fps'``. No ground truth.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..files import VideoSource
from .common import Dataset, count

__all__ = ["NAME", "LOOKS_FOR", "locate", "missing", "open_video"]

NAME = "video"
LOOKS_FOR = "a video file"


def locate(path: Path) -> Optional[Path]:
    return path if path.is_file() else None


def missing(path: Path) -> str:
    return f"{path} is not a file"


def open_video(path: Path, *, stamps: str = "auto", fps: float = 30.0,
               topic: Optional[str] = None) -> Dataset:
    if stamps not in ("auto", "fps"):
        raise ValueError(f"video stamps must be 'auto' (the container's) or 'fps', got "
                         f"{stamps!r}")
    source = VideoSource(path, fps if stamps == "fps" else None)
    frames = (count(source.frame_count, "frame") + " announced" if source.frame_count
              else "frame count unknown")
    how = (f"stamps at {source.fps:g} fps" if stamps == "fps"
           else f"container stamps ({source.fps:g} fps nominal)")
    return Dataset(source, None, NAME, f"video {path.name}: {frames}, {how}", path)

"""A rosbag2 (sqlite3 or mcap directory or storage file) or ROS 1 bag (``--format bag``),
read by :class:`lingbot_ros.tools.sources.bag.BagSource`: one image topic (``topic=None``
picks the only one whose name does not say ``depth``), stamps from the message headers
(``stamps='auto'`` or ``'header'``) or the record times (``'bag'``). No ground truth.

Depth (``Dataset.depth``, for ``--scale depth``): the ``depth_topic`` given, else
:data:`~lingbot_ros.tools.sources.bag.DEFAULT_DEPTH_TOPIC`
(``/camera/aligned_depth_to_color/image_raw``) when the bag has it; 16UC1/mono16 mm or 32FC1
m, header stamps, read beside the colour frames (``BagDepthStream``).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

from ..bag import DEFAULT_DEPTH_TOPIC, BagDepthStream, BagSource, list_image_topics
from .common import Dataset

__all__ = ["NAME", "LOOKS_FOR", "BAG_SUFFIXES", "locate", "missing", "open_bag"]

NAME = "bag"
LOOKS_FOR = "metadata.yaml or a .db3/.mcap/.bag file"
BAG_SUFFIXES = (".db3", ".mcap", ".bag")


def locate(path: Path) -> Optional[Path]:
    if (path.is_dir() and (path / "metadata.yaml").is_file()) or (
            path.is_file() and path.suffix.lower() in BAG_SUFFIXES):
        return path
    return None


def missing(path: Path) -> str:
    if path.is_dir():
        return f"{path / 'metadata.yaml'} does not exist"
    return f"{path} is not a {'/'.join(BAG_SUFFIXES)} file"


def open_bag(path: Path, *, stamps: str = "auto", fps: float = 30.0,
             topic: Optional[str] = None, depth_topic: Optional[str] = None) -> Dataset:
    if stamps not in ("auto", "header", "bag"):
        raise ValueError(f"bag stamps must be 'auto', 'header' or 'bag', got {stamps!r}")
    source = BagSource(path, topic, "header" if stamps == "auto" else stamps)
    how = "header stamps" if source.header_stamps else "record times"
    desc = f"bag {path.name}: topic {source.topic} ({source.msgtype}), {how}"
    if source.truncated:
        desc += f", TRUNCATED: the {len(source)} whole messages before the cut are read"
    if depth_topic is None and DEFAULT_DEPTH_TOPIC in list_image_topics(path):
        depth_topic = DEFAULT_DEPTH_TOPIC
    depth = BagDepthStream(path, depth_topic) if depth_topic else None
    if depth is not None:
        desc += f", {depth.description}"
    return Dataset(source, None, NAME, desc, path, depth=depth)

"""What every dataset layout shares: :class:`Dataset`, :class:`GroundTruth`, the index-file
reading helpers (every bad line is a ValueError naming ``file:line``) and the checks that
make ground truth sorted, unique and rigid (:func:`lingbot_ros.geometry.check_rigid`).

Ground truth is converted once, when a dataset is opened: float64 camera-to-world poses
(N, 4, 4) of the camera whose images are read, in the dataset's world frame, sorted by stamp,
no stamp twice, with the pose helpers of :mod:`lingbot_ros.geometry` (numpy only).
"""
from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, NamedTuple, Optional, Sequence

import numpy as np

from ....geometry import check_rigid, format_stamp, parse_stamp, write_tum
from ..depth_stream import DepthStream
from ..frame import FrameSource, PathLike

__all__ = ["Dataset", "GroundTruth", "RIGID_TOLERANCE", "count",
           "line_error", "make_ground_truth", "parse_finite", "parse_nanoseconds",
           "parse_seconds", "read_index_lines", "require_auto_stamps", "require_some_image",
           "write_ground_truth_tum"]

log = logging.getLogger("lingbot_ros.datasets")

# Published poses are printed with 6 to 12 significant digits: their rotations are
# orthonormal to about 1e-6. A rotation further off than this is not a pose (a wrongly
# parsed file, a scale in the matrix). The last row must be [0 0 0 1] to 1e-9
# (lingbot_ros.geometry.check_rigid's default).
RIGID_TOLERANCE = 1e-3


class GroundTruth(NamedTuple):
    """``(stamps_ns, poses)``: int64 (N,), strictly increasing; float64 (N, 4, 4) rigid
    camera-to-world poses of the camera whose images are read, in the dataset's world."""

    stamps_ns: np.ndarray
    poses: np.ndarray


@dataclass(frozen=True)
class Dataset:
    """An opened sequence: ``source`` yields its frames with its own stamps; ``ground_truth``
    is a :class:`GroundTruth` (a 2-tuple) or None; ``format`` one of ``FORMATS``;
    ``description`` one line for logs; ``path`` the sequence folder (or file) opened;
    ``depth`` the aligned sensor depth (a :class:`~.depth.DepthStream`) where the dataset has
    it, else None; ``camera_height_m`` the camera's height over the ground where the dataset
    states it (KITTI: 1.65 m), else None."""

    source: FrameSource
    ground_truth: Optional[GroundTruth]
    format: str
    description: str
    path: Path
    depth: Optional[DepthStream] = None
    camera_height_m: Optional[float] = None


def require_auto_stamps(format: str, source: str, stamps: str) -> None:
    """Layouts whose index file carries the stamps take no ``stamps`` choice."""
    if stamps != "auto":
        raise ValueError(f"{format} stamps come from {source}: stamps must be 'auto', got "
                         f"{stamps!r}")


def count(n: int, what: str) -> str:
    """``count(2431, 'pose')`` -> ``'2,431 poses'``."""
    return f"{n:,} {what}" + ("" if n == 1 else "s")


def line_error(path: PathLike, line: int, message: str) -> ValueError:
    return ValueError(f"{path}:{line}: {message}")


def read_index_lines(path: Path) -> Iterator[tuple[int, str]]:
    """``(line number, stripped text)`` of a text index file; blank lines and ``#`` comment
    lines are left out (a UTF-8 byte-order mark and CRLF line ends are accepted)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError as err:
        raise ValueError(f"{path}: not a UTF-8 text file ({err.reason} at byte "
                         f"{err.start})") from None
    for no, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            yield no, line


def parse_seconds(text: str, path: PathLike, line: int) -> int:
    """Decimal seconds (``1305031102.175304``, ``1.036633e-01``) -> integer ns, exactly
    (:func:`lingbot_ros.geometry.parse_stamp`); ValueError naming ``file:line`` else."""
    try:
        return parse_stamp(text)
    except ValueError:
        raise line_error(path, line, f"{text!r} is not a time in seconds") from None


_INTEGER = re.compile(r"\d+")


def parse_nanoseconds(text: str, path: PathLike, line: int) -> int:
    """An integer count of nanoseconds (EuRoC's ``1403636579763555584``) -> int."""
    text = text.strip()
    if not _INTEGER.fullmatch(text):
        raise line_error(path, line, f"{text!r} is not a time in integer nanoseconds")
    return int(text)


def parse_finite(fields: Sequence[str], path: PathLike, line: int) -> list[float]:
    """Numbers of one line -> floats; ValueError naming ``file:line`` for text that is no
    number, or a NaN / infinity."""
    out = []
    for f in fields:
        try:
            v = float(f)
        except ValueError:
            raise line_error(path, line, f"{f!r} is not a number") from None
        if not math.isfinite(v):
            raise line_error(path, line, f"{f!r} is not a finite number")
        out.append(v)
    return out


def make_ground_truth(stamps_ns: Sequence[int], poses, labels: Sequence[str]
                      ) -> GroundTruth:
    """Stamps and camera-to-world poses (N, 4, 4) -> :class:`GroundTruth` sorted by stamp
    (stable). Poses must be rigid to ``RIGID_TOLERANCE`` (``geometry.check_rigid``: a bad
    one is named by its label); a stamp given twice is a ValueError naming both lines.
    ``labels[i]`` says where pose i was read (``file:line``)."""
    stamps = np.asarray(stamps_ns, dtype=np.int64).reshape(-1)
    m = np.asarray(poses, dtype=np.float64).reshape(-1, 4, 4)
    if len(stamps) != len(m) or len(labels) != len(m):
        raise ValueError(f"{len(stamps)} stamps, {len(m)} poses, {len(labels)} labels")
    check_rigid(m, "ground truth poses", tol=RIGID_TOLERANCE, batch=True, labels=labels)
    order = np.argsort(stamps, kind="stable")
    s = stamps[order]
    dup = np.flatnonzero(np.diff(s) == 0)
    if dup.size:
        i = int(dup[0])
        raise ValueError(f"ground truth has stamp {format_stamp(int(s[i]))} s twice "
                         f"({labels[order[i]]} and {labels[order[i + 1]]}); "
                         f"{dup.size} duplicate stamp(s) in all")
    return GroundTruth(s, np.ascontiguousarray(m[order]))


def require_some_image(entries: Sequence[tuple[int, Path]], index: PathLike) -> None:
    """FileNotFoundError when none of the images an index lists exists (a wrong folder, an
    archive not unpacked); some missing ones are only skipped, while reading."""
    if not any(p.is_file() for _, p in entries):
        first = entries[0][1] if entries else "?"
        raise FileNotFoundError(f"none of the {count(len(entries), 'image')} {index} lists "
                                f"exists (the first: {first})")


def write_ground_truth_tum(dataset: Dataset, path: PathLike) -> Path:
    """Write ``dataset.ground_truth`` as a TUM file (``timestamp tx ty tz qx qy qz qw``, the
    stamps written exactly from integer ns) with :func:`lingbot_ros.geometry.write_tum`;
    atomic. ValueError when the dataset has no ground truth."""
    if dataset.ground_truth is None:
        raise ValueError(f"{dataset.format} dataset {dataset.path} has no ground truth")
    stamps, poses = dataset.ground_truth
    return write_tum(path, stamps, poses)

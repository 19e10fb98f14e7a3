"""Coloured point clouds as binary PLY files (MeshLab, CloudCompare, Open3D read them).

Binary little-endian rather than ASCII: a 2M-point map is 30 MB instead of ~60 MB and is
written with one ``tobytes`` instead of formatting millions of numbers. Written atomically
(:func:`~lingbot_ros.geometry.atomic_file.write_atomic`), like the TUM trajectories.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .atomic_file import PathLike, write_atomic

__all__ = ["PLY_HEADER", "write_ply", "read_ply", "read_ply_comments"]

# How every PLY file we write starts: how a file is recognised as ours (write_ply replaces
# no other file). The comment is a header line PLY readers skip.
_OURS = "lingbot_ros point map"
PLY_HEADER = f"ply\nformat binary_little_endian 1.0\ncomment {_OURS}\n".encode("ascii")

# One vertex as written: 3 x float32 + 3 x uint8, packed (15 bytes, no padding).
_VERTEX_DTYPE = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"),
                          ("red", "u1"), ("green", "u1"), ("blue", "u1")])


def write_ply(path: PathLike, xyz, rgb, comments: Sequence[str] = ()) -> Path:
    """Write points ``xyz`` (N, 3) float and colours ``rgb`` (N, 3) uint8 as a binary
    little-endian PLY file (``x y z`` float, ``red green blue`` uchar); returns the path.

    Atomic and never through a link: see :func:`write_atomic`. The file starts with
    ``PLY_HEADER``; an existing target is replaced only if it is a regular file that starts
    with it too (one we wrote): anything else is refused with FileExistsError. Raises
    ValueError for wrong shapes or dtypes and for coordinates that are not finite as float32 (PLY readers choke on them).
    ``comments``: header ``comment`` lines (e.g. ``units: m``), ASCII, one line each."""
    for c in comments:
        if not str(c).isascii() or "\n" in str(c) or "\r" in str(c):
            raise ValueError(f"a PLY comment must be one line of ASCII: {c!r}")
    xyz = np.asarray(xyz)
    rgb = np.asarray(rgb)
    if xyz.ndim != 2 or xyz.shape[1] != 3:
        raise ValueError(f"xyz must have shape (N, 3), got {xyz.shape}")
    if rgb.shape != xyz.shape:
        raise ValueError(f"rgb must have shape {xyz.shape} like xyz, got {rgb.shape}")
    if xyz.dtype.kind != "f":
        raise ValueError(f"xyz must be a float array, got dtype {xyz.dtype}")
    if rgb.dtype != np.uint8:  # no silent wrap-around of 0..1 floats or 16-bit colours
        raise ValueError(f"rgb must be uint8, got dtype {rgb.dtype}")
    with np.errstate(over="ignore"):  # float64 beyond float32 -> inf: refused just below
        xyz32 = xyz.astype("<f4")
    if not np.isfinite(xyz32).all():
        raise ValueError("xyz contains non-finite values (as float32)")
    vertices = np.empty(len(xyz), _VERTEX_DTYPE)  # (N,) records of 15 bytes
    for i, name in enumerate("xyz"):
        vertices[name] = xyz32[:, i]
    for i, name in enumerate(("red", "green", "blue")):
        vertices[name] = rgb[:, i]
    header = (PLY_HEADER.decode("ascii")
              + "".join(f"comment {c}\n" for c in comments) +
              f"element vertex {len(vertices)}\n"
              "property float x\nproperty float y\nproperty float z\n"
              "property uchar red\nproperty uchar green\nproperty uchar blue\n"
              "end_header\n").encode("ascii")
    return write_atomic(path, header + vertices.tobytes(), replaces=PLY_HEADER)


def read_ply(path: PathLike) -> tuple[np.ndarray, np.ndarray]:
    """Read back what :func:`write_ply` wrote: ``(xyz (N, 3) float32, rgb (N, 3) uint8)``."""
    data = Path(path).read_bytes()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    header = data[:end].decode("ascii").splitlines()
    if "format binary_little_endian 1.0" not in header:
        raise ValueError(f"{path}: not a binary little-endian PLY")
    count = int(next(line.split()[-1] for line in header if line.startswith("element vertex")))
    vertices = np.frombuffer(data, dtype=_VERTEX_DTYPE, count=count, offset=end)
    xyz = np.stack([vertices[name] for name in "xyz"], axis=1)
    rgb = np.stack([vertices[name] for name in ("red", "green", "blue")], axis=1)
    return xyz, rgb


def read_ply_comments(path: PathLike) -> list[str]:
    """The ``comment`` lines of a PLY file's header, without the ``comment `` keyword (our
    ``PLY_HEADER``'s is not one of them)."""
    with open(path, "rb") as f:
        head = b""
        while b"end_header\n" not in head:
            block = f.read(4096)
            if not block:
                raise ValueError(f"{path}: no end_header in the PLY header")
            head += block
    text = head[:head.index(b"end_header\n")].decode("ascii", errors="replace")
    return [line[len("comment "):] for line in text.splitlines()
            if line.startswith("comment ") and line != f"comment {_OURS}"]

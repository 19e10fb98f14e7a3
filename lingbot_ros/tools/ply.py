"""PLY point clouds: binary little-endian, float xyz + uchar rgb (readable by Open3D, MeshLab)."""
from __future__ import annotations

import numpy as np

_VERTEX = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"),
                    ("red", "u1"), ("green", "u1"), ("blue", "u1")])


def write_ply(path, xyz: np.ndarray, rgb: np.ndarray) -> None:
    """Binary little-endian PLY with float xyz and uchar rgb per vertex."""
    vertex = np.empty(len(xyz), dtype=_VERTEX)
    vertex["x"], vertex["y"], vertex["z"] = xyz[:, 0], xyz[:, 1], xyz[:, 2]
    vertex["red"], vertex["green"], vertex["blue"] = rgb[:, 0], rgb[:, 1], rgb[:, 2]
    header = ("ply\nformat binary_little_endian 1.0\n"
              f"element vertex {len(xyz)}\n"
              "property float x\nproperty float y\nproperty float z\n"
              "property uchar red\nproperty uchar green\nproperty uchar blue\nend_header\n")
    with open(path, "wb") as f:
        f.write(header.encode("ascii"))
        f.write(vertex.tobytes())


def read_ply(path) -> tuple[np.ndarray, np.ndarray]:
    """Read back what :func:`write_ply` wrote: ``(xyz (N, 3) float32, rgb (N, 3) uint8)``."""
    data = open(path, "rb").read()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    header = data[:end].decode("ascii").splitlines()
    if "format binary_little_endian 1.0" not in header:
        raise ValueError(f"{path}: not a binary little-endian PLY")
    count = int(next(line.split()[-1] for line in header if line.startswith("element vertex")))
    vertex = np.frombuffer(data, dtype=_VERTEX, count=count, offset=end)
    xyz = np.stack([vertex["x"], vertex["y"], vertex["z"]], axis=1)
    rgb = np.stack([vertex["red"], vertex["green"], vertex["blue"]], axis=1)
    return xyz, rgb

"""KITTI odometry (Geiger et al., 2012) sequences, as published::

    dataset/sequences/00/        # the path given
        image_2/000000.png ...   # left colour camera (camera 2): the images read
        times.txt                # seconds from the sequence start, one line per image
        calib.txt                # "P0: 12 numbers" ... "P3: ...", "Tr: ..." (row-major 3x4)
    dataset/poses/00.txt         # ground truth, sequences 00-10 only: 12 numbers per line

Stamps: times.txt's seconds (``1.036633e-01``) read to integer ns exactly; image i is
``image_2/{i:06d}.png``.

Ground truth: poses/XX.txt line i is the 3x4 row-major pose of camera 0 (left grey) at image
i in the frame of camera 0 at image 0 (the dataset's world). The images read are camera 2's,
so the poses are moved to camera 2 through calib.txt.

The sign. All cameras are rectified to camera 0's orientation, and ``P_i = K_i [I | t_i]``
projects a point X given in (rectified) camera-0 coordinates: ``P_i X = K_i (X + t_i)``, so
camera i's coordinates are ``X_i = X_0 + t_i``, i.e. ``T_ci_c0 = [I | t_i]``, and camera i's
centre in camera-0 coordinates is ``-t_i``. ``t_i = K_i^-1 P_i[:, 3]`` (upper-triangular
back-substitution: t_z = P[2,3] / P[2,2], then t_y, then t_x; with KITTI's P2 mostly
``t_x = P2[0,3] / P2[0,0]``). In KITTI, P2[0,3] = +44.86 and fx = 718.9: t_x = +0.062 m, so
camera 2 sits 6 cm to the *left* (-x) of camera 0, as in the rig's drawing (and P1's
t_x = -0.54 m puts camera 1, the right grey camera, 54 cm to the right). Hence::

    T_c0_c2 = [I | t_0 - t_2]      (t_0 = 0 for KITTI's P0)
    T_w_c2  = T_w_c0 @ T_c0_c2

Published poses are used as read (checked rigid within RIGID_TOLERANCE).

Camera height: the cameras sit 1.65 m over the road (the KITTI setup's drawing), given as
``Dataset.camera_height_m`` for ``--scale camera_height`` without a height.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Optional

import numpy as np

from ....geometry import check_rigid
from ..files import IMAGE_EXTENSIONS, ImageListSource
from .common import (RIGID_TOLERANCE, Dataset, count, line_error, make_ground_truth,
                     parse_finite, parse_seconds, read_index_lines, require_auto_stamps,
                     require_some_image)

__all__ = ["NAME", "LOOKS_FOR", "CAMERA", "CAMERA_HEIGHT_M", "locate", "missing", "open_kitti", "read_calib",
           "camera_offset", "T_c0_camera"]

NAME = "kitti"
LOOKS_FOR = "image_2/ and times.txt"
CAMERA = 2  # image_2: the left colour camera
CAMERA_HEIGHT_M = 1.65  # the cameras' height over the road (the KITTI setup)
log = logging.getLogger("lingbot_ros.datasets")


def locate(path: Path) -> Optional[Path]:
    ok = (path / f"image_{CAMERA}").is_dir() and (path / "times.txt").is_file()
    return path if ok else None


def missing(path: Path) -> str:
    gone = [str(p) for p in (path / f"image_{CAMERA}", path / "times.txt") if not p.exists()]
    return f"{' and '.join(gone) or 'image_2/ or times.txt'} does not exist"


def read_calib(path: Path) -> dict[str, np.ndarray]:
    """calib.txt -> ``{"P0": (3, 4), ...}`` (every ``KEY: 12 numbers`` line)."""
    if not path.is_file():
        raise ValueError(f"{path} does not exist: its P0/P{CAMERA} place camera {CAMERA} "
                         f"relative to camera 0, needed to convert the ground truth")
    out = {}
    for no, line in read_index_lines(path):
        key, sep, rest = line.partition(":")
        if not sep:
            raise line_error(path, no, "expected 'KEY: 12 numbers'")
        values = parse_finite(rest.split(), path, no)
        if len(values) != 12:
            raise line_error(path, no, f"{key.strip()}: expected 12 numbers (3x4), got "
                                       f"{len(values)}")
        out[key.strip()] = np.asarray(values, dtype=np.float64).reshape(3, 4)
    return out


def camera_offset(P: np.ndarray, where: str) -> np.ndarray:
    """``t`` of a rectified projection ``P = K [I | t]`` (K upper triangular), by
    back-substitution: camera coordinates are ``X_cam = X_ref + t``."""
    P = np.asarray(P, dtype=np.float64)
    k = P[:, :3]
    if k[1, 0] != 0 or k[2, 0] != 0 or k[2, 1] != 0 or not (k[0, 0] > 0 and k[1, 1] > 0
                                                             and k[2, 2] > 0):
        raise ValueError(f"{where} is not a rectified projection K [I | t] (K upper "
                         f"triangular with a positive diagonal): {P.tolist()}")
    tz = P[2, 3] / k[2, 2]
    ty = (P[1, 3] - k[1, 2] * tz) / k[1, 1]
    tx = (P[0, 3] - k[0, 1] * ty - k[0, 2] * tz) / k[0, 0]
    return np.array([tx, ty, tz])


def T_c0_camera(calib: dict[str, np.ndarray], camera: int = CAMERA,
                where: str = "calib.txt") -> np.ndarray:
    """Pose of ``camera`` in camera 0's frame: ``[I | t_0 - t_camera]`` (module docstring)."""
    for key in ("P0", f"P{camera}"):
        if key not in calib:
            raise ValueError(f"{where}: no {key} line")
    T = np.eye(4)
    T[:3, 3] = (camera_offset(calib["P0"], f"{where}: P0")
                - camera_offset(calib[f"P{camera}"], f"{where}: P{camera}"))
    return T


def read_poses(path: Path, stamps: list[int], T_c0_cam: np.ndarray):
    poses, labels = [], []
    for no, line in read_index_lines(path):
        values = parse_finite(line.split(), path, no)
        if len(values) != 12:
            raise line_error(path, no, f"expected 12 numbers (3x4 row-major pose), got "
                                       f"{len(values)}")
        poses.append(values + [0.0, 0.0, 0.0, 1.0])
        labels.append(f"{path}:{no}")
    T_w_c0 = np.asarray(poses, dtype=np.float64).reshape(-1, 4, 4)
    check_rigid(T_w_c0, f"{path} poses", tol=RIGID_TOLERANCE, batch=True,
                labels=labels)  # before the count: a bad line is named
    if len(poses) != len(stamps):
        raise ValueError(f"{path} has {count(len(poses), 'pose')} but times.txt "
                         f"{count(len(stamps), 'time')}: one pose per image expected")
    return make_ground_truth(stamps, T_w_c0 @ T_c0_cam, labels)


def open_kitti(seq: Path, *, stamps: str = "auto", fps: float = 30.0,
               topic: Optional[str] = None) -> Dataset:
    require_auto_stamps("kitti", "times.txt", stamps)
    times = seq / "times.txt"
    image_dir = seq / f"image_{CAMERA}"
    by_stem = {}
    for p in sorted(image_dir.iterdir()):
        if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS:
            by_stem.setdefault(p.stem, p)
    stamps_ns = []
    for no, line in read_index_lines(times):
        fields = line.split()
        if len(fields) != 1:
            raise line_error(times, no, f"expected one time in seconds, got "
                                        f"{len(fields)} fields")
        stamps_ns.append(parse_seconds(fields[0], times, no))
    entries = []
    for i, s in enumerate(stamps_ns):
        stem = f"{i:06d}"
        entries.append((s, by_stem.get(stem, image_dir / f"{stem}.png")))
    if len(by_stem) > len(entries):
        log.warning("%s: %d images but times.txt lists %d: the images after the last time "
                    "are not read", image_dir, len(by_stem), len(entries))
    source = ImageListSource(entries, index=str(times))
    require_some_image(source.entries, times)
    name = seq.resolve().name
    poses = seq.resolve().parent.parent / "poses" / f"{name}.txt"
    if poses.is_file():
        gt = read_poses(poses, stamps_ns, T_c0_camera(read_calib(seq / "calib.txt"),
                                                      where=str(seq / "calib.txt")))
        gt_text = (f"ground truth {count(len(gt.stamps_ns), 'pose')} (camera 0 -> camera "
                   f"{CAMERA} via P0/P{CAMERA})")
    else:
        gt = None
        gt_text = f"no ground truth ({poses} not found; KITTI has it for 00-10 only)"
    desc = f"KITTI odometry {name} image_{CAMERA}: {count(len(entries), 'image')}, {gt_text}"
    return Dataset(source, gt, NAME, desc, seq, camera_height_m=CAMERA_HEIGHT_M)

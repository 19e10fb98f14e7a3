"""EuRoC MAV (Burri et al., 2016) sequences in the ASL folder format, as published::

    MH_01_easy/mav0/                     # the path given: MH_01_easy/ or mav0/ itself
        cam0/data.csv                    # "#timestamp [ns],filename", then lines
                                         # "1403636579763555584,1403636579763555584.png"
        cam0/data/*.png
        cam0/sensor.yaml                 # T_BS: {cols: 4, rows: 4, data: [16 numbers]}
        state_groundtruth_estimate0/data.csv   # optional, see below

Images are cam0's (the left camera); stamps are data.csv's integer nanoseconds.

Ground truth: ``state_groundtruth_estimate0/data.csv`` lines are ``timestamp [ns], p_RS_R_x,
p_RS_R_y, p_RS_R_z, q_RS_w, q_RS_x, q_RS_y, q_RS_z, v..., b_w..., b_a...``: the pose of the
body S (the IMU) in the world R, with the quaternion **w first**. ``T_BS`` of
``cam0/sensor.yaml`` is the camera's pose in the body frame (row-major 4x4; maps camera
coordinates to body coordinates), so the camera in the world is::

    T_R_cam0 = T_R_S @ T_BS

at the ground truth's own stamps (200 Hz, the same clock as the images'). T_BS is used as
published (checked rigid within RIGID_TOLERANCE, not re-orthonormalised).
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import numpy as np

from ....geometry import check_rigid, tq_to_matrix
from ..files import ImageListSource
from .common import (RIGID_TOLERANCE, Dataset, count, line_error, make_ground_truth,
                     parse_finite, parse_nanoseconds, read_index_lines, require_auto_stamps,
                     require_some_image)

__all__ = ["NAME", "LOOKS_FOR", "locate", "missing", "open_euroc", "read_T_BS"]

NAME = "euroc"
LOOKS_FOR = "mav0/cam0/data.csv"
CAMERA = "cam0"


def locate(path: Path) -> Optional[Path]:
    """The ``mav0`` folder when ``path`` is a sequence folder (containing mav0) or mav0
    itself, else None."""
    for mav in (path / "mav0", path):
        if (mav / CAMERA / "data.csv").is_file():
            return mav
    return None


def missing(path: Path) -> str:
    return (f"neither {path / 'mav0' / CAMERA / 'data.csv'} nor {path / CAMERA / 'data.csv'} "
            f"exists")


def read_T_BS(path: Path) -> np.ndarray:
    """``T_BS`` of a sensor.yaml -> float64 (4, 4), checked rigid."""
    import yaml
    if not path.is_file():
        raise ValueError(f"{path} does not exist: it holds T_BS, the camera's pose in the "
                         f"body frame, needed to turn the body ground truth into the camera's")
    # OpenCV-style files start with "%YAML:1.0", which is no YAML directive: drop it
    text = "\n".join(line for line in path.read_text(encoding="utf-8-sig").splitlines()
                     if not line.startswith("%YAML:"))
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ValueError(f"{path}: not YAML: {err}") from None
    t_bs = doc.get("T_BS") if isinstance(doc, dict) else None
    if not isinstance(t_bs, dict) or not isinstance(t_bs.get("data"), list):
        raise ValueError(f"{path}: no 'T_BS: {{cols: 4, rows: 4, data: [...]}}'")
    if (t_bs.get("rows", 4), t_bs.get("cols", 4)) != (4, 4) or len(t_bs["data"]) != 16:
        raise ValueError(f"{path}: T_BS must be 4x4 (16 numbers), got rows={t_bs.get('rows')}"
                         f" cols={t_bs.get('cols')} with {len(t_bs['data'])} numbers")
    try:
        m = np.array([float(v) for v in t_bs["data"]], dtype=np.float64).reshape(4, 4)
    except (TypeError, ValueError):
        raise ValueError(f"{path}: T_BS data must be 16 numbers") from None
    check_rigid(m, f"{path}: T_BS", tol=RIGID_TOLERANCE)
    return m


def read_ground_truth(path: Path, T_BS: np.ndarray):
    """state_groundtruth_estimate0/data.csv (body in world, q w,x,y,z) -> the camera's
    GroundTruth (T_W_body @ T_BS)."""
    stamps, rows, labels = [], [], []
    for no, line in read_index_lines(path):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) < 8:
            raise line_error(path, no, f"expected at least 8 comma-separated fields "
                                       f"(timestamp, p x y z, q w x y z), got {len(fields)}")
        stamps.append(parse_nanoseconds(fields[0], path, no))
        row = parse_finite(fields[1:8], path, no)
        if not any(row[3:]):
            raise line_error(path, no, "zero quaternion")
        rows.append(row)
        labels.append(f"{path}:{no}")
    arr = np.asarray(rows, dtype=np.float64).reshape(-1, 7)
    q_xyzw = arr[:, [4, 5, 6, 3]]  # the file's order is w, x, y, z
    T_W_body = tq_to_matrix(arr[:, :3], q_xyzw)
    return make_ground_truth(stamps, T_W_body @ T_BS, labels)


def open_euroc(mav: Path, *, stamps: str = "auto", fps: float = 30.0,
               topic: Optional[str] = None) -> Dataset:
    require_auto_stamps("euroc", f"{CAMERA}/data.csv", stamps)
    cam = mav / CAMERA
    index = cam / "data.csv"
    entries = []
    for no, line in read_index_lines(index):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 2 or not fields[1]:
            raise line_error(index, no, f"expected 'timestamp [ns],filename', got "
                                        f"{len(fields)} field(s)")
        entries.append((parse_nanoseconds(fields[0], index, no), cam / "data" / fields[1]))
    source = ImageListSource(entries, index=str(index))
    require_some_image(source.entries, index)
    gt_file = mav / "state_groundtruth_estimate0" / "data.csv"
    gt = (read_ground_truth(gt_file, read_T_BS(cam / "sensor.yaml")) if gt_file.is_file()
          else None)
    name = mav.resolve().parent.name if mav.resolve().name == "mav0" else mav.resolve().name
    desc = (f"EuRoC MAV {name} {CAMERA}: {count(len(entries), 'image')}, "
            + (f"ground truth {count(len(gt.stamps_ns), 'pose')} (body -> {CAMERA} via T_BS)"
               if gt is not None else "no ground truth (no state_groundtruth_estimate0)"))
    return Dataset(source, gt, NAME, desc, mav)

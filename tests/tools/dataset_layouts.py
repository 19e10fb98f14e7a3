"""Tiny synthetic copies of the public dataset layouts (TUM RGB-D, EuRoC MAV, KITTI
odometry, 7-Scenes), written as published: index files with their header / comment lines,
small PNGs. Image i is filled with the value ``pixel(i)`` so a test can check the order."""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence

import cv2
import numpy as np


def pixel(i: int) -> int:
    return (10 + 20 * i) % 256


def write_png(path: Path, i: int, shape=(6, 8, 3)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    assert cv2.imwrite(str(path), np.full(shape, pixel(i), np.uint8))
    return path


def write_tum_rgbd(root: Path, stamps: Sequence[str], gt_lines: Optional[Sequence[str]] = None,
                   missing: Sequence[int] = ()) -> Path:
    """rgb.txt (stamps as text, e.g. '1305031102.175304'), rgb/<stamp>.png, and
    groundtruth.txt from ``gt_lines`` ('t tx ty tz qx qy qz qw'). Images ``missing`` are
    listed but not written."""
    root.mkdir(parents=True, exist_ok=True)
    lines = ["# color images", "# file: 'rgbd_dataset_freiburg1_xyz.bag'",
             "# timestamp filename"]
    for i, s in enumerate(stamps):
        lines.append(f"{s} rgb/{s}.png")
        if i not in missing:
            write_png(root / "rgb" / f"{s}.png", i)
    (root / "rgb.txt").write_text("\n".join(lines) + "\n")
    (root / "depth.txt").write_text("# depth maps\n")  # present in the real folders, unread
    if gt_lines is not None:
        (root / "groundtruth.txt").write_text(
            "# ground truth trajectory\n# file: 'rgbd_dataset_freiburg1_xyz.bag'\n"
            "# timestamp tx ty tz qx qy qz qw\n" + "\n".join(gt_lines) + "\n")
    return root


EUROC_GT_HEADER = (
    "#timestamp, p_RS_R_x [m], p_RS_R_y [m], p_RS_R_z [m], q_RS_w [], q_RS_x [], q_RS_y [], "
    "q_RS_z [], v_RS_R_x [m s^-1], v_RS_R_y [m s^-1], v_RS_R_z [m s^-1], b_w_RS_S_x [rad s^-1], "
    "b_w_RS_S_y [rad s^-1], b_w_RS_S_z [rad s^-1], b_a_RS_S_x [m s^-2], b_a_RS_S_y [m s^-2], "
    "b_a_RS_S_z [m s^-2]")

# MH_01_easy's cam0/sensor.yaml T_BS, as published
EUROC_T_BS = [0.0148655429818, -0.999880929698, 0.00414029679422, -0.0216401454975,
              0.999557249008, 0.0149672133247, 0.025715529948, -0.064676986768,
              -0.0257744366974, 0.00375618835797, 0.999660727178, 0.00981073058949,
              0.0, 0.0, 0.0, 1.0]


def euroc_sensor_yaml(T_BS: Sequence[float]) -> str:
    rows = ",\n         ".join(", ".join(repr(float(v)) for v in T_BS[r * 4:r * 4 + 4])
                               for r in range(4))
    return ("# General sensor definitions.\nsensor_type: camera\n"
            "comment: VI-Sensor cam0 (MT9M034)\n\n# Sensor extrinsics wrt. the body-frame.\n"
            f"T_BS:\n  cols: 4\n  rows: 4\n  data: [{rows}]\n\n"
            "# Camera specific definitions.\nrate_hz: 20\nresolution: [752, 480]\n"
            "camera_model: pinhole\nintrinsics: [458.654, 457.296, 367.215, 248.375] "
            "#fu, fv, cu, cv\ndistortion_model: radial-tangential\n"
            "distortion_coefficients: [-0.28340811, 0.07395907, 0.00019359, 1.76187114e-05]\n")


def write_euroc(seq: Path, stamps_ns: Sequence[int], gt_rows: Optional[Sequence[str]] = None,
                T_BS: Sequence[float] = EUROC_T_BS, missing: Sequence[int] = ()) -> Path:
    """<seq>/mav0/cam0/{data.csv, data/<ns>.png, sensor.yaml} and, with ``gt_rows``
    ('ns,px,py,pz,qw,qx,qy,qz' -- velocity and bias columns are appended),
    state_groundtruth_estimate0/data.csv. CRLF line ends, as the published csv files."""
    cam = seq / "mav0" / "cam0"
    cam.mkdir(parents=True, exist_ok=True)
    lines = ["#timestamp [ns],filename"]
    for i, s in enumerate(stamps_ns):
        lines.append(f"{s},{s}.png")
        if i not in missing:
            write_png(cam / "data" / f"{s}.png", i, shape=(6, 8))  # EuRoC images are grey
    (cam / "data.csv").write_bytes(("\r\n".join(lines) + "\r\n").encode())
    (cam / "sensor.yaml").write_text(euroc_sensor_yaml(T_BS))
    if gt_rows is not None:
        gt = seq / "mav0" / "state_groundtruth_estimate0"
        gt.mkdir(parents=True)
        tail = (",-0.027876,0.033207,0.800006,-0.003172,0.021267,0.078502,-0.025266,"
                "0.136053,0.075694")
        (gt / "data.csv").write_bytes(
            ("\r\n".join([EUROC_GT_HEADER] + [r + tail for r in gt_rows]) + "\r\n").encode())
    return seq


def kitti_calib(P0: Sequence[float], P2: Sequence[float]) -> str:
    P1 = [718.856, 0.0, 607.1928, -386.1448, 0.0, 718.856, 185.2157, 0.0, 0.0, 0.0, 1.0, 0.0]
    tr = [4.276802e-04, -9.999672e-01, -8.084491e-03, -1.198459e-02, -7.210626e-03,
          8.081198e-03, -9.999413e-01, -5.403984e-02, 9.999738e-01, 4.859485e-04,
          -7.206933e-03, -2.921968e-01]
    return "".join(f"{k}: " + " ".join(f"{v:.12e}" for v in vals) + "\n"
                   for k, vals in (("P0", P0), ("P1", P1), ("P2", P2), ("P3", P2), ("Tr", tr)))


def write_kitti(root: Path, seq: str, times: Sequence[float], P0: Sequence[float],
                P2: Sequence[float], poses: Optional[Sequence[Sequence[float]]] = None,
                missing: Sequence[int] = ()) -> Path:
    """<root>/sequences/<seq>/{image_2/%06d.png, times.txt, calib.txt} and, with ``poses``
    (12 numbers each), <root>/poses/<seq>.txt. Returns the sequence folder."""
    d = root / "sequences" / seq
    d.mkdir(parents=True, exist_ok=True)
    (d / "image_2").mkdir(exist_ok=True)
    for i in range(len(times)):
        if i not in missing:
            write_png(d / "image_2" / f"{i:06d}.png", i)
    (d / "times.txt").write_text("".join(f"{t:.6e}\n" for t in times))
    (d / "calib.txt").write_text(kitti_calib(P0, P2))
    if poses is not None:
        (root / "poses").mkdir(exist_ok=True)
        (root / "poses" / f"{seq}.txt").write_text(
            "".join(" ".join(f"{v:.6e}" for v in p) + "\n" for p in poses))
    return d


def seven_scenes_number(v: float) -> str:
    """Floats as in the published pose files: 7 decimals, 3-digit exponent."""
    mantissa, exp = f"{v:.7e}".split("e")
    return f"{mantissa}e{exp[0]}{int(exp[1:]):03d}"


def write_seven_scenes(seq: Path, poses: dict, missing: Sequence[int] = ()) -> Path:
    """seq-XX/frame-N.{color.png, depth.png, pose.txt} for every N in ``poses`` (N -> 4x4);
    frames ``missing`` get no color image."""
    seq.mkdir(parents=True, exist_ok=True)
    for n, pose in poses.items():
        if n not in missing:
            write_png(seq / f"frame-{n:06d}.color.png", n)
        assert cv2.imwrite(str(seq / f"frame-{n:06d}.depth.png"),
                           np.full((6, 8), 1000 + n, np.uint16))
        (seq / f"frame-{n:06d}.pose.txt").write_text(
            "".join("\t".join(seven_scenes_number(v) for v in row) + "\t\n"
                    for row in np.asarray(pose, dtype=np.float64)))
    return seq

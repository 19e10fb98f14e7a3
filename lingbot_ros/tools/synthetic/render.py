"""Deterministic synthetic camera sequences with exact ground truth: the scene, the camera
path and the renderer (:func:`render_sequence` -> :class:`SyntheticSequence`), and the CLI
that renders a sequence and writes it (:func:`main`).

The scene is a textured box room (6 m x 5 m x 2.6 m, world z up) with three textured boxes
on the floor, ray cast in numpy along a smooth camera path (a slow arc at eye height with
gentle pitch/roll), pinhole camera in the OpenCV convention (x right, y down, z forward;
integer pixel coordinates are pixel centres). ~100 frames of 160x120 render in about a
second on one core.

Ground truth: ``c2w`` (camera-to-world, room frame) and metric z-depth per frame (the
writers put it beside the images as the aligned depth: a TUM ``depth/`` folder, a 16UC1 topic
in bags, for ``--scale depth`` / ``scale.source: depth``). The writers for
every input the offline runner and the ROS demo read (image folder, video, rosbag2
sqlite3/mcap, each with a TUM ground truth beside it) are in
:mod:`lingbot_ros.tools.synthetic.writers`, which this module's CLI calls (they import OpenCV
and rosbags lazily, in the writer that needs them). The scene and renderer are pure numpy: no
OpenCV, rosbags or rclpy.

CLI: ``python -m lingbot_ros.tools.synthetic.render OUT_DIR [--frames N] [--width W] [--height H]
[--formats folder,video,sqlite3,mcap]`` (:func:`main`).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional, Sequence

import numpy as np

from .sequence import SyntheticSequence
from .writers import write_bag, write_image_folder, write_tum_rgbd, write_video

__all__ = ["SyntheticSequence", "default_intrinsics", "camera_path", "render_view",
           "render_sequence", "main"]

ROOM_MIN = np.array([-3.0, -2.5, 0.0])
ROOM_MAX = np.array([3.0, 2.5, 2.6])
# boxes on the floor: (min corner, max corner)
BOXES = (
    (np.array([1.2, 0.6, 0.0]), np.array([2.0, 1.6, 0.9])),
    (np.array([-2.2, -1.9, 0.0]), np.array([-1.3, -1.1, 1.4])),
    (np.array([0.9, -2.0, 0.0]), np.array([1.6, -1.3, 0.5])),
)
_NUM_SURFACES = 6 + 6 * len(BOXES)  # room planes, then 6 faces per box


def default_intrinsics(width: int, height: int, hfov_deg: float = 70.0) -> np.ndarray:
    """Pinhole K with square pixels, principal point at the image centre (pixel centres)."""
    f = (width / 2.0) / np.tan(np.radians(hfov_deg) / 2.0)
    return np.array([[f, 0.0, (width - 1) / 2.0], [0.0, f, (height - 1) / 2.0], [0.0, 0.0, 1.0]])


def camera_path(num_frames: int, fps: float = 30.0) -> np.ndarray:
    """(N, 4, 4) smooth c2w path: an arc at ~1.3 m height, yaw sweeping ~100 degrees over
    10 s, small pitch and roll oscillations. Deterministic."""
    t = np.arange(num_frames) / fps
    a = 0.35 * t - 0.4
    pos = np.stack([0.9 * np.cos(a) - 0.5, 0.7 * np.sin(a), 1.3 + 0.08 * np.sin(1.3 * t)], -1)
    yaw = a + np.pi - 0.6 + 0.2 * np.sin(0.7 * t)  # look across the room, past the centre
    pitch = -0.12 + 0.06 * np.sin(0.9 * t)
    roll = 0.05 * np.sin(1.1 * t)
    fwd = np.stack([np.cos(pitch) * np.cos(yaw), np.cos(pitch) * np.sin(yaw), np.sin(pitch)], -1)
    up = np.array([0.0, 0.0, 1.0])
    right = np.cross(fwd, up)
    right /= np.linalg.norm(right, axis=-1, keepdims=True)
    down = np.cross(fwd, right)
    cr, sr = np.cos(roll)[:, None], np.sin(roll)[:, None]
    right, down = cr * right + sr * down, -sr * right + cr * down
    c2w = np.zeros((num_frames, 4, 4))
    c2w[:, :3, 0], c2w[:, :3, 1], c2w[:, :3, 2] = right, down, fwd
    c2w[:, :3, 3] = pos
    c2w[:, 3, 3] = 1.0
    return c2w


def _lattices(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).random((_NUM_SURFACES, 2, 32, 32))


def _value_noise(lat: np.ndarray, surf: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Bilinear value noise from a per-surface 32x32 lattice (wraps), at (a, b) lattice units."""
    n = lat.shape[-1]
    a0, b0 = np.floor(a), np.floor(b)
    fa, fb = a - a0, b - b0
    fa, fb = fa * fa * (3 - 2 * fa), fb * fb * (3 - 2 * fb)  # smoothstep
    i0, j0 = a0.astype(np.int64) % n, b0.astype(np.int64) % n
    i1, j1 = (i0 + 1) % n, (j0 + 1) % n
    v00, v01 = lat[surf, i0, j0], lat[surf, i0, j1]
    v10, v11 = lat[surf, i1, j0], lat[surf, i1, j1]
    return (v00 * (1 - fa) * (1 - fb) + v10 * fa * (1 - fb) + v01 * (1 - fa) * fb
            + v11 * fa * fb)


def _palette(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 7)
    return 0.25 + 0.7 * rng.random((_NUM_SURFACES, 2, 3))


def _shade(surf: np.ndarray, a: np.ndarray, b: np.ndarray, dist: np.ndarray,
           seed: int) -> np.ndarray:
    """Texture: two-colour checker (period 0.6 m) x multi-octave value noise x stripes."""
    lat, pal = _lattices(seed), _palette(seed)
    checker = ((np.floor(a / 0.3) + np.floor(b / 0.3)) % 2).astype(np.int64)
    base = pal[surf, checker]  # (M, 3)
    noise = (0.5 * _value_noise(lat[:, 0], surf, a * 4.0, b * 4.0)
             + 0.3 * _value_noise(lat[:, 1], surf, a * 13.0, b * 13.0)
             + 0.2 * _value_noise(lat[:, 0], surf, a * 37.0 + 5.0, b * 37.0 + 3.0))
    stripes = 0.85 + 0.15 * np.sin((a * 1.7 + b * 0.9) * 9.0 + surf)
    light = 1.0 / (1.0 + 0.04 * dist ** 2)
    return np.clip(base * (0.55 + 0.6 * noise)[:, None] * (stripes * light)[:, None], 0, 1)


def _trace(origin: np.ndarray, dirs: np.ndarray):
    """Nearest hit of rays (M, 3) from one origin: (t, surface id, face coords a, b)."""
    m = len(dirs)
    with np.errstate(divide="ignore", invalid="ignore"):
        inv = 1.0 / dirs
        # room: inside a box, the exit distance along each axis
        t_axes = np.where(dirs > 0, (ROOM_MAX - origin) * inv, (ROOM_MIN - origin) * inv)
        t_axes = np.where(np.isfinite(t_axes) & (t_axes > 0), t_axes, np.inf)
        axis = np.argmin(t_axes, 1)
        t = t_axes[np.arange(m), axis]
        surf = axis * 2 + (dirs[np.arange(m), axis] > 0)
        for k, (lo, hi) in enumerate(BOXES):  # slab test, entry face
            t1, t2 = (lo - origin) * inv, (hi - origin) * inv
            tmin, tmax = np.minimum(t1, t2), np.maximum(t1, t2)
            tmin = np.where(np.isnan(tmin), -np.inf, tmin)
            tmax = np.where(np.isnan(tmax), np.inf, tmax)
            t_near, t_far = tmin.max(1), tmax.min(1)
            face_axis = tmin.argmax(1)
            hit = (t_near <= t_far) & (t_near > 1e-6) & (t_near < t)
            t = np.where(hit, t_near, t)
            face = 6 + 6 * k + face_axis * 2 + (dirs[np.arange(m), face_axis] > 0)
            surf = np.where(hit, face, surf)
    p = origin + t[:, None] * dirs
    ax = (surf % 6) // 2  # the axis the face is normal to
    other = np.stack([(ax + 1) % 3, (ax + 2) % 3], 1)
    a = np.take_along_axis(p, other[:, :1], 1)[:, 0]
    b = np.take_along_axis(p, other[:, 1:], 1)[:, 0]
    return t, surf, a, b


def render_view(c2w: np.ndarray, K: np.ndarray, height: int, width: int, seed: int = 0,
                supersample: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """One view: (RGB uint8 (H, W, 3), z-depth float32 (H, W) at pixel centres)."""
    ss = int(supersample)
    if ss < 1:
        raise ValueError(f"supersample must be >= 1, got {supersample}")
    # sub-pixel sample positions in pixel-centre coordinates
    offs = (np.arange(ss) + 0.5) / ss - 0.5
    us = (np.arange(width)[:, None] + offs[None]).reshape(-1)
    vs = (np.arange(height)[:, None] + offs[None]).reshape(-1)
    vv, uu = np.meshgrid(vs, us, indexing="ij")
    kinv = np.linalg.inv(K)
    d_cam = np.stack([uu, vv, np.ones_like(uu)], -1).reshape(-1, 3) @ kinv.T  # z = 1
    d_world = d_cam @ c2w[:3, :3].T
    t, surf, a, b = _trace(c2w[:3, 3], d_world)
    dist = t * np.linalg.norm(d_world, axis=1)
    rgb = _shade(surf, a, b, dist, seed).reshape(height, ss, width, ss, 3).mean((1, 3))
    if ss == 1:  # depth = the ray parameter, since d_cam has z = 1
        depth = t.reshape(height, width)
    else:  # depth at the pixel centres
        vc, uc = np.meshgrid(np.arange(height, dtype=np.float64),
                             np.arange(width, dtype=np.float64), indexing="ij")
        dc = np.stack([uc, vc, np.ones_like(uc)], -1).reshape(-1, 3) @ kinv.T
        depth = _trace(c2w[:3, 3], dc @ c2w[:3, :3].T)[0].reshape(height, width)
    return (rgb * 255.0 + 0.5).astype(np.uint8), depth.astype(np.float32)


def render_sequence(num_frames: int = 100, width: int = 160, height: int = 120,
                    fps: float = 30.0, seed: int = 0, start_ns: int = 0, hfov_deg: float = 70.0,
                    supersample: int = 1) -> SyntheticSequence:
    """Render ``num_frames`` along :func:`camera_path`; stamps ``start_ns + round(i * 1e9/fps)``."""
    if num_frames < 1 or width < 1 or height < 1 or not fps > 0:
        raise ValueError("num_frames, width, height and fps must be positive")
    K = default_intrinsics(width, height, hfov_deg)
    c2w = camera_path(num_frames, fps)
    images = np.empty((num_frames, height, width, 3), np.uint8)
    depths = np.empty((num_frames, height, width), np.float32)
    for i in range(num_frames):
        images[i], depths[i] = render_view(c2w[i], K, height, width, seed, supersample)
    stamps = int(start_ns) + np.round(np.arange(num_frames) * (1e9 / fps)).astype(np.int64)
    return SyntheticSequence(images, depths, c2w, K, stamps, float(fps))


def main(argv: Optional[Sequence[str]] = None) -> int:
    """The CLI: render a sequence, then write it in each of ``--formats``."""
    ap = argparse.ArgumentParser(prog="python -m lingbot_ros.tools.synthetic.render",
                                 description="Writers for synthetic sequences: image folder, "
                                             "video and rosbag2, each with ground truth.")
    ap.add_argument("out", type=Path, help="output directory (created)")
    ap.add_argument("--frames", type=int, default=100)
    ap.add_argument("--width", type=int, default=160)
    ap.add_argument("--height", type=int, default=120)
    ap.add_argument("--fps", type=float, default=30.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--supersample", type=int, default=1)
    ap.add_argument("--formats", default="folder,video,sqlite3,mcap",
                    help="comma list of folder, video, sqlite3, mcap, tum_rgbd")
    args = ap.parse_args(argv)
    seq = render_sequence(args.frames, args.width, args.height, args.fps, args.seed,
                          supersample=args.supersample)
    args.out.mkdir(parents=True, exist_ok=True)
    for fmt in [f.strip() for f in args.formats.split(",") if f.strip()]:
        if fmt == "folder":
            out = write_image_folder(seq, args.out / "frames")
        elif fmt == "video":
            out = write_video(seq, args.out / "video.avi")
        elif fmt == "tum_rgbd":
            out = write_tum_rgbd(seq, args.out / "tum_rgbd")
        elif fmt in ("sqlite3", "mcap"):
            out = write_bag(seq, args.out / f"bag_{fmt}", storage=fmt,
                            compressed_topic="/camera/image_raw/compressed")
        else:
            ap.error(f"unknown format {fmt!r}")
        print(f"{fmt}: {out.path} ({out.frames} frames), ground truth {out.gt_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

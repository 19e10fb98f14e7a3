"""Writers for synthetic sequences: image folder, video and rosbag2, each with ground truth.

They write a :class:`~lingbot_ros.tools.synthetic.sequence.SyntheticSequence` (rendered by
:func:`lingbot_ros.tools.synthetic.render.render_sequence`) as every input the offline runner and
the ROS demo read (a PNG folder, an .avi/.mp4 video, a rosbag2 sqlite3/mcap). The CLI that renders a
sequence and writes it is ``lingbot_ros.tools.synthetic.render.main``.

The TUM file a writer leaves beside its output (``<name>.gt.tum``, :func:`gt_path_for`) holds
the poses **relative to the first camera, OpenCV optical axes** -- the model's own convention
(world = first camera) -- or, with ``gt_frame='body'``, as ROS ``map -> camera body`` poses
(see ``geometry/poses.py``). Its stamps are the ones the matching frame source yields:
``i / fps`` from 0 for a folder or a video, the header stamps for a bag.

No rclpy: the bag writer uses ``rosbags`` (CDR, Kilted typestore). OpenCV and rosbags are
imported only by the writers that need them.

CLI: ``python -m lingbot_ros.tools.synthetic.render OUT_DIR [--frames N] [--width W] [--height H]
[--formats folder,video,sqlite3,mcap,tum_rgbd]``. ``write_tum_rgbd`` writes the TUM RGB-D
layout (its ground truth in the room's world, at its own 100 Hz clock, as a dataset has it);
``write_seven_scenes`` and ``write_kitti`` the 7-Scenes and KITTI odometry layouts (the
benchmark's tests lay the room out as each dataset).

Aligned depth (for ``scale.source: depth`` / ``--scale depth``): the renderer's metric
z-depth, registered to the colour image by construction, is written as a TUM ``depth/``
folder + ``depth.txt`` (16-bit PNG, 5000 per metre, 0 = no reading) and as a 16UC1
(millimetres) ``sensor_msgs/Image`` topic in the bags
(``/camera/aligned_depth_to_color/image_raw`` by default, the colour images' stamps).
:func:`depth_to_u16` does the conversion.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Sequence, Union

import numpy as np

from ...geometry import (c2w_to_map, format_stamp, interpolate_poses, matrix_to_tq,
                        write_tum)
from ...image_decode import require_cv2
from ..sources.bag import DEFAULT_DEPTH_TOPIC
from ..sources.datasets.depth import TUM_DEPTH_FACTOR
from .sequence import SyntheticSequence

__all__ = ["Written", "gt_path_for", "write_gt_tum", "write_image_folder", "write_video",
           "write_bag", "write_tum_rgbd", "write_seven_scenes", "write_kitti",
           "depth_to_u16", "DEFAULT_DEPTH_TOPIC",
           "TUM_DEPTH_FACTOR"]

PathLike = Union[str, Path]


@dataclass(frozen=True)
class Written:
    path: Path  # the folder, video file or bag directory
    gt_path: Path  # the TUM ground truth beside it
    frames: int


def gt_path_for(path: PathLike) -> Path:
    """Where a writer puts the ground truth: ``frames/`` -> ``frames.gt.tum``,
    ``clip.mp4`` -> ``clip.gt.tum``, ``bag_dir/`` -> ``bag_dir.gt.tum``."""
    p = Path(path)
    return p.with_name((p.stem if p.suffix and not p.is_dir() else p.name) + ".gt.tum")


def write_gt_tum(seq: SyntheticSequence, path: PathLike, stamps_ns: Optional[Sequence[int]] = None,
                 gt_frame: str = "optical") -> Path:
    """Ground truth as TUM: 'optical' = c2w relative to the first camera (model convention),
    'body' = ROS ``map -> camera body`` (map = first camera's body frame)."""
    rel = seq.c2w_relative
    if gt_frame == "body":
        rel = c2w_to_map(rel, frame="body")
    elif gt_frame != "optical":
        raise ValueError(f"gt_frame must be 'optical' or 'body', got {gt_frame!r}")
    return write_tum(path, seq.stamps_ns if stamps_ns is None else stamps_ns, rel)


def depth_to_u16(depth_m: np.ndarray, units_per_metre: float) -> np.ndarray:
    """Metric depth (float) -> uint16 sensor units (``units_per_metre``: 1000 for 16UC1 mm,
    5000 for TUM), rounded; no reading (NaN, inf, <= 0) and depth beyond the range -> 0."""
    d = np.asarray(depth_m, dtype=np.float64) * float(units_per_metre)
    ok = np.isfinite(d) & (d > 0) & (d < 65535.5)
    return np.where(ok, np.rint(np.where(ok, d, 0.0)), 0.0).astype(np.uint16)


def write_image_folder(seq: SyntheticSequence, folder: PathLike, ext: str = "png",
                       gt_frame: str = "optical") -> Written:
    """``folder/frame_000000.png`` ... (lexicographic = temporal order) + GT beside it
    (stamps ``i / fps``, as ``ImageFolderSource(fps=seq.fps)`` yields)."""
    cv2 = require_cv2("this writer")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i, img in enumerate(seq.images):
        out = folder / f"frame_{i:06d}.{ext}"
        if not cv2.imwrite(str(out), np.ascontiguousarray(img[..., ::-1])):
            raise RuntimeError(f"OpenCV could not write {out}")
    gt = write_gt_tum(seq, gt_path_for(folder), seq.index_stamps_ns, gt_frame)
    return Written(folder, gt, len(seq))


def write_tum_rgbd(seq: SyntheticSequence, folder: PathLike, gt_rate_hz: float = 100.0,
                   depths: Optional[np.ndarray] = None) -> Written:
    """The TUM RGB-D layout, as the offline runner reads published sequences: ``rgb/<stamp>.png``,
    ``rgb.txt`` (``timestamp filename``, seconds with microseconds), ``depth/<stamp>.png`` and
    ``depth.txt`` (the aligned depth, 16-bit PNG at 5000 per metre, 0 = no reading; the
    colour images' stamps; ``depths`` overrides the sequence's metric depth, e.g. a test's
    (N, H, W) metres) and ``groundtruth.txt``
    (``timestamp tx ty tz qx qy qz qw``: the camera in the room's world, z up). As from a
    motion-capture system, the ground truth has its own clock: ``gt_rate_hz`` samples of
    the camera path (interpolated between frames), not the image stamps, so an evaluation
    has to associate by nearest stamp. ``Written.gt_path`` is ``groundtruth.txt``."""
    cv2 = require_cv2("this writer")
    folder = Path(folder)
    (folder / "rgb").mkdir(parents=True, exist_ok=True)
    # TUM stamps have microseconds: round the images' stamps to them.
    stamps = (np.asarray(seq.stamps_ns, np.int64) // 1000) * 1000
    lines = ["# color images", "# synthetic room (lingbot_ros.tools.synthetic.render)",
             "# timestamp filename"]
    for stamp, img in zip(stamps, seq.images):
        name = f"rgb/{format_stamp(int(stamp))[:-3]}.png"  # seconds with 6 decimals
        if not cv2.imwrite(str(folder / name), np.ascontiguousarray(img[..., ::-1])):
            raise RuntimeError(f"OpenCV could not write {folder / name}")
        lines.append(f"{format_stamp(int(stamp))[:-3]} {name}")
    (folder / "rgb.txt").write_text("\n".join(lines) + "\n")
    depths = seq.depths if depths is None else np.asarray(depths)
    if depths.shape != seq.images.shape[:3]:
        raise ValueError(f"depths must have shape {seq.images.shape[:3]}, got {depths.shape}")
    (folder / "depth").mkdir(exist_ok=True)
    depth_lines = ["# depth maps", "# synthetic room: z-depth registered to rgb, 5000 per metre",
                   "# timestamp filename"]
    for stamp, depth in zip(stamps, depths):
        name = f"depth/{format_stamp(int(stamp))[:-3]}.png"
        if not cv2.imwrite(str(folder / name), depth_to_u16(depth, TUM_DEPTH_FACTOR)):
            raise RuntimeError(f"OpenCV could not write {folder / name}")
        depth_lines.append(f"{format_stamp(int(stamp))[:-3]} {name}")
    (folder / "depth.txt").write_text("\n".join(depth_lines) + "\n")
    period = round(1e9 / gt_rate_hz)
    gt_stamps = np.arange(stamps[0] - 3 * period // 2, stamps[-1] + 2 * period, period)
    gt_stamps = gt_stamps[(gt_stamps >= stamps[0]) & (gt_stamps <= stamps[-1])]
    gt_poses = interpolate_poses(stamps, seq.c2w, gt_stamps)
    t, q = matrix_to_tq(gt_poses)
    gt_lines = ["# ground truth trajectory", "# synthetic room: the camera's optical frame",
                "# timestamp tx ty tz qx qy qz qw"]
    for stamp, ti, qi in zip(gt_stamps, t, q):
        gt_lines.append(" ".join([f"{int(stamp) / 1e9:.4f}"] + [f"{v:.6f}" for v in (*ti, *qi)]))
    gt = folder / "groundtruth.txt"
    gt.write_text("\n".join(gt_lines) + "\n")
    return Written(folder, gt, len(seq))


def write_video(seq: SyntheticSequence, path: PathLike, gt_frame: str = "optical") -> Written:
    """A video file: ``.avi`` -> MJPG (near-lossless at quality 95, the default), ``.mp4`` ->
    mp4v. GT beside it with stamps ``i / fps``."""
    cv2 = require_cv2("this writer")
    path = Path(path)
    codecs = {".avi": "MJPG", ".mp4": "mp4v"}
    if path.suffix.lower() not in codecs:
        raise ValueError(f"video path must end in .avi (MJPG) or .mp4 (mp4v), got {path.name}")
    path.parent.mkdir(parents=True, exist_ok=True)
    h, w = seq.images.shape[1:3]
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*codecs[path.suffix.lower()]),
                             seq.fps, (w, h))
    if not writer.isOpened():
        raise RuntimeError(f"OpenCV cannot write {codecs[path.suffix.lower()]} to {path}")
    try:
        for img in seq.images:
            writer.write(np.ascontiguousarray(img[..., ::-1]))
    finally:
        writer.release()
    gt = write_gt_tum(seq, gt_path_for(path), seq.index_stamps_ns, gt_frame)
    return Written(path, gt, len(seq))


def write_bag(seq: SyntheticSequence, path: PathLike, storage: str = "sqlite3",
              topic: str = "/camera/image_raw",
              compressed_topic: Optional[str] = None,
              camera_info_topic: Optional[str] = "/camera/camera_info",
              frame_id: str = "camera_optical_frame", compressed_format: str = "jpeg",
              gt_frame: str = "optical",
              depth_topic: Optional[str] = DEFAULT_DEPTH_TOPIC) -> Written:
    """A rosbag2 (``storage`` 'sqlite3' or 'mcap', version 9, Kilted typestore) with
    ``sensor_msgs/msg/Image`` rgb8 on ``topic``, optionally ``CompressedImage`` (jpeg or png)
    on ``compressed_topic``, ``CameraInfo`` on ``camera_info_topic`` and the aligned depth
    as a 16UC1 (millimetres, 0 = no reading) ``Image`` on ``depth_topic`` (None: no depth);
    header stamps = record times = ``seq.stamps_ns`` (30 Hz by default), the same for colour
    and depth. GT beside it with those stamps."""
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_typestore

    plugins = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}
    if storage not in plugins:
        raise ValueError(f"storage must be 'sqlite3' or 'mcap', got {storage!r}")
    if compressed_format not in ("jpeg", "png"):
        raise ValueError(f"compressed_format must be 'jpeg' or 'png', got {compressed_format!r}")
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} exists; rosbag2 writers need a new directory")
    ts = get_typestore(Stores.ROS2_KILTED)
    T = ts.types
    h, w = seq.images.shape[1:3]

    def header(stamp: int):
        return T["std_msgs/msg/Header"](
            stamp=T["builtin_interfaces/msg/Time"](sec=int(stamp // 1_000_000_000),
                                                   nanosec=int(stamp % 1_000_000_000)),
            frame_id=frame_id)

    k = seq.K
    p = np.zeros((3, 4))
    p[:, :3] = k
    with Writer(path, version=9, storage_plugin=plugins[storage]) as writer:
        img_conn = writer.add_connection(topic, "sensor_msgs/msg/Image", typestore=ts)
        cmp_conn = info_conn = None
        if compressed_topic:
            cmp_conn = writer.add_connection(compressed_topic, "sensor_msgs/msg/CompressedImage",
                                             typestore=ts)
        if camera_info_topic:
            info_conn = writer.add_connection(camera_info_topic, "sensor_msgs/msg/CameraInfo",
                                              typestore=ts)
        depth_conn = None
        if depth_topic:
            depth_conn = writer.add_connection(depth_topic, "sensor_msgs/msg/Image",
                                               typestore=ts)
        for img, depth, stamp in zip(seq.images, seq.depths, seq.stamps_ns):
            stamp = int(stamp)
            msg = T["sensor_msgs/msg/Image"](header=header(stamp), height=h, width=w,
                                             encoding="rgb8", is_bigendian=0, step=w * 3,
                                             data=np.ascontiguousarray(img).reshape(-1))
            writer.write(img_conn, stamp, ts.serialize_cdr(msg, msg.__msgtype__))
            if cmp_conn is not None:
                cv2 = require_cv2("this writer")
                ok, buf = cv2.imencode("." + ("jpg" if compressed_format == "jpeg" else "png"),
                                       np.ascontiguousarray(img[..., ::-1]))
                if not ok:
                    raise RuntimeError("OpenCV could not encode a frame")
                cmsg = T["sensor_msgs/msg/CompressedImage"](
                    header=header(stamp), format=f"rgb8; {compressed_format} compressed bgr8",
                    data=buf.reshape(-1).astype(np.uint8))
                writer.write(cmp_conn, stamp, ts.serialize_cdr(cmsg, cmsg.__msgtype__))
            if depth_conn is not None:
                mm = depth_to_u16(depth, 1000.0)
                dmsg = T["sensor_msgs/msg/Image"](header=header(stamp), height=h, width=w,
                                                  encoding="16UC1", is_bigendian=0, step=w * 2,
                                                  data=mm.astype("<u2").view(np.uint8).reshape(-1))
                writer.write(depth_conn, stamp, ts.serialize_cdr(dmsg, dmsg.__msgtype__))
            if info_conn is not None:
                imsg = T["sensor_msgs/msg/CameraInfo"](
                    header=header(stamp), height=h, width=w, distortion_model="plumb_bob",
                    d=np.zeros(5), k=k.reshape(-1).copy(), r=np.eye(3).reshape(-1),
                    p=p.reshape(-1), binning_x=0, binning_y=0,
                    roi=T["sensor_msgs/msg/RegionOfInterest"](x_offset=0, y_offset=0, height=0,
                                                              width=0, do_rectify=False))
                writer.write(info_conn, stamp, ts.serialize_cdr(imsg, imsg.__msgtype__))
    gt = write_gt_tum(seq, gt_path_for(path), seq.stamps_ns, gt_frame)
    return Written(path, gt, len(seq))


def write_seven_scenes(seq: SyntheticSequence, folder: PathLike) -> Written:
    """The 7-Scenes layout of one sequence (``<scene>/seq-NN/``): ``frame-NNNNNN.color.png``,
    ``frame-NNNNNN.pose.txt`` (4x4 camera-to-world, the room's world) and
    ``frame-NNNNNN.depth.png`` (16-bit millimetres, 65535 = no reading). No stamps: a reader
    takes ``i / fps``. ``Written.gt_path`` is the first pose file."""
    cv2 = require_cv2("this writer")
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i, (img, depth, pose) in enumerate(zip(seq.images, seq.depths, seq.c2w)):
        stem = folder / f"frame-{i:06d}"
        mm = np.where(np.isfinite(depth) & (depth > 0), np.round(depth * 1000.0), 65535)
        if not (cv2.imwrite(f"{stem}.color.png", np.ascontiguousarray(img[..., ::-1])) and
                cv2.imwrite(f"{stem}.depth.png", np.clip(mm, 0, 65535).astype(np.uint16))):
            raise RuntimeError(f"OpenCV could not write {stem}.*.png")
        Path(f"{stem}.pose.txt").write_text(
            "\n".join(" ".join(f"{v:.7e}" for v in row) for row in pose) + "\n")
    return Written(folder, folder / "frame-000000.pose.txt", len(seq))


def write_kitti(seq: SyntheticSequence, root: PathLike, name: str = "00") -> Written:
    """The KITTI odometry layout: ``<root>/sequences/<name>/image_2/NNNNNN.png``,
    ``times.txt`` (seconds from the start), ``calib.txt`` (P0..P3 from the sequence's K,
    all one camera: camera 2 is camera 0 here) and ``<root>/poses/<name>.txt`` (3x4
    row-major, camera 0 in the first camera's frame). ``Written.path`` is the sequence
    folder."""
    cv2 = require_cv2("this writer")
    folder = Path(root) / "sequences" / name
    (folder / "image_2").mkdir(parents=True, exist_ok=True)
    for i, img in enumerate(seq.images):
        path = folder / "image_2" / f"{i:06d}.png"
        if not cv2.imwrite(str(path), np.ascontiguousarray(img[..., ::-1])):
            raise RuntimeError(f"OpenCV could not write {path}")
    stamps = np.asarray(seq.stamps_ns, np.int64) - int(seq.stamps_ns[0])
    (folder / "times.txt").write_text("".join(f"{s / 1e9:.6e}\n" for s in stamps))
    P = np.hstack([seq.K, np.zeros((3, 1))]).reshape(-1)  # (3, 4) -> 12, row-major
    (folder / "calib.txt").write_text("".join(
        f"P{k}: " + " ".join(f"{v:.12e}" for v in P) + "\n" for k in range(4)))
    poses = Path(root) / "poses" / f"{name}.txt"
    poses.parent.mkdir(parents=True, exist_ok=True)
    rel = seq.c2w_relative[:, :3, :].reshape(len(seq), 12)  # (N, 3, 4) -> (N, 12)
    poses.write_text("".join(" ".join(f"{v:.12e}" for v in row) + "\n" for row in rel))
    return Written(folder, poses, len(seq))

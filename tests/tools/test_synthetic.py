"""Synthetic scenes: deterministic, fast, geometrically exact (depth + poses + K agree across
views), and the writers produce what the frame sources read."""
import time

import numpy as np
import pytest

from lingbot_ros.geometry import c2w_to_map, read_tum
from lingbot_ros.session.keyframes import camera_motion_flow
from lingbot_ros.tools.synthetic import render as synthetic
from lingbot_ros.tools.synthetic.render import default_intrinsics, render_sequence
from lingbot_ros.tools.synthetic.writers import (DEFAULT_DEPTH_TOPIC, depth_to_u16,
                                                 gt_path_for, write_bag, write_image_folder,
                                                 write_video)


@pytest.fixture(scope="module")
def seq():
    return render_sequence(24)


def test_shapes_stamps_and_determinism(seq):
    n = len(seq)
    assert seq.images.shape == (n, 120, 160, 3) and seq.images.dtype == np.uint8
    assert seq.depths.shape == (n, 120, 160) and seq.depths.dtype == np.float32
    assert seq.c2w.shape == (n, 4, 4) and seq.K.shape == (3, 3)
    assert np.all(np.diff(seq.stamps_ns) >= 33_333_333) and seq.stamps_ns[0] == 0
    assert seq.stamps_ns[3] == 100_000_000
    again = render_sequence(24)
    assert np.array_equal(again.images, seq.images) and np.array_equal(again.c2w, seq.c2w)
    other = render_sequence(2, seed=1)
    assert not np.array_equal(other.images[0], seq.images[0])  # the seed changes textures
    r = seq.c2w[:, :3, :3]
    assert np.allclose(r @ np.swapaxes(r, 1, 2), np.eye(3)) and np.allclose(np.linalg.det(r), 1)
    assert np.allclose(seq.c2w_relative[0], np.eye(4))
    assert np.isfinite(seq.depths).all() and seq.depths.min() > 0.1
    assert seq.images.std() > 20  # textured, not flat


def test_a_hundred_frames_render_in_a_few_seconds():
    t0 = time.process_time()  # CPU time: robust to a busy machine
    s = render_sequence(100)
    assert len(s) == 100 and time.process_time() - t0 < 10.0


def test_depth_poses_and_intrinsics_agree_across_views(seq):
    """Unproject frame 0 with its depth/K/c2w (OpenCV axes), project into frame 6: the depth
    rendered there matches for the pixels that see the same surface."""
    i, j = 0, 6
    K = seq.K
    h, w = seq.depths.shape[1:]
    v, u = np.mgrid[0:h, 0:w].astype(np.float64)
    pts_cam = np.stack([u, v, np.ones_like(u)], -1) @ np.linalg.inv(K).T * seq.depths[i][..., None]
    world = pts_cam @ seq.c2w[i, :3, :3].T + seq.c2w[i, :3, 3]
    r_j, c_j = seq.c2w[j, :3, :3], seq.c2w[j, :3, 3]
    in_j = (world - c_j) @ r_j  # world -> camera j
    proj = in_j @ K.T
    uj, vj = proj[..., 0] / proj[..., 2], proj[..., 1] / proj[..., 2]
    ui, vi = np.round(uj).astype(int), np.round(vj).astype(int)
    ok = (ui >= 0) & (ui < w) & (vi >= 0) & (vi < h) & (in_j[..., 2] > 0)
    assert ok.mean() > 0.7
    rendered = seq.depths[j][vi[ok], ui[ok]]
    rel = np.abs(rendered - in_j[..., 2][ok]) / in_j[..., 2][ok]
    assert np.median(rel) < 0.01 and (rel < 0.05).mean() > 0.9
    # colour agrees too (the texture is attached to the surfaces)
    col_i = seq.images[i].astype(float)[ok]
    col_j = seq.images[j].astype(float)[vi[ok], ui[ok]]
    assert np.median(np.abs(col_i - col_j)) < 25


def test_camera_motion_is_smooth_and_visible_to_the_flow_policy(seq):
    import torch
    steps = np.linalg.norm(np.diff(seq.c2w[:, :3, 3], axis=0), axis=1)
    assert steps.max() < 0.05 and steps.min() > 0.001  # moves every frame, never jumps
    flows = [float(camera_motion_flow(torch.from_numpy(seq.depths[k]), torch.from_numpy(seq.K),
                                      torch.from_numpy(seq.c2w[k]), torch.from_numpy(seq.c2w[0])))
             for k in (1, 5, 20)]
    assert 0 < flows[0] < flows[1] < flows[2]


def test_intrinsics_and_gt_paths(tmp_path):
    K = default_intrinsics(160, 120, 90.0)
    assert np.isclose(K[0, 0], 80.0) and K[0, 2] == 79.5 and K[1, 2] == 59.5
    assert gt_path_for(tmp_path / "clip.mp4") == tmp_path / "clip.gt.tum"
    (tmp_path / "frames").mkdir()
    assert gt_path_for(tmp_path / "frames") == tmp_path / "frames.gt.tum"


def test_image_folder_writer(seq, tmp_path):
    import cv2
    out = write_image_folder(seq, tmp_path / "frames")
    files = sorted(out.path.iterdir())
    assert len(files) == len(seq) and files[0].name == "frame_000000.png"
    assert np.array_equal(cv2.imread(str(files[3]))[..., ::-1], seq.images[3])  # PNG: lossless
    stamps, poses = read_tum(out.gt_path)
    assert np.array_equal(stamps, seq.index_stamps_ns)
    assert np.allclose(poses, seq.c2w_relative, atol=1e-12)


@pytest.mark.parametrize("name", ["clip.avi", "clip.mp4"])
def test_video_writer(seq, tmp_path, name):
    import cv2
    out = write_video(seq, tmp_path / name)
    cap = cv2.VideoCapture(str(out.path))
    frames = []
    while True:
        ok, img = cap.read()
        if not ok:
            break
        frames.append(img[..., ::-1])
    cap.release()
    assert len(frames) == len(seq)
    assert np.abs(np.stack(frames).astype(int) - seq.images).mean() < 12  # lossy codecs
    assert out.gt_path.name == "clip.gt.tum"
    with pytest.raises(ValueError, match=".avi"):
        write_video(seq, tmp_path / "clip.mkv")


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_bag_writer(seq, tmp_path, storage):
    from rosbags.highlevel import AnyReader
    out = write_bag(seq, tmp_path / f"bag_{storage}", storage=storage,
                    compressed_topic="/camera/image_raw/compressed", gt_frame="body")
    with AnyReader([out.path]) as reader:
        topics = {c.topic: c.msgtype for c in reader.connections}
        assert topics == {"/camera/image_raw": "sensor_msgs/msg/Image",
                          "/camera/image_raw/compressed": "sensor_msgs/msg/CompressedImage",
                          "/camera/camera_info": "sensor_msgs/msg/CameraInfo",
                          DEFAULT_DEPTH_TOPIC: "sensor_msgs/msg/Image"}
        n = {t: 0 for t in topics}
        for conn, t_bag, raw in reader.messages():
            msg = reader.deserialize(raw, conn.msgtype)
            k = n[conn.topic]
            n[conn.topic] += 1
            stamp = msg.header.stamp.sec * 10**9 + msg.header.stamp.nanosec
            assert stamp == t_bag == seq.stamps_ns[k]
            assert msg.header.frame_id == "camera_optical_frame"
            if conn.topic == DEFAULT_DEPTH_TOPIC:  # the aligned depth, 16UC1 millimetres
                assert (msg.encoding, msg.step, msg.height, msg.width) == ("16UC1", 320, 120, 160)
                mm = msg.data.view("<u2").reshape(120, 160)
                assert np.array_equal(mm, depth_to_u16(seq.depths[k], 1000.0))
                assert np.abs(mm / 1000.0 - seq.depths[k]).max() <= 0.0005 + 1e-6
            elif conn.msgtype.endswith("/Image"):
                assert (msg.encoding, msg.step, msg.height, msg.width) == ("rgb8", 480, 120, 160)
                assert np.array_equal(msg.data.reshape(120, 160, 3), seq.images[k])
            elif conn.msgtype.endswith("CameraInfo"):
                assert np.allclose(msg.k.reshape(3, 3), seq.K)
    assert set(n.values()) == {len(seq)}
    stamps, poses = read_tum(out.gt_path)
    assert np.array_equal(stamps, seq.stamps_ns)
    assert np.allclose(poses, c2w_to_map(seq.c2w_relative, "body"), atol=1e-12)
    with pytest.raises(FileExistsError):
        write_bag(seq, out.path)


def test_cli(tmp_path, capsys):
    assert synthetic.main([str(tmp_path), "--frames", "3", "--width", "32", "--height", "24",
                           "--formats", "folder,sqlite3"]) == 0
    assert len(list((tmp_path / "frames").iterdir())) == 3
    assert (tmp_path / "bag_sqlite3" / "metadata.yaml").is_file()
    assert (tmp_path / "frames.gt.tum").is_file() and (tmp_path / "bag_sqlite3.gt.tum").is_file()
    assert "ground truth" in capsys.readouterr().out

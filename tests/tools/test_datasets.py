"""Public dataset layouts read as published (lingbot_ros.tools.sources.datasets): for each layout a
few-frame synthetic copy in tmp_path, opened with format='auto' and explicitly: the format
detected, the stamps exactly as the files say (int ns), image count and order, ground truth
equal to the hand-computed conversion to the read camera, bad index lines named by
file:line, missing images counted."""
import subprocess
import sys

import numpy as np
import pytest

from lingbot_ros.geometry import read_tum, tq_to_matrix
from lingbot_ros.tools.sources.datasets import (FORMATS, Dataset, GroundTruth, detect_format,
                                        open_dataset, write_ground_truth_tum)
from lingbot_ros.tools.sources.datasets.kitti import T_c0_camera, camera_offset, read_calib
from lingbot_ros.tools.sources.files import ImageFolderSource
from lingbot_ros.tools.sources.frame import SKIP_REASONS
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_bag, write_video
from tests.tools.dataset_layouts import (EUROC_T_BS, kitti_calib, pixel, write_euroc,
                                         write_kitti, write_png, write_seven_scenes,
                                         write_tum_rgbd)


def pose(R, t):
    T = np.eye(4)
    T[:3, :3] = R
    T[:3, 3] = t
    return T


def read_all(ds: Dataset):
    frames = list(ds.source)
    return frames, [f.stamp_ns for f in frames], [int(f.image.flat[0]) for f in frames]


def check_ground_truth(gt):
    assert isinstance(gt, GroundTruth) and isinstance(gt, tuple)
    stamps, poses = gt
    assert stamps.dtype == np.int64 and poses.dtype == np.float64
    assert poses.shape == (len(stamps), 4, 4)
    assert np.all(np.diff(stamps) > 0)


R_Y180 = np.diag([-1.0, 1.0, -1.0])
R_X180 = np.diag([1.0, -1.0, -1.0])
R_Y90 = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])


# --- TUM RGB-D ---------------------------------------------------------------------------

TUM_STAMPS = ["1305031102.175304", "1305031102.211214", "1305031102.243211",
              "1305031102.275326"]
TUM_GT = ["1305031102.1758 1.3405 0.6266 1.6575 0.6574 0.6126 -0.2949 -0.3248",
          "1305031102.1858 1.5 -0.25 0.75 0 1 0 0",
          "1305031102.1958 0.125 0.5 -2.0 0 0 0 1"]


def test_tum_rgbd(tmp_path):
    root = write_tum_rgbd(tmp_path / "rgbd_dataset_freiburg1_xyz", TUM_STAMPS, TUM_GT,
                          missing=[2])
    assert detect_format(root) == ("tum_rgbd", root)
    for fmt in ("auto", "tum_rgbd"):
        ds = open_dataset(root, format=fmt)
        assert ds.format == "tum_rgbd" and ds.path == root
        assert len(ds.source) == 4
        assert ds.description == ("TUM RGB-D rgbd_dataset_freiburg1_xyz: 4 images, "
                                  "ground truth 3 poses")
        frames, stamps, values = read_all(ds)
        assert stamps == [1305031102175304000, 1305031102211214000, 1305031102275326000]
        assert all(type(s) is int for s in stamps)
        assert values == [pixel(0), pixel(1), pixel(3)]
        assert ds.source.stats.skipped == {"missing_file": 1}
        assert "rgb/1305031102.243211.png" in ds.source.stats.messages[0]
        assert "rgb.txt" in ds.source.stats.messages[0]
        check_ground_truth(ds.ground_truth)
        gt_stamps, gt_poses = ds.ground_truth
        assert gt_stamps.tolist() == [1305031102175800000, 1305031102185800000,
                                      1305031102195800000]
        # as published: t and q (x, y, z, w) of the optical frame in the mocap world
        assert np.array_equal(gt_poses[0], tq_to_matrix([1.3405, 0.6266, 1.6575],
                                                        [0.6574, 0.6126, -0.2949, -0.3248]))
        assert np.array_equal(gt_poses[1], pose(R_Y180, [1.5, -0.25, 0.75]))
        assert np.array_equal(gt_poses[2], pose(np.eye(3), [0.125, 0.5, -2.0]))


def test_tum_rgbd_without_ground_truth_and_sorted_ground_truth(tmp_path):
    root = write_tum_rgbd(tmp_path / "a", TUM_STAMPS[:2])
    ds = open_dataset(root)
    assert ds.ground_truth is None and "no ground truth" in ds.description
    root = write_tum_rgbd(tmp_path / "b", TUM_STAMPS[:2], [TUM_GT[2], TUM_GT[1]])
    stamps, poses = open_dataset(root).ground_truth
    assert stamps.tolist() == [1305031102185800000, 1305031102195800000]
    assert np.array_equal(poses[0], pose(R_Y180, [1.5, -0.25, 0.75]))


@pytest.mark.parametrize("line, where, message", [
    ("1305031102.175304", "rgb.txt:5", "expected 'timestamp filename', got 1 fields"),
    ("1305031102,175304 rgb/x.png", "rgb.txt:5", "is not a time in seconds"),
])
def test_tum_rgbd_bad_index_line(tmp_path, line, where, message):
    root = write_tum_rgbd(tmp_path / "s", TUM_STAMPS[:1])
    with (root / "rgb.txt").open("a") as f:
        f.write(line + "\n")
    with pytest.raises(ValueError, match=message) as err:
        open_dataset(root)
    assert f"{root / where}: " in str(err.value)


@pytest.mark.parametrize("line, message", [
    ("1305031102.2 1 2 3 0 0 0", "groundtruth.txt:5: expected 8 fields"),
    ("1305031102.2 1 2 3 0 0 0 0", "groundtruth.txt:5: zero quaternion"),
    ("1305031102.2 1 2 nan 0 0 0 1", "groundtruth.txt:5: 'nan' is not a finite number"),
    ("1305031102.1758 0 0 0 0 0 0 1", r"stamp 1305031102.175800000 s twice \(.*groundtruth"
                                      r"\.txt:4 and .*groundtruth\.txt:5\)"),
])
def test_tum_rgbd_bad_ground_truth(tmp_path, line, message):
    root = write_tum_rgbd(tmp_path / "s", TUM_STAMPS[:1], TUM_GT[:1] + [line])
    with pytest.raises(ValueError, match=message):
        open_dataset(root)


# --- EuRoC MAV ---------------------------------------------------------------------------

EUROC_STAMPS = [1403636579763555584, 1403636579813555456, 1403636579863555584,
                1403636579913555456]
T_BS_EXACT = [0.0, 0.0, 1.0, 0.125,
              -1.0, 0.0, 0.0, -0.0625,
              0.0, -1.0, 0.0, 0.25,
              0.0, 0.0, 0.0, 1.0]
# ns, p x y z, q w x y z: identity; 180 deg about y (w=0, y=1); w=.5 x=-.5 y=.5 z=.5
EUROC_GT = ["1403636579758555392,1.5,-2.25,0.75,1.0,0.0,0.0,0.0",
            "1403636579763555584,0.5,0.25,-1.0,0.0,0.0,1.0,0.0",
            "1403636579768555520,-3.0,4.5,0.125,0.5,-0.5,0.5,0.5"]


def test_euroc(tmp_path):
    seq = write_euroc(tmp_path / "MH_01_easy", EUROC_STAMPS, EUROC_GT, T_BS=T_BS_EXACT,
                      missing=[1])
    mav = seq / "mav0"
    assert detect_format(seq) == ("euroc", mav)
    for path, fmt in ((seq, "auto"), (mav, "auto"), (seq, "euroc"), (mav, "euroc")):
        ds = open_dataset(path, format=fmt)
        assert ds.format == "euroc" and ds.path == mav and len(ds.source) == 4
        assert ds.description == ("EuRoC MAV MH_01_easy cam0: 4 images, ground truth 3 poses "
                                  "(body -> cam0 via T_BS)")
        frames, stamps, values = read_all(ds)
        assert stamps == [EUROC_STAMPS[0], EUROC_STAMPS[2], EUROC_STAMPS[3]]
        assert values == [pixel(0), pixel(2), pixel(3)]
        assert frames[0].encoding == "mono8"
        assert ds.source.stats.skipped == {"missing_file": 1}
        check_ground_truth(ds.ground_truth)
        gt_stamps, gt_poses = ds.ground_truth
        assert gt_stamps.tolist() == [1403636579758555392, 1403636579763555584,
                                      1403636579768555520]
        # by hand: camera = T_W_body @ T_BS, with T_BS's rotation [[0,0,1],[-1,0,0],[0,-1,0]]
        # and offset (0.125, -0.0625, 0.25); the quaternions read w first
        expected = [
            pose([[0, 0, 1], [-1, 0, 0], [0, -1, 0]], [1.625, -2.3125, 1.0]),
            # R_y(180) = diag(-1, 1, -1): R @ R_BS, t = R @ t_BS + p
            pose([[0, 0, -1], [-1, 0, 0], [0, 1, 0]], [0.375, 0.1875, -1.25]),
            # w=.5, x=-.5, y=.5, z=.5 -> R = [[0,-1,0],[0,0,1],[-1,0,0]]
            pose([[1, 0, 0], [0, -1, 0], [0, 0, -1]], [-2.9375, 4.75, 0.0]),
        ]
        assert np.array_equal(gt_poses, np.array(expected, dtype=np.float64))


def test_euroc_published_T_BS(tmp_path):
    """MH_01's real T_BS and a general quaternion: T_W_body (q read w, x, y, z) @ T_BS."""
    row = "1403636579758555392,4.688319,-1.786938,0.783338,0.534108,-0.153029,-0.827383,-0.082152"
    seq = write_euroc(tmp_path / "MH_01_easy", EUROC_STAMPS[:2], [row], T_BS=EUROC_T_BS)
    gt_stamps, gt_poses = open_dataset(seq).ground_truth
    T_WB = tq_to_matrix([4.688319, -1.786938, 0.783338], [-0.153029, -0.827383, -0.082152,
                                                           0.534108])
    assert gt_stamps.tolist() == [1403636579758555392]
    assert np.array_equal(gt_poses[0], T_WB @ np.array(EUROC_T_BS).reshape(4, 4))
    # the camera sits 6.8 cm from the body origin, as T_BS says
    assert np.linalg.norm(gt_poses[0, :3, 3] - T_WB[:3, 3]) == pytest.approx(
        np.linalg.norm(np.array(EUROC_T_BS).reshape(4, 4)[:3, 3]))


def test_euroc_without_ground_truth_needs_no_sensor_yaml(tmp_path):
    seq = write_euroc(tmp_path / "V1_01", EUROC_STAMPS[:2])
    (seq / "mav0" / "cam0" / "sensor.yaml").unlink()
    ds = open_dataset(seq)
    assert ds.ground_truth is None and "no ground truth" in ds.description
    assert read_all(ds)[1] == EUROC_STAMPS[:2]


@pytest.mark.parametrize("where, line, message", [
    ("cam0/data.csv", "14036365799x3555584,x.png", r"data\.csv:4: '14036365799x3555584' is "
                                                    r"not a time in integer nanoseconds"),
    ("cam0/data.csv", "1403636580013555456", r"data\.csv:4: expected 'timestamp \[ns\],"),
    ("state_groundtruth_estimate0/data.csv", "1403636579773555456,1,2,3,1,0",
     r"data\.csv:5: expected at least 8 comma-separated fields"),
    ("state_groundtruth_estimate0/data.csv", "1403636579773555456,1,2,3,0,0,0,0",
     r"data\.csv:5: zero quaternion"),
    ("state_groundtruth_estimate0/data.csv", "1403636579763555584,1,2,3,1,0,0,0",
     r"stamp 1403636579\.763555584 s twice"),
])
def test_euroc_bad_lines(tmp_path, where, line, message):
    seq = write_euroc(tmp_path / "s", EUROC_STAMPS[:2], EUROC_GT)
    with (seq / "mav0" / where).open("a") as f:
        f.write(line + "\n")
    with pytest.raises(ValueError, match=message):
        open_dataset(seq)


def test_euroc_bad_sensor_yaml(tmp_path):
    seq = write_euroc(tmp_path / "s", EUROC_STAMPS[:2], EUROC_GT)
    sensor = seq / "mav0" / "cam0" / "sensor.yaml"
    sensor.write_text(sensor.read_text().replace("0.0148655429818", "2.5"))
    with pytest.raises(ValueError, match="sensor.yaml: T_BS: not a rigid transform"):
        open_dataset(seq)
    sensor.unlink()
    with pytest.raises(ValueError, match="sensor.yaml does not exist: it holds T_BS"):
        open_dataset(seq)


# --- KITTI odometry ----------------------------------------------------------------------

P0 = [500.0, 0.0, 320.0, 0.0, 0.0, 500.0, 240.0, 0.0, 0.0, 0.0, 1.0, 0.0]
# camera 2 as in KITTI: only P2[0,3] = fx * t_x, t_x = 31.25 / 500 = 0.0625
P2_X = [500.0, 0.0, 320.0, 31.25, 0.0, 500.0, 240.0, 0.0, 0.0, 0.0, 1.0, 0.0]
KITTI_TIMES = [0.0, 0.103663, 0.207327, 0.31099]
KITTI_POSES = [
    [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0],
    [0, 0, 1, 1, 0, 1, 0, 2, -1, 0, 0, 3],  # 90 deg about y, at (1, 2, 3)
    [-1, 0, 0, 1.5, 0, -1, 0, -0.25, 0, 0, 1, 4],  # 180 deg about z
    [1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 8.5],
]


def test_kitti(tmp_path):
    seq = write_kitti(tmp_path / "dataset", "05", KITTI_TIMES, P0, P2_X, KITTI_POSES,
                      missing=[2])
    assert detect_format(seq) == ("kitti", seq)
    for fmt in ("auto", "kitti"):
        ds = open_dataset(seq, format=fmt)
        assert ds.format == "kitti" and len(ds.source) == 4
        assert ds.description == ("KITTI odometry 05 image_2: 4 images, ground truth 4 poses "
                                  "(camera 0 -> camera 2 via P0/P2)")
        frames, stamps, values = read_all(ds)
        # times.txt says 0.000000e+00, 1.036630e-01, 2.073270e-01, 3.109900e-01
        assert stamps == [0, 103663000, 310990000]
        assert values == [pixel(0), pixel(1), pixel(3)]
        assert ds.source.stats.skipped == {"missing_file": 1}
        check_ground_truth(ds.ground_truth)
        gt_stamps, gt_poses = ds.ground_truth
        assert gt_stamps.tolist() == [0, 103663000, 207327000, 310990000]
        # by hand: camera 2 is 0.0625 m to the left (-x) of camera 0, same orientation
        expected = [pose(np.eye(3), [-0.0625, 0, 0]),
                    pose(R_Y90, [1.0, 2.0, 3.0 + 0.0625]),
                    pose(np.diag([-1.0, -1.0, 1.0]), [1.5 + 0.0625, -0.25, 4.0]),
                    pose(np.eye(3), [-0.0625, 0.0, 8.5])]
        assert np.array_equal(gt_poses, np.array(expected))


def test_kitti_full_offset_by_back_substitution(tmp_path):
    # P2 = K [I | t] with t = (0.0625, 0.125, 0.5): P2[:, 3] = K t
    P2 = [500.0, 0.0, 320.0, 500 * 0.0625 + 320 * 0.5, 0.0, 500.0, 240.0,
          500 * 0.125 + 240 * 0.5, 0.0, 0.0, 1.0, 0.5]
    assert camera_offset(np.reshape(P2, (3, 4)), "P2").tolist() == [0.0625, 0.125, 0.5]
    seq = write_kitti(tmp_path / "dataset", "00", KITTI_TIMES[:2], P0, P2, KITTI_POSES[:2])
    gt_poses = open_dataset(seq).ground_truth.poses
    assert np.array_equal(gt_poses[0], pose(np.eye(3), [-0.0625, -0.125, -0.5]))
    # rotated: t_w_c2 = t_w_c0 + R_y90 @ (-0.0625, -0.125, -0.5) = (1 - 0.5, 2 - 0.125, 3 + 0.0625)
    assert np.array_equal(gt_poses[1], pose(R_Y90, [0.5, 1.875, 3.0625]))


def test_kitti_published_calib_puts_camera_2_left_of_camera_0(tmp_path):
    """Sequence 00's calib.txt: camera 2 about 6 cm left (-x) of camera 0, camera 1 (the
    right grey camera, P1 t_x < 0) 54 cm right."""
    p0 = [7.188560e+02, 0, 6.071928e+02, 0, 0, 7.188560e+02, 1.852157e+02, 0, 0, 0, 1, 0]
    p2 = [7.188560e+02, 0, 6.071928e+02, 4.538225e+01, 0, 7.188560e+02, 1.852157e+02,
          -1.130887e-01, 0, 0, 1, 3.779761e-03]
    (tmp_path / "calib.txt").write_text(kitti_calib(p0, p2))
    calib = read_calib(tmp_path / "calib.txt")
    c2 = T_c0_camera(calib, 2)[:3, 3]
    assert c2[0] == pytest.approx(-0.0599, abs=2e-4) and abs(c2[1]) < 1e-2
    assert T_c0_camera(calib, 1)[0, 3] == pytest.approx(386.1448 / 718.856)


def test_kitti_test_sequence_has_no_ground_truth(tmp_path):
    seq = write_kitti(tmp_path / "dataset", "11", KITTI_TIMES, P0, P2_X)
    ds = open_dataset(seq)
    assert ds.ground_truth is None
    assert "no ground truth" in ds.description and "00-10" in ds.description


@pytest.mark.parametrize("edit, message", [
    (("times.txt", "0.5 0.6\n"), r"times\.txt:5: expected one time in seconds, got 2"),
    (("times.txt", "0.4s\n"), r"times\.txt:5: '0\.4s' is not a time in seconds"),
    (("poses", "1 0 0 0 0 1 0 0 0 0 1\n"), r"05\.txt:5: expected 12 numbers"),
    (("poses", "1 0 0 0 0 1 0 0 0 0 x 0\n"), r"05\.txt:5: 'x' is not a number"),
    (("poses", "2 0 0 0 0 1 0 0 0 0 1 0\n"), r"05\.txt:5: not a rigid transform"),
    (("calib.txt", "P4 1 2\n"), r"calib\.txt:6: expected 'KEY: 12 numbers'"),
])
def test_kitti_bad_lines(tmp_path, edit, message):
    seq = write_kitti(tmp_path / "dataset", "05", KITTI_TIMES, P0, P2_X, KITTI_POSES)
    name, text = edit
    path = tmp_path / "dataset" / "poses" / "05.txt" if name == "poses" else seq / name
    with path.open("a") as f:
        f.write(text)
    with pytest.raises(ValueError, match=message):
        open_dataset(seq)


def test_kitti_pose_count_must_match_times(tmp_path):
    seq = write_kitti(tmp_path / "dataset", "05", KITTI_TIMES, P0, P2_X, KITTI_POSES[:3])
    with pytest.raises(ValueError, match=r"05\.txt has 3 poses but times\.txt 4 times"):
        open_dataset(seq)
    (seq / "calib.txt").unlink()
    with pytest.raises(ValueError, match=r"calib\.txt does not exist"):
        open_dataset(seq)


# --- 7-Scenes ----------------------------------------------------------------------------

SEVEN_POSES = {
    0: pose(np.eye(3), [0.0, 0.0, 0.0]),
    1: pose(R_Y90, [0.5, -1.25, 2.0]),
    2: pose(R_X180, [0.25, 0.5, 0.75]),
    3: pose(np.eye(3), [1.0, 2.0, 3.0]),
}


def test_seven_scenes(tmp_path):
    seq = write_seven_scenes(tmp_path / "chess" / "seq-01", SEVEN_POSES, missing=[2])
    assert detect_format(seq) == ("seven_scenes", seq)
    for fmt in ("auto", "seven_scenes"):
        ds = open_dataset(seq, format=fmt)
        assert ds.format == "seven_scenes" and len(ds.source) == 4
        assert ds.description == ("7-Scenes chess/seq-01: 4 images at 30 fps, "
                                  "ground truth 4 poses, 4 depth images")
        frames, stamps, values = read_all(ds)
        assert stamps == [0, 33333333, 100000000]
        assert values == [pixel(0), pixel(1), pixel(3)]
        assert ds.source.stats.skipped == {"missing_file": 1}
        check_ground_truth(ds.ground_truth)
        gt_stamps, gt_poses = ds.ground_truth
        assert gt_stamps.tolist() == [0, 33333333, 66666667, 100000000]
        assert np.array_equal(gt_poses, np.array([SEVEN_POSES[n] for n in range(4)]))
    ds = open_dataset(seq, fps=15, stamps="fps")  # --fps sets the frame rate
    assert read_all(ds)[1] == [0, 66666667, 200000000]
    assert ds.ground_truth.stamps_ns.tolist() == [0, 66666667, 133333333, 200000000]


def test_seven_scenes_bad_and_invalid_pose_files(tmp_path):
    seq = write_seven_scenes(tmp_path / "seq-02", {n: SEVEN_POSES[n] for n in range(3)})
    (seq / "frame-000001.pose.txt").write_text("1 0 0 0\n0 1 0 0\n0 0 1 0\n0 0 0 inf\n")
    ds = open_dataset(seq)
    assert ds.ground_truth.stamps_ns.tolist() == [0, 66666667]
    assert "(1 not finite, left out)" in ds.description
    (seq / "frame-000002.pose.txt").write_text("1 0 0 0\n0 1 0 0\n0 0 1 zero\n0 0 0 1\n")
    with pytest.raises(ValueError, match=r"frame-000002\.pose\.txt:3: 'zero' is not a number"):
        open_dataset(seq)
    (seq / "frame-000002.pose.txt").write_text("1 0 0 0\n0 1 0 0\n0 0 1 0\n")
    with pytest.raises(ValueError, match=r"frame-000002\.pose\.txt: expected 16 numbers"):
        open_dataset(seq)


# --- generic folder, video, bag ----------------------------------------------------------

def test_folder_with_tum_names(tmp_path):
    for i, s in enumerate(TUM_STAMPS):
        write_png(tmp_path / "rgb" / f"{s}.png", i)
    ds = open_dataset(tmp_path / "rgb")
    assert ds.format == "folder" and ds.ground_truth is None
    assert ds.description == "image folder rgb: 4 images, stamps from file names (seconds)"
    assert read_all(ds)[1] == [1305031102175304000, 1305031102211214000, 1305031102243211000,
                               1305031102275326000]
    fps = open_dataset(tmp_path / "rgb", format="folder", stamps="fps", fps=10)
    assert read_all(fps)[1] == [0, 100000000, 200000000, 300000000]


def test_folder_with_euroc_names(tmp_path):
    for i, s in enumerate(EUROC_STAMPS):
        write_png(tmp_path / "data" / f"{s}.png", i)
    ds = open_dataset(tmp_path / "data", format="folder")
    assert "(nanoseconds)" in ds.description
    assert read_all(ds)[1:] == (EUROC_STAMPS, [pixel(i) for i in range(4)])


def test_folder_with_plain_names(tmp_path):
    for i in (1, 2, 10):
        write_png(tmp_path / "f" / f"frame_{i:03d}.png", i)
    ds = open_dataset(tmp_path / "f")
    assert ds.description == "image folder f: 3 images, stamps at 30 fps"
    assert read_all(ds)[1:] == ([0, 33333333, 66666667], [pixel(1), pixel(2), pixel(10)])
    ds = open_dataset(tmp_path / "f", stamps="filename")
    assert read_all(ds)[0] == [] and ds.source.stats.skipped == {"bad_stamp": 3}
    assert read_all(open_dataset(tmp_path / "f", fps=10))[1] == [0, 100000000, 200000000]


def test_video_and_bag_wrap_the_sources(tmp_path):
    seq = render_sequence(4, width=32, height=24)
    video = write_video(seq, tmp_path / "v.avi").path
    bag = write_bag(seq, tmp_path / "b", camera_info_topic=None).path
    ds = open_dataset(video)
    assert ds.format == "video" and ds.ground_truth is None
    assert read_all(ds)[1] == seq.index_stamps_ns.tolist()
    assert ds.description.startswith("video v.avi: 4 frames announced")
    ds = open_dataset(bag)
    assert ds.format == "bag" and ds.ground_truth is None
    assert read_all(ds)[1] == seq.stamps_ns.tolist()
    assert ds.description.startswith("bag b: topic /camera/image_raw")
    assert open_dataset(bag, format="bag", stamps="bag").source.stamp_source == "bag"
    assert open_dataset(next(bag.glob("*.db3"))).format == "bag"


# --- the front door ----------------------------------------------------------------------

def test_detection_errors(tmp_path):
    assert set(FORMATS) == {"tum_rgbd", "euroc", "kitti", "seven_scenes", "folder", "video",
                            "bag"}
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError) as err:
        open_dataset(tmp_path / "empty")
    text = str(err.value)
    assert "cannot tell the dataset format" in text
    for what in ("rgb.txt", "mav0/cam0/data.csv", "image_2/ and times.txt",
                 "frame-XXXXXX.color.png", "metadata.yaml", "image files", *FORMATS):
        assert what in text
    with pytest.raises(FileNotFoundError, match="does not exist"):
        open_dataset(tmp_path / "nope")
    tum = write_tum_rgbd(tmp_path / "tum", TUM_STAMPS[:1])
    with pytest.raises(ValueError, match=r"is not a euroc dataset: neither .*mav0/cam0/"
                                         r"data\.csv nor .*cam0/data\.csv exists"):
        open_dataset(tum, format="euroc")
    with pytest.raises(ValueError, match=r"is not a tum_rgbd dataset: .*empty/rgb\.txt does "
                                         r"not exist"):
        open_dataset(tmp_path / "empty", format="tum_rgbd")
    (tmp_path / "k" / "image_2").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"is not a kitti dataset: .*k/times\.txt does not "
                                         r"exist"):
        open_dataset(tmp_path / "k", format="kitti")
    with pytest.raises(ValueError, match="is not a seven_scenes dataset: no frame-"):
        open_dataset(tum, format="seven_scenes")
    with pytest.raises(ValueError, match=r"rgb\.txt is an index file, not a sequence"):
        open_dataset(tum / "rgb.txt")
    with pytest.raises(ValueError, match="unknown format 'tum'"):
        open_dataset(tum, format="tum")
    with pytest.raises(ValueError, match="tum_rgbd stamps come from rgb.txt"):
        open_dataset(tum, stamps="fps")
    with pytest.raises(ValueError, match="fps must be a positive number"):
        open_dataset(tum, fps=0)


def test_nothing_listed_exists(tmp_path):
    root = write_tum_rgbd(tmp_path / "s", TUM_STAMPS[:2], missing=[0, 1])
    with pytest.raises(FileNotFoundError, match=r"none of the 2 images .*rgb\.txt lists "
                                                r"exists"):
        open_dataset(root)
    (root / "rgb.txt").write_text("# color images\n")
    with pytest.raises(ValueError, match="lists no images"):
        open_dataset(root)


def test_write_ground_truth_tum(tmp_path):
    seq = write_euroc(tmp_path / "s", EUROC_STAMPS[:2], EUROC_GT, T_BS=EUROC_T_BS)
    ds = open_dataset(seq)
    out = write_ground_truth_tum(ds, tmp_path / "groundtruth.tum")
    stamps, poses = read_tum(out)
    assert np.array_equal(stamps, ds.ground_truth.stamps_ns)
    assert np.allclose(poses, ds.ground_truth.poses, atol=1e-12)
    with pytest.raises(ValueError, match="has no ground truth"):
        write_ground_truth_tum(open_dataset(write_tum_rgbd(tmp_path / "t", TUM_STAMPS[:1])),
                               tmp_path / "x.tum")


def test_missing_file_is_a_skip_reason():
    assert "missing_file" in SKIP_REASONS


def test_importing_the_package_does_not_import_torch():
    code = ("import sys, lingbot_ros.tools.sources.datasets; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_folder_source_is_an_image_folder_source(tmp_path):
    write_png(tmp_path / "f" / "a.png", 0)
    assert isinstance(open_dataset(tmp_path / "f").source, ImageFolderSource)

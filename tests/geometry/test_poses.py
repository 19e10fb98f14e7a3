"""ROS conventions (REP-103/105), quaternion and TUM round trips, and the TUM file read back
with evo (APE 0 against itself)."""
import math

import numpy as np
import pytest
import torch

from lingbot_ros.geometry import (R_BODY_OPTICAL, T_BODY_OPTICAL, T_OPTICAL_BODY, Trajectory,
                                  c2w_to_map, format_stamp, matrix_to_tq, parse_stamp,
                                  quaternion_to_rotation, read_tum, rigid_inverse,
                                  rotation_to_quaternion, tq_to_matrix, write_tum)


def random_quats(rng, n):
    q = rng.normal(size=(n, 4))
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def random_poses(rng, n):
    return tq_to_matrix(rng.normal(size=(n, 3)), random_quats(rng, n))


def axis_angle(axis, angle):
    axis = np.asarray(axis, float) / np.linalg.norm(axis)
    kx = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + math.sin(angle) * kx + (1 - math.cos(angle)) * kx @ kx


# --- REP-103 / REP-105 -------------------------------------------------------------------

def test_optical_to_body_rotation_follows_rep103():
    r = R_BODY_OPTICAL
    assert np.allclose(r @ r.T, np.eye(3)) and np.isclose(np.linalg.det(r), 1.0)
    assert np.allclose(r @ [0, 0, 1], [1, 0, 0])  # optical z (forward) = body x (forward)
    assert np.allclose(r @ [1, 0, 0], [0, -1, 0])  # optical x (right)   = body -y (y is left)
    assert np.allclose(r @ [0, 1, 0], [0, 0, -1])  # optical y (down)    = body -z (z is up)
    # the standard camera_link -> camera_optical_frame rotation: RPY (-pi/2, 0, -pi/2)
    rz, rx = axis_angle([0, 0, 1], -math.pi / 2), axis_angle([1, 0, 0], -math.pi / 2)
    assert np.allclose(r, rz @ rx)
    assert np.allclose(T_BODY_OPTICAL @ T_OPTICAL_BODY, np.eye(4))
    with pytest.raises(ValueError):
        T_BODY_OPTICAL[0, 0] = 1.0  # read-only constants


def test_first_frame_is_the_map_origin_and_motions_map_to_ros_axes():
    eye = np.eye(4)
    assert np.allclose(c2w_to_map(eye, "body"), eye)
    assert np.allclose(c2w_to_map(eye, "optical"), T_BODY_OPTICAL)
    # moving 1 along the optical axis (forward) = +x in map; down = -z; right = -y
    for d, expect in (([0, 0, 1], [1, 0, 0]), ([0, 1, 0], [0, 0, -1]), ([1, 0, 0], [0, -1, 0])):
        c2w = np.eye(4)
        c2w[:3, 3] = d
        assert np.allclose(c2w_to_map(c2w, "body")[:3, 3], expect)
        assert np.allclose(c2w_to_map(c2w, "optical")[:3, 3], expect)
    # turning left by 30 degrees (about optical -y, "up") = positive yaw about map +z
    c2w = np.eye(4)
    c2w[:3, :3] = axis_angle([0, -1, 0], math.radians(30))
    t, q = matrix_to_tq(c2w_to_map(c2w, "body"))
    assert np.allclose(q, [0, 0, math.sin(math.radians(15)), math.cos(math.radians(15))])
    # pitching the nose up (about optical x, right... up = -y) = negative pitch about map +y
    c2w[:3, :3] = axis_angle([1, 0, 0], math.radians(10))  # z moves towards -y: looks up
    body = c2w_to_map(c2w, "body")
    assert body[2, 0] > 0  # the body x axis (forward) now points up in map


def test_map_conversions_round_trip_and_take_a_mount_and_an_origin():
    rng = np.random.default_rng(0)
    c2w = random_poses(rng, 6)
    back = {"body": lambda m: T_OPTICAL_BODY @ m @ T_BODY_OPTICAL,
            "optical": lambda m: T_OPTICAL_BODY @ m}
    for frame in ("body", "optical"):
        assert np.allclose(back[frame](c2w_to_map(c2w, frame)), c2w)
    mount = random_poses(rng, 1)[0]  # any rigid body <- optical mount (e.g. base_link)
    m = c2w_to_map(c2w, "body", T_body_optical=mount)
    assert np.allclose(m, mount @ c2w @ np.linalg.inv(mount))
    assert np.allclose(rigid_inverse(mount) @ m @ mount, c2w)
    # origin: the first prediction is not the identity -> it becomes the map origin
    rel = c2w_to_map(c2w, "body", origin_c2w=c2w[0])
    assert np.allclose(rel[0], np.eye(4))
    # torch CPU tensors are accepted; CUDA ones must be moved by the caller
    assert np.allclose(c2w_to_map(torch.from_numpy(c2w).float(), "body"),
                       c2w_to_map(c2w, "body"), atol=1e-6)
    with pytest.raises(ValueError, match="frame must be"):
        c2w_to_map(c2w, "camera")
    with pytest.raises(ValueError, match="shape"):
        c2w_to_map(np.eye(3))


# --- quaternions -------------------------------------------------------------------------

def test_quaternion_round_trips_cover_every_branch():
    rng = np.random.default_rng(1)
    q = random_quats(rng, 200)
    # near-180-degree rotations about each axis exercise Shepperd's non-trace branches
    q = np.concatenate([q, [[1, 0, 0, 1e-9], [0, 1, 0, 0], [0, 0, 1, 1e-12], [0.6, 0.8, 0, 0]]])
    r = quaternion_to_rotation(q)
    q2 = rotation_to_quaternion(r)
    assert np.all(q2[:, 3] >= 0)
    canon = np.where(q[:, 3:4] < 0, -q, q) / np.linalg.norm(q, axis=1, keepdims=True)
    assert np.allclose(quaternion_to_rotation(q2), r, atol=1e-12)
    assert np.allclose(np.abs(np.sum(q2 * canon, axis=1)), 1.0, atol=1e-9)


def test_quaternion_convention_matches_scipy_and_the_model():
    rotation = pytest.importorskip("scipy.spatial.transform").Rotation
    rng = np.random.default_rng(2)
    q = random_quats(rng, 20)
    assert np.allclose(quaternion_to_rotation(q), rotation.from_quat(q).as_matrix())  # xyzw
    from lingbot_ros.model.pose import quaternion_to_matrix
    assert np.allclose(quaternion_to_rotation(q),
                       quaternion_to_matrix(torch.from_numpy(q)).numpy(), atol=1e-12)


def test_matrix_tq_round_trip_batched():
    rng = np.random.default_rng(3)
    m = random_poses(rng, 12).reshape(3, 4, 4, 4)
    t, q = matrix_to_tq(m)
    assert t.shape == (3, 4, 3) and q.shape == (3, 4, 4)
    assert np.allclose(tq_to_matrix(t, q), m, atol=1e-12)
    with pytest.raises(ValueError, match="zero quaternion"):
        tq_to_matrix([0, 0, 0], [0, 0, 0, 0])


# --- stamps and TUM ----------------------------------------------------------------------

@pytest.mark.parametrize("ns,text", [(0, "0.000000000"), (1, "0.000000001"),
                                     (33_333_333, "0.033333333"),
                                     (1_700_000_000_123_456_789, "1700000000.123456789"),
                                     (-1_500_000_000, "-1.500000000")])
def test_stamps_are_exact_to_the_nanosecond(ns, text):
    assert format_stamp(ns) == text
    assert parse_stamp(text) == ns


def test_parse_stamp_variants():
    assert parse_stamp("1305031102.175304") == 1_305_031_102_175_304_000  # TUM RGB-D, µs
    assert parse_stamp("1.5e3") == 1_500_000_000_000
    assert parse_stamp(" 12 ") == 12_000_000_000
    for bad in ("abc", "nan", "inf", ""):
        with pytest.raises(ValueError):
            parse_stamp(bad)


def test_tum_round_trip_is_bit_exact(tmp_path):
    rng = np.random.default_rng(4)
    poses = random_poses(rng, 25)
    poses[:, :3, :3] = quaternion_to_rotation(rotation_to_quaternion(poses[:, :3, :3]))
    stamps = 1_700_000_000_000_000_000 + np.arange(25) * 33_333_333
    path = write_tum(tmp_path / "traj.tum", stamps, poses)
    s2, p2 = read_tum(path)
    assert s2.dtype == np.int64 and np.array_equal(s2, stamps)
    assert np.allclose(p2, poses, atol=1e-15, rtol=0)
    assert not list(tmp_path.glob("*.tmp"))
    first = path.read_text().splitlines()[2].split()  # after TUM_HEADER and the column names
    assert len(first) == 8 and first[0] == "1700000000.000000000"


def test_read_tum_tolerates_comments_and_reports_bad_lines(tmp_path):
    p = tmp_path / "x.tum"
    p.write_text("# header\n\n1.0 0 0 0 0 0 0 1\n2.0,1,2,3,0,0,0,1\n")
    stamps, poses = read_tum(p)
    assert list(stamps) == [1_000_000_000, 2_000_000_000]
    assert np.allclose(poses[1, :3, 3], [1, 2, 3])
    p.write_text("1.0 0 0 0 0 0 0 1\n2.0 1 2 3 0 0 1\n")
    with pytest.raises(ValueError, match=":2: expected 8 fields"):
        read_tum(p)
    p.write_text("1.0 0 0 x 0 0 0 1\n")
    with pytest.raises(ValueError, match=":1:"):
        read_tum(p)
    p.write_text("")
    assert read_tum(p)[1].shape == (0, 4, 4)
    with pytest.raises(ValueError, match="stamps for"):
        write_tum(p, [1, 2], np.eye(4)[None])
    with pytest.raises(ValueError, match="non-finite"):
        write_tum(p, [1], np.full((1, 4, 4), np.nan))


def test_write_tum_never_follows_nor_replaces_what_is_not_a_regular_file(tmp_path):
    import os
    import stat

    pose = np.eye(4)[None]
    pointee = tmp_path / "precious.txt"
    pointee.write_text("keep me\n")
    (tmp_path / "link.tum").symlink_to(pointee)
    os.mkfifo(tmp_path / "fifo.tum")
    (tmp_path / "folder.tum").mkdir()
    for name, kind, is_kind in (("link.tum", "a symlink", stat.S_ISLNK),
                                ("fifo.tum", "a FIFO", stat.S_ISFIFO),
                                ("folder.tum", "a folder", stat.S_ISDIR)):
        with pytest.raises(FileExistsError, match=f"is {kind}, not a regular file"):
            write_tum(tmp_path / name, [1], pose)
        assert is_kind(os.lstat(tmp_path / name).st_mode), name
    assert pointee.read_text() == "keep me\n" and not list((tmp_path / "folder.tum").iterdir())
    # A file we wrote is replaced, atomically; one we did not write is not (a params file,
    # authorized_keys: anything without our header). Nothing temporary is left by any of it.
    write_tum(tmp_path / "old.tum", [5, 6], np.tile(pose, (2, 1, 1)))
    write_tum(tmp_path / "old.tum", [1], pose)
    assert read_tum(tmp_path / "old.tum")[0].tolist() == [1]
    (tmp_path / "theirs.tum").write_text("# frame: x\n1.0 0 0 0 0 0 0 1\n")
    with pytest.raises(FileExistsError, match="not written by lingbot_ros"):
        write_tum(tmp_path / "theirs.tum", [1], pose)
    assert (tmp_path / "theirs.tum").read_text() == "# frame: x\n1.0 0 0 0 0 0 0 1\n"
    assert not list(tmp_path.glob("*.tmp"))


def test_tum_file_reads_back_in_evo_with_zero_ape(tmp_path):
    from evo.core import metrics, sync
    from evo.core.trajectory import PoseTrajectory3D
    from evo.main_ape import ape
    from evo.tools import file_interface

    rng = np.random.default_rng(5)
    traj = Trajectory()
    stamps = 1_700_000_000_000_000_000 + np.arange(40) * 33_333_333
    c2w = random_poses(rng, 40)
    for s, m in zip(stamps, c2w_to_map(c2w, "body")):
        traj.append(int(s), m)
    path = traj.save_tum(tmp_path / "est.tum")

    est = file_interface.read_tum_trajectory_file(str(path))
    assert est.num_poses == 40
    assert np.allclose(est.timestamps, stamps / 1e9, rtol=0, atol=1e-6)
    assert np.allclose(est.poses_se3, traj.poses, atol=1e-12)
    ref = file_interface.read_tum_trajectory_file(str(path))
    result = ape(ref, est, pose_relation=metrics.PoseRelation.full_transformation,
                 align=False, correct_scale=False)
    assert result.stats["rmse"] < 1e-9
    # a similarity-transformed copy: APE 0 after evo's Sim(3) alignment (evo_ape -as)
    moved = PoseTrajectory3D(poses_se3=[m for m in traj.poses], timestamps=stamps / 1e9)
    moved.scale(2.5)
    moved.transform(random_poses(rng, 1)[0])
    ref2, est2 = sync.associate_trajectories(ref, moved)
    res2 = ape(ref2, est2, pose_relation=metrics.PoseRelation.translation_part, align=True,
               correct_scale=True)
    assert res2.stats["rmse"] < 1e-6
    apem = metrics.APE(metrics.PoseRelation.translation_part)
    apem.process_data((ref, est))
    assert apem.get_statistic(metrics.StatisticsType.rmse) < 1e-9

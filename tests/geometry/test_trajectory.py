"""The stamped trajectory: strictly increasing stamps, refused appends change nothing, a
TUM round trip, reads while appending from another thread."""
import threading

import numpy as np
import pytest

from lingbot_ros.geometry import Trajectory, read_tum
from tests.geometry.sim3_cases import random_c2w


def test_trajectory_append_reset_save_load(tmp_path):
    traj = Trajectory()
    assert len(traj) == 0 and traj.poses.shape == (0, 4, 4)
    rng = np.random.default_rng(6)
    poses = random_c2w(rng, 5)
    for i, m in enumerate(poses):
        traj.append(1000 + i, m)
    with pytest.raises(ValueError, match="not after the last one"):
        traj.append(1004, poses[0])
    with pytest.raises(ValueError, match="non-finite"):
        traj.append(2000, np.full((4, 4), np.inf))
    with pytest.raises(ValueError, match="4x4"):
        traj.append(2000, np.eye(3))
    assert len(traj) == 5  # failed appends change nothing
    back = Trajectory.load_tum(traj.save_tum(tmp_path / "t.tum"))
    assert np.array_equal(back.stamps_ns, traj.stamps_ns)
    assert np.allclose(back.poses, traj.poses, atol=1e-12)
    traj.reset()
    assert len(traj) == 0
    traj.append(5, np.eye(4))  # after a reset stamps may start over
    assert traj.stamps_ns.tolist() == [5]


def test_trajectory_is_thread_safe():
    traj = Trajectory()
    stop = threading.Event()

    def reader():
        while not stop.is_set():
            s, p = traj.snapshot()
            assert len(s) == len(p)

    t = threading.Thread(target=reader)
    t.start()
    for i in range(2000):
        traj.append(i, np.eye(4))
    stop.set()
    t.join()
    assert len(traj) == 2000


def test_a_tum_file_names_its_frame_in_a_comment_that_readers_skip(tmp_path):
    traj = Trajectory()
    traj.append(1, np.eye(4))
    path = traj.save_tum(tmp_path / "t.tum")
    marker, first = path.read_text().splitlines()[:2]  # marker: TUM_HEADER (ours)
    assert marker == "# lingbot_ros trajectory (TUM)"
    assert first.startswith("# frame: camera_optical") and "first frame" in first
    stamps, poses = read_tum(path)
    assert stamps.tolist() == [1] and np.array_equal(poses[0], np.eye(4))

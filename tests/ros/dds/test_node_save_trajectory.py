"""~/save_trajectory after a bag replay: a TUM file that evo reads, one pose per processed frame
with the image stamps and the published poses, answered with the absolute path written (a
relative path is files.root's); a bad path is refused with a message; an
existing target that is not a regular file (FIFO, symlink, folder) is neither followed nor
replaced, and no temporary file is left behind by a failure."""
from __future__ import annotations

import os
import stat

import numpy as np

from tests.ros.node_harness import IMAGE_TOPIC, NodeProcess, Probe, make_bag
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture
from tests.ros.ros_helpers import finish, start_replay

FRAMES = 12
PARAMS = {"qos.image": "reliable", "qos.image_depth": 100, "queue_size": 100}


def save(probe, path):
    from lingbot_ros_interfaces.srv import SaveTrajectory
    return probe.call("save_trajectory", SaveTrajectory.Request(path=str(path)))


def test_save_trajectory_is_read_by_evo(tmp_path, ros_env):
    from evo.tools.file_interface import read_tum_trajectory_file

    bag = tmp_path / "bag"
    stamps = make_bag(bag, FRAMES, "sqlite3")
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, Probe() as probe:
        probe.wait_active(node)
        rc, _, err = finish(start_replay([str(bag), "--topics", IMAGE_TOPIC,
                                          "--wait-for-subscribers", "1", "--wait-timeout", "30",
                                          "--wait-for-all-acked", "15"], ros_env), timeout=90)
        assert rc == 0, err
        probe.wait_until(lambda: len(probe.poses) >= FRAMES, 60, f"{FRAMES} poses")
        assert probe.pose_stamps() == stamps

        out = tmp_path / "trajectory.tum"
        reply = save(probe, out)
        assert reply.success, reply.message
        assert reply.num_poses == FRAMES and str(out.resolve()) in reply.message
        # The file names its frame (a bare camera here: the camera frame is tracked).
        assert out.read_text().splitlines()[1].startswith(
            "# frame: camera_optical_frame in map (REP-105, as ~/pose)")

        # Not writable: a missing folder, an empty path. Nothing is written, the node says why.
        missing = tmp_path / "no_such_dir" / "t.tum"
        reply = save(probe, missing)
        assert not reply.success and "no_such_dir" in reply.message, reply.message
        assert reply.num_poses == 0 and not missing.parent.exists()
        reply = save(probe, "")
        assert not reply.success and reply.message

        # A relative path is files.root's (the harness sets it to tmp_path; the node runs in
        # REPO); the answer names the absolute, resolved path that was written.
        rel_dir = tmp_path / "rel"
        rel_dir.mkdir()
        reply = save(probe, "rel/t.tum")
        assert reply.success, reply.message
        written = (rel_dir / "t.tum").resolve()
        assert reply.message.endswith(f" to {written}"), reply.message
        assert written.read_text() == out.read_text()

        # A FIFO is refused and stays a FIFO (never opened: the node would block on it).
        fifo = tmp_path / "fifo.tum"
        os.mkfifo(fifo)
        reply = save(probe, fifo)
        assert not reply.success and reply.num_poses == 0, reply.message
        assert "FIFO" in reply.message and str(fifo.resolve()) in reply.message, reply.message
        assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
        # A symlink is refused: the link stays, the file it points to is unchanged.
        pointee = tmp_path / "precious.txt"
        pointee.write_text("keep me\n")
        link = tmp_path / "link.tum"
        link.symlink_to(pointee)
        reply = save(probe, link)
        assert not reply.success and "symlink" in reply.message, reply.message
        assert link.is_symlink() and os.readlink(link) == str(pointee)
        assert pointee.read_text() == "keep me\n"
        # A failure after the temporary file was written (the target is an existing folder,
        # which fails as root too) leaves no temporary file behind, and the folder intact.
        folder = tmp_path / "folder.tum"
        folder.mkdir()
        (folder / "inside").write_text("x")
        reply = save(probe, folder)
        assert not reply.success and "folder" in reply.message, reply.message
        assert [p.name for p in folder.iterdir()] == ["inside"]
        # Outside files.root ('..', an absolute path elsewhere): refused, nothing written.
        for outside in ("../escaped.tum", str(tmp_path.parent / "escaped.tum")):
            reply = save(probe, outside)
            assert not reply.success and "outside files.root" in reply.message, reply.message
        assert not (tmp_path.parent / "escaped.tum").exists()
        # A regular file the node did not write (its params file, authorized_keys) is never
        # replaced; one it wrote is.
        theirs = tmp_path / "params.yaml"
        theirs.write_text("lingbot_ros:\n  ros__parameters: {}\n")
        reply = save(probe, theirs)
        assert not reply.success and "not written by lingbot_ros" in reply.message, reply.message
        assert theirs.read_text() == "lingbot_ros:\n  ros__parameters: {}\n"
        assert save(probe, out).success
        assert not list(tmp_path.glob("*.tmp")) and not list(rel_dir.glob("*.tmp"))
        published = [g.msg.pose for g in probe.snapshot("poses")]
        assert node.poll() is None, node.log()[-3000:]

    traj = read_tum_trajectory_file(str(out))
    assert traj.num_poses == FRAMES
    np.testing.assert_allclose(traj.timestamps, np.array(stamps) / 1e9, rtol=0, atol=1e-6)
    # Exact stamps in the file's text (integer nanoseconds as seconds.nanoseconds).
    lines = [ln.split() for ln in out.read_text().splitlines() if not ln.startswith("#")]
    file_stamps = [int(sec) * 10**9 + int(frac.ljust(9, "0")) for sec, frac in
                   (ln[0].split(".") for ln in lines)]
    assert file_stamps == stamps
    # The poses are the published ones (map frame; a quaternion and its negation are equal).
    xyz = np.array([[p.position.x, p.position.y, p.position.z] for p in published])
    np.testing.assert_allclose(traj.positions_xyz, xyz, atol=1e-9)
    wxyz = np.array([[p.orientation.w, p.orientation.x, p.orientation.y, p.orientation.z]
                     for p in published])
    dots = np.abs(np.sum(traj.orientations_quat_wxyz * wxyz, axis=1))
    np.testing.assert_allclose(dots, 1.0, atol=1e-9)
    # The map is the first camera's body frame: frame 0 sits at its origin, optical axes.
    from lingbot_ros.geometry import R_BODY_OPTICAL, rotation_to_quaternion
    x, y, z, w = rotation_to_quaternion(R_BODY_OPTICAL)
    np.testing.assert_allclose(traj.positions_xyz[0], 0, atol=1e-9)
    assert abs(np.dot(traj.orientations_quat_wxyz[0], [w, x, y, z])) > 1 - 1e-9

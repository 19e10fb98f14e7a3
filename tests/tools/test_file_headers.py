"""The units header of the files the tools write: TUM ``#`` lines and PLY ``comment`` lines
(lingbot_ros.geometry's writers), still read by our readers and by evo."""
import numpy as np
import pytest
from evo.tools import file_interface

from lingbot_ros.geometry import (read_ply, read_ply_comments, read_tum, read_tum_header,
                                  write_ply, write_tum)


def poses(n=4):
    out = np.tile(np.eye(4), (n, 1, 1))
    out[:, :3, 3] = np.arange(3 * n).reshape(n, 3) * 0.1
    return out


def test_tum_header_lines_round_trip_and_evo_reads_the_file(tmp_path):
    path = write_tum(tmp_path / "t.tum", [1, 2, 3, 4], poses(), frame="camera in world",
                     header=["units: m", "scale: depth, 0.25 m per model unit"])
    assert read_tum_header(path) == ["frame: camera in world", "units: m",
                                     "scale: depth, 0.25 m per model unit",
                                     "timestamp tx ty tz qx qy qz qw"]
    stamps, back = read_tum(path)
    np.testing.assert_array_equal(back, poses())
    traj = file_interface.read_tum_trajectory_file(str(path))
    np.testing.assert_allclose(traj.positions_xyz, poses()[:, :3, 3])
    with pytest.raises(ValueError, match="line break"):
        write_tum(tmp_path / "bad.tum", [1], poses(1), header=["units: m\n0 0 0 0 0 0 0 1"])
    assert not (tmp_path / "bad.tum").exists()


def test_ply_comments_round_trip(tmp_path):
    xyz = np.random.default_rng(0).random((5, 3)).astype(np.float32)
    rgb = np.full((5, 3), 7, np.uint8)
    path = write_ply(tmp_path / "p.ply", xyz, rgb, comments=["units: m", "scale: fixed, 2.0"])
    assert read_ply_comments(path) == ["units: m", "scale: fixed, 2.0"]
    back, colours = read_ply(path)
    np.testing.assert_array_equal(back, xyz)
    np.testing.assert_array_equal(colours, rgb)
    assert read_ply_comments(write_ply(tmp_path / "q.ply", xyz, rgb)) == []
    with pytest.raises(ValueError, match="one line"):
        write_ply(tmp_path / "r.ply", xyz, rgb, comments=["a\nend_header"])

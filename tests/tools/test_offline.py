"""lingbot-ros-offline end to end on a generated image folder, video and bags."""
import json
import subprocess
import sys

import numpy as np
import pytest
from evo.core import metrics, sync
from evo.tools import file_interface

from lingbot_ros.tools.offline import main
from lingbot_ros.session import read_ply
from lingbot_ros.tools.synthetic import render_sequence
from lingbot_ros.tools.synthetic_writers import write_bag, write_image_folder, write_video

FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--rollover", "8",
        "--keyframes", "every_n", "--no-progress"]


@pytest.fixture(scope="module")
def seq():
    return render_sequence(16, 80, 60)


def read_summary(out):
    return json.loads((out / "summary.json").read_text())


def ape_against_itself(tum_path) -> float:
    traj = file_interface.read_tum_trajectory_file(str(tum_path))
    ref, est = sync.associate_trajectories(traj, traj)
    ape = metrics.APE(metrics.PoseRelation.translation_part)
    ape.process_data((ref, est))
    return ape.get_statistic(metrics.StatisticsType.rmse)


def test_image_folder_with_a_corrupt_file_ply_plot_and_gt(tmp_path, seq):
    written = write_image_folder(seq, tmp_path / "frames")
    bad = sorted((tmp_path / "frames").glob("*.png"))[5]
    bad.write_bytes(bad.read_bytes()[:100])  # truncated PNG
    out = tmp_path / "out"
    assert main([str(written.path), "--out", str(out), "--ply", "--plot",
                 "--gt", str(written.gt_path), *FAST]) == 0
    s = read_summary(out)
    assert s["random_weights"] is True
    assert s["frames_read"] == 15 and s["frames_skipped_by_source"] == 1
    assert s["frames_processed"] == 15 and s["rollovers"] >= 1
    assert s["keyframes"] + s["non_keyframes"] == 15
    assert s["ape_rmse_sim3"] is not None and np.isfinite(s["ape_rmse_sim3"])
    xyz, rgb = read_ply(out / "points.ply")
    assert len(xyz) == s["num_points"] > 0 and np.isfinite(xyz).all() and rgb.dtype == np.uint8
    assert (out / "trajectory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    traj = file_interface.read_tum_trajectory_file(str(out / "trajectory.tum"))
    assert traj.num_poses == 15
    np.testing.assert_allclose(traj.positions_xyz[0], 0.0, atol=1e-9)  # world = first camera
    assert ape_against_itself(out / "trajectory.tum") == 0.0


def test_video(tmp_path, seq):
    written = write_video(seq, tmp_path / "clip.mp4")
    out = tmp_path / "out"
    assert main([str(written.path), "--out", str(out), *FAST]) == 0
    s = read_summary(out)
    assert s["frames_processed"] == len(seq)
    traj = file_interface.read_tum_trajectory_file(str(out / "trajectory.tum"))
    assert traj.num_poses == len(seq)
    assert ape_against_itself(out / "trajectory.tum") == 0.0


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_bag_through_the_console_entry_point(tmp_path, seq, storage):
    written = write_bag(seq, tmp_path / f"bag_{storage}", storage=storage)
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "lingbot_ros.tools.offline", str(written.path),
                           "--out", str(out), *FAST], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "RANDOM weights" in proc.stderr  # says loudly that poses mean nothing
    s = read_summary(out)
    assert s["frames_processed"] == len(seq)
    stamps = file_interface.read_tum_trajectory_file(str(out / "trajectory.tum")).timestamps
    np.testing.assert_allclose(stamps, seq.stamps_ns / 1e9, atol=1e-9)  # bag stamps kept
    assert ape_against_itself(out / "trajectory.tum") == 0.0


def test_missing_input_is_a_clear_error(tmp_path, capsys):
    assert main([str(tmp_path / "nope"), "--out", str(tmp_path / "o"), *FAST]) == 2

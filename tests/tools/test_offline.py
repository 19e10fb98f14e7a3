"""lingbot-ros-offline end to end on a generated image folder, video and bags."""
import json
import subprocess
import sys

import numpy as np
import pytest
from evo.core import metrics, sync
from evo.tools import file_interface

from lingbot_ros.geometry import read_ply
from lingbot_ros.tools.offline.cli import main
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_bag, write_image_folder, write_video

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
    ate = s["evaluation"]["ate_sim3"]
    assert s["evaluation"]["error"] is None and np.isfinite(ate["rmse"])
    assert s["evaluation"]["associated"] == 15
    assert (out / "groundtruth.tum").is_file()
    # What made the numbers: settings, version, stamp range.
    assert s["settings"]["window"] == 4 and s["settings"]["keyframes"]["policy"] == "every_n"
    assert s["settings"]["input_size_hw"] == [42, 56] and s["version"]
    assert s["stamps"]["duration_s"] == pytest.approx(15 / 30, abs=1e-6)
    xyz, rgb = read_ply(out / "points.ply")
    assert len(xyz) == s["num_points"] > 0 and np.isfinite(xyz).all() and rgb.dtype == np.uint8
    # the keyframe points went through the node's voxel map: one point per voxel, bounded
    voxel = s["point_map"]["voxel_size"]
    assert s["point_map"]["initial_voxel_size"] == 0.005 and s["num_points"] <= 2_000_000
    keys = np.floor(xyz.astype(np.float64) / voxel)
    assert len(np.unique(keys, axis=0)) == len(xyz)
    assert (out / "trajectory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    traj = file_interface.read_tum_trajectory_file(str(out / "trajectory.tum"))
    assert traj.num_poses == 15
    np.testing.assert_allclose(traj.positions_xyz[0], 0.0, atol=1e-9)  # world = first camera
    assert ape_against_itself(out / "trajectory.tum") == 0.0


@pytest.mark.parametrize("flag,value", [("--ply-voxel", "0"), ("--ply-max-points", "3")])
def test_a_bad_point_map_setting_fails_before_the_run(tmp_path, seq, caplog, flag, value):
    written = write_image_folder(seq, tmp_path / "frames")
    out = tmp_path / "out"
    assert main([str(written.path), "--out", str(out), "--ply", flag, value, *FAST]) == 2
    assert not out.exists()  # nothing was run nor written


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
    proc = subprocess.run([sys.executable, "-m", "lingbot_ros.tools.offline.cli", str(written.path),
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


def test_plot_without_matplotlib_fails_before_the_run(tmp_path, seq, monkeypatch, caplog):
    written = write_image_folder(seq, tmp_path / "frames")
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # as if not installed
    out = tmp_path / "out"
    assert main([str(written.path), "--out", str(out), "--plot", *FAST]) == 2
    assert "--plot needs matplotlib" in caplog.text
    assert not out.exists()  # nothing ran


def test_help_shows_every_default(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for default in ("(default: 30.0)", "(default: 0.01)", "(default: 518)", "(default: auto)",
                    "(default: lingbot_out)", "(default: 64)"):
        assert default in text, default


def test_progress_totals_come_from_the_source(tmp_path, seq):
    from lingbot_ros.tools.offline.cli import source_total
    from lingbot_ros.tools.sources.files import open_source
    assert source_total(open_source(write_video(seq, tmp_path / "clip.avi").path)) == len(seq)
    assert source_total(open_source(write_bag(seq, tmp_path / "bag", storage="mcap").path)) == \
        len(seq)
    assert source_total(open_source(write_image_folder(seq, tmp_path / "f").path)) == len(seq)


def test_ground_truth_shifted_by_a_millisecond_still_associates(tmp_path, seq):
    """The issue's case: exact stamp matching found nothing; evo's nearest-stamp rule (10 ms)
    associates every pose, and the numbers are evo's (tests/tools/test_trajectory_eval.py)."""
    from lingbot_ros.geometry import read_tum, write_tum
    written = write_image_folder(seq, tmp_path / "frames")
    stamps, poses = read_tum(written.gt_path)
    shifted = tmp_path / "shifted.tum"
    write_tum(shifted, stamps + 1_000_000, poses)
    out = tmp_path / "out"
    assert main([str(written.path), "--out", str(out), "--gt", str(shifted), *FAST]) == 0
    ev = read_summary(out)["evaluation"]
    assert ev["error"] is None and ev["associated"] == len(seq)
    too_strict = tmp_path / "strict"
    assert main([str(written.path), "--out", str(too_strict), "--gt", str(shifted),
                 "--max-diff", "0.0005", *FAST]) == 0
    ev = read_summary(too_strict)["evaluation"]
    assert ev["associated"] == 0 and "--max-diff" in ev["error"]


def test_sliced_rollovers_offline(tmp_path):
    """--rollover-mode sliced reaches the session (as a node at camera rate runs it): the
    poses equal blocking ones up to the first rollover, then go their own way (the segment
    ends a few frames later, when its next anchors are built); the settings say which."""
    written = write_image_folder(render_sequence(40, 80, 60), tmp_path / "frames")
    common = [str(written.path), "--width", "56", "--scale-frames", "2", "--window", "4",
              "--rollover", "4", "--keyframes", "all", "--no-progress"]
    tums, summaries = {}, {}
    for mode in ("blocking", "sliced"):
        out = tmp_path / mode
        assert main([*common, "--out", str(out), "--rollover-mode", mode,
                     "--rollover-slices", "3"]) == 0
        summaries[mode] = read_summary(out)
        tums[mode] = file_interface.read_tum_trajectory_file(str(out / "trajectory.tum"))
    for mode, s in summaries.items():
        assert s["settings"]["rollover_mode"] == mode
        assert s["settings"]["rollover_slices_per_frame"] == 3
        assert s["frames_processed"] == 40 and s["rollovers"] >= 2, (mode, s["rollovers"])
    blocking, sliced = tums["blocking"].positions_xyz, tums["sliced"].positions_xyz
    first_rollover = 4  # rollover_keyframes keyframes, anchors included (policy all)
    np.testing.assert_array_equal(sliced[:first_rollover], blocking[:first_rollover])
    assert not np.array_equal(sliced[first_rollover], blocking[first_rollover])
    assert not np.array_equal(sliced, blocking)


def test_a_bad_rollover_setting_is_a_clear_error(tmp_path, seq, caplog):
    written = write_image_folder(seq, tmp_path / "frames")
    out = tmp_path / "out"
    assert main([str(written.path), "--out", str(out), "--rollover-mode", "sliced",
                 "--rollover-slices", "0", *FAST]) == 2
    assert "rollover_slices_per_frame" in caplog.text and not out.exists()

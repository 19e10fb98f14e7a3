"""lingbot-ros-offline --save-session / --resume: a recording in two runs gives the
trajectory of one, and with --scale / --ply the scale, the points and every file of one."""
import json

import pytest

from lingbot_ros.tools.offline.cli import main
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_bag

FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--rollover", "8",
        "--keyframes", "every_n", "--no-progress"]


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    return write_bag(render_sequence(16, 80, 60), tmp_path_factory.mktemp("bag") / "bag").path


def summary(out):
    return json.loads((out / "summary.json").read_text())


def test_a_recording_in_two_halves_gives_the_trajectory_of_one_run(tmp_path, bag):
    whole, first, second, snap = (tmp_path / n for n in ("whole", "first", "second", "snap"))
    assert main([str(bag), "--out", str(whole), *FAST]) == 0
    # the first half saves every 3 frames and at its end (frame 9); the second resumes
    assert main([str(bag), "--out", str(first), "--max-frames", "9", "--save-session", str(snap),
                 "--snapshot-every", "3", *FAST]) == 0
    assert summary(first)["snapshot"]["saves"] == 4
    assert main([str(bag), "--out", str(second), "--resume", str(snap), *FAST]) == 0
    s = summary(second)
    assert s["snapshot"]["frames_skipped"] == 9 and s["frames_read"] == 16
    assert s["frames_processed"] == 16 == summary(whole)["frames_processed"]
    assert s["rollovers"] == summary(whole)["rollovers"] >= 1
    assert (second / "trajectory.tum").read_bytes() == (whole / "trajectory.tum").read_bytes()


def test_resume_refuses_another_setting_or_recording(tmp_path, bag, caplog):
    snap = tmp_path / "snap"
    assert main([str(bag), "--out", str(tmp_path / "a"), "--max-frames", "5",
                 "--save-session", str(snap), *FAST]) == 0
    other = [a if a != "4" else "5" for a in FAST]  # --window 5
    assert main([str(bag), "--out", str(tmp_path / "b"), "--resume", str(snap), *other]) == 2
    assert "window: saved 4, here 5" in caplog.text
    shifted = write_bag(render_sequence(16, 80, 60, start_ns=10**9), tmp_path / "bag2").path
    assert main([str(shifted), "--out", str(tmp_path / "c"), "--resume", str(snap), *FAST]) == 2
    assert "another recording" in caplog.text
    assert main([str(bag), "--out", str(tmp_path / "d"), "--resume", str(snap), "--ply",
                 *FAST]) == 2
    assert "holds no point map (saved without --ply)" in caplog.text


def test_a_rerun_fleet_unit_resumes_from_its_last_snapshot(tmp_path, bag):
    from lingbot_ros.tools.eval.fleet import (OutputTree, execute_unit, plan_units, run_settings,
                                         unit_snapshot_folder)
    from lingbot_ros.tools.eval.table import parse_args as eval_args
    from lingbot_ros.tools.offline.cli import load_model

    def unit_run(out, snapshot_every):
        args = eval_args([str(bag), "--policies", "every_n", "--out", str(out), *FAST[:-3],
                          "--snapshot-every", str(snapshot_every)])
        settings = run_settings(args)
        unit = plan_units([str(bag)], ["bag"], ["every_n"], args.snapshot_every)[0]
        return unit, settings, OutputTree(out), load_model(args)

    unit, settings, tree, model = unit_run(tmp_path / "plain", 0)
    assert execute_unit(unit, settings, model, tree, "local").status == "ok"
    want = (tree.unit_dir(unit.key) / "trajectory.tum").read_bytes()
    # An earlier attempt of the unit got 9 frames in and saved there (the unit's folder).
    unit, settings, tree, model = unit_run(tmp_path / "snap", 3)
    folder = unit_snapshot_folder(unit, tree, settings)
    folder.parent.mkdir(parents=True)
    assert main([str(bag), "--out", str(tmp_path / "half"), "--max-frames", "9",
                 "--save-session", str(folder), *FAST]) == 0
    result = execute_unit(unit, settings, model, tree, "local")
    assert result.status == "ok", result.error
    assert result.summary["snapshot"]["frames_skipped"] == 9
    assert (tree.unit_dir(unit.key) / "trajectory.tum").read_bytes() == want
    assert not folder.exists()  # the unit is done: its snapshot is gone


# a tiny model's 56x42 depth against the bag's 16UC1 depth: few pixels, random confidence; a
# wide lock spread so that the estimate locks early and then refines at the bounded rate
DEPTH = ["--scale", "depth", "--scale-param", "min_pixels=50", "--scale-param",
         "depth_min_conf=1.0", "--scale-param", "min_samples=3", "--scale-param",
         "lock_spread=10", "--scale-param", "max_change_per_s=0.5"]
PLY = ["--ply", "--ply-stride", "2", "--ply-voxel", "0.0001", "--ply-max-points", "300"]


@pytest.mark.parametrize("scale, cut", [(["--scale", "fixed:0.25"], 9), (DEPTH + PLY, 5),
                                        (DEPTH + PLY, 11)])
def test_scale_and_points_resume_from_the_snapshot(tmp_path, bag, scale, cut):
    """Run A straight through; run B saved after ``cut`` frames, then resumed: the same
    trajectory.tum (its scale header included: the estimate continued), points.ply and scale
    summary."""
    whole, first, second, snap = (tmp_path / n for n in ("whole", "first", "second", "snap"))
    assert main([str(bag), "--out", str(whole), *FAST, *scale]) == 0
    assert main([str(bag), "--out", str(first), "--max-frames", str(cut), "--save-session",
                 str(snap), *FAST, *scale]) == 0
    assert main([str(bag), "--out", str(second), "--resume", str(snap), *FAST, *scale]) == 0
    a, b, half = summary(whole), summary(second), summary(first)
    assert b["snapshot"]["frames_skipped"] == cut and b["frames_processed"] == 16
    assert a["scale"]["locked"], a["scale"]  # the files are in metres
    if "depth" in scale:  # the snapshot was taken while the estimate still moved
        assert 0 < half["scale"]["samples"] < a["scale"]["samples"]
        assert half["scale"]["estimate_metres_per_unit"] != a["scale"]["metres_per_unit"]
        assert a["point_map"]["coarsenings"] >= 1  # the bound is reached: the map coarsens
    for key in ("state", "metres_per_unit", "sigma_log", "samples", "segment", "rejections"):
        assert b["scale"][key] == a["scale"][key], key
    assert (second / "trajectory.tum").read_bytes() == (whole / "trajectory.tum").read_bytes()
    if "--ply" in scale:
        assert (second / "points.ply").read_bytes() == (whole / "points.ply").read_bytes()
        assert b["point_map"] == a["point_map"]


def test_resume_refuses_another_scale_or_ply_setting(tmp_path, bag, caplog):
    snap = tmp_path / "snap"
    assert main([str(bag), "--out", str(tmp_path / "a"), "--max-frames", "5",
                 "--save-session", str(snap), *FAST, *DEPTH, *PLY]) == 0
    for i, (args, message) in enumerate((
            (["--scale", "fixed:0.25", *PLY], "made with scale.source 'depth', this stream's "
             "is 'fixed'"),
            ([*PLY], "made with scale.source 'depth', this stream's is 'none'"),
            ([*DEPTH[:-2], *PLY], "scale.max_change_per_s: saved 0.5, here 0.01"),
            ([*DEPTH, *PLY[:-2], "--ply-max-points", "400"],
             "other --ply settings (max_points: saved 300, here 400)"),
            ([*DEPTH, *PLY, "--min-conf", "2"], "min_conf: saved 1.5, here 2.0"))):
        caplog.clear()
        assert main([str(bag), "--out", str(tmp_path / f"r{i}"), "--resume", str(snap),
                     *FAST, *args]) == 2, args
        assert message in caplog.text, caplog.text
    # without --ply the snapshot's point map is not needed: the rest resumes
    assert main([str(bag), "--out", str(tmp_path / "ok"), "--resume", str(snap), *FAST,
                 *DEPTH]) == 0


def test_resume_refuses_another_recording_of_the_same_length_and_rate(tmp_path, caplog):
    """Image folders take their stamps from --fps: two recordings of one length and rate
    have the same stamps. The snapshot of s1 resumed on s4 was accepted and the outputs
    mixed both; the fingerprint of the input's first frames refuses it (s1 itself resumes)."""
    from lingbot_ros.tools.synthetic.writers import write_image_folder
    s1, s4 = (write_image_folder(render_sequence(12, 80, 60, seed=seed), tmp_path / name).path
              for seed, name in ((0, "s1"), (3, "s4")))
    snap = tmp_path / "snap"
    assert main([str(s1), "--out", str(tmp_path / "a"), "--max-frames", "6", "--fps", "30",
                 "--save-session", str(snap), *FAST]) == 0
    caplog.clear()
    assert main([str(s4), "--out", str(tmp_path / "b"), "--resume", str(snap), "--fps", "30",
                 *FAST]) == 2
    assert "input frame 1 (stamp 0 ns) is not the snapshot's" in caplog.text, caplog.text
    assert "another recording" in caplog.text
    assert not (tmp_path / "b" / "trajectory.tum").exists()
    assert main([str(s1), "--out", str(tmp_path / "c"), "--resume", str(snap), "--fps", "30",
                 *FAST]) == 0
    assert summary(tmp_path / "c")["frames_processed"] == 12


def test_a_bad_save_or_resume_target_fails_before_the_first_frame(tmp_path, bag, caplog):
    """--save-session onto a folder we did not write (a manifest.json in it) and --resume of
    something that is not a snapshot fail at once, with the reason; nothing is deleted."""
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "manifest.json").write_text("{}")
    for flag, target, reason in (("--save-session", foreign, "no lingbot_ros_snapshot marker"),
                                 ("--resume", foreign, "no lingbot_ros_snapshot marker"),
                                 ("--save-session", tmp_path / "no" / "snap",
                                  "does not exist")):
        caplog.clear()
        out = tmp_path / f"out{flag}{target.name}"
        assert main([str(bag), "--out", str(out), flag, str(target), *FAST]) == 2
        assert reason in caplog.text, caplog.text
        assert "summary.json" not in {p.name for p in out.glob("*")}
    assert (foreign / "manifest.json").read_text() == "{}"

"""lingbot-ros-offline --loop-closure, --save-map and --localize-in end to end: the tiny
model on a synthetic sequence that comes back to its first images. Its weights are random
but for the camera head's last layer (tests/loop/still_camera.py: every frame at the
identity), so that loops verify and the plumbing runs; no accuracy is asserted."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from lingbot_ros.geometry import read_tum
from lingbot_ros.loop.graph_record import read_graph_record
from lingbot_ros.loop.place_map import read_place_map
from lingbot_ros.tools.metrics.loops import read_loops
from lingbot_ros.tools.offline.cli import main
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_image_folder
from tests.loop.still_camera import still_camera_checkpoint

FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--rollover", "0",
        "--keyframes", "all", "--no-progress"]
# geometric gates opened: the two frames' random depths disagree (the gates are tested in
# tests/loop/test_verify.py); thinning off: every pose is the same
OPEN = ["min_age_s=0.38", "min_keyframe_distance_m=0", "verify_min_conf=0",
        "min_valid_pixels=1", "inlier_depth_ratio=1e9", "min_inlier_fraction=1e-9",
        "max_correction_m=1e9", "max_correction_deg=180", "confirm_m=1e9",
        "confirm_deg=180", "top_k=1"]
REVISIT = 4  # the last frames are the first ones again (at 0.4 s on, 30 fps: only they have
# keyframes at least min_age_s = 0.38 s older than themselves)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    seq = render_sequence(12, 80, 60)
    back = dataclasses.replace(
        seq, images=np.concatenate([seq.images, seq.images[:REVISIT]]),
        depths=np.concatenate([seq.depths, seq.depths[:REVISIT]]),
        c2w=np.concatenate([seq.c2w, seq.c2w[:REVISIT]]),
        stamps_ns=np.arange(12 + REVISIT, dtype=np.int64) * int(1e9 / seq.fps))
    return write_image_folder(back, tmp_path_factory.mktemp("seq") / "frames")


@pytest.fixture(scope="module")
def still(tmp_path_factory):
    return str(still_camera_checkpoint(tmp_path_factory.mktemp("ckpt") / "still.safetensors"))


def loop_args(still):
    return ["--checkpoint", still] + [a for p in OPEN for a in ("--loop-param", p)]


def test_loop_closure_writes_the_back_ends_files(tmp_path, folder, still):
    out = tmp_path / "out"
    assert main([str(folder.path), "--out", str(out), "--gt", str(folder.gt_path),
                 "--loop-closure", *loop_args(still), *FAST]) == 0
    summary = json.loads((out / "summary.json").read_text())
    lc = summary["loop_closure"]
    report = read_loops(out / "loops.json")  # the evaluation's reader accepts it
    counts = lc["counts"]
    assert counts["keyframes"] == summary["keyframes"] == 12 + REVISIT
    # the revisited images are retrieved (same images: the same descriptors)
    assert counts["candidates"] >= REVISIT
    assert report.accepted == counts["accepted"] == lc["loops"] >= 2  # a confirmed pair
    assert counts["verified"] >= counts["accepted"]
    for lp in report.loops:  # the best candidate is the same image, 12 frames before
        assert lp.keyframe_id >= 12 and lp.matched_id == lp.keyframe_id - 12, lp
    stamps, fe = read_tum(out / "trajectory.tum")
    opt_stamps, opt = read_tum(out / "trajectory_optimized.tum")
    assert np.array_equal(stamps, opt_stamps) and np.isfinite(opt).all()
    record = read_graph_record(out / "loop_graph.json")
    assert len(record.ids) == counts["keyframes"] and len(record.loops) == counts["accepted"]
    assert "evaluation" in lc  # (every pose is the same: no alignment, an error, said)
    # the same graph replayed from its file gives the same trajectory
    assert main([str(out), "--reoptimize"]) == 0
    _, again = read_tum(out / "trajectory_optimized.tum")
    np.testing.assert_allclose(again, opt, atol=1e-6)


def test_a_map_saved_then_localized_in(tmp_path, folder, still):
    first, second, place = tmp_path / "first", tmp_path / "second", tmp_path / "place.map"
    metric = ["--scale", "fixed:0.5"]
    assert main([str(folder.path), "--out", str(first), "--loop-closure", *loop_args(still),
                 "--save-map", str(place), *metric, *FAST]) == 0
    pm = read_place_map(place)
    assert pm.units == "m" and len(pm) == 12 + REVISIT
    assert main([str(folder.path), "--out", str(second), "--localize-in", str(place),
                 *loop_args(still), *metric, *FAST]) == 0
    doc = json.loads((second / "localization.json").read_text())
    assert doc["map_id"] == pm.map_id
    assert doc["localized"] is True, doc
    T = np.array(doc["T_map_odom"]).reshape(4, 4)
    np.testing.assert_allclose(T[:3, :3] @ T[:3, :3].T, np.eye(3), atol=1e-9)
    stamps, in_map = read_tum(second / "trajectory_in_map.tum")
    _, odom = read_tum(second / "trajectory.tum")
    np.testing.assert_allclose(in_map, T @ odom, atol=1e-6)


def test_map_options_are_checked_before_the_run(tmp_path, folder, caplog):
    out = tmp_path / "out"
    assert main([str(folder.path), "--out", str(out), "--save-map", str(tmp_path / "m"),
                 *FAST]) == 2
    assert "--save-map needs --loop-closure" in caplog.text
    assert main([str(folder.path), "--out", str(out), "--localize-in", str(tmp_path / "m"),
                 *FAST]) == 2
    assert "--localize-in needs a metric --scale" in caplog.text
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "x.txt").write_text("not ours")
    assert main([str(folder.path), "--out", str(out), "--loop-closure", "--save-map",
                 str(foreign), *FAST]) == 2
    assert (foreign / "x.txt").read_text() == "not ours"
    assert not out.exists()

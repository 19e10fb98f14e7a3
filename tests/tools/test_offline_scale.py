"""lingbot-ros-offline --scale: one scale per stream, applied once at write time.

Random weights give meaningless depth, so these test the algebra, never accuracy: a fixed
factor scales every translation and point exactly; a sensor depth written as k x the
model's own predicted depth locks the estimate at k; every file states its units."""
import json
import logging
import math

import numpy as np
import pytest
from evo.tools import file_interface

from lingbot_ros.geometry import read_ply, read_ply_comments, read_tum, read_tum_header
from lingbot_ros.scale import crop_indices
from lingbot_ros.session import StreamingSession, load_session_model
from lingbot_ros.tools.offline.cli import main, parse_args, session_config
from lingbot_ros.tools.offline.scale_args import (parse_scale, parse_scale_params, scale_config)
from lingbot_ros.tools.sources.datasets import open_dataset
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_tum_rgbd

FRAMES = 10
FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--rollover", "8",
        "--keyframes", "every_n", "--no-progress", "--ply", "--ply-stride", "2"]
# a tiny model's 56x42 depth: few pixels, random confidence
DEPTH_PARAMS = ["--scale-param", "min_pixels=50", "--scale-param", "depth_min_conf=1.0",
                "--scale-param", "min_samples=5"]
K_FIXED = 0.25


def summary_of(out):
    return json.loads((out / "summary.json").read_text())


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A synthetic TUM RGB-D room (with its depth), run without a scale and with fixed:K."""
    root = tmp_path_factory.mktemp("scale")
    seq = render_sequence(FRAMES, 80, 60)
    tum = write_tum_rgbd(seq, root / "tum").path
    out = {}
    for name, scale in (("none", "none"), ("fixed", f"fixed:{K_FIXED}")):
        out[name] = root / name
        assert main([str(tum), "--out", str(out[name]), "--scale", scale, *FAST]) == 0
    return {"root": root, "seq": seq, "tum": tum, **out}


def test_fixed_scales_every_translation_and_point_exactly(runs):
    stamps0, poses0 = read_tum(runs["none"] / "trajectory.tum")
    stamps1, poses1 = read_tum(runs["fixed"] / "trajectory.tum")
    assert len(stamps0) == FRAMES and np.array_equal(stamps0, stamps1)
    np.testing.assert_allclose(poses1[:, :3, 3], K_FIXED * poses0[:, :3, 3], rtol=1e-12,
                               atol=1e-15)
    np.testing.assert_array_equal(poses1[:, :3, :3], poses0[:, :3, :3])  # rotations untouched
    xyz0, rgb0 = read_ply(runs["none"] / "points.ply")
    xyz1, rgb1 = read_ply(runs["fixed"] / "points.ply")
    assert len(xyz0) > 0
    np.testing.assert_allclose(xyz1, K_FIXED * xyz0.astype(np.float64), rtol=1e-6)
    np.testing.assert_array_equal(rgb1, rgb0)
    s0, s1 = summary_of(runs["none"]), summary_of(runs["fixed"])
    assert s1["scale"]["state"] == "LOCKED" and s1["scale"]["metres_per_unit"] == K_FIXED
    assert s1["point_map"]["voxel_size"] == pytest.approx(K_FIXED * s0["point_map"]["voxel_size"])
    assert s0["scale"]["units"] == "model units" and s0["scale"]["metres_per_unit"] is None


def test_every_file_states_units_source_and_value(runs):
    none = read_tum_header(runs["none"] / "trajectory.tum")
    assert "units: model units (no metric scale: --scale none)" in none
    fixed = read_tum_header(runs["fixed"] / "trajectory.tum")
    assert "units: m" in fixed
    assert any(h.startswith(f"scale: fixed, {K_FIXED!r} m per model unit") for h in fixed)
    assert read_ply_comments(runs["fixed"] / "points.ply")[:1] == ["units: m"]
    assert read_ply_comments(runs["none"] / "points.ply")[0].startswith("units: model units")
    assert any(h.startswith("units: ") for h in read_tum_header(runs["fixed"] /
                                                                 "groundtruth.tum"))
    # the comments keep the files readable by evo
    traj = file_interface.read_tum_trajectory_file(str(runs["fixed"] / "trajectory.tum"))
    assert traj.num_poses == FRAMES


def test_with_a_scale_the_evaluation_has_the_se3_ate_in_metres(runs):
    ev0 = summary_of(runs["none"])["evaluation"]
    ev1 = summary_of(runs["fixed"])["evaluation"]
    assert ev0["estimate_units"] == "model units" and "ate_se3_metres" not in ev0
    assert ev1["estimate_units"] == "m"
    se3 = ev1["ate_se3_metres"]
    assert se3["units"] == "m" and se3["scale"] == 1.0 and math.isfinite(se3["rmse"])
    # the Sim(3) ATE fits the scale away: the same error, the fitted scale divided by K
    assert ev1["ate_sim3"]["rmse"] == pytest.approx(ev0["ate_sim3"]["rmse"], rel=1e-6)
    assert ev1["ate_sim3"]["scale"] == pytest.approx(ev0["ate_sim3"]["scale"] / K_FIXED,
                                                     rel=1e-6)


def predicted_depths(tum):
    """The tiny model's own depth for each frame of ``tum``, run here through the public
    session API with the runner's settings, and the crops."""
    args = parse_args([str(tum), *FAST])
    config = session_config(args, return_depth=True)
    model, _ = load_session_model(config, args.preset, None)
    session = StreamingSession(model, config)
    out = []
    for frame in open_dataset(tum).source:
        out.extend(session.push(frame.image, frame.stamp_ns, frame.encoding))
    return out


def test_depth_k_times_the_models_own_depth_locks_at_k(runs):
    results = predicted_depths(runs["tum"])
    assert len(results) == FRAMES
    median = float(np.median([np.median(r.depth) for r in results]))
    k = 2.0 / median  # sensor depth around 2 m: inside the valid range, fine in 1/5000 m
    seq = runs["seq"]
    sensor = np.zeros(seq.images.shape[:3], np.float32)  # 0: no reading
    for i, r in enumerate(results):
        rows, cols = crop_indices(r.crop)  # the input pixel each model pixel samples
        sensor[i][np.ix_(rows, cols)] = k * r.depth
    tum_k = write_tum_rgbd(seq, runs["root"] / "tum_k", depths=sensor).path
    out = runs["root"] / "depth"
    assert main([str(tum_k), "--out", str(out), "--scale", "depth", *DEPTH_PARAMS,
                 *FAST]) == 0
    s = summary_of(out)["scale"]
    assert s["state"] == "LOCKED" and s["samples"] == FRAMES
    assert s["metres_per_unit"] == pytest.approx(k, rel=1e-3)
    est = s["metres_per_unit"]
    _, poses0 = read_tum(runs["none"] / "trajectory.tum")
    _, poses1 = read_tum(out / "trajectory.tum")
    np.testing.assert_allclose(poses1[:, :3, 3], est * poses0[:, :3, 3], rtol=1e-9,
                               atol=1e-12)
    np.testing.assert_array_equal(poses1[:, :3, :3], poses0[:, :3, :3])
    np.testing.assert_allclose(read_ply(out / "points.ply")[0],
                               est * read_ply(runs["none"] / "points.ply")[0].astype(float),
                               rtol=1e-5)
    header = read_tum_header(out / "trajectory.tum")
    assert "units: m" in header and any(h.startswith(f"scale: depth, {est!r}") for h in header)


def test_a_scale_that_never_locks_leaves_model_units_and_says_so(runs):
    out = runs["root"] / "unlocked"
    assert main([str(runs["tum"]), "--out", str(out), "--scale", "depth", *DEPTH_PARAMS,
                 "--scale-param", "min_samples=100", "--scale-param", "max_samples=100",
                 *FAST]) == 0  # still a successful run
    s = summary_of(out)
    assert s["scale"]["locked"] is False and s["scale"]["units"] == "model units"
    assert "never locked" in s["scale"]["note"] and s["scale"]["metres_per_unit"] is None
    assert s["evaluation"]["estimate_units"] == "model units"
    header = read_tum_header(out / "trajectory.tum")
    assert any(h.startswith("units: model units (the depth scale never locked") for h in header)
    np.testing.assert_array_equal(read_tum(out / "trajectory.tum")[1],
                                  read_tum(runs["none"] / "trajectory.tum")[1])


@pytest.mark.parametrize("text,expected", [
    ("none", ("none", None, None)), ("fixed:0.5", ("fixed", 0.5, None)),
    ("depth", ("depth", None, None)), ("camera_height", ("camera_height", None, None)),
    ("camera_height:1.2", ("camera_height", None, 1.2)), (" DEPTH ", ("depth", None, None))])
def test_parse_scale(text, expected):
    c = parse_scale(text)
    assert (c.source, c.factor, c.camera_height_m) == expected


@pytest.mark.parametrize("text,message", [
    ("fixed", "fixed:K"), ("fixed:0", "number > 0"), ("fixed:abc", "number > 0"),
    ("camera_height:-1", "number > 0"), ("depth:2", "takes no value"),
    ("odometry", "unknown source"), ("metres", "unknown source")])
def test_parse_scale_errors_are_clear(text, message):
    with pytest.raises(ValueError, match=message):
        parse_scale(text)


def test_bad_scale_options_fail_before_the_run(tmp_path, runs, capsys):
    with pytest.raises(SystemExit):
        main([str(runs["tum"]), "--out", str(tmp_path / "o"), "--scale", "fixed:-2"])
    assert "--scale" in capsys.readouterr().err
    assert main([str(runs["tum"]), "--out", str(tmp_path / "o2"), "--scale", "depth",
                 "--scale-param", "lock_spread=-1", *FAST]) == 2
    assert main([str(runs["tum"]), "--out", str(tmp_path / "o3"), "--scale", "depth",
                 "--scale-param", "nonsense=1", *FAST]) == 2
    assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()
    assert parse_scale_params(["min_samples=3", "planar=true", "depth_unit_m=none"]) == \
        {"min_samples": 3, "planar": True, "depth_unit_m": None}


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_camera_height_needs_a_height_except_on_kitti(tmp_path, runs):
    from tests.tools.dataset_layouts import write_kitti
    P = [500.0, 0.0, 320.0, 0.0, 0.0, 500.0, 240.0, 0.0, 0.0, 0.0, 1.0, 0.0]
    kitti = open_dataset(write_kitti(tmp_path / "kitti", "05", [0.0, 0.1, 0.2], P, P))
    args = parse_args([str(kitti.path), "--scale", "camera_height"])
    said = Collect()
    logger = logging.getLogger("lingbot_ros.offline")  # (launch's loggers do not propagate)
    logger.addHandler(said)
    try:
        cfg = scale_config(args, kitti)
    finally:
        logger.removeHandler(said)
    assert cfg.source == "camera_height" and cfg.camera_height_m == 1.65
    assert any("kitti camera height, 1.65 m" in m for m in said.messages)  # and says so
    cfg = scale_config(parse_args([str(kitti.path), "--scale", "camera_height:1.2"]), kitti)
    assert cfg.camera_height_m == 1.2
    tum = open_dataset(runs["tum"])
    with pytest.raises(ValueError, match="camera_height:H"):
        scale_config(parse_args([str(runs["tum"]), "--scale", "camera_height"]), tum)
    assert main([str(runs["tum"]), "--out", str(tmp_path / "o"), "--scale", "camera_height",
                 *FAST]) == 2
    # a folder of images has no depth: --scale depth says so before the run
    from lingbot_ros.tools.synthetic.writers import write_image_folder
    folder = write_image_folder(runs["seq"], tmp_path / "frames").path
    with pytest.raises(ValueError, match="no aligned depth"):
        scale_config(parse_args([str(folder), "--scale", "depth"]), open_dataset(folder))


def floor_frame(index: int, height_units: float, h: int = 84, w: int = 112):
    """A FrameResult whose predicted depth is a level floor ``height_units`` below the camera
    (a wall 5 units ahead above the horizon), model units, confident everywhere."""
    from lingbot_ros.preprocess import CropInfo
    from lingbot_ros.session import FrameResult
    f = 0.8 * w
    K = np.array([[f, 0, (w - 1) / 2], [0, f, (h - 1) / 2], [0, 0, 1.0]])
    v = np.arange(h, dtype=np.float64)[:, None].repeat(w, 1)
    down = (v - K[1, 2]) / f  # ray's y per unit z
    with np.errstate(divide="ignore"):
        depth = np.where(down > 1e-3, height_units / down, 5.0)
    depth = np.minimum(depth, 5.0).astype(np.float32)
    crop = CropInfo((h, w), (h, w), (0, 0), (h, w))
    return FrameResult(index=index, ticket=index, stamp_ns=index * 33_000_000, keyframe=True,
                       segment=0, c2w=np.eye(4), pose_enc=np.zeros(9, np.float32), K=K,
                       K_model=K, crop=crop, latency_ms=0.0, depth=depth,
                       depth_conf=np.full((h, w), 3.0, np.float32), rgb=None)


def test_camera_height_samples_the_floor_below_a_level_camera():
    from lingbot_ros.scale import ScaleConfig
    from lingbot_ros.tools.offline.scale_args import OfflineScale
    scale = OfflineScale(ScaleConfig(source="camera_height", camera_height_m=1.5,
                                     min_samples=3, ground_min_inliers=100))
    for i in range(3):
        est = scale.feed(floor_frame(i, 0.5))
    assert est.locked and scale.factor == pytest.approx(1.5 / 0.5, rel=1e-6)
    assert scale.header_lines()[0] == "units: m"
    # a restarted stream (index 0 again) starts a new estimate; a rollover would keep it
    est = scale.feed(floor_frame(0, 0.25))
    assert not est.locked and est.segment == 1 and scale.summary()["stream_restarts"] == 1

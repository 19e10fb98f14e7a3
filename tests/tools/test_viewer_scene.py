"""The viewer's scene model, a run folder read for it, and the live hand-over: bounds, order,
counters, and clear errors for bad files (no browser here: test_viewer_browser.py)."""
import json
import threading
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pytest

from lingbot_ros.geometry import write_ply, write_tum
from lingbot_ros.tools.synthetic.render import camera_path, default_intrinsics, render_view
from lingbot_ros.tools.view.live import Feeder, Handover, Latest, scale_view
from lingbot_ros.tools.view.run_dir import RunDirError, load_into, read_run_dir
from lingbot_ros.tools.view.scene import Counters, SceneModel, ScaleView, subsample


def pose_at(x: float) -> np.ndarray:
    T = np.eye(4)
    T[0, 3] = x
    return T


def test_points_are_bounded_and_the_same_input_shows_the_same_points():
    rng = np.random.default_rng(1)
    xyz = rng.normal(size=(5000, 3)).astype(np.float32)
    rgb = rng.integers(0, 255, (5000, 3), dtype=np.uint8)
    a, b = SceneModel(max_points=1000), SceneModel(max_points=1000)
    a.set_points(xyz, rgb)
    b.set_points(xyz, rgb)
    sa, sb = a.snapshot(), b.snapshot()
    assert len(sa.points_xyz) == 1000
    np.testing.assert_array_equal(sa.points_xyz, sb.points_xyz)
    # in input order: the kept points are a subsequence of the input
    idx = [int(np.flatnonzero((xyz == p).all(axis=1))[0]) for p in sa.points_xyz[:50]]
    assert idx == sorted(idx)
    small_xyz, small_rgb = subsample(xyz[:10], rgb[:10], 1000)
    assert len(small_xyz) == 10 and len(small_rgb) == 10  # under the budget: all of them


def test_accumulated_points_stay_within_the_budget():
    model = SceneModel(max_points=500, voxel_size=0.001)
    rng = np.random.default_rng(2)
    for _ in range(10):
        model.add_points(rng.uniform(-1, 1, (400, 3)),
                         rng.integers(0, 255, (400, 3), dtype=np.uint8))
        assert len(model.snapshot().points_xyz) <= 500
    assert len(model.snapshot().points_xyz) > 0


def test_non_finite_points_are_not_shown():
    model = SceneModel()
    xyz = np.array([[0, 0, 0], [np.nan, 0, 0], [1, 1, 1]], np.float32)
    model.set_points(xyz, np.zeros((3, 3), np.uint8))
    assert len(model.snapshot().points_xyz) == 2


def test_poses_keep_their_order_are_thinned_at_the_bound_and_the_newest_shows():
    model = SceneModel(max_poses=10, max_keyframes=3)
    for i in range(25):
        model.add_pose(pose_at(i), keyframe=i % 5 == 0)
    snap = model.snapshot()
    xs = snap.front_end[:, 0]
    assert snap.poses_seen == 25 and len(xs) <= 11
    assert list(xs) == sorted(xs) and xs[0] == 0 and xs[-1] == 24
    assert [k[0, 3] for k in snap.keyframes] == [10, 15, 20]  # the last max_keyframes
    assert snap.state()["poses"] == 25 and snap.state()["keyframes"] == 3


def test_a_whole_trajectory_replaces_the_front_end_and_clear_forgets_the_stream():
    model = SceneModel(max_poses=4)
    model.add_pose(pose_at(100))
    poses = np.stack([pose_at(i) for i in range(9)])
    model.set_trajectory(poses, keyframe_mask=np.arange(9) % 2 == 0)
    snap = model.snapshot()
    assert snap.poses_seen == 9 and snap.front_end[0, 0] == 0 and snap.front_end[-1, 0] == 8
    assert len(snap.front_end) <= 5 and len(snap.keyframes) == 5
    model.set_counters(frames_in=9, processed=9)
    model.clear()
    snap = model.snapshot()
    assert snap.poses_seen == 0 and len(snap.front_end) == 0 and len(snap.keyframes) == 0
    assert snap.counters == Counters(frames_in=9, processed=9)  # counters outlive a reset


def test_counters_scale_and_versions():
    model = SceneModel()
    v0 = model.version()
    model.set_counters(frames_in=5, processed=4, dropped=1)
    model.set_counters(keyframes=2)
    model.set_scale(ScaleView("LOCKED", "depth", 0.5, "m"))
    snap = model.snapshot()
    assert snap.counters == Counters(5, 4, 1, 2)
    assert snap.state()["metres_per_unit"] == 0.5 and snap.state()["scale_state"] == "LOCKED"
    assert model.version() == v0 + 3 and snap.versions["status"] == 3
    assert "0.5 m/unit" in snap.scale.text()


def test_wait_changed_wakes_on_a_change_and_is_bounded():
    model = SceneModel()
    seen = model.version()
    assert model.wait_changed(seen, timeout=0.01) == seen  # nothing changed: times out
    t = threading.Thread(target=lambda: model.add_pose(np.eye(4)))
    t.start()
    assert model.wait_changed(seen, timeout=10) != seen
    t.join()


@pytest.mark.parametrize("bad,message", [
    (dict(max_points=1), "max_points"), (dict(max_poses=0), "max_poses"),
    (dict(voxel_size=0.0), "voxel_size")])
def test_bad_bounds_are_clear_errors(bad, message):
    with pytest.raises(ValueError, match=message):
        SceneModel(**bad)


def test_bad_poses_and_cameras_are_refused():
    model = SceneModel()
    with pytest.raises(ValueError, match="finite"):
        model.add_pose(np.full((4, 4), np.nan))
    with pytest.raises(ValueError, match=r"\(N, 4, 4\)"):
        model.set_trajectory(np.zeros((3, 3)))
    with pytest.raises(ValueError, match="fy > 0"):
        model.set_camera(np.eye(4), np.zeros((3, 3)), (4, 4))


# -- a run's folder -----------------------------------------------------------------------

def write_run(folder, n=6, points=50, summary=True):
    folder.mkdir(parents=True, exist_ok=True)
    stamps = np.arange(n, dtype=np.int64) * 33_000_000
    write_tum(folder / "trajectory.tum", stamps, np.stack([pose_at(i) for i in range(n)]),
              frame="camera_optical (x right, y down, z forward) in world = the first "
                    "frame's camera_optical", header=["units: m", "scale: depth, 0.5 m per "
                                                      "model unit (LOCKED)"])
    rng = np.random.default_rng(0)
    write_ply(folder / "points.ply", rng.normal(size=(points, 3)).astype(np.float32),
              rng.integers(0, 255, (points, 3), dtype=np.uint8))
    if summary:
        (folder / "summary.json").write_text(json.dumps({
            "summary_format": "lingbot_ros.offline.summary/1", "frames_read": n + 2,
            "frames_processed": n, "frames_skipped_by_source": 1,
            "frames_rejected_by_session": {"non_monotonic": 1}, "keyframes": 3,
            "settings": {"input_size_hw": [42, 56]},
            "scale": {"source": "depth", "state": "locked", "metres_per_unit": 0.5}},
            indent=2))
    return folder


def test_a_run_folder_is_read_and_shown(tmp_path):
    run = read_run_dir(write_run(tmp_path / "run"))
    assert len(run.poses) == 6 and len(run.xyz) == 50 and run.points_file == "points.ply"
    assert run.units == "m" and run.up_axis == "-y"
    assert run.counters == Counters(frames_in=8, processed=6, dropped=2, keyframes=3)
    assert run.scale == ScaleView("LOCKED", "depth", 0.5, "m")
    model = SceneModel(max_points=20)
    load_into(model, run)
    state = model.snapshot().state()
    assert state["poses"] == 6 and state["points"] == 20 and state["camera"]
    assert state["frames_in"] == 8 and state["dropped"] == 2


def test_the_nodes_saved_files_are_read_too(tmp_path):
    folder = write_run(tmp_path / "demo", summary=False)
    (folder / "points.ply").rename(folder / "map.ply")
    run = read_run_dir(folder)
    assert run.points_file == "map.ply" and run.summary is None
    assert run.counters.processed == 6
    assert run.scale.state == "LOCKED" and run.scale.metres_per_unit == 0.5


@pytest.mark.parametrize("breakage,message", [
    ("missing_folder", "no such folder"),
    ("a_file", "not a folder"),
    ("no_trajectory", "no trajectory.tum"),
    ("bad_trajectory", "not a TUM trajectory"),
    ("binary_trajectory", "not a text file"),
    ("empty_trajectory", "no poses"),
    ("bad_ply", "points.ply: not a point cloud we wrote"),
    ("bad_summary", "summary.json: not JSON"),
    ("foreign_summary", "not a lingbot-ros-offline summary"),
    ("trajectory_is_a_folder", "trajectory.tum"),
])
def test_bad_run_folders_are_clear_errors(tmp_path, breakage, message):
    folder = write_run(tmp_path / "run")
    if breakage == "missing_folder":
        folder = tmp_path / "nope"
    elif breakage == "a_file":
        folder = folder / "summary.json"
    elif breakage == "no_trajectory":
        (folder / "trajectory.tum").unlink()
    elif breakage == "bad_trajectory":
        (folder / "trajectory.tum").write_text("0.0 1 2 3\n")
    elif breakage == "binary_trajectory":
        (folder / "trajectory.tum").write_bytes(b"\xff\xfe\x00garbage")
    elif breakage == "empty_trajectory":
        (folder / "trajectory.tum").write_text("# lingbot_ros trajectory (TUM)\n")
    elif breakage == "bad_ply":
        (folder / "points.ply").write_bytes(b"ply\nformat ascii 1.0\nend_header\n1 2 3\n")
    elif breakage == "bad_summary":
        (folder / "summary.json").write_text("{not json")
    elif breakage == "foreign_summary":
        (folder / "summary.json").write_text('{"hello": 1}')
    elif breakage == "trajectory_is_a_folder":
        (folder / "trajectory.tum").unlink()
        (folder / "trajectory.tum").mkdir()
    with pytest.raises(RunDirError, match=message):
        read_run_dir(folder)


# -- the live hand-over -------------------------------------------------------------------

@dataclass
class Keyframe:
    """What the feeder reads of a keyframe (geometry.DepthFrame): a rendered view's depth."""
    depth: np.ndarray
    depth_conf: np.ndarray
    rgb: Optional[np.ndarray]
    K_model: np.ndarray
    c2w: np.ndarray


def rendered_keyframes(n: int) -> list:
    K = default_intrinsics(40, 30)
    out = []
    for c2w in camera_path(n):
        rgb, depth = render_view(c2w, K, 30, 40)
        out.append(Keyframe(depth, np.full_like(depth, 2.0), rgb, K, c2w))
    return out


def test_the_handover_keeps_every_pose_and_bounds_what_waits():
    handover = Handover(max_pending=5, max_keyframes_pending=2)
    for i in range(8):
        handover.put_pose(pose_at(i), keyframe=False)
        handover.put_keyframe(i)
    cleared, poses, keyframes, latest = handover.take(timeout=0)
    assert [p[0][0, 3] for p in poses] == [3, 4, 5, 6, 7] and handover.poses_lost == 3
    assert keyframes == [6, 7] and handover.keyframes_lost == 6
    assert not cleared and latest is None
    assert handover.take(timeout=0.01) == (False, [], [], None)  # bounded wait, nothing new


def test_the_feeder_moves_poses_points_camera_and_counters_into_the_scene():
    model, handover = SceneModel(max_points=2000), Handover()
    feeder = Feeder(handover, model, point_stride=2, min_conf=1.5)
    frames = rendered_keyframes(4)
    for i, kf in enumerate(frames):
        handover.put_pose(kf.c2w, keyframe=True)
        handover.put_keyframe(kf)
        handover.put_latest(Latest(kf.c2w, kf.K_model, (30, 40), kf.rgb,
                                   {"frames_in": i + 1, "processed": i + 1, "dropped": 0,
                                    "keyframes": i + 1}, ScaleView("CONVERGING", "depth", 0.4)))
    feeder.close(drain=True)
    snap = model.snapshot()
    assert snap.poses_seen == 4 and len(snap.keyframes) == 4
    assert 0 < len(snap.points_xyz) <= 2000 and snap.camera is not None
    assert snap.camera.image.shape == (30, 40, 3)
    assert snap.counters == Counters(4, 4, 0, 4) and snap.scale.state == "CONVERGING"
    handover.put_clear()
    Feeder(handover, model).close(drain=True)
    assert model.snapshot().poses_seen == 0


def test_a_scale_estimate_as_the_viewer_shows_it():
    from lingbot_ros.scale import ScaleConfig, ScaleStream
    est = ScaleStream(ScaleConfig(source="fixed", factor=0.25)).estimate
    view = scale_view(est)
    assert view.source == "fixed" and view.metres_per_unit == 0.25 and view.state == "LOCKED"
    assert scale_view(None) is None

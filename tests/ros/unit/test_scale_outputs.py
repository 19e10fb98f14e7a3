"""Metric scale where the node's outputs leave (no DDS): the REP-105 algebra with a scale
(a robot turning in place about base_link with the camera 0.3 m ahead keeps base_link put),
the odometry covariance with the scale's uncertainty, depth messages read for the depth
source, ``ScaleStream`` (fixed, depth; bad input counted, never raised; ``camera_height``: a
synthetic floor as the predicted depth, the height configured or from the robot's TF, the
ground frame missing; ``odometry`` from TF, looked up at the image stamps; the odometry
window in stream snapshots, continued bit for bit) and the saved files' units header."""
from __future__ import annotations

import math
import time
from types import SimpleNamespace

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from lingbot_ros.geometry import T_BODY_OPTICAL, rigid_inverse
from lingbot_ros.image_decode import ImageRejected
from lingbot_ros.ros.intake.scale_msgs import depth_msg_input, tf_lookup
from lingbot_ros.ros.outputs.messages import scaled_covariance
from lingbot_ros.ros.tf.frame_chain import FrameChain
from lingbot_ros.scale import ScaleConfig, ScaleState, ScaleStream, units_header

K = 0.25  # metres per model unit
LEVER = 0.3  # the camera's optical centre 0.3 m ahead of base_link


def rot_z(a: float) -> np.ndarray:
    T = np.eye(4)
    T[:2, :2] = [[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]]
    return T


def turning_in_place(angles, k: float, T_bo: np.ndarray) -> list[np.ndarray]:
    """The model's c2w (model units) of a camera on a base turning about its own z axis:
    the true camera pose in metres is T_bo^-1 . R(a) . T_bo (map = base at frame 0), its
    translation divided by k."""
    out = []
    for a in angles:
        metric = rigid_inverse(T_bo) @ rot_z(a) @ T_bo
        c2w = metric.copy()
        c2w[:3, 3] /= k
        out.append(c2w)
    return out


def test_turning_in_place_keeps_base_link_put_only_with_the_scale_applied_first():
    T_base_camera = np.eye(4)
    T_base_camera[:3, 3] = [LEVER, 0.0, 0.5]
    chain = FrameChain.robot("base_link", "camera_link", T_base_camera, camera_is_optical=False)
    angles = np.linspace(0.0, math.pi, 7)
    for a, c2w in zip(angles, turning_in_place(angles, K, chain.T_base_optical)):
        T = chain.tracked_in_map(c2w, K)
        np.testing.assert_allclose(T[:3, 3], 0.0, atol=1e-12)  # base_link stays put
        np.testing.assert_allclose(T[:3, :3], rot_z(a)[:3, :3], atol=1e-12)
        if a > 0.1:  # model units composed with the metric lever arm: the base wanders
            assert np.linalg.norm(chain.tracked_in_map(c2w)[:3, 3]) > 0.05
    # the written-out algebra: T_bo . S(c2w) . T_bo^-1
    c2w = turning_in_place([0.7], K, chain.T_base_optical)[0]
    S = c2w.copy()
    S[:3, 3] *= K
    bo = chain.T_base_optical
    np.testing.assert_allclose(chain.tracked_in_map(c2w, K), bo @ S @ np.linalg.inv(bo),
                               atol=1e-12)


def test_points_in_map_scale_before_the_extrinsic():
    chain = FrameChain.camera_only("cam", camera_is_optical=True)
    xyz = np.random.default_rng(0).normal(size=(50, 3))
    M = chain.T_map_world
    np.testing.assert_allclose(chain.points_in_map(xyz, K), (K * xyz) @ M[:3, :3].T + M[:3, 3],
                               rtol=1e-6, atol=1e-6)
    assert chain.points_in_map(xyz).dtype == np.float32
    np.testing.assert_array_equal(chain.points_in_map(xyz),
                                  (xyz @ M[:3, :3].T + M[:3, 3]).astype(np.float32))


def test_covariance_carries_the_scale_uncertainty():
    t = np.array([3.0, -4.0, 0.0])
    cov = scaled_covariance(0.04, 0.002, 0.1, t).reshape(6, 6)
    want = np.diag([0.04] * 3 + [0.002] * 3)
    want[:3, :3] += 0.01 * np.outer(t, t)
    np.testing.assert_allclose(cov, want)
    np.testing.assert_allclose(scaled_covariance(0.04, 0.002, 0.0, t).reshape(6, 6),
                               np.diag([0.04] * 3 + [0.002] * 3))
    assert np.all(np.isfinite(scaled_covariance(0.01, 0.002, math.inf, t)))


def depth_msg(array: np.ndarray, encoding: str, t_ns: int = 5_000_000_000, pad: int = 0,
              bigendian: bool = False) -> Image:
    h, w = array.shape
    dtype = array.dtype.newbyteorder(">" if bigendian else "<")
    rows = np.ascontiguousarray(array, dtype=dtype).view(np.uint8).reshape(h, -1)
    rows = np.concatenate([rows, np.zeros((h, pad), np.uint8)], axis=1)
    return Image(header=Header(stamp=Time(sec=t_ns // 10**9, nanosec=t_ns % 10**9)),
                 height=h, width=w, encoding=encoding, is_bigendian=int(bigendian),
                 step=rows.shape[1], data=rows.tobytes())


@pytest.mark.parametrize("encoding,dtype", [("16UC1", np.uint16), ("32FC1", np.float32)])
@pytest.mark.parametrize("pad,bigendian", [(0, False), (6, False), (2, True)])
def test_depth_messages_read_exactly(encoding, dtype, pad, bigendian):
    a = (np.arange(12).reshape(3, 4) * 100 + 7).astype(dtype)
    stamp, got, enc = depth_msg_input(depth_msg(a, encoding, pad=pad, bigendian=bigendian))
    np.testing.assert_array_equal(got, a)
    assert got.dtype == np.dtype(dtype) and got.flags.c_contiguous
    assert (stamp, enc) == (5_000_000_000, encoding)


def test_short_or_unknown_depth_messages_are_refused_with_the_decoders_reason():
    msg = depth_msg(np.ones((3, 4), np.uint16), "16UC1")
    msg.data = msg.data[:-1]
    with pytest.raises(ImageRejected, match="truncated"):
        depth_msg_input(msg)
    with pytest.raises(ImageRejected, match="unknown_encoding"):
        depth_msg_input(depth_msg(np.ones((3, 4), np.uint16), "rgb8"))


def crop(h: int, w: int):
    return SimpleNamespace(input_hw=(h, w), resized_hw=(h, w), crop_xy=(0, 0), output_hw=(h, w))


def frame(t_ns: int, depth: np.ndarray | None):
    h, w = (8, 8) if depth is None else depth.shape
    return SimpleNamespace(stamp_ns=t_ns, depth=depth, depth_conf=None, crop=crop(h, w),
                           c2w=np.eye(4))


def test_stream_scale_depth_locks_at_k_and_counts_bad_input():
    cfg = ScaleConfig(source="depth", min_samples=3, min_pixels=10, depth_min_m=0.0,
                      depth_max_m=100.0)
    scale = ScaleStream(cfg)
    rng = np.random.default_rng(1)
    T_bo = np.eye(4)
    # no depth yet; a wrong encoding; a wrong size; no predicted depth: counted, no raise
    pred = rng.uniform(1.0, 3.0, size=(30, 40)).astype(np.float32)
    assert scale.on_frame(frame(1_000_000_000, pred), T_bo).reason == "no_depth"
    scale.push_depth(2_000_000_000, np.zeros((30, 40), np.uint8), "mono8")  # not a depth
    assert scale.on_frame(frame(2_000_000_000, pred), T_bo).reason == "wrong_encoding"
    scale.push_depth(*depth_msg_input(depth_msg(np.ones((10, 10), np.float32), "32FC1",
                                                3_000_000_000)))
    assert scale.on_frame(frame(3_000_000_000, pred), T_bo).reason == "wrong_size"
    assert scale.on_frame(frame(3_500_000_000, None), T_bo).reason in ("no_depth", "out_of_sync")
    for i in range(4):
        t = 4_000_000_000 + i * 33_000_000
        pred = rng.uniform(1.0, 3.0, size=(30, 40)).astype(np.float32)
        scale.push_depth(*depth_msg_input(depth_msg(pred * np.float32(K), "32FC1", t)))
        estimate = scale.on_frame(frame(t, pred), T_bo)
    assert estimate.state is ScaleState.LOCKED
    assert estimate.output_factor == pytest.approx(K, rel=1e-6)
    info = scale.info()
    assert info["scale_rejected_wrong_encoding"] == 1 and info["scale_rejected_wrong_size"] == 1
    assert info["scale_depth_received"] == 6
    assert scale.reset().state is ScaleState.UNKNOWN
    assert scale.estimate.segment == 1


def test_units_header_states_units_source_and_value():
    fixed = ScaleStream(ScaleConfig(source="fixed", factor=0.5)).estimate
    assert units_header(fixed)[0] == "units: m"
    assert "fixed, 0.5 m per model unit" in units_header(fixed)[1]
    none = ScaleStream(ScaleConfig()).estimate
    assert units_header(none)[0].startswith("units: model units")
    assert units_header(none) == ["units: model units (no metric scale: scale.source none)",
                                  "scale: none"]
    assert units_header(None)[0] == "units: model units (no scale estimate: nothing was scaled)"
    depth = ScaleStream(ScaleConfig(source="depth")).estimate
    assert "not locked" in units_header(depth)[1]


def test_stream_scale_odometry_counts_bad_poses_and_waits_for_motion():
    scale = ScaleStream(ScaleConfig(source="odometry", min_samples=2))
    T_bo = np.eye(4)
    scale.push_odometry(1_000_000_000, np.eye(4))  # before the first frame: kept until T_bo is known
    assert scale.on_frame(SimpleNamespace(stamp_ns=1_000_000_000, c2w=np.eye(4)),
                          T_bo).reason == "stationary"
    bad = np.eye(4)
    bad[0, 3] = math.nan
    assert scale.push_odometry(2_000_000_000, bad) is None  # never raises
    assert scale.estimate.rejection_count("non_finite") == 1
    assert scale.info()["scale_odometry_received"] == 2


# --- camera_height and odometry from TF in ScaleStream --------------------------------------

CAM_HEIGHT = 1.2  # metres: the camera's optical centre over the floor (base_footprint)
PITCH_DOWN = math.radians(25.0)
IMG_H, IMG_W = 120, 160
K_MODEL = np.array([[90.0, 0.0, 79.5], [0.0, 90.0, 59.5], [0.0, 0.0, 1.0]])


def camera_mount() -> np.ndarray:
    """base_link -> camera_link: 0.3 m ahead, CAM_HEIGHT up (base_link on the floor), pitched
    down by PITCH_DOWN (its x axis below the horizontal)."""
    c, s = math.cos(PITCH_DOWN), math.sin(PITCH_DOWN)
    T = np.eye(4)
    T[:3, :3] = [[c, 0.0, s], [0.0, 1.0, 0.0], [-s, 0.0, c]]
    T[:3, 3] = [LEVER, 0.0, CAM_HEIGHT]
    return T


def floor_depth(T_base_optical: np.ndarray, k: float) -> np.ndarray:
    """The model's predicted z-depth (model units = metres / k) of a scene seen by the camera
    at ``T_base_optical``: the floor z = 0 of the base below the horizon, a wall 8 m ahead
    above it; exact (no noise), so the floor's plane is the floor."""
    vs, us = np.mgrid[0:IMG_H, 0:IMG_W]
    rays = np.stack([(us - K_MODEL[0, 2]) / K_MODEL[0, 0], (vs - K_MODEL[1, 2]) / K_MODEL[1, 1],
                     np.ones(us.shape)], axis=-1)  # optical, z = 1
    in_base = rays @ T_base_optical[:3, :3].T  # (H, W, 3)
    origin = T_base_optical[:3, 3]
    with np.errstate(divide="ignore", invalid="ignore"):
        to_floor = np.where(in_base[..., 2] < -1e-6, -origin[2] / in_base[..., 2], np.inf)
        to_wall = np.where(in_base[..., 0] > 1e-6, (8.0 - origin[0]) / in_base[..., 0], np.inf)
    depth_m = np.minimum(to_floor, to_wall)
    assert np.isfinite(depth_m).all() and (to_floor < np.inf).mean() > 0.3
    return (depth_m / k).astype(np.float32)


def height_frame(t_ns: int, depth: np.ndarray):
    return SimpleNamespace(stamp_ns=t_ns, depth=depth, K_model=K_MODEL, c2w=np.eye(4),
                           depth_conf=np.full(depth.shape, 3.0, np.float32))


def robot_tree(with_ground: bool = True):
    """The robot's static TF: base_footprint -> base_link -> camera_link -> optical."""
    from lingbot_ros.ros.tf.tree import TransformTree
    tree = TransformTree()
    if with_ground:
        tree.set_transform("base_footprint", "base_link", np.eye(4), 0, static=True)
    tree.set_transform("base_link", "camera_link", camera_mount(), 0, static=True)
    tree.set_transform("camera_link", "camera_optical_frame", T_BODY_OPTICAL, 0, static=True)
    return tree


def robot_frames(tree, **config):
    from lingbot_ros.ros.params.node_config import NodeConfig
    from lingbot_ros.ros.tf.robot_frames import RobotFrames
    frames = RobotFrames(NodeConfig(**config), tree)
    chain = frames.resolve("camera_optical_frame", 0.0)
    assert chain is not None
    return frames, chain


@pytest.mark.parametrize("k", [0.5, 3.0])
def test_camera_height_configured_locks_at_k(k):
    """scale.camera_height_m: the floor in the predicted points, unprojected with the model's
    intrinsics, gives k within 1 % (exact here: 1e-6)."""
    T_bo = camera_mount() @ T_BODY_OPTICAL
    scale = ScaleStream(ScaleConfig(source="camera_height", camera_height_m=CAM_HEIGHT,
                                    min_samples=3))
    assert scale.needs_depth
    depth = floor_depth(T_bo, k)
    for i in range(3):
        estimate = scale.on_frame(height_frame(1_000_000_000 + i * 33_000_000, depth), T_bo)
    assert estimate.state is ScaleState.LOCKED and estimate.source == "camera_height"
    assert estimate.output_factor == pytest.approx(k, rel=1e-6)


def test_camera_height_from_tf_ground_frame_locks_at_k():
    """No configured height: base_footprint -> camera on the robot's TF gives it (and the
    ground's up axis)."""
    k = 0.8
    frames, chain = robot_frames(robot_tree())
    np.testing.assert_allclose(frames.ground_to_optical(0), chain.T_base_optical, atol=1e-12)
    scale = ScaleStream(ScaleConfig(source="camera_height", min_samples=2))
    scale.attach_tf(ground=tf_lookup(frames.ground_to_optical))
    depth = floor_depth(chain.T_base_optical, k)
    for i in range(2):
        estimate = scale.on_frame(height_frame(2_000_000_000 + i * 10**8, depth),
                                  chain.T_base_optical)
    assert estimate.state is ScaleState.LOCKED
    assert estimate.output_factor == pytest.approx(k, rel=1e-6)


def test_camera_height_without_ground_frame_or_floor_is_counted_never_raised():
    frames, chain = robot_frames(robot_tree(with_ground=False))
    cfg = ScaleConfig(source="camera_height", min_samples=2, stale_timeout_s=0.5)
    scale = ScaleStream(cfg)
    depth = floor_depth(chain.T_base_optical, 1.0)
    # no TF attached (the node not active): no ground frame to look up
    assert scale.on_frame(height_frame(1_000_000_000, depth),
                          chain.T_base_optical).reason == "no_ground_frame"
    scale.attach_tf(ground=tf_lookup(frames.ground_to_optical))
    estimate = scale.on_frame(height_frame(1_100_000_000, depth), chain.T_base_optical)
    assert estimate.reason == "no_ground_frame" and estimate.state is ScaleState.UNKNOWN
    assert estimate.rejection_count("no_ground_frame") == 2
    info = scale.info()
    assert "no ground frame 'base_footprint' in TF" in info["scale_last_rejection_detail"]
    stale = scale.stale_reason(time.monotonic() + 1.0)
    assert stale.startswith("no_ground_frame (no ground frame 'base_footprint' in TF"), stale
    # no floor in view (a wall only): no_floor; no predicted depth: no_depth
    wall = np.full((IMG_H, IMG_W), 4.0, np.float32)
    configured = ScaleStream(ScaleConfig(source="camera_height", camera_height_m=1.0))
    assert configured.on_frame(height_frame(1, wall), chain.T_base_optical).reason == "no_floor"
    nan = wall.copy()
    nan[4, 7] = np.nan  # on the pixel grid (every 3rd pixel from 1)
    assert configured.on_frame(height_frame(2, nan), chain.T_base_optical).reason == "non_finite"
    none = SimpleNamespace(stamp_ns=3, depth=None, depth_conf=None, K_model=K_MODEL)
    assert configured.on_frame(none, chain.T_base_optical).reason == "no_depth"
    assert configured.estimate.state is ScaleState.UNKNOWN


def test_odometry_from_tf_is_looked_up_at_the_image_stamps_even_when_late():
    """scale.odometry_input tf: odom -> base_link of another node, in the TF tree, looked up
    at each frame's stamp; a frame newer than TF's odometry is looked up again later."""
    k = 2.0
    tree = robot_tree()
    frames, chain = robot_frames(tree)
    T_bo = chain.T_base_optical
    scale = ScaleStream(ScaleConfig(source="odometry", min_samples=2, min_baseline_m=0.3,
                                    odom_min_step_m=0.1))
    scale.attach_tf(odometry=tf_lookup(frames.odom_to_base))
    stamps = [10_000_000_000 + i * 100_000_000 for i in range(8)]

    def base_pose(i):  # the base drives forward and turns a little (metres)
        T = rot_z(0.05 * i)
        T[:3, 3] = [0.15 * i, 0.02 * i * i, 0.0]
        return T

    def c2w(i):  # the model's: T_bo^-1 T_map_base T_bo, translation / k
        m = rigid_inverse(T_bo) @ base_pose(i) @ T_bo
        m[:3, 3] /= k
        return m

    estimate = None
    for i, s in enumerate(stamps):
        # the odometry of frames 3 and 4 comes late: with frame 5's
        for j in ((3, 4, 5) if i == 5 else () if i in (3, 4) else (i,)):
            tree.set_transform("odom", "base_link", base_pose(j), stamps[j], static=False)
        estimate = scale.on_frame(SimpleNamespace(stamp_ns=s, c2w=c2w(i)), T_bo)
        if i == 4:  # not on TF yet: frames 3 and 4 wait (the fit uses frames 0-2)
            assert scale.info()["scale_odometry_received"] == 3
    assert estimate.state is ScaleState.LOCKED
    assert estimate.output_factor == pytest.approx(k, rel=1e-6)
    assert scale.info()["scale_odometry_received"] == len(stamps)


def test_odometry_from_tf_refuses_the_circular_and_camera_only_configurations():
    from lingbot_ros.ros.params.declare import build_settings
    with pytest.raises(ValueError, match="scale.odometry_input.*circular"):
        build_settings({"scale.source": "odometry", "scale.odometry_input": "tf"})
    with pytest.raises(ValueError, match="scale.odometry_input.*frames.base"):
        build_settings({"scale.source": "odometry", "scale.odometry_input": "tf",
                        "frames.base": "", "tf.publish_odom_to_base": False})
    no_depth_out = {"publish.depth_rate_hz": 0.0}  # no output reads the depth
    s = build_settings({"scale.source": "odometry", "scale.odometry_input": "tf",
                        "tf.publish_odom_to_base": False, **no_depth_out})
    assert s.node.odometry_input == "tf" and not s.session.return_depth
    # the camera_height source reads every frame's predicted depth
    assert build_settings({"scale.source": "camera_height", **no_depth_out}).session.return_depth
    # irrelevant without the odometry source
    build_settings({"scale.source": "depth", "scale.odometry_input": "tf"})


def test_odometry_from_tf_without_odometry_says_what_tf_lacks():
    frames, chain = robot_frames(robot_tree())
    scale = ScaleStream(ScaleConfig(source="odometry", stale_timeout_s=0.5))
    scale.attach_tf(odometry=tf_lookup(frames.odom_to_base))
    estimate = scale.on_frame(SimpleNamespace(stamp_ns=10**9, c2w=np.eye(4)),
                              chain.T_base_optical)
    assert estimate.reason == "no_odometry" and estimate.rejection_count("no_odometry") == 1
    assert "TF: frame 'odom' does not exist" in scale.info()["scale_last_rejection_detail"]
    assert scale.stale_reason(time.monotonic() + 1.0).startswith("no_odometry (")
    assert scale.info()["scale_odometry_received"] == 0

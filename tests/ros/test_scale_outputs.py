"""Metric scale where the node's outputs leave (no DDS): the REP-105 algebra with a scale
(a robot turning in place about base_link with the camera 0.3 m ahead keeps base_link put),
the odometry covariance with the scale's uncertainty, depth messages read for the depth
source, ``StreamScale`` (fixed, depth; bad input counted, never raised) and the saved files'
units header."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from builtin_interfaces.msg import Time
from sensor_msgs.msg import Image
from std_msgs.msg import Header

from lingbot_ros.geometry import T_BODY_OPTICAL, rigid_inverse
from lingbot_ros.ros.frames import FrameChain
from lingbot_ros.ros.messages import scaled_covariance
from lingbot_ros.ros.stream_scale import StreamScale, depth_msg_to_array, units_header
from lingbot_ros.scale import ScaleConfig, ScaleState

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
    got = depth_msg_to_array(depth_msg(a, encoding, pad=pad, bigendian=bigendian))
    np.testing.assert_array_equal(got, a)
    assert got.dtype == np.dtype(dtype)


def test_short_or_unknown_depth_messages_give_arrays_the_source_rejects():
    msg = depth_msg(np.ones((3, 4), np.uint16), "16UC1")
    msg.data = msg.data[:-1]
    assert depth_msg_to_array(msg).shape == (0, 0)
    assert depth_msg_to_array(depth_msg(np.ones((3, 4), np.uint16), "rgb8")).dtype == np.uint8


def crop(h: int, w: int):
    return SimpleNamespace(input_hw=(h, w), resized_hw=(h, w), crop_xy=(0, 0), output_hw=(h, w))


def frame(t_ns: int, depth: np.ndarray | None):
    h, w = (8, 8) if depth is None else depth.shape
    return SimpleNamespace(stamp_ns=t_ns, depth=depth, depth_conf=None, crop=crop(h, w),
                           c2w=np.eye(4))


def test_stream_scale_depth_locks_at_k_and_counts_bad_input():
    cfg = ScaleConfig(source="depth", min_samples=3, min_pixels=10, depth_min_m=0.0,
                      depth_max_m=100.0)
    scale = StreamScale(cfg)
    rng = np.random.default_rng(1)
    T_bo = np.eye(4)
    # no depth yet; a wrong encoding; a wrong size; no predicted depth: counted, no raise
    pred = rng.uniform(1.0, 3.0, size=(30, 40)).astype(np.float32)
    assert scale.on_frame(frame(1_000_000_000, pred), T_bo).reason == "no_depth"
    scale.push_depth(depth_msg(np.zeros((30, 40), np.uint8), "mono8", 2_000_000_000))
    assert scale.on_frame(frame(2_000_000_000, pred), T_bo).reason == "wrong_encoding"
    scale.push_depth(depth_msg(np.ones((10, 10), np.float32), "32FC1", 3_000_000_000))
    assert scale.on_frame(frame(3_000_000_000, pred), T_bo).reason == "wrong_size"
    assert scale.on_frame(frame(3_500_000_000, None), T_bo).reason in ("no_depth", "out_of_sync")
    for i in range(4):
        t = 4_000_000_000 + i * 33_000_000
        pred = rng.uniform(1.0, 3.0, size=(30, 40)).astype(np.float32)
        scale.push_depth(depth_msg(pred * np.float32(K), "32FC1", t))
        estimate = scale.on_frame(frame(t, pred), T_bo)
    assert estimate.state is ScaleState.LOCKED
    assert estimate.output_factor == pytest.approx(K, rel=1e-6)
    info = scale.info()
    assert info["scale_rejected_wrong_encoding"] == 1 and info["scale_rejected_wrong_size"] == 1
    assert info["scale_depth_received"] == 6
    assert scale.reset().state is ScaleState.UNKNOWN
    assert scale.estimate.segment == 1


def test_units_header_states_units_source_and_value():
    fixed = StreamScale(ScaleConfig(source="fixed", factor=0.5)).estimate
    assert units_header(fixed)[0] == "units: m"
    assert "fixed, 0.5 m per model unit" in units_header(fixed)[1]
    none = StreamScale(ScaleConfig()).estimate
    assert units_header(none)[0].startswith("units: model units")
    assert units_header(None)[1] == "scale: no scale source"
    depth = StreamScale(ScaleConfig(source="depth")).estimate
    assert "not locked" in units_header(depth)[1]


def test_stream_scale_odometry_counts_bad_poses_and_waits_for_motion():
    scale = StreamScale(ScaleConfig(source="odometry", min_samples=2))
    T_bo = np.eye(4)
    scale.push_odometry(1.0, np.eye(4))  # before the first frame: kept until T_bo is known
    assert scale.on_frame(SimpleNamespace(stamp_ns=1_000_000_000, c2w=np.eye(4)),
                          T_bo).reason == "stationary"
    bad = np.eye(4)
    bad[0, 3] = math.nan
    assert scale.push_odometry(2.0, bad) is None  # never raises
    assert scale.estimate.rejection_count("non_finite") == 1
    assert scale.info()["scale_odometry_received"] == 2

"""The back end's correction in the node's frames (ros/backend/corrections.py), without ROS:
map -> odom composes with odom -> base into the corrected pose for any extrinsic, the path is
the keyframes' optimised poses in stamp order, the rebuilt map's points lie where the stored
depth says, and a LOCKED scale puts the keyframe in metres before the back end sees it."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from lingbot_ros.geometry import rotation_exp
from lingbot_ros.ros.backend.corrections import (corrected_path, metric_result,
                                                  odom_correction, rebuild_map)
from lingbot_ros.ros.tf.frame_chain import FrameChain


def rigid(rng, t_scale: float = 2.0) -> np.ndarray:
    T = np.eye(4)
    T[:3, :3] = rotation_exp(rng.normal(size=3))
    T[:3, 3] = rng.normal(size=3) * t_scale
    return T


def chains(rng):
    return [FrameChain.robot("base_link", "cam", rigid(rng, 0.3), camera_is_optical=True),
            FrameChain.robot("base_link", "cam", rigid(rng, 0.3), camera_is_optical=False),
            FrameChain.camera_only("cam", True)]


def test_map_to_odom_times_odom_to_base_is_the_corrected_pose():
    rng = np.random.default_rng(3)
    for chain in chains(rng):
        for _ in range(5):
            C, c2w = rigid(rng), rigid(rng)
            M = odom_correction(chain, C)
            T_odom = chain.tracked_in_map(c2w)  # what odom -> base carries, untouched
            np.testing.assert_allclose(M @ T_odom, chain.tracked_in_map(C @ c2w), atol=1e-12)
            np.testing.assert_allclose(M[:3, :3] @ M[:3, :3].T, np.eye(3), atol=1e-12)


def test_identity_correction_is_identity_map_to_odom():
    chain = chains(np.random.default_rng(0))[0]
    np.testing.assert_allclose(odom_correction(chain, np.eye(4)), np.eye(4), atol=1e-12)


@pytest.mark.parametrize("bad", [np.eye(3), np.full((4, 4), np.nan), np.zeros((2, 4, 4))])
def test_a_bad_correction_is_refused(bad):
    chain = FrameChain.camera_only("cam", True)
    with pytest.raises(ValueError, match="correction"):
        odom_correction(chain, bad)


def test_corrected_path_is_in_stamp_order_and_skips_keyframes_without_a_stamp():
    rng = np.random.default_rng(1)
    chain = chains(rng)[0]
    poses = {7: rigid(rng), 3: rigid(rng), 5: rigid(rng), 9: rigid(rng)}
    stamps = {7: 300, 3: 100, 5: 200}  # 9: none
    path = corrected_path(chain, poses, stamps)
    assert [s for s, _ in path] == [100, 200, 300]
    np.testing.assert_allclose(path[2][1], chain.tracked_in_map(poses[7]))


def test_rebuilt_points_lie_where_the_stored_depth_says():
    """A stored depth at stride 4 of a 16 x 16 model depth: its pixel (r, c) is model pixel
    (4r, 4c); every point is that pixel's ray at its depth, in the keyframe's map pose,
    then through the chain into the node's map."""
    rng = np.random.default_rng(2)
    chain = chains(rng)[0]
    K = np.array([[20.0, 0, 8.0], [0, 18.0, 7.5], [0, 0, 1]])
    stride = 4
    depth = rng.uniform(1.0, 3.0, size=(4, 4)).astype(np.float32)  # (16 / 4, 16 / 4)
    T = rigid(rng)
    vm = rebuild_map([(0, T, depth, K, stride)], chain, voxel_size=1e-4, max_points=1000)
    xyz, rgb = vm.arrays()
    assert len(xyz) == depth.size and (rgb == 200).all()
    r, c = np.mgrid[0:4, 0:4]
    u, v, z = c.ravel() * stride, r.ravel() * stride, depth.ravel().astype(float)
    cam = np.stack([(u - K[0, 2]) / K[0, 0] * z, (v - K[1, 2]) / K[1, 1] * z, z], axis=1)
    expected = chain.points_in_map(cam @ T[:3, :3].T + T[:3, 3])
    got = xyz[np.lexsort(xyz.T)]
    np.testing.assert_allclose(got, expected[np.lexsort(expected.T)], atol=2e-4)


def test_rebuilt_map_is_bounded_as_the_running_one():
    rng = np.random.default_rng(4)
    chain = FrameChain.camera_only("cam", True)
    K = np.array([[30.0, 0, 16.0], [0, 30.0, 16.0], [0, 0, 1]])
    depths = [(i, rigid(rng), rng.uniform(1, 5, (32, 32)).astype(np.float32), K, 1)
              for i in range(6)]
    vm = rebuild_map(depths, chain, voxel_size=1e-3, max_points=500)
    assert 0 < vm.num_points <= 500 and vm.coarsenings > 0


def test_metric_result_scales_translation_and_depth_only():
    c2w = rigid(np.random.default_rng(5))
    frame = Frame(c2w, np.full((2, 2), 2.0, np.float32), 4)
    assert metric_result(frame, None) is frame
    m = metric_result(frame, 0.5)
    np.testing.assert_allclose(m.c2w[:3, 3], c2w[:3, 3] * 0.5)
    np.testing.assert_allclose(m.c2w[:3, :3], c2w[:3, :3])
    np.testing.assert_allclose(m.depth, 1.0)
    assert m.index == 4


@dataclasses.dataclass(frozen=True)
class Frame:
    """The ``FrameResult`` fields ``metric_result`` changes (it uses ``dataclasses.replace``)."""

    c2w: np.ndarray
    depth: np.ndarray
    index: int

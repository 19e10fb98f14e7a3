"""Pose encoding -> camera-to-world (OpenCV axes) and intrinsics at the input size."""
import math

import torch

from lingbot_ros.model import pose_to_c2w, pose_to_intrinsics, quaternion_to_matrix


def test_identity_quaternion_and_translation_give_the_camera_centre():
    pose = torch.tensor([1.0, -2.0, 3.0, 0, 0, 0, 1, 1.0, 1.2])
    c2w = pose_to_c2w(pose)
    assert torch.equal(c2w[:3, :3], torch.eye(3))
    assert torch.equal(c2w[:3, 3], torch.tensor([1.0, -2.0, 3.0]))  # camera centre in the world
    assert torch.equal(c2w[3], torch.tensor([0.0, 0, 0, 1]))


def test_quaternion_is_xyzw_and_normalised_implicitly():
    half = math.pi / 4  # 90 degrees about +z, scaled by 3 (not unit length)
    q = 3 * torch.tensor([0.0, 0.0, math.sin(half), math.cos(half)], dtype=torch.float64)
    r = quaternion_to_matrix(q)
    expected = torch.tensor([[0.0, -1, 0], [1, 0, 0], [0, 0, 1]], dtype=torch.float64)
    assert torch.allclose(r, expected, atol=1e-12)
    # camera-to-world: the camera's forward axis (+z, OpenCV) maps to a world direction
    assert torch.allclose(r @ torch.tensor([1.0, 0, 0], dtype=torch.float64),
                          torch.tensor([0.0, 1, 0], dtype=torch.float64), atol=1e-12)


def test_intrinsics_follow_the_field_of_view_at_the_input_size():
    fov_h, fov_w = 0.8, 1.1
    pose = torch.tensor([[0, 0, 0, 0, 0, 0, 1, fov_h, fov_w]], dtype=torch.float64)
    k = pose_to_intrinsics(pose, (378, 504))[0]
    assert math.isclose(k[0, 0].item(), 252 / math.tan(fov_w / 2), rel_tol=1e-12)
    assert math.isclose(k[1, 1].item(), 189 / math.tan(fov_h / 2), rel_tol=1e-12)
    assert k[0, 2].item() == 252 and k[1, 2].item() == 189 and k[2, 2].item() == 1
    assert k[0, 1].item() == k[1, 0].item() == 0


def test_a_zero_fov_from_the_relu_gives_a_finite_focal_length():
    pose = torch.tensor([0, 0, 0, 0, 0, 0, 1, 0.0, 0.0])
    assert torch.isfinite(pose_to_intrinsics(pose, (112, 154))).all()

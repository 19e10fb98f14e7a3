"""Keyframe policies: the flow against analytic cases, and which frames each policy keeps."""
import math

import numpy as np
import pytest
import torch

from lingbot_ros.config import KeyframeConfig
from lingbot_ros.session.keyframes import (AllFrames, EveryN, FlowKeyframes, KeyframePolicy,
                                           camera_motion_flow, make_policy)

H, W, FX, FY, CX, CY = 48, 64, 50.0, 50.0, 32.0, 24.0
K = torch.tensor([[FX, 0, CX], [0, FY, CY], [0, 0, 1]], dtype=torch.float64)


def pose(t=(0.0, 0.0, 0.0), rot=None, dtype=torch.float64):
    m = torch.eye(4, dtype=dtype)
    if rot is not None:
        m[:3, :3] = torch.as_tensor(rot, dtype=dtype)
    m[:3, 3] = torch.tensor(t, dtype=dtype)
    return m


def rot_y(a):
    c, s = math.cos(a), math.sin(a)
    return [[c, 0, s], [0, 1, 0], [-s, 0, c]]


def plane(z=2.0, dtype=torch.float64):
    return torch.full((H, W), z, dtype=dtype)


def grid(stride):
    v, u = np.meshgrid(np.arange(0, H, stride), np.arange(0, W, stride), indexing="ij")
    return u.astype(np.float64), v.astype(np.float64)


# --- the flow ----------------------------------------------------------------------------

@pytest.mark.parametrize("tx,z", [(0.1, 2.0), (-0.3, 5.0), (0.0, 1.0)])
def test_sideways_translation_over_a_fronto_parallel_plane(tx, z):
    """Every pixel moves by fx * |tx| / Z."""
    flow = camera_motion_flow(plane(z), K, pose((tx, 0, 0)), pose())
    assert flow.ndim == 0
    assert abs(float(flow) - FX * abs(tx) / z) < 1e-9


def test_forward_translation_matches_the_analytic_radial_flow():
    z, tz, stride = 2.0, 0.5, 4
    u, v = grid(stride)
    # a point at depth z in the current camera is at depth z + tz in the reference camera
    scale = z / (z + tz)
    expect = np.hypot((u - CX) * (scale - 1), (v - CY) * (scale - 1)).mean()
    flow = camera_motion_flow(plane(z), K, pose((0, 0, tz)), pose(), stride=stride)
    assert abs(float(flow) - expect) < 1e-9


def test_pure_rotation_flow_is_the_homography_and_ignores_depth():
    a, stride = 0.05, 8
    u, v = grid(stride)
    Kn = K.numpy()
    rel = np.asarray(rot_y(a))  # ref_c2w = I, so points go ref <- current by R
    rays = np.stack([u, v, np.ones_like(u)], -1) @ np.linalg.inv(Kn).T
    p = rays @ rel.T @ Kn.T
    expect = np.hypot(p[..., 0] / p[..., 2] - u, p[..., 1] / p[..., 2] - v).mean()
    depth = torch.rand(H, W, dtype=torch.float64, generator=torch.Generator().manual_seed(0)) + 1
    flow = camera_motion_flow(depth, K, pose(rot=rot_y(a)), pose(), stride=stride)
    assert abs(float(flow) - expect) < 1e-9


def test_reference_pose_and_K_are_used():
    # both cameras moved by the same amount: no relative motion
    assert float(camera_motion_flow(plane(), K, pose((1, 2, 3)), pose((1, 2, 3)))) < 1e-9
    # the reference K doubles the focal length: projected points scale about the centre
    k2 = K.clone()
    k2[0, 0] = k2[1, 1] = 2 * FX
    flow = camera_motion_flow(plane(), K, pose(), pose(), ref_K=k2, stride=8)
    u, v = grid(8)
    assert abs(float(flow) - np.hypot(u - CX, v - CY).mean()) < 1e-9


def test_invalid_depth_and_points_behind_the_reference():
    depth = plane(2.0)
    depth[:, : W // 2] = 0.0  # half the pixels have no depth: they do not count
    depth[0, W - 1] = float("nan")
    flow = camera_motion_flow(depth, K, pose((0.1, 0, 0)), pose(), stride=1)
    assert abs(float(flow) - FX * 0.1 / 2.0) < 1e-9
    assert float(camera_motion_flow(torch.zeros(H, W), K, pose((1, 0, 0)), pose())) == 0.0
    behind = pose(rot=rot_y(math.pi))  # the reference camera looks the other way
    assert math.isinf(float(camera_motion_flow(plane(), K, pose(), behind)))


def test_model_shaped_inputs_and_dtypes():
    d = plane(2.0, torch.float32).reshape(1, 1, H, W, 1)  # depth [B, S, H, W, 1]
    c2w = pose((0.1, 0, 0), dtype=torch.float32).reshape(1, 1, 4, 4)
    flow = camera_motion_flow(d, K.float().reshape(1, 1, 3, 3), c2w, pose(dtype=torch.float32))
    assert flow.dtype == torch.float32 and abs(float(flow) - 2.5) < 1e-5
    half = camera_motion_flow(d.to(torch.bfloat16), K, pose((0.1, 0, 0)), pose())
    assert half.dtype == torch.float32 and abs(float(half) - 2.5) < 1e-4
    with pytest.raises(ValueError, match="one \\(H, W\\) map"):
        camera_motion_flow(torch.ones(2, H, W), K, pose(), pose())
    with pytest.raises(ValueError, match="K must be one 3x3"):
        camera_motion_flow(plane(), torch.eye(4), pose(), pose())
    with pytest.raises(ValueError, match="stride"):
        camera_motion_flow(plane(), K, pose(), pose(), stride=0)


# --- the policies ------------------------------------------------------------------------

def run(policy: KeyframePolicy, n, speed=0.0, z=2.0, start=0):
    """Stream n frames of a camera sliding sideways at ``speed`` per frame over a plane;
    commit what the policy keeps. Returns the keyframe indices."""
    kept = []
    for i in range(start, start + n):
        c2w = pose((speed * i, 0, 0))
        first = policy.decide(i, plane(z), K, c2w)
        assert policy.decide(i, plane(z), K, c2w) == first  # decide is a pure query
        if first:
            policy.on_keyframe(i, plane(z), K, c2w)
            kept.append(i)
    return kept


def test_all_frames():
    assert run(AllFrames(), 7) == list(range(7))


@pytest.mark.parametrize("n,expect", [(1, list(range(10))), (3, [0, 3, 6, 9]), (4, [0, 4, 8]),
                                      (20, [0])])
def test_every_n(n, expect):
    assert run(EveryN(n), 10) == expect


def test_which_decisions_are_known_before_the_forward():
    """all / every_n decide from the index alone (keyframes evict first); flow decides from
    the frame's outputs, so every flow frame is speculative."""
    assert [AllFrames().known_before_forward(i) for i in range(3)] == [True] * 3
    p = EveryN(2)
    known = []
    for i in range(6):
        known.append(p.known_before_forward(i))
        if known[-1]:
            p.on_keyframe(i)
    assert known == [True, False, True, False, True, False]
    f = FlowKeyframes(10.0, max_gap=2)
    assert f.known_before_forward(0) is None  # even the first frame, as the reference
    f.on_keyframe(0, K=K, c2w=pose())
    assert f.known_before_forward(2) is None  # the gap rule too: decided after the forward
    with pytest.raises(ValueError, match="not after the last keyframe"):
        f.known_before_forward(0)


def test_every_n_counts_from_the_first_streaming_frame_and_reset():
    p = EveryN(3)
    assert run(p, 7, start=8) == [8, 11, 14]  # e.g. after 8 scale frames: (i - 8) % 3 == 0
    p.reset()
    assert run(p, 4, start=100) == [100, 103]


def test_flow_keyframes_when_the_flow_exceeds_the_threshold():
    # 0.16 m/frame at 2 m with fx 50: 4 px per frame; a keyframe once 3 frames (12 px) pass
    assert run(FlowKeyframes(10.0, max_gap=30), 13, speed=0.16) == [0, 3, 6, 9, 12]
    # 8 px after 2 frames: just below / just above the threshold
    assert run(FlowKeyframes(7.99, max_gap=30), 7, speed=0.16) == [0, 2, 4, 6]
    assert run(FlowKeyframes(8.01, max_gap=30), 7, speed=0.16) == [0, 3, 6]


def test_flow_max_gap_and_first_frame():
    slow = FlowKeyframes(10.0, max_gap=5)
    assert run(slow, 12, speed=0.001) == [0, 5, 10]
    assert slow.num_keyframes == 3 and slow.last_keyframe_index == 10
    still = FlowKeyframes(10.0, max_gap=30)
    assert run(still, 40, speed=0.0) == [0, 30]


def test_flow_decide_skips_the_flow_when_the_gap_decides():
    p = FlowKeyframes(10.0, max_gap=2)
    assert p.decide(0) and p.last_flow is None  # first frame: no inputs needed
    p.on_keyframe(0, K=K, c2w=pose())
    assert not p.decide(1, plane(), K, pose((0.01, 0, 0)))
    assert p.last_flow is not None and abs(float(p.last_flow) - 0.25) < 1e-9
    assert p.decide(2) and p.last_flow is None  # the gap rule: no depth needed, no sync


def test_flow_reset_and_errors():
    p = FlowKeyframes(10.0)
    run(p, 3, speed=0.5)
    p.reset()
    assert p.last_keyframe_index is None and p.decide(0)
    p.on_keyframe(0, K=K, c2w=pose())
    with pytest.raises(ValueError, match="needs depth, K and c2w"):
        p.decide(1)
    with pytest.raises(ValueError, match="needs the keyframe's c2w"):
        p.on_keyframe(1)
    with pytest.raises(ValueError, match="not after the last keyframe"):
        p.decide(0, plane(), K, pose())
    with pytest.raises(ValueError, match="flow_threshold"):
        FlowKeyframes(-1.0)


def test_make_policy_from_config():
    assert isinstance(make_policy(KeyframeConfig()), AllFrames)
    p = make_policy(KeyframeConfig(policy="every_n", n=4))
    assert isinstance(p, EveryN) and p.n == 4
    f = make_policy(KeyframeConfig(policy="flow", flow_threshold=3.5, max_gap=7, flow_stride=4))
    assert isinstance(f, FlowKeyframes) and (f.threshold, f.max_gap, f.stride) == (3.5, 7, 4)
    for policy in (AllFrames(), EveryN(2), f):
        assert isinstance(policy, KeyframePolicy)


@pytest.mark.parametrize("kwargs,match", [
    ({"policy": "random"}, "policy must be one of"),
    ({"n": 0}, "n must be a positive integer"),
    ({"max_gap": 0}, "max_gap must be a positive integer"),
    ({"flow_stride": -1}, "flow_stride must be a positive integer"),
    ({"flow_threshold": -0.5}, "flow_threshold must be a finite number"),
    ({"flow_threshold": float("nan")}, "flow_threshold must be a finite number"),
    ({"flow_threshold": "5"}, "flow_threshold must be a finite number"),
])
def test_keyframe_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        KeyframeConfig(**kwargs)

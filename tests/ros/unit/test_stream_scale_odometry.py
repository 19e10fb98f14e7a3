"""ScaleStream's odometry input: an unusable pose is a counted ``non_finite`` rejection
whenever it comes, also before the stream's first frame (issue 32: one that came then was
kept, and its rejection dropped uncounted when the source was built at the first frame)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from lingbot_ros.geometry import T_BODY_OPTICAL
from lingbot_ros.ros.intake.scale_msgs import odometry_msg_pose
from lingbot_ros.scale import ScaleConfig, ScaleStream
from tests.ros.unit.test_scale_outputs import camera_mount
from tests.ros.unit.test_stream_scale_state import ODOM_CFG, feed_scale, odometry_events

NAN_POSE = np.full((4, 4), np.nan)


def non_finite(scale: ScaleStream) -> int:
    return scale.estimate.rejection_count("non_finite")


@pytest.mark.parametrize("bad", [NAN_POSE, np.eye(3), np.diag([2.0, 1.0, 1.0, 1.0])],
                         ids=["nan", "not_4x4", "not_rigid"])
def test_an_unusable_pose_before_the_first_frame_is_counted_at_once(bad):
    scale = ScaleStream(ODOM_CFG)
    scale.push_odometry(1_000_000_000, bad)
    assert non_finite(scale) == 1
    assert scale.info()["scale_rejected_non_finite"] == 1
    assert scale.info()["scale_last_rejection_detail"] == \
        "odometry pose is not a finite rigid transform"
    assert scale.odometry_received == 1


def test_counted_once_and_the_good_poses_around_it_still_make_the_estimate():
    """A NaN pose among the odometry that comes before the first frame: counted once (not
    again when the source is built at the first frame), and the stream locks as without it."""
    T_bo = camera_mount() @ T_BODY_OPTICAL
    events = odometry_events(120, 2.0, T_bo, lag=0)  # frame 0, odometry 0.5, frame 1, ...
    ahead = [i for i, (kind, _) in enumerate(events) if kind == "odom"][:5]
    rest = [e for i, e in enumerate(events) if i not in ahead]
    assert rest[0][0] == "frame"  # the five odometry poses come before the first frame
    nan = ("odom", (events[ahead[2]][1][0] - 10_000_000, NAN_POSE))
    clean, with_nan = ScaleStream(ODOM_CFG), ScaleStream(ODOM_CFG)
    feed_scale(clean, [events[i] for i in ahead] + rest, T_bo)
    feed_scale(with_nan, [events[i] for i in ahead[:2]] + [nan] +
               [events[i] for i in ahead[2:]] + rest, T_bo)
    assert non_finite(with_nan) == 1 and non_finite(clean) == 0
    assert with_nan.estimate.locked and clean.estimate.locked
    assert with_nan.estimate.metres_per_unit == clean.estimate.metres_per_unit
    assert with_nan.estimate.samples == clean.estimate.samples


def test_after_the_first_frame_too():
    T_bo = camera_mount() @ T_BODY_OPTICAL
    scale = ScaleStream(ODOM_CFG)
    scale.on_frame(SimpleNamespace(stamp_ns=1_000_000_000, c2w=np.eye(4)), T_bo)
    scale.push_odometry(1_000_000_000, NAN_POSE)
    assert non_finite(scale) == 1


def test_other_sources_keep_no_odometry_and_count_nothing():
    scale = ScaleStream(ScaleConfig(source="depth"))
    scale.push_odometry(1_000_000_000, NAN_POSE)
    assert scale.odometry_received == 1 and non_finite(scale) == 0


def odometry(position=(0.0, 0.0, 0.0), quaternion=(0.0, 0.0, 0.0, 1.0)):
    from nav_msgs.msg import Odometry
    msg = Odometry()
    msg.header.stamp.sec, msg.header.stamp.nanosec = 12, 500_000_000
    p, q = msg.pose.pose.position, msg.pose.pose.orientation
    p.x, p.y, p.z = position
    q.x, q.y, q.z, q.w = quaternion
    return msg


def test_a_zero_or_nan_quaternion_is_no_rotation_and_is_rejected():
    stamp, T = odometry_msg_pose(odometry((1.0, 2.0, 3.0), (0.0, 0.0, 0.0, 2.0)))
    assert stamp == 12_500_000_000
    np.testing.assert_allclose(T, [[1, 0, 0, 1], [0, 1, 0, 2], [0, 0, 1, 3], [0, 0, 0, 1]])
    for q in [(0.0, 0.0, 0.0, 0.0), (math.nan, 0.0, 0.0, 1.0)]:
        _, T = odometry_msg_pose(odometry(quaternion=q))
        assert np.isnan(T[:3, :3]).all()
        scale = ScaleStream(ODOM_CFG)
        scale.push_odometry(stamp, T)
        assert non_finite(scale) == 1

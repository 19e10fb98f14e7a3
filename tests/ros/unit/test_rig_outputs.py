"""A rig camera's outputs (no DDS traffic: a real rclpy node, the real ``Outputs``,
``MapPoints`` and ``CameraStatus``): topics under ``~/<camera>/``, nothing on /tf and no
~/odometry (the rig's fused ones), the pose through the camera's alignment, the rig's one
map fed but not owned; ``camera=""`` keeps today's topics."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from lingbot_ros.ros.params.node_config import NodeConfig
from lingbot_ros.ros.tf.frame_chain import FrameChain

from tests.ros.rig_streams import rclpy_node

NODE = "rig_outputs"


@pytest.fixture
def ros_node():
    with rclpy_node(NODE) as node:
        yield node


def keyframe(stamp_ns: int = 1_000_000_000, c2w=None):
    """A keyframe with a flat depth of 2 model units over 8 x 8 pixels."""
    h = w = 8
    K_model = np.array([[8.0, 0.0, 4.0], [0.0, 8.0, 4.0], [0.0, 0.0, 1.0]])
    return SimpleNamespace(
        stamp_ns=stamp_ns, keyframe=True, index=5, c2w=np.eye(4) if c2w is None else c2w,
        K=K_model, K_model=K_model, depth=np.full((h, w), 2.0, np.float32),
        depth_conf=np.full((h, w), 5.0, np.float32), rgb=None,
        crop=SimpleNamespace(input_hw=(h, w)), latency_ms=3.0)


def topics(outputs) -> set[str]:
    return {p.topic_name for p in outputs._publishers} | {outputs.path.path.topic_name}


def recorded(publisher) -> list:
    """The messages ``publisher`` publishes from now on (they still go out)."""
    sent, real = [], publisher.publish
    publisher.publish = lambda msg: (sent.append(msg), real(msg))
    return sent


def test_todays_topics_without_a_camera(ros_node):
    from lingbot_ros.ros.outputs.frame_outputs import Outputs
    outputs = Outputs(ros_node, NodeConfig(publish_points=True))
    assert topics(outputs) == {f"/{NODE}/{t}" for t in (
        "pose", "odometry", "camera_info", "depth", "depth/camera_info", "points", "path")} \
        | {"/tf"}
    outputs.destroy()


def test_a_cameras_topics_are_under_its_name_without_tf_or_odometry(ros_node):
    from lingbot_ros.ros.outputs.frame_outputs import Outputs
    outputs = Outputs(ros_node, NodeConfig(publish_points=True), camera="front",
                      publish_tf=False)
    assert topics(outputs) == {f"/{NODE}/front/{t}" for t in (
        "pose", "camera_info", "depth", "depth/camera_info", "points", "path")}
    assert outputs.odometry is None and outputs.tf is None and outputs.map is None
    outputs.destroy()
    # a camera may keep its /tf (a rig of one camera that is the odometry, say)
    outputs = Outputs(ros_node, NodeConfig(), camera="rear")
    assert "/tf" in topics(outputs) and f"/{NODE}/rear/pose" in topics(outputs)
    outputs.destroy()


def test_a_cameras_pose_goes_through_its_alignment_and_nothing_on_tf(ros_node):
    from lingbot_ros.ros.outputs.frame_outputs import Outputs
    outputs = Outputs(ros_node, NodeConfig(base_frame="", depth_rate_hz=0), camera="rear",
                      publish_tf=False)
    poses, infos = recorded(outputs.pose), recorded(outputs.camera_info)
    chain = FrameChain.camera_only("rear_optical", True)
    A = np.eye(4)
    A[:3, 3] = (1.0, 2.0, 3.0)  # the camera's alignment into the fused odometry
    c2w = np.eye(4)
    c2w[:3, 3] = (0.5, 0.0, 0.0)
    assert outputs.publish(keyframe(c2w=c2w), chain, depth_due=False, map_to_odom=A) == ""
    p = poses[0].pose.position
    expected = (A @ chain.tracked_in_map(c2w, None))[:3, 3]
    assert [p.x, p.y, p.z] == pytest.approx(expected, abs=1e-12)
    assert [p.x, p.y, p.z] != pytest.approx(chain.tracked_in_map(c2w, None)[:3, 3])
    assert poses[0].header.frame_id == "map" and infos[0].header.frame_id == "rear_optical"
    outputs.destroy()


def test_the_rigs_map_takes_every_cameras_points_and_survives_a_cameras_reset(ros_node):
    from lingbot_ros.ros.outputs.frame_outputs import Outputs
    from lingbot_ros.ros.outputs.map_points import MapPoints
    cfg = NodeConfig(base_frame="", depth_rate_hz=0, points_stride=1, map_points=True,
                     map_rate_hz=100.0)
    shared = MapPoints(ros_node, "map", 0.01, 10_000, 100.0)
    front = Outputs(ros_node, cfg, camera="front", publish_tf=False, shared_map=shared)
    rear = Outputs(ros_node, cfg, camera="rear", publish_tf=False, shared_map=shared)
    assert front.map is shared and rear.map is shared
    chain = FrameChain.camera_only("cam", True)
    front.publish(keyframe(), chain, depth_due=False)
    shared._last_add = -np.inf  # due again (the map's rate), for the other camera's keyframe
    A = np.eye(4)
    A[:3, 3] = (10.0, 0.0, 0.0)  # the rear's points land 10 units away in the fused map
    rear.publish(keyframe(2_000_000_000), chain, depth_due=False, map_to_odom=A)
    xyz, _ = shared.snapshot()
    assert len(xyz) == 128 and xyz[:, 0].min() < 5.0 < xyz[:, 0].max()  # both cameras'
    rear.clear()  # a reset of one camera: the rig's map keeps everyone's points
    assert shared.info()["map_points"] == 128
    from lingbot_ros.session import VOXEL_MAP
    assert front.node_state()[VOXEL_MAP] is None  # the rig's map is not the camera's part
    front.destroy()
    rear.destroy()  # ... nor destroyed with it: the rig's owner destroys it
    assert shared.info()["map_points"] == 128
    shared.destroy()


def test_bad_camera_arguments(ros_node):
    from lingbot_ros.ros.outputs.frame_outputs import Outputs
    from lingbot_ros.ros.outputs.map_points import MapPoints
    with pytest.raises(ValueError, match="camera name of"):
        Outputs(ros_node, NodeConfig(), camera="Front")
    shared = MapPoints(ros_node, "map", 0.01, 100, 1.0)
    with pytest.raises(ValueError, match="needs a camera"):
        Outputs(ros_node, NodeConfig(), shared_map=shared)
    shared.destroy()


def test_a_cameras_status_topic_and_counters(ros_node):
    from std_msgs.msg import Header

    from lingbot_ros.ros.status.camera_status import CameraStatus
    from lingbot_ros.ros.status.telemetry import NodeTelemetry
    telemetry = NodeTelemetry()
    status = CameraStatus(ros_node, "front", telemetry)
    assert status.status.topic_name == f"/{NODE}/front/status"
    sent = recorded(status.status)
    status.frame(keyframe(), Header(frame_id="front_optical"), 12.5, "withheld")
    status.failed(Header(), "non-finite")
    assert [m.state for m in sent] == [sent[0].STATE_TRACKING, sent[0].STATE_FAILED]
    assert sent[0].keyframe and sent[0].frame_index == 5 and sent[0].latency_ms == 12.5
    assert sent[0].message == "withheld" and sent[0].header.frame_id == "front_optical"
    status.destroy()
    with pytest.raises(ValueError, match="camera name"):
        CameraStatus(ros_node, "", telemetry)


def test_the_fused_pose_goes_out_as_odom_to_base_odometry_pose_and_path(ros_node):
    from lingbot_ros.ros.outputs.rig_outputs import FusedOutputs
    from lingbot_ros.ros.tf.rig_fusion import FusedPose
    fused = FusedOutputs(ros_node, NodeConfig())
    assert {p.topic_name for p in (fused.pose, fused.odometry, fused.tf)} == {
        f"/{NODE}/pose", f"/{NODE}/odometry", "/tf"}
    assert fused.path.path.topic_name == f"/{NODE}/path"
    tfs, odoms, poses = recorded(fused.tf), recorded(fused.odometry), recorded(fused.pose)
    for i in range(2):
        T = np.eye(4)
        T[:3, 3] = (0.1 * i, 0.0, 0.0)
        fused.publish(FusedPose(1_000_000_000 + i * 100_000_000, "front", T))
    frames = [(t.header.frame_id, t.child_frame_id) for t in tfs[-1].transforms]
    assert frames == [("odom", "base_link"), ("map", "odom")]
    assert tfs[-1].transforms[0].transform.translation.x == pytest.approx(0.1)
    assert odoms[-1].header.frame_id == "odom" and odoms[-1].child_frame_id == "base_link"
    assert odoms[0].twist.twist.linear.x == 0.0
    assert odoms[-1].twist.twist.linear.x == pytest.approx(1.0)  # 0.1 m in 0.1 s
    assert poses[-1].header.frame_id == "map" and fused.num_published == 2
    fused.destroy()
    with pytest.raises(ValueError, match="robot base"):
        FusedOutputs(ros_node, NodeConfig(base_frame=""))

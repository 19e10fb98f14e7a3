"""A camera rig over DDS (docs/node.md, "A camera rig"): the node with ``cameras.names:
front,rear`` on one robot, two synthetic cameras rigid on base_link (front 0.3 m ahead
looking forward, rear 0.3 m behind looking back; /tf_static as robot_state_publisher sends
it), each with its aligned depth (``scale.source: depth``), fed in lock step.

As in test_node_scale.py, the tiny model runs in this test too (the same settings, one
stream per camera) as the oracle: each camera's sensor depth is K x that camera's own
predicted depth, so each camera's scale locks at K, and the oracle gives each camera's base
motion in metres (``T_bo . S_K(c2w) . T_bo^-1``, its speed bounds the failover's jump).

Checked: both cameras publish under ~/front/ and ~/rear/ (pose, status, depth); the fused
odom -> base_link goes out on /tf; ``~/front/reset`` (the primary) makes /diagnostics report
the failover to rear and the fused pose does not jump by more than the documented bound
(the new source's base speed times the stamp gap); ~/map_points holds points of both
cameras (in front of and behind the robot).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from lingbot_ros.config import PreprocessConfig, SessionConfig
from lingbot_ros.geometry import T_BODY_OPTICAL
from tests.ros.dds.test_node_robot_tf import ROBOT
from tests.ros.dds.test_node_scale import depth_msg
from tests.ros.node_data import stamp_ns
from tests.ros.node_harness import TINY_PARAMS, NodeProcess, good_images
from tests.ros.robot_probe import RobotProbe, matrix_of, transform_msg
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

W, H = 56, 42  # the tiny model's input size: no resize, no crop
K = 2.0  # metres per model unit of both simulated depth sensors
MIN_SAMPLES = 3
BEFORE, AFTER = 8, 6  # frame pairs before and after ~/front/reset
CAMERAS = ("front", "rear")


def yaw(angle: float, x: float) -> np.ndarray:
    c, s = math.cos(angle), math.sin(angle)
    return np.array([[c, -s, 0.0, x], [s, c, 0.0, 0.0], [0.0, 0.0, 1.0, 1.0],
                     [0.0, 0.0, 0.0, 1.0]])


T_BASE_LINK = {"front": yaw(0.0, 0.3), "rear": yaw(math.pi, -0.3)}  # base -> <camera>_link
T_BASE_OPTICAL = {c: T_BASE_LINK[c] @ T_BODY_OPTICAL for c in CAMERAS}
STATIC = [(p, c, T) for cam in CAMERAS for p, c, T in (
    ("base_link", f"{cam}_link", T_BASE_LINK[cam]),
    (f"{cam}_link", f"{cam}_optical", T_BODY_OPTICAL))]
RIG = {**ROBOT, "input.height": H, "publish.map_points": True, "map.max_points": 100000,
       "map.voxel_size": 0.001, "scale.source": "depth", "scale.min_samples": MIN_SAMPLES,
       "scale.min_pixels": 100, "cameras.names": "front,rear", "cameras.primary": "front",
       "cameras.max_wait_ms": 200.0, "cameras.stall_timeout_s": 10.0,
       "publish.diagnostics_rate_hz": 20.0,
       **{f"cameras.{c}.{k}": f"/{c}/{v}" for c in CAMERAS
          for k, v in (("image_topic", "image_raw"), ("depth_topic", "depth"))}}


def camera_images(camera: str, count: int) -> list:
    """The camera's images (its own scene: another seed), stamped with its optical frame;
    both cameras share the stamps (one rig, triggered together)."""
    images = good_images(count, width=W, height=H, seed=CAMERAS.index(camera) + 1)
    for msg in images:
        msg.header.frame_id = f"{camera}_optical"
    return images


def oracle(images) -> list:
    """One camera's stream run alone here: the node's settings (TINY_PARAMS, input H x W)."""
    from lingbot_ros.ros.intake.convert import image_to_array
    from lingbot_ros.session import open_session
    config = SessionConfig(num_scale_frames=TINY_PARAMS["session.num_scale_frames"],
                           window=TINY_PARAMS["cache.window"], rollover_keyframes=320,
                           preprocess=PreprocessConfig(width=W, height=H))
    session, _ = open_session(config, "tiny", precision="auto")
    out = []
    for msg in images:
        out += session.push(image_to_array(msg), stamp_ns(msg.header.stamp), msg.encoding)
    assert len(out) == len(images)
    return out


def base_pose(c2w, T_bo: np.ndarray) -> np.ndarray:
    """A camera's base pose in its map, in metres: T_bo . S_K(c2w) . T_bo^-1."""
    S = np.array(c2w, float)
    S[:3, 3] *= K
    return T_bo @ S @ np.linalg.inv(T_bo)


def base_speed(results, T_bo: np.ndarray) -> float:
    """The fastest base motion (m/s) between consecutive frames, in metres (K)."""
    v = 0.0
    for a, b in zip(results, results[1:]):
        d = np.linalg.norm(base_pose(b.c2w, T_bo)[:3, 3] - base_pose(a.c2w, T_bo)[:3, 3])
        v = max(v, d / ((b.stamp_ns - a.stamp_ns) * 1e-9))
    return v


class RigProbe(RobotProbe):
    """A robot probe with each camera's image and depth publishers, its ~/<camera>/pose and
    ~/<camera>/status subscriptions and its ~/<camera>/reset client."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for c in CAMERAS:
            setattr(self, f"{c}_poses", [])
            setattr(self, f"{c}_status", [])
            setattr(self, f"{c}_depth", [])

    def setup(self, node) -> None:
        super().setup(node)
        from geometry_msgs.msg import PoseStamped
        from lingbot_ros_interfaces.msg import TrackingStatus
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from std_srvs.srv import Trigger
        reliable = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        n = self._node_name
        self.pubs = {}
        for c in CAMERAS:
            for topic, msg_type, store in ((f"{n}/{c}/pose", PoseStamped, f"{c}_poses"),
                                           (f"{n}/{c}/status", TrackingStatus, f"{c}_status"),
                                           (f"{n}/{c}/depth", Image, f"{c}_depth")):
                node.create_subscription(
                    msg_type, topic, lambda m, s=getattr(self, store): self._on_message(s, m),
                    reliable)
            self.pubs[c] = (node.create_publisher(Image, f"/{c}/image_raw", reliable),
                            node.create_publisher(Image, f"/{c}/depth", reliable))
            self.clients[f"{c}_reset"] = node.create_client(Trigger, f"{n}/{c}/reset")

    def count(self, store: str) -> int:
        return len(self.snapshot(store))

    def fused(self) -> dict:
        """stamp -> the fused odom -> base_link of /tf."""
        return {stamp_ns(t.header.stamp): matrix_of(t.transform)
                for t in self.published_transforms()
                if (t.header.frame_id, t.child_frame_id) == ("odom", "base_link")}


def send_pairs(probe, images, results, first: int, last: int) -> None:
    """Frame pairs ``first .. last - 1`` in lock step: each camera's depth one pair ahead
    (K x its oracle's), then both images; the next pair once the rig's worker took both
    (``<camera>_taken`` on /diagnostics), so its one latest-frame slot per camera never
    drops one."""
    def depth(i):
        for c in CAMERAS:
            if i < len(images[c]):
                probe.pubs[c][1].publish(depth_msg(K * results[c][i].depth,
                                                   images[c][i].header.stamp))
    depth(first)
    for i in range(first, last):
        depth(i + 1)
        for c in CAMERAS:
            probe.pubs[c][0].publish(images[c][i])
        probe.wait_until(lambda: all(int(probe.last_diag().get(f"{c}_taken", 0)) >= i + 1
                                     for c in CAMERAS), 90,
                         lambda: f"frame pair {i} taken ({probe.last_diag()})")


def test_two_cameras_publish_fail_over_without_a_jump_and_share_one_map(tmp_path, ros_env):
    frames = BEFORE + AFTER
    images = {c: camera_images(c, frames) for c in CAMERAS}
    results = {c: oracle(images[c]) for c in CAMERAS}
    with NodeProcess(ros_env, tmp_path, RIG) as node, \
            RigProbe([transform_msg(p, c, T) for p, c, T in STATIC]) as probe:
        probe.wait_active(node)
        probe.wait_static_delivered()
        for c in CAMERAS:
            for pub in probe.pubs[c]:
                probe.wait_until(lambda pub=pub: pub.get_subscription_count() > 0, 30,
                                 f"the node's subscription to {pub.topic_name}")
        send_pairs(probe, images, results, 0, BEFORE)

        # both streams publish; the fused pose comes from the primary, the rear is anchored
        for c in CAMERAS:
            probe.wait_until(lambda c=c: probe.count(f"{c}_poses") >= 1, 30, f"~/{c}/pose")
            probe.wait_until(lambda c=c: probe.count(f"{c}_depth") >= 1, 30, f"~/{c}/depth")
        probe.wait_until(lambda: probe.last_diag().get("rig_source") == "front"
                         and "rear_disagreement_m" in probe.last_diag(), 30,
                         lambda: f"the fused pose from front, rear anchored ({probe.last_diag()})")
        before = probe.wait_until(probe.fused, 30, "the fused odom -> base_link on /tf")
        probe.wait_until(lambda: any(g.msg.frames_committed > 0 for g in probe.snapshot(
            "cache_info")), 30, "~/cache_info of the primary's cache")
        last_before = max(before)

        # ~/front/reset: the rear takes over, reported on /diagnostics
        response = probe.call("front_reset")
        assert response.success, response.message
        probe.wait_until(lambda: probe.last_diag().get("rig_source") == "rear", 30,
                         lambda: f"the failover to rear ({probe.last_diag()})")
        send_pairs(probe, images, results, BEFORE, frames)
        diag = probe.wait_until(
            lambda: (d := probe.last_diag()).get("rig_source") == "rear"
            and "rig_last_switch_jump_m" in d and d, 30,
            lambda: f"the failover's jump on /diagnostics ({probe.last_diag()})")
        assert int(diag["rig_failovers"]) >= 1
        assert "front -> rear (reset)" in diag["rig_last_switch"]
        level, message = probe.last_level()
        assert level == 1 and "failed over to rear" in message, (level, message)

        # the jump: the first fused pose after the reset against the last one before it, at
        # most the new source's base speed times their stamp gap (docs/node.md)
        fused = probe.wait_until(lambda: (f := probe.fused()) and max(f) > last_before and f,
                                 30, "a fused pose after the reset")
        first_after = min(s for s in fused if s > last_before)
        jump = np.linalg.norm(fused[first_after][:3, 3] - fused[last_before][:3, 3])
        bound = base_speed(results["rear"], T_BASE_OPTICAL["rear"]) * (
            (first_after - last_before) * 1e-9)
        assert jump <= bound + 1e-4, (jump, bound)
        # exactly: the new source re-anchored at the last fused stamp moves the pose by its
        # own motion since then (the rear's base in metres, from its oracle)
        rear = {r.stamp_ns: base_pose(r.c2w, T_BASE_OPTICAL["rear"]) for r in results["rear"]}
        own = np.linalg.norm(rear[first_after][:3, 3] - rear[last_before][:3, 3])
        assert jump == pytest.approx(own, abs=1e-4)
        # /diagnostics gives it to 3 decimals
        assert float(diag["rig_last_switch_jump_m"]) == pytest.approx(jump, abs=1e-3)

        # one map of both cameras: points ahead of the robot (front) and behind it (rear)
        def last_map():
            maps = probe.snapshot("map_points")
            return maps[-1].msg if maps and maps[-1].msg.width else None
        cloud = probe.wait_until(last_map, 30, "a non-empty map")
        assert cloud.header.frame_id == "map" and cloud.point_step == 16
        xyz = np.frombuffer(bytes(cloud.data), "<f4").reshape(-1, 4)[:, :3].astype(float)
        base = fused[max(fused)]
        local = (np.linalg.inv(base) @ np.c_[xyz, np.ones(len(xyz))].T).T[:, :3]
        assert (local[:, 0] > 0.3).sum() > 0 and (local[:, 0] < -0.3).sum() > 0, \
            (local[:, 0].min(), local[:, 0].max())

        # the file services of a rig: the primary's trajectory, the one map; no snapshots yet
        from lingbot_ros_interfaces.srv import SaveMap, SaveSession, SaveTrajectory
        saved = probe.call("save_trajectory", SaveTrajectory.Request(path="front.tum"))
        assert saved.success, saved.message
        lines = [ln for ln in (tmp_path / "front.tum").read_text().splitlines()
                 if ln and not ln.startswith("#")]
        assert 0 < len(lines) <= AFTER  # the primary's stream since its reset
        saved = probe.call("save_map", SaveMap.Request(path="rig.ply"))
        assert saved.success and (tmp_path / "rig.ply").stat().st_size > 0, saved.message
        refused = probe.call("save_session", SaveSession.Request(path="snap"))
        assert not refused.success and "camera rig" in refused.message, refused.message

        # ~/pause: every camera's images are dropped on arrival and counted
        from std_srvs.srv import SetBool
        assert probe.call("pause", SetBool.Request(data=True)).success
        for c in CAMERAS:
            probe.pubs[c][0].publish(images[c][-1])
        probe.wait_until(lambda: probe.counter("dropped_paused") >= 1
                         and probe.last_diag().get("paused") == "True", 30,
                         lambda: f"the primary's image dropped while paused ({probe.last_diag()})")
        assert int(probe.last_diag()["front_taken"]) == frames

"""Loop closure in the node over real DDS (issue 34, item 4; docs/node.md "Loop closure"): the
node in a child process with ``loop.enable`` and the tiny random model, a probe in this one.

The model is the tiny preset with random weights (seeded), saved as a checkpoint whose camera
head's last layer is scaled down and biased to the identity pose
(``steady_camera_checkpoint``, tests/loop/still_camera.py):
every pose is then near the first one with small random differences, so a pair's relative pose
keeps its two views overlapping (with the head as drawn, the pair's random pose projects the
current frame out of the keyframe's view: every candidate was ``little_overlap``) while the
front end still drifts a little and a loop has something to correct.

The input is a looped stream: a sequence of the synthetic scene, then the same images again
with later stamps, so the second pass revisits the first one's places with the same pixels
(the place descriptors of its keyframes equal the first pass's). Random weights make every
pose meaningless, so the gates are opened wide (``GATES``: a minimum age that only the
revisit passes, any inlier fraction, any correction, any agreement); what is tested is the
contract, never accuracy:

- candidates appear (/diagnostics ``loop_candidates``), a loop is accepted and goes out on
  ``~/loop_closures`` (map frame, the current and matched keyframes' stamps);
- on /tf, odom -> camera (the front end's, continuous) is never moved by the loop: its step
  across the loop is no larger than its steps elsewhere, while map -> odom is the identity
  before the first loop and equals the loop message's correction after it;
- ``~/pose`` is map -> odom times odom -> camera at every stamp;
- ``~/path`` is republished after the loop, with the keyframes before it in corrected poses;
- ~/save_session then ~/load_session carry the back end: its counts continue; ~/reset
  starts a fresh one.
"""
from __future__ import annotations

import time

import numpy as np

from tests.loop.still_camera import steady_camera_checkpoint
from tests.ros.node_harness import NodeProcess, Probe, good_images, stamp_ns
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

PASS_FRAMES = 16  # one pass of the scene; the stream is two passes
# candidates at least 1 s old: only the second pass (1 s after the first) finds the first's
GATES = {"loop.enable": True, "loop.min_age_s": 1.0, "loop.min_keyframe_distance_m": 0.0,
         "loop.min_keyframe_angle_deg": 0.0, "loop.top_k": 2,
         "loop.min_inlier_fraction": 1e-9, "loop.inlier_depth_ratio": 1e6,
         "loop.verify_min_conf": 0.0, "loop.min_valid_pixels": 1,
         "loop.max_correction_m": 1e9, "loop.max_correction_deg": 180.0,
         "loop.confirm_m": 1e9, "loop.confirm_deg": 180.0, "loop.confirm_window_s": 1e9}
PARAMS = {**GATES, "qos.image": "reliable", "qos.image_depth": 100, "queue_size": 100,
          "loop.queue_size": 100, "publish.map_points": True}
CAMERA = "camera_optical_frame"  # camera-only (TINY_PARAMS): the tracked frame


class LoopProbe(Probe):
    """The harness's probe, plus /tf and ~/loop_closures."""

    def setup(self, node) -> None:
        super().setup(node)
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from tf2_msgs.msg import TFMessage

        from lingbot_ros_interfaces.msg import LoopClosure
        self.tf: list = []
        self.loops: list = []
        reliable = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        node.create_subscription(TFMessage, "/tf", lambda m: self._on_message(self.tf, m),
                                 QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE))
        node.create_subscription(LoopClosure, f"{self._node_name}/loop_closures",
                                 lambda m: self._on_message(self.loops, m), reliable)


def matrix(translation, rotation) -> np.ndarray:
    from lingbot_ros.geometry import quaternion_to_rotation
    T = np.eye(4)
    T[:3, 3] = (translation.x, translation.y, translation.z)
    T[:3, :3] = quaternion_to_rotation([rotation.x, rotation.y, rotation.z, rotation.w])
    return T


def transforms(probe, parent: str, child: str) -> dict[int, np.ndarray]:
    """Stamp -> the transform ``parent -> child`` the node put on /tf."""
    out = {}
    for got in probe.snapshot("tf"):
        for t in got.msg.transforms:
            if t.header.frame_id == parent and t.child_frame_id == child:
                out[stamp_ns(t.header.stamp)] = matrix(t.transform.translation,
                                                       t.transform.rotation)
    return out


def loop_diag(probe) -> dict:
    return {k: v for k, v in probe.last_diag().items() if k.startswith("loop_")}


def test_a_looped_stream_closes_a_loop_in_map_to_odom_only(tmp_path, ros_env):
    first = good_images(PASS_FRAMES)
    last = stamp_ns(first[-1].header.stamp)
    second = good_images(PASS_FRAMES, start_ns=last + 1_000_000_000)  # the same images, later
    checkpoint = tmp_path / "steady_tiny.safetensors"
    steady_camera_checkpoint(checkpoint)
    params = {**PARAMS, "checkpoint": str(checkpoint)}
    with NodeProcess(ros_env, tmp_path, params) as node, LoopProbe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        for msg in first + second:
            probe.publish_image(msg)
        probe.wait_for_pose_of(stamp_ns(second[-1].header.stamp), timeout=180)
        probe.wait_until(lambda: probe.snapshot("loops"), 180,
                         lambda: f"a loop on ~/loop_closures (diagnostics: {loop_diag(probe)})")
        # the back end runs beside the stream: the frames after its loop carry the correction
        third = good_images(PASS_FRAMES // 2, start_ns=stamp_ns(second[-1].header.stamp)
                            + 1_000_000_000)
        for msg in third:
            probe.publish_image(msg)
        probe.wait_for_pose_of(stamp_ns(third[-1].header.stamp), timeout=180)
        # ... and once it has taken every keyframe (every frame is one: keyframes.policy all)
        # and its loops are out, a last frame goes out through the last loop's correction
        done = len(first + second + third)
        probe.wait_until(lambda: (probe.counter("loop_keyframes") == done
                                  and probe.counter("loop_queued") == 0), 120,
                         lambda: f"the back end idle after {done} keyframes: {loop_diag(probe)}")
        diag = probe.last_diag()
        probe.wait_until(lambda: len(probe.snapshot("loops")) == int(diag["loop_closures"]),
                         30, lambda: f"{diag['loop_closures']} loops on ~/loop_closures")
        loops = [g.msg for g in probe.snapshot("loops")]
        sentinel = good_images(1, start_ns=stamp_ns(third[-1].header.stamp) + 1_000_000_000)
        probe.publish_image(sentinel[0])
        stamps = [stamp_ns(m.header.stamp) for m in first + second + third + sentinel]
        probe.wait_for_pose_of(stamps[-1], timeout=60)
        assert int(diag["loop_candidates"]) > 0 and int(diag["loop_verified"]) >= 2, diag
        assert int(diag["loop_accepted"]) >= 1 and int(diag["loop_failures"]) == 0, diag

        loop_ns = stamp_ns(loops[0].header.stamp)
        assert all(m.header.frame_id == "map" for m in loops)
        assert loop_ns in stamps[PASS_FRAMES:] and stamp_ns(loops[0].matched_stamp) < loop_ns
        assert all(0.0 <= m.inlier_fraction <= 1.0 for m in loops)
        corrections = [matrix(m.correction.translation, m.correction.rotation) for m in loops]

        # /tf: odom -> camera is the front end's; map -> odom is the identity until the loop,
        # then a loop's correction (the last loop's once the last frame went out). /tf is
        # published after ~/pose: wait for the last frame's
        probe.wait_until(lambda: stamps[-1] in transforms(probe, "map", "odom")
                         and stamps[-1] in transforms(probe, "odom", CAMERA), 30,
                         "the last frame's /tf")
        odom_cam = transforms(probe, "odom", CAMERA)
        map_odom = transforms(probe, "map", "odom")
        assert sorted(odom_cam) == stamps and sorted(map_odom) == stamps

        def which(T) -> int:  # -1: identity, else the loop whose correction it is
            if np.allclose(T, np.eye(4), atol=1e-9):
                return -1
            hits = [k for k, C in enumerate(corrections) if np.allclose(T, C, atol=1e-6)]
            assert hits, f"map -> odom {T} is neither the identity nor a loop's correction"
            return hits[-1]
        kinds = [which(map_odom[s]) for s in stamps]
        assert all(k == -1 for s, k in zip(stamps, kinds) if s <= loop_ns)
        assert kinds[-1] == len(loops) - 1, kinds
        assert kinds == sorted(kinds), kinds  # a later loop's correction never goes back
        i = next(j for j, k in enumerate(kinds) if k >= 0)  # the first corrected frame
        steps = [np.linalg.norm(odom_cam[b][:3, 3] - odom_cam[a][:3, 3])
                 for a, b in zip(stamps, stamps[1:])]
        across = steps[i - 1]  # odom -> camera from the frame before to the frame at the jump
        assert across <= max(steps[:i - 1] + steps[i:]) + 1e-9, (across, steps)

        # ~/pose = map -> odom @ odom -> camera, at every stamp
        poses = {stamp_ns(g.msg.header.stamp): g.msg.pose for g in probe.snapshot("poses")}
        for s in stamps:
            p = poses[s]
            np.testing.assert_allclose(matrix(p.position, p.orientation),
                                       map_odom[s] @ odom_cam[s], atol=1e-6)

        # ~/path republished: a Path in which a frame from before the loop is no longer where
        # ~/pose put it then (the keyframes' optimised poses)
        early = [s for s, k in zip(stamps, kinds) if s <= loop_ns]

        def rewritten():
            for got in probe.snapshot("paths"):
                path = {stamp_ns(p.header.stamp): p.pose for p in got.msg.poses}
                if any(s in path and not np.allclose(
                        matrix(path[s].position, path[s].orientation), odom_cam[s], atol=1e-7)
                       for s in early):
                    return got
            return None
        assert probe.wait_until(rewritten, 30, "a ~/path rewritten by the loop")

        # snapshots carry the back end: saved, then loaded, it continues (no "starts anew")
        probe.wait_until(lambda: probe.counter("loop_keyframes") == len(stamps)
                         and probe.counter("loop_queued") == 0, 120, "the back end idle")
        saved = probe.last_diag()
        response = probe.save_session("loop_snapshot")
        assert response.success, response.message
        response = probe.load_session("loop_snapshot")
        assert response.success, response.message
        loaded_at = time.monotonic()
        probe.wait_until(lambda: probe.snapshot("diagnostics")[-1].t > loaded_at + 0.1, 30,
                         "/diagnostics after the load")
        diag = probe.last_diag()
        for key in ("loop_keyframes", "loop_accepted", "loop_closures"):
            assert diag[key] == saved[key], (key, diag, saved)
        assert "starts anew" not in node.log()
        # ~/reset starts a fresh back end
        assert probe.call("reset").success
        probe.wait_until(lambda: probe.counter("loop_closures") == 0
                         and probe.counter("loop_keyframes") == 0, 30, "a fresh back end")

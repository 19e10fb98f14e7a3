"""launch/lingbot_ros.launch.py under the real launch system (launch_testing), with a bag
replay run as a launch_ros Node: the node comes up by itself (autostart), the bag's images
come out as poses, ``~/reset`` empties the cache (``~/get_cache_info``), and after the
shutdown every process exited 0.

The launch runs in this process: the package is found through an ament prefix made in a temp
dir (tests/launch/launch_env.py), as after a colcon --symlink-install; the node and the player
are the venv's console scripts, the launch file is the checkout's. Tiny model, CPU, one torch
thread: about a minute on a loaded 2-core machine.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
import unittest
from pathlib import Path

from tests.launch.launch_env import (IMAGE_TOPIC, launch_environment, require_launch,
                                     synthetic_bag, tiny_params_file)

require_launch()  # skips the module, with the reason, where the launch system is missing

import launch_testing  # noqa: E402
import pytest  # noqa: E402
import launch_testing.actions  # noqa: E402
import launch_testing.asserts  # noqa: E402
import rclpy  # noqa: E402
import rclpy.executors  # noqa: E402
from launch import LaunchDescription  # noqa: E402
from launch.actions import IncludeLaunchDescription  # noqa: E402
from launch.launch_description_sources import PythonLaunchDescriptionSource  # noqa: E402
from launch.substitutions import PathJoinSubstitution  # noqa: E402
from launch_ros.actions import Node  # noqa: E402
from launch_ros.substitutions import FindPackageShare  # noqa: E402

FRAMES = 20
NODE = "/lingbot_ros"
START_TIMEOUT = 180.0  # s: torch import + tiny model on a loaded 2-core machine
WAIT = 60.0  # s for anything after the start
SAVED: dict = {}  # this process' environment before the launch, and the temp dir


@pytest.mark.launch_test
def generate_test_description():
    tmp = Path(tempfile.mkdtemp(prefix="lingbot_ros_launch_test_"))
    # The launch service runs in this process: FindPackageShare and launch_ros' executable
    # lookup read AMENT_PREFIX_PATH here; the processes inherit the rest. Restored, and tmp
    # removed, after the post-shutdown tests (TestExitCodes.tearDownClass).
    SAVED.update(environ=dict(os.environ), tmp=tmp)
    os.environ.update(launch_environment(tmp))
    stamps = synthetic_bag(tmp / "bag", FRAMES)
    params = tiny_params_file(tmp / "params.yaml")
    lingbot = IncludeLaunchDescription(
        PythonLaunchDescriptionSource(PathJoinSubstitution(
            [FindPackageShare("lingbot_ros"), "launch", "lingbot_ros.launch.py"])),
        launch_arguments={"params_file": str(params), "image_topic": IMAGE_TOPIC}.items())
    # The player as a launch_ros Node: it gets --ros-args (node name) and must accept them.
    replay = Node(package="lingbot_ros", executable="lingbot-ros-replay", name="bag_replay",
                  arguments=[str(tmp / "bag"), "--topics", IMAGE_TOPIC,
                             "--wait-for-subscribers", "2", "--settle", "1",
                             "--wait-timeout", str(START_TIMEOUT),
                             "--wait-for-all-acked", "15"],
                  output="screen")
    return (LaunchDescription([lingbot, replay, launch_testing.actions.ReadyToTest()]),
            {"replay": replay, "stamps": stamps})


class Probe:
    """A node of its own (own context, spun in a thread): poses received, service calls."""

    def __init__(self) -> None:
        from geometry_msgs.msg import PoseStamped
        self.context = rclpy.Context()
        rclpy.init(context=self.context)
        self.node = rclpy.create_node("launch_test_probe", context=self.context)
        self.poses: list = []
        self.spin_error = None
        self.lock = threading.Lock()
        self.pose_sub = self.node.create_subscription(PoseStamped, f"{NODE}/pose",
                                                      self._on_pose, 100)
        self.executor = rclpy.executors.SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def hold_the_replay(self) -> None:
        """Subscribe to the bag's image topic too, once the node's pose publisher has matched:
        the player waits for two subscriptions (the node's and this one), so no pose is
        published before this probe can receive it (~/pose is volatile)."""
        from sensor_msgs.msg import Image
        wait_until(lambda: self.pose_sub.get_publisher_count() > 0, START_TIMEOUT,
                   f"the node's {NODE}/pose publisher")
        self.node.create_subscription(Image, IMAGE_TOPIC, lambda _msg: None, 1)

    def _spin(self) -> None:
        try:
            self.executor.spin()
        except Exception as exc:  # noqa: BLE001 -- the context was shut down under it
            self.spin_error = exc

    def _on_pose(self, msg) -> None:
        with self.lock:
            self.poses.append(msg)

    def pose_stamps(self) -> list[int]:
        with self.lock:
            return [p.header.stamp.sec * 10**9 + p.header.stamp.nanosec for p in self.poses]

    def call(self, srv_type, name: str, timeout: float = WAIT):
        """Call a service of the node; re-sent every 3 s if DDS lost the first try."""
        client = self.node.create_client(srv_type, f"{NODE}/{name}")
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                if not client.wait_for_service(timeout_sec=1.0):
                    continue
                future = client.call_async(srv_type.Request())
                end = min(deadline, time.monotonic() + 3.0)
                while not future.done() and time.monotonic() < end:
                    time.sleep(0.02)
                if future.done():
                    return future.result()
                future.cancel()
            raise AssertionError(f"{NODE}/{name}: no response within {timeout} s")
        finally:
            self.node.destroy_client(client)

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=5)
        self.node.destroy_node()
        self.context.try_shutdown()
        self.thread.join(5)


def wait_until(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for "
                         f"{what() if callable(what) else what}")


class TestPosesResetCache(unittest.TestCase):

    @classmethod
    def setUpClass(cls) -> None:
        cls.probe = Probe()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.probe.close()

    def test_poses_then_reset_empties_the_cache(self, proc_info, proc_output, replay, stamps):
        from lingbot_ros_interfaces.srv import GetCacheInfo
        from std_srvs.srv import Trigger
        # The player waited for the node's subscription (autostart: configured and active)
        # and this probe's, played every image and waited for the acknowledgements, then
        # exited by itself.
        self.probe.hold_the_replay()
        proc_info.assertWaitForShutdown(process=replay, timeout=START_TIMEOUT + WAIT)
        launch_testing.asserts.assertExitCodes(proc_info, process=replay)
        proc_output.assertWaitFor(f"{FRAMES} msgs", process=replay, timeout=10,
                                  stream="stdout")
        # One pose per image, with its stamp, in order (the params drop nothing).
        wait_until(lambda: len(self.probe.pose_stamps()) >= FRAMES, WAIT,
                   lambda: f"{FRAMES} poses (got {len(self.probe.pose_stamps())}, spin "
                   f"{self.probe.spin_error!r}, alive {self.probe.thread.is_alive()}; topics seen "
                   f"in domain {os.environ.get('ROS_DOMAIN_ID')}: "
                   f"{self.probe.node.get_topic_names_and_types()})")
        self.assertEqual(self.probe.pose_stamps(), stamps)

        before = self.probe.call(GetCacheInfo, "get_cache_info")
        self.assertTrue(before.success, before.message)
        self.assertGreater(before.info.frames_committed, 0)
        self.assertGreater(before.info.frames_cached, 0)

        reset = self.probe.call(Trigger, "reset")
        self.assertTrue(reset.success, reset.message)

        after = self.probe.call(GetCacheInfo, "get_cache_info")
        self.assertTrue(after.success, after.message)
        info = after.info
        self.assertEqual((info.frames_seen, info.frames_committed, info.frames_cached,
                          info.special_frames, info.tokens_visible, info.patch_pages_used,
                          info.special_pages_used), (0, 0, 0, 0, 0, 0, 0), info)


@launch_testing.post_shutdown_test()
class TestExitCodes(unittest.TestCase):

    @classmethod
    def tearDownClass(cls) -> None:
        if SAVED:
            os.environ.clear()
            os.environ.update(SAVED["environ"])
            shutil.rmtree(SAVED["tmp"], ignore_errors=True)

    def test_every_process_exited_cleanly(self, proc_info):
        # The node (stopped by the launch's SIGINT) and the player both exit 0.
        self.assertEqual(len(proc_info.process_names()), 2, proc_info.process_names())
        launch_testing.asserts.assertExitCodes(proc_info)

"""Our interfaces as built by scripts/setup_ros.sh: fields, type hashes, and a round trip
between processes over real DDS (a service server in a child process, the client here)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ros.ros_helpers import REPO

MSG_DIR, SRV_DIR = REPO / "msg", REPO / "srv"


def installed_json(package: str, kind: str, name: str) -> dict:
    """The type description rosidl installed into this venv (an ament prefix)."""
    path = Path(sys.prefix, "share", package, kind, f"{name}.json")
    assert path.is_file(), f"{path} is not installed: run scripts/setup_ros.sh"
    return json.loads(path.read_text())


def test_every_definition_is_built_from_the_repo_files():
    import lingbot_ros_interfaces.msg as msgs
    import lingbot_ros_interfaces.srv as srvs
    for folder, module, kind in ((MSG_DIR, msgs, "msg"), (SRV_DIR, srvs, "srv")):
        names = sorted(p.stem for p in folder.glob(f"*.{kind}"))
        assert names, folder
        for name in names:
            assert hasattr(module, name), f"{name} not built: rerun scripts/setup_ros.sh"
            installed = Path(sys.prefix, "share", "lingbot_ros_interfaces", kind, f"{name}.{kind}")
            assert installed.read_text() == (folder / f"{name}.{kind}").read_text(), \
                f"{installed} is stale: rerun scripts/setup_ros.sh"


def test_service_and_message_fields():
    from lingbot_ros_interfaces.msg import CacheInfo, TrackingStatus
    from lingbot_ros_interfaces.srv import GetCacheInfo, SaveTrajectory
    response = GetCacheInfo.Response()
    assert isinstance(response.info, CacheInfo)
    assert (response.success, response.message) == (False, "")
    assert SaveTrajectory.Request().path == ""
    assert SaveTrajectory.Response().num_poses == 0
    fields = CacheInfo.get_fields_and_field_types()
    assert fields["stamp"] == "builtin_interfaces/Time"
    assert fields["max_special_frames"] == "int64" and fields["bytes_used"] == "uint64"
    assert TrackingStatus.STATE_TRACKING == 2
    assert TrackingStatus.get_fields_and_field_types()["header"] == "std_msgs/Header"


def test_minimal_tf2_msgs_has_the_standard_type_hash():
    # Same RIHS01 hash as the real tf2_msgs/msg/TFMessage (rosbags' Kilted type store), so
    # /tf subscribers of a full ROS install match our publishers.
    from rosbags.typesys import Stores, get_typestore
    hashes = {h["type_name"]: h["hash_string"]
              for h in installed_json("tf2_msgs", "msg", "TFMessage")["type_hashes"]}
    standard = get_typestore(Stores.ROS2_KILTED).hash_rihs01("tf2_msgs/msg/TFMessage")
    assert hashes["tf2_msgs/msg/TFMessage"] == standard


def test_round_trip_between_processes(ros_env, tmp_path):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import DurabilityPolicy, QoSProfile
    from rclpy.signals import SignalHandlerOptions
    from tf2_msgs.msg import TFMessage

    from lingbot_ros_interfaces.msg import TrackingStatus
    from lingbot_ros_interfaces.srv import GetCacheInfo, SaveTrajectory
    from tests.ros.interface_server import CACHE_INFO

    server = subprocess.Popen([sys.executable, "-m", "tests.ros.interface_server"], env=ros_env,
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    context = rclpy.Context()
    rclpy.init(args=[], context=context, signal_handler_options=SignalHandlerOptions.NO)
    try:
        assert server.stdout.readline().strip() == "ready", server.stderr.read()
        node = rclpy.create_node("test_client", context=context)
        executor = SingleThreadedExecutor(context=context)
        executor.add_node(node)
        latched = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        got = {}
        node.create_subscription(TrackingStatus, "/lingbot/status",
                                 lambda m: got.setdefault("status", m), latched)
        node.create_subscription(TFMessage, "/tf_static", lambda m: got.setdefault("tf", m),
                                 latched)

        def call(srv_type, name, request):
            client = node.create_client(srv_type, name)
            assert client.wait_for_service(timeout_sec=15), name
            future = client.call_async(request)
            executor.spin_until_future_complete(future, timeout_sec=15)
            assert future.done(), name
            return future.result()

        info = call(GetCacheInfo, "/lingbot/get_cache_info", GetCacheInfo.Request())
        assert info.success and info.message == "9 committed frames"
        assert info.info.stamp.sec == 42
        assert {k: getattr(info.info, k) for k in CACHE_INFO} == CACHE_INFO

        path = tmp_path / "trajectory.tum"
        saved = call(SaveTrajectory, "/lingbot/save_trajectory",
                     SaveTrajectory.Request(path=str(path)))
        assert (saved.success, saved.message, saved.num_poses) == (True, str(path), 3)
        assert len(path.read_text().splitlines()) == 3
        failed = call(SaveTrajectory, "/lingbot/save_trajectory",
                      SaveTrajectory.Request(path=str(tmp_path / "no" / "such" / "dir.tum")))
        assert not failed.success and failed.num_poses == 0 and "No such file" in failed.message

        for _ in range(100):
            if len(got) == 2:
                break
            executor.spin_once(timeout_sec=0.1)
        assert got["status"].state == TrackingStatus.STATE_TRACKING
        assert (got["status"].frames_dropped, got["status"].header.frame_id) == (1, "cam")
        assert got["tf"].transforms[0].child_frame_id == "cam"
    finally:
        context.try_shutdown()
        server.terminate()
        try:
            assert server.wait(timeout=10) == 0, server.stderr.read()
        except subprocess.TimeoutExpired:
            server.kill()
            pytest.fail("the interface server ignored SIGTERM")

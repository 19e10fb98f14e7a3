"""Harness of the node's end-to-end tests: the node in a child process, a probe in this one.

    with NodeProcess(ros_env, tmp_path, {"queue_size": 10}) as node, Probe() as probe:
        probe.wait_active(node)              # lifecycle GetState says 'active'
        ...replay a bag, or probe.publish_image(...)...
        probe.wait_until(lambda: len(probe.poses) >= 30, 60, "30 poses")

The node runs as ``python -m lingbot_ros.ros.node --ros-args ...`` with the tiny preset on tiny
images (TINY_PARAMS) plus the test's parameters, with ``files.root`` the test's tmp_path (the
file services' paths resolve under it); its output goes to files (read with
``node.log()``), so a chatty node never blocks on a full pipe. The probe has its own rclpy
context, spun in a thread: subscriptions to the node's pose, path, status, cache_info and
/diagnostics (each message kept with its monotonic receive time), clients of its services and
of the lifecycle services, and a reliable image publisher. Everything is torn down on exit;
the node is stopped with SIGINT, then its process group is killed if it lingers.

For a loaded 2-core CI machine: the node runs one torch (OpenMP) thread, queries are re-sent
if their response is lost to DDS discovery, and every wait has a generous timeout.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional, Union

import pytest

from lingbot_ros.clients.background_node import BackgroundNode
from tests.ros.node_data import IMAGE_TOPIC, stamp_ns
from tests.ros.node_data import (good_images, header, image_stamps_in_bag,  # noqa: F401
                                 make_bag, median)  # re-exported: the tests import them here
from tests.ros.ros_helpers import REPO

NODE = "/lingbot_ros"
# Tiny model on tiny images: a CPU frame takes tens of milliseconds. A bare camera
# (camera-only TF: no robot base, so no /tf_static needed) unless a test sets frames.base.
TINY_PARAMS: dict[str, Any] = {"model.preset": "tiny", "input.width": 56,
                               "session.num_scale_frames": 2, "cache.window": 4,
                               "warmup": False, "frames.base": ""}
START_TIMEOUT = 60.0  # s until the node is active (imports torch on a loaded 2-core machine)
IDEMPOTENT = {"get_state", "get_cache_info", "save_trajectory"}  # safe to re-send
RETRY_S = 3.0  # s before a query is re-sent

# lifecycle_msgs/msg/State ids and lifecycle_msgs/msg/Transition ids
UNCONFIGURED, INACTIVE, ACTIVE, FINALIZED = 1, 2, 3, 4
CONFIGURE, CLEANUP, ACTIVATE, DEACTIVATE = 1, 2, 3, 4
SHUTDOWN_FROM = {UNCONFIGURED: 5, INACTIVE: 6, ACTIVE: 7}


def _param_arg(name: str, value: Any) -> str:
    if isinstance(value, bool):
        value = "true" if value else "false"
    elif isinstance(value, str):
        value = f"'{value}'" if value == "" else value
    return f"{name}:={value}"


def node_command(params: dict[str, Any], remaps: Optional[dict[str, str]] = None) -> list[str]:
    """The node's command line: TINY_PARAMS updated with ``params``, image remapped."""
    values = {**TINY_PARAMS, **params}
    remaps = {"image": IMAGE_TOPIC, **(remaps or {})}
    cmd = [sys.executable, "-m", "lingbot_ros.ros.main", "--ros-args"]
    for name, value in values.items():
        cmd += ["-p", _param_arg(name, value)]
    for old, new in remaps.items():
        cmd += ["-r", f"{old}:={new}"]
    return cmd


class NodeProcess:
    """The node in a child process (its own process group), output captured in files."""

    def __init__(self, env: dict[str, str], tmp_path: Path, params: Optional[dict] = None,
                 remaps: Optional[dict[str, str]] = None, name: str = "node") -> None:
        # files.root: the test's folder (the node's own default, $ROS_HOME/lingbot_ros, is
        # outside it), so the file services take the test's paths
        self.cmd = node_command({"files.root": str(tmp_path), **(params or {})}, remaps)
        # One torch (OpenMP) thread: on a loaded 2-core machine, OpenMP workers spin-waiting
        # beside the replay and probe processes stalled the node for seconds at a time.
        self._env = {**env, "OMP_NUM_THREADS": "1"}
        self._out_path = tmp_path / f"{name}.stdout"
        self._err_path = tmp_path / f"{name}.stderr"
        self.proc: Optional[subprocess.Popen] = None

    def __enter__(self) -> "NodeProcess":
        self._out = open(self._out_path, "w")
        self._err = open(self._err_path, "w")
        self.proc = subprocess.Popen(self.cmd, env=self._env, cwd=REPO, stdout=self._out,
                                     stderr=self._err, start_new_session=True)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> Optional[int]:
        return self.proc.poll()

    def log(self) -> str:
        """Everything the node wrote so far (stdout, then stderr)."""
        return self._out_path.read_text() + self._err_path.read_text()

    def stderr(self) -> str:
        return self._err_path.read_text()

    def wait(self, timeout: float) -> int:
        """Exit status; kill the node (and fail) if it outlives ``timeout``."""
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill()
            pytest.fail(f"the node did not exit within {timeout} s\n{self.log()[-4000:]}")

    def interrupt(self) -> None:
        """SIGINT, as Ctrl-C."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)

    def stop(self, timeout: float = 20.0) -> Optional[int]:
        """SIGINT, then SIGKILL (the whole process group) if it is still there."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self._kill()
        for f in (self._out, self._err):
            if not f.closed:
                f.close()
        return self.proc.returncode

    def _kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the node and anything it started
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass


@dataclass(frozen=True)
class Got:
    """One received message and its monotonic receive time."""

    msg: Any
    t: float


def is_node_status(status, node: str = NODE) -> bool:
    """Whether a DiagnosticStatus is the node's: named by its full name (namespace too)."""
    return status.name == f"{node}: tracking"


def diag_values(array_msg, node: str = NODE) -> dict[str, str]:
    """The key/values of the node's DiagnosticStatus in a DiagnosticArray ({} if none)."""
    for status in array_msg.status:
        if is_node_status(status, node):
            return {kv.key: kv.value for kv in status.values}
    return {}


class Probe(BackgroundNode):
    """Subscriptions, service clients and an image publisher in this process (own context)."""

    def __init__(self, node: str = NODE, image_topic: str = IMAGE_TOPIC) -> None:
        super().__init__(f"test_probe_{os.getpid()}", start_parameter_services=False)
        self._node_name = node
        self._image_topic = image_topic
        self._lock = threading.Lock()
        self.poses: list[Got] = []
        self.paths: list[Got] = []
        self.status: list[Got] = []  # TrackingStatus of processed frames (TRACKING)
        self.state_changes: list[Got] = []  # the others (INITIALIZING after a (re)start...)
        self.cache_info: list[Got] = []
        self.diagnostics: list[Got] = []

    # -- set up / tear down --------------------------------------------------------------------
    def setup(self, node) -> None:
        from diagnostic_msgs.msg import DiagnosticArray
        from geometry_msgs.msg import PoseStamped
        from lifecycle_msgs.srv import ChangeState, GetState
        from nav_msgs.msg import Path as PathMsg
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image
        from std_srvs.srv import Trigger

        from lingbot_ros_interfaces.msg import CacheInfo, TrackingStatus
        from lingbot_ros_interfaces.srv import (GetCacheInfo, LoadSession, SaveSession,
                                               SaveTrajectory)

        reliable = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE)
        latched = QoSProfile(depth=1000, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        n = self._node_name
        for topic, msg_type, store, qos in (
                (f"{n}/pose", PoseStamped, self.poses, reliable),
                (f"{n}/path", PathMsg, self.paths, latched),
                (f"{n}/status", TrackingStatus, None, reliable),
                (f"{n}/cache_info", CacheInfo, self.cache_info, reliable),
                ("/diagnostics", DiagnosticArray, self.diagnostics, reliable)):
            node.create_subscription(msg_type, topic,
                                     lambda m, s=store: self._on_message(s, m), qos)
        self.clients = {
            "get_state": node.create_client(GetState, f"{n}/get_state"),
            "change_state": node.create_client(ChangeState, f"{n}/change_state"),
            "reset": node.create_client(Trigger, f"{n}/reset"),
            "get_cache_info": node.create_client(GetCacheInfo, f"{n}/get_cache_info"),
            "save_trajectory": node.create_client(SaveTrajectory, f"{n}/save_trajectory"),
            "save_session": node.create_client(SaveSession, f"{n}/save_session"),
            "load_session": node.create_client(LoadSession, f"{n}/load_session"),
        }
        self.image_pub = node.create_publisher(
            Image, self._image_topic, QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))

    def _on_message(self, store: Optional[list], msg) -> None:
        if store is None:  # a TrackingStatus: per frame, or a state change
            store = (self.status if msg.state == msg.STATE_TRACKING else self.state_changes)
        with self._lock:
            store.append(Got(msg, time.monotonic()))

    # -- reading what arrived ------------------------------------------------------------------
    def snapshot(self, store_name: str) -> list[Got]:
        with self._lock:
            return list(getattr(self, store_name))

    def pose_stamps(self) -> list[int]:
        return [stamp_ns(g.msg.header.stamp) for g in self.snapshot("poses")]

    def wait_for_pose_of(self, stamp: int, timeout: float = 60.0) -> list[int]:
        """The sentinel of "nothing else came": wait for the pose of ``stamp``, a good frame
        published LAST, and return every pose stamp received by then.

        The node takes images in order (one subscription, one queue, one worker) and its
        reliable pose publisher keeps that order, so the pose of anything published before
        the sentinel has arrived before the sentinel's: compare the returned list with the
        expected one, instead of sleeping a while and hoping a stray pose would have come."""
        self.wait_until(lambda: stamp in self.pose_stamps(), timeout,
                        lambda: f"the pose of the sentinel frame {stamp} "
                                f"(last poses: {self.pose_stamps()[-3:]})")
        return self.pose_stamps()

    def last_diag(self) -> dict[str, str]:
        """The values of the latest /diagnostics message of the node ({} before the first)."""
        for got in reversed(self.snapshot("diagnostics")):
            values = diag_values(got.msg, self._node_name)
            if values:
                return values
        return {}

    def last_level(self) -> tuple[Optional[int], str]:
        """(level 0/1/2, message) of the node's latest DiagnosticStatus ((None, "") before
        the first). rclpy gives the level as bytes."""
        for got in reversed(self.snapshot("diagnostics")):
            for status in got.msg.status:
                if is_node_status(status, self._node_name):
                    level = status.level
                    return (int.from_bytes(level, "little") if isinstance(level, bytes)
                            else int(level)), status.message
        return None, ""

    def counter(self, key: str) -> int:
        """A counter of the latest /diagnostics (0 when the node has not counted it yet)."""
        return int(self.last_diag().get(key, 0))

    @staticmethod
    def wait_until(predicate: Callable[[], Any], timeout: float,
                   what: Union[str, Callable[[], str]], interval: float = 0.05) -> Any:
        """Poll ``predicate`` until truthy (returned); fail the test after ``timeout`` s,
        saying what was awaited (``what``, or what it returns when called then)."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() >= deadline:
                pytest.fail(f"timed out after {timeout} s waiting for "
                            f"{what() if callable(what) else what}")
            time.sleep(interval)

    # -- services --------------------------------------------------------------------------------
    def save_session(self, path, timeout: float = 60.0):
        """~/save_session of ``path`` (str or Path): the response."""
        client = self.clients["save_session"]
        return self.call("save_session", client.srv_type.Request(path=str(path)), timeout)

    def load_session(self, path, timeout: float = 60.0):
        """~/load_session of ``path`` (str or Path): the response."""
        client = self.clients["load_session"]
        return self.call("load_session", client.srv_type.Request(path=str(path)), timeout)

    def call(self, name: str, request=None, timeout: float = 30.0):
        """Call one of ``self.clients`` and return its response (fails the test on timeout).

        Queries are re-sent every RETRY_S s: a client's first request can be answered before
        the server has matched the client's response reader (DDS discovery is not
        symmetric), and that response is lost. Requests that change state are sent once;
        make a query first (as ``wait_active`` does) so the server knows this probe.
        """
        response = self.try_call(name, request, timeout)
        if response is None:
            pytest.fail(f"no response from {self.clients[name].srv_name} within {timeout} s")
        return response

    def try_call(self, name: str, request=None, timeout: float = 30.0):
        """As ``call``, but None when no response came within ``timeout`` s."""
        client = self.clients[name]
        deadline = time.monotonic() + timeout
        if not client.wait_for_service(timeout_sec=timeout):
            return None
        request = request if request is not None else client.srv_type.Request()
        while True:
            future = client.call_async(request)
            attempt_end = min(deadline, time.monotonic() + (
                RETRY_S if name in IDEMPOTENT else timeout))
            while not future.done() and time.monotonic() < attempt_end:
                time.sleep(0.01)
            if future.done():
                return future.result()
            client.remove_pending_request(future)
            if time.monotonic() >= deadline:
                return None

    def service_available(self, name: str) -> bool:
        return self.clients[name].service_is_ready()

    def get_state(self, timeout: float = 30.0) -> tuple[int, str]:
        state = self.call("get_state", timeout=timeout).current_state
        return state.id, state.label

    def change_state(self, transition_id: int, timeout: float = 60.0) -> bool:
        from lifecycle_msgs.srv import ChangeState
        request = ChangeState.Request()
        request.transition.id = transition_id
        return self.call("change_state", request, timeout).success

    def wait_active(self, node: Optional[NodeProcess] = None,
                    timeout: float = START_TIMEOUT) -> None:
        """Until the node's lifecycle state is 'active' (it configures itself: autostart)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if node is not None and node.poll() is not None:
                pytest.fail(f"the node exited with {node.poll()} before becoming active\n"
                            f"{node.log()[-4000:]}")
            response = self.try_call("get_state", timeout=RETRY_S)
            if response is not None and response.current_state.id == ACTIVE:
                return
            time.sleep(0.1)
        pytest.fail(f"the node was not active within {timeout} s\n"
                    f"{node.log()[-4000:] if node else ''}")

    def wait_for_image_subscriber(self, timeout: float = 30.0) -> None:
        self.wait_until(lambda: self.image_pub.get_subscription_count() > 0, timeout,
                        f"a subscription to {self._image_topic}")

    # -- images ----------------------------------------------------------------------------------
    def publish_image(self, msg) -> None:
        self.image_pub.publish(msg)

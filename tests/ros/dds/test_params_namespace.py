"""config/lingbot_ros.yaml applies to the node under a namespace (its key is '/**').

The node runs in a child process as ``-r __ns:=/robot1 --params-file <copy of the file with a
few values changed>``; its parameter service, ``/robot1/lingbot_ros/get_parameters``, must
report the changed values. A file keyed ``lingbot_ros:`` (that is ``/lingbot_ros``) would not
match ``/robot1/lingbot_ros`` and the node would keep its defaults: this test fails then.
"""
from __future__ import annotations

import os
import sys
import time

import pytest
import yaml

from lingbot_ros.clients.background_node import BackgroundNode
from tests.ros.node_harness import RETRY_S, START_TIMEOUT, NodeProcess
from tests.ros.ros_helpers import REPO, ros_env  # noqa: F401 -- the fixture

NAMESPACE = "/robot1"
NODE = f"{NAMESPACE}/lingbot_ros"
# Values unlike the defaults (and no model work: no autostart, no warm-up, tiny network).
CHANGED = {"publish.path_rate_hz": 2.5, "frames.map": "robot1_map", "autostart": False,
           "warmup": False, "model.preset": "tiny"}


class ParameterClient(BackgroundNode):
    """A rcl_interfaces/srv/GetParameters client of ``NODE`` on its own context."""

    def __init__(self) -> None:
        super().__init__(f"test_params_ns_{os.getpid()}", start_parameter_services=False)

    def setup(self, node) -> None:
        from rcl_interfaces.srv import GetParameters
        self.client = node.create_client(GetParameters, f"{NODE}/get_parameters")

    def get(self, node: NodeProcess, names: list[str], timeout: float) -> dict:
        """The values of ``names`` (ParameterValue messages), re-asking every RETRY_S s: the
        first response can be lost while DDS discovery is still matching the reader."""
        deadline = time.monotonic() + timeout
        while not self.client.wait_for_service(timeout_sec=0.5):
            if node.poll() is not None:
                pytest.fail(f"the node exited with {node.poll()}\n{node.log()[-4000:]}")
            if time.monotonic() >= deadline:
                pytest.fail(f"no service {NODE}/get_parameters within {timeout} s\n"
                            f"{node.log()[-4000:]}")
        request = self.client.srv_type.Request(names=names)
        while time.monotonic() < deadline:
            future = self.client.call_async(request)
            attempt_end = min(deadline, time.monotonic() + RETRY_S)
            while not future.done() and time.monotonic() < attempt_end:
                time.sleep(0.01)
            if future.done():
                return dict(zip(names, future.result().values))
            self.client.remove_pending_request(future)
        pytest.fail(f"no response from {NODE}/get_parameters within {timeout} s")


def _python(value):
    """A rcl_interfaces/msg/ParameterValue as a Python value (the types used here)."""
    from rcl_interfaces.msg import ParameterType
    return {ParameterType.PARAMETER_BOOL: lambda v: v.bool_value,
            ParameterType.PARAMETER_INTEGER: lambda v: v.integer_value,
            ParameterType.PARAMETER_DOUBLE: lambda v: v.double_value,
            ParameterType.PARAMETER_STRING: lambda v: v.string_value}[value.type](value)


def test_the_params_file_applies_under_a_namespace(ros_env, tmp_path):
    data = yaml.safe_load((REPO / "config" / "lingbot_ros.yaml").read_text())
    (key,) = data
    values = data[key]["ros__parameters"]
    assert set(CHANGED) <= set(values), "parameters of the file"
    assert values["publish.path_rate_hz"] != 2.5 and values["frames.map"] != "robot1_map"
    values.update(CHANGED)
    params_file = tmp_path / "params.yaml"
    params_file.write_text(yaml.safe_dump(data, sort_keys=False))

    node = NodeProcess(ros_env, tmp_path)
    # Only the namespace and the params file: no -p overrides that would hide the file.
    node.cmd = [sys.executable, "-m", "lingbot_ros.ros.node", "--ros-args",
                "-r", f"__ns:={NAMESPACE}", "--params-file", str(params_file)]
    with node, ParameterClient() as client:
        got = client.get(node, sorted(CHANGED), START_TIMEOUT)
        assert node.poll() is None, node.log()[-4000:]
    assert {name: _python(v) for name, v in got.items()} == CHANGED, node.log()[-4000:]

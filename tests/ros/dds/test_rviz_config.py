"""config/lingbot_ros.rviz against the running node's publishers, over DDS.

The node runs in a child process under a namespace (``-r __ns:=/robot1``, as ``launch
namespace:=robot1`` starts it) with its defaults (the tiny network). A probe in this process
reads its publishers (``get_publisher_names_and_types_by_node``) and their QoS
(``get_publishers_info_by_topic``). The config names the un-namespaced topics
(``/lingbot_ros/<name>``); under a namespace ``use_rviz:=true`` remaps those of the launch
file's ``RVIZ_TOPICS`` (read here from the launch file itself), and this test resolves them the
same way. Then, for every display:

- its ``Class`` is one RViz maps to a message type (``TOPIC_TYPES``) or one that reads no
  topic (``NO_TOPIC``); any other class fails, so a new display gets checked too;
- its topic is published by the node with that type, and the display's reliability and
  durability can match the publisher's (a reliable or transient-local reader needs such a
  writer);
- an enabled display's topic is published at the defaults (what ``use_rviz:=true`` opens);
  a disabled one's with the node's optional outputs on (``OPTIONAL_OUTPUTS``: the node is
  taken back to unconfigured, the parameters set, configured and activated again);
- the Fixed Frame is the node's map frame (``frames.map``, read from the running node).
"""
from __future__ import annotations

import ast
import time

import pytest
import yaml

from tests.ros.node_harness import (ACTIVATE, ACTIVE, CLEANUP, CONFIGURE, DEACTIVATE,
                                    INACTIVE, RETRY_S, UNCONFIGURED, NodeProcess, Probe)
from tests.ros.ros_helpers import REPO
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

RVIZ = REPO / "config" / "lingbot_ros.rviz"
LAUNCH = REPO / "launch" / "lingbot_ros.launch.py"
NAMESPACE = "/robot1"
NODE_NAME = "lingbot_ros"
NODE = f"{NAMESPACE}/{NODE_NAME}"
# RViz display class -> the message type it subscribes to (rviz_default_plugins).
TOPIC_TYPES = {
    "rviz_default_plugins/Camera": "sensor_msgs/msg/Image",
    "rviz_default_plugins/DepthCloud": "sensor_msgs/msg/Image",
    "rviz_default_plugins/FluidPressure": "sensor_msgs/msg/FluidPressure",
    "rviz_default_plugins/Illuminance": "sensor_msgs/msg/Illuminance",
    "rviz_default_plugins/Image": "sensor_msgs/msg/Image",
    "rviz_default_plugins/LaserScan": "sensor_msgs/msg/LaserScan",
    "rviz_default_plugins/Map": "nav_msgs/msg/OccupancyGrid",
    "rviz_default_plugins/Marker": "visualization_msgs/msg/Marker",
    "rviz_default_plugins/MarkerArray": "visualization_msgs/msg/MarkerArray",
    "rviz_default_plugins/Odometry": "nav_msgs/msg/Odometry",
    "rviz_default_plugins/Path": "nav_msgs/msg/Path",
    "rviz_default_plugins/PointCloud": "sensor_msgs/msg/PointCloud",
    "rviz_default_plugins/PointCloud2": "sensor_msgs/msg/PointCloud2",
    "rviz_default_plugins/PointStamped": "geometry_msgs/msg/PointStamped",
    "rviz_default_plugins/Polygon": "geometry_msgs/msg/PolygonStamped",
    "rviz_default_plugins/Pose": "geometry_msgs/msg/PoseStamped",
    "rviz_default_plugins/PoseArray": "geometry_msgs/msg/PoseArray",
    "rviz_default_plugins/PoseWithCovariance": "geometry_msgs/msg/PoseWithCovarianceStamped",
    "rviz_default_plugins/Range": "sensor_msgs/msg/Range",
    "rviz_default_plugins/RelativeHumidity": "sensor_msgs/msg/RelativeHumidity",
    "rviz_default_plugins/Temperature": "sensor_msgs/msg/Temperature",
    "rviz_default_plugins/TF": "tf2_msgs/msg/TFMessage",
    "rviz_default_plugins/Wrench": "geometry_msgs/msg/WrenchStamped",
}
NO_TOPIC = {"rviz_default_plugins/Axes", "rviz_default_plugins/Grid"}
# The TF display has no Topic property: it listens to /tf (and /tf_static, the robot's).
FIXED_TOPICS = {"rviz_default_plugins/TF": "/tf"}
# Outputs off by default that a disabled display may show.
OPTIONAL_OUTPUTS = {"publish.map_points": True, "publish.points": True}
WAIT_S = 20.0  # s for DDS discovery to show a publisher (a loaded 2-core CI machine)


def rviz_topics_of_launch() -> tuple[str, ...]:
    """``RVIZ_TOPICS`` of the launch file: the topics use_rviz:=true remaps under a namespace."""
    for node in ast.parse(LAUNCH.read_text()).body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and getattr(node.targets[0], "id", None) == "RVIZ_TOPICS"):
            return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"{LAUNCH.name} has no RVIZ_TOPICS")


def resolve(topic: str, namespace: str) -> str:
    """A topic of the config as RViz sees it once use_rviz:=true remapped it (launch _rviz)."""
    assert topic.startswith("/"), f"the rviz config names an absolute topic, not {topic!r}"
    remapped = {f"/{NODE_NAME}/{t}" for t in rviz_topics_of_launch()}
    return f"{namespace}{topic}" if namespace and topic in remapped else topic


def displays() -> list[dict]:
    manager = yaml.safe_load(RVIZ.read_text())["Visualization Manager"]
    return manager["Displays"]


def display_topic(display: dict) -> str:
    cls = display["Class"]
    return FIXED_TOPICS.get(cls) or resolve(display["Topic"]["Value"], NAMESPACE)


class RvizProbe(Probe):
    """The harness's probe of ``NODE`` plus its graph and parameters."""

    def __init__(self) -> None:
        super().__init__(node=NODE)

    def publishers(self) -> dict[str, set[str]]:
        """topic -> types of the node's publishers, as the DDS graph shows them now."""
        found = self.node.get_publisher_names_and_types_by_node(NODE_NAME, NAMESPACE)
        return {topic: set(types) for topic, types in found}

    def wait_published(self, wanted: set[tuple[str, str]], what: str) -> dict[str, set[str]]:
        """Until the node publishes every (topic, type) of ``wanted``; the publishers then.
        On a timeout, fails naming what is missing or of another type."""
        def missing() -> dict[str, str]:
            have = self.publishers()
            return {t: f"{ty} (published: {sorted(have.get(t, ())) or 'none'})"
                    for t, ty in sorted(wanted) if ty not in have.get(t, ())}
        deadline = time.monotonic() + WAIT_S
        while missing() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not missing(), (f"{what}: displays of config/lingbot_ros.rviz with no publisher "
                               f"of their type on {NODE}: {missing()}; its publishers: "
                               f"{sorted(self.publishers())}")
        return self.publishers()

    def writer_qos(self, topic: str) -> list:
        """The QoS of the node's publishers of ``topic`` (one; two while DDS still shows one
        destroyed at a deactivate)."""
        infos = [i for i in self.node.get_publishers_info_by_topic(topic)
                 if (i.node_namespace, i.node_name) == (NAMESPACE, NODE_NAME)]
        assert infos, f"{topic}: no publisher of {NODE}"
        return [i.qos_profile for i in infos]

    def ask(self, srv_type, name: str, request, timeout: float = 30.0):
        """The response of ``NODE``'s service ``name``; the request is re-sent every RETRY_S s
        (idempotent here): a first response can be lost while DDS discovery still matches
        this client's reader."""
        client = self.node.create_client(srv_type, f"{NODE}/{name}")
        assert client.wait_for_service(timeout_sec=timeout), f"no {NODE}/{name}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            future = client.call_async(request)
            attempt_end = min(deadline, time.monotonic() + RETRY_S)
            while not future.done() and time.monotonic() < attempt_end:
                time.sleep(0.01)
            if future.done():
                return future.result()
            client.remove_pending_request(future)
        pytest.fail(f"no response from {NODE}/{name} within {timeout} s")

    def set_parameters(self, values: dict) -> None:
        from rcl_interfaces.srv import SetParameters
        from rclpy.parameter import Parameter
        request = SetParameters.Request(parameters=[Parameter(n, value=v).to_parameter_msg()
                                                    for n, v in values.items()])
        results = self.ask(SetParameters, "set_parameters", request).results
        for name, result in zip(values, results):
            assert result.successful, f"{name}: {result.reason}"

    def get_parameter(self, name: str):
        from rcl_interfaces.srv import GetParameters
        from rclpy.parameter import parameter_value_to_python
        response = self.ask(GetParameters, "get_parameters", GetParameters.Request(names=[name]))
        return parameter_value_to_python(response.values[0])

    def transition(self, transition_id: int, state: int) -> None:
        assert self.change_state(transition_id), f"transition {transition_id} refused"
        assert self.get_state()[0] == state


def check_qos(probe: RvizProbe, display: dict, topic: str) -> None:
    """A reliable (transient local) reader matches only a reliable (transient local) writer."""
    from rclpy.qos import DurabilityPolicy, ReliabilityPolicy
    wanted = display.get("Topic", {})
    for writer in probe.writer_qos(topic):
        if wanted.get("Reliability Policy") == "Reliable":
            assert writer.reliability == ReliabilityPolicy.RELIABLE, \
                f"{display['Name']}: a reliable reader of {topic}, a best-effort writer"
        if wanted.get("Durability Policy") == "Transient Local":
            assert writer.durability == DurabilityPolicy.TRANSIENT_LOCAL, \
                f"{display['Name']}: a transient-local reader of {topic}, a volatile writer"


def test_every_display_class_is_known():
    for display in displays():
        cls = display["Class"]
        assert cls in TOPIC_TYPES or cls in NO_TOPIC, (
            f"display {display.get('Name')!r}: class {cls} is not in TOPIC_TYPES (with its "
            f"message type) nor NO_TOPIC of {__name__}")
        if cls in TOPIC_TYPES and cls not in FIXED_TOPICS:
            assert display.get("Topic", {}).get("Value"), f"{display['Name']}: no topic"


@pytest.mark.parametrize("namespace, topic, resolved", [
    ("", "/lingbot_ros/path", "/lingbot_ros/path"),
    ("/robot1", "/lingbot_ros/path", "/robot1/lingbot_ros/path"),
    ("/robot1", "/tf", "/tf"),
])
def test_config_topics_resolve_as_the_launch_remaps_them(namespace, topic, resolved):
    assert resolve(topic, namespace) == resolved


def test_every_display_matches_a_publisher_of_the_running_node(tmp_path, ros_env):
    typed = [d for d in displays() if d["Class"] in TOPIC_TYPES]
    enabled = {(display_topic(d), TOPIC_TYPES[d["Class"]]) for d in typed if d["Enabled"]}
    every = {(display_topic(d), TOPIC_TYPES[d["Class"]]) for d in typed}
    assert enabled, "the rviz config shows none of the node's topics"
    remaps = {"__ns": NAMESPACE}
    with NodeProcess(ros_env, tmp_path, remaps=remaps) as node, RvizProbe() as probe:
        probe.wait_active(node)
        frame = probe.get_parameter("frames.map")
        config = yaml.safe_load(RVIZ.read_text())["Visualization Manager"]
        fixed = config["Global Options"]["Fixed Frame"]
        assert fixed == frame, f"Fixed Frame {fixed!r}: the node's map frame is {frame!r}"
        probe.wait_published(enabled, "enabled at the node's defaults")
        for display in typed:
            if display["Enabled"]:
                check_qos(probe, display, display_topic(display))
        # The optional outputs on: unconfigured, parameters set, configured and active again.
        probe.transition(DEACTIVATE, INACTIVE)
        probe.transition(CLEANUP, UNCONFIGURED)
        probe.set_parameters(OPTIONAL_OUTPUTS)
        probe.transition(CONFIGURE, INACTIVE)
        probe.transition(ACTIVATE, ACTIVE)
        probe.wait_published(every, f"with {OPTIONAL_OUTPUTS}")
        for display in typed:
            check_qos(probe, display, display_topic(display))
        assert node.poll() is None, node.log()[-3000:]

"""launch/lingbot_ros.launch.py, statically and through its argument logic.

The launch file is run for real by the real launch system in tests/launch/ (poses through a
bag replay, reset, exit codes, a bad checkpoint, use_rviz without rviz2, Ctrl-C). Here, fast
and without ROS: it compiles; its syntax tree names the package, executable, node name, params
file and launch arguments that the rest of the package provides; and the arguments' effect on
the node (parameter overrides, remappings, the rviz2 node's config and remaps, the errors of
bad values) is read from its OpaqueFunction run against stand-ins that record what it asks of
`launch` and `launch_ros`.
"""
from __future__ import annotations

import ast
import importlib.util
import re
import sys
import types
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
LAUNCH = REPO / "launch" / "lingbot_ros.launch.py"
ARGUMENTS = {"checkpoint", "params_file", "image_topic", "use_sim_time", "namespace",
             "use_compressed", "camera_info_topic", "device", "autostart", "base_frame",
             "bare_camera", "use_rviz", "scale_source", "aligned_depth_topic",
             "scale_odometry_input", "odom_topic"}
# Read through the file's helpers (_value, _boolean) with the argument name as a literal.
READERS = {"LaunchConfiguration": 0, "_value": 1, "_boolean": 1}


def _name(func: ast.AST) -> str:
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _string(node: ast.AST):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


@pytest.fixture(scope="module")
def tree() -> ast.Module:
    assert LAUNCH.is_file(), f"{LAUNCH} is missing"
    source = LAUNCH.read_text()
    compile(source, str(LAUNCH), "exec")  # a SyntaxError fails here
    return ast.parse(source, str(LAUNCH))


def calls(tree: ast.Module, *names: str) -> list[ast.Call]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _name(n.func) in names]


def keyword(call: ast.Call, key: str):
    for kw in call.keywords:
        if kw.arg == key:
            return kw.value
    return None


def first_string(call: ast.Call, key: str):
    value = call.args[0] if call.args else keyword(call, key)
    return _string(value) if value is not None else None


def test_defines_generate_launch_description(tree):
    functions = [n.name for n in tree.body if isinstance(n, ast.FunctionDef)]
    assert "generate_launch_description" in functions
    imported = {alias.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
                for alias in n.names}
    assert "LaunchDescription" in imported and "DeclareLaunchArgument" in imported


def test_starts_our_node(tree):
    nodes = [n for n in calls(tree, "Node", "LifecycleNode")
             if _string(keyword(n, "package")) == "lingbot_ros"]
    assert len(nodes) == 1, "one lingbot_ros node"
    node = nodes[0]
    assert _name(node.func) == "LifecycleNode"
    assert _string(keyword(node, "executable")) == "lingbot_ros_node"
    # The params file is keyed '/**': it applies under any node name and namespace.
    params_yaml = yaml.safe_load((REPO / "config" / "lingbot_ros.yaml").read_text())
    assert list(params_yaml) == ["/**"]
    assert keyword(node, "name") is not None
    assert keyword(node, "parameters") is not None and keyword(node, "remappings") is not None
    # The node's base topic names, which the launch file remaps: the node resolves 'image'
    # (remaps applied) before appending '/compressed', so the one rule moves the compressed
    # input as well; camera_info is remapped beside it.
    values = params_yaml["/**"]["ros__parameters"]
    assert values["topics.image"] == "image" and values["topics.camera_info"] == "camera_info"
    # The parameters that launch arguments override are the params file's (use_sim_time is
    # rclpy's own).
    assert {"checkpoint", "topics.use_compressed", "autostart", "device",
            "frames.base", "scale.source"} <= set(values)


def test_the_executable_and_the_installed_files_exist():
    setup = (REPO / "setup.py").read_text()
    assert re.search(r"lingbot_ros_node\s*=\s*lingbot_ros\.ros\.main:main", setup)
    assert "launch/*.launch.py" in setup and "config/*.yaml" in setup
    assert "config/*.rviz" in setup
    assert (REPO / "config" / "lingbot_ros.yaml").is_file()
    assert (REPO / "config" / "lingbot_ros.rviz").is_file()


def test_uses_the_params_file(tree):
    strings = {_string(n) for n in ast.walk(tree)} - {None}
    assert "lingbot_ros.yaml" in strings or any(s.endswith("/lingbot_ros.yaml")
                                                for s in strings)
    assert "lingbot_ros.rviz" in strings, "use_rviz opens the installed rviz config"


def test_declares_the_launch_arguments(tree):
    declared = [first_string(c, "name") for c in calls(tree, "DeclareLaunchArgument")]
    assert None not in declared, "argument names are literal strings"
    assert len(declared) == len(set(declared)), declared
    missing = ARGUMENTS - set(declared)
    assert not missing, f"launch arguments not declared: {sorted(missing)}"
    for call in calls(tree, "DeclareLaunchArgument"):
        assert keyword(call, "description") is not None, first_string(call, "name")
    # Every argument read is declared (a typo would be an unset substitution at launch).
    used = {_string(c.args[READERS[_name(c.func)]]) for c in calls(tree, *READERS)
            if len(c.args) > READERS[_name(c.func)]}
    assert used - {None} <= set(declared), used - set(declared)
    assert ARGUMENTS <= used, f"declared but never used: {sorted(ARGUMENTS - used)}"


# --- the launch file run against stand-ins of launch / launch_ros ---------------------------

class _Recorded:
    """A stand-in action or substitution: keeps its arguments."""

    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs = args, kwargs


class _LaunchConfiguration(_Recorded):
    def perform(self, context) -> str:
        return context[self.args[0]]


@pytest.fixture
def launch_module(monkeypatch):
    """The launch file imported with stand-in launch / launch_ros modules."""
    names = {"launch": ["LaunchDescription"],
             "launch.actions": ["DeclareLaunchArgument", "OpaqueFunction",
                                "RegisterEventHandler", "Shutdown"],
             "launch.event_handlers": ["OnProcessExit"],
             "launch.substitutions": ["PathJoinSubstitution"],
             "launch_ros.actions": ["LifecycleNode", "Node"],
             "launch_ros.substitutions": ["FindPackageShare"]}
    for module_name, classes in names.items():
        module = types.ModuleType(module_name)
        for cls in classes:
            setattr(module, cls, type(cls, (_Recorded,), {}))
        monkeypatch.setitem(sys.modules, module_name, module)
    sys.modules["launch.substitutions"].LaunchConfiguration = _LaunchConfiguration
    monkeypatch.setitem(sys.modules, "launch_ros", types.ModuleType("launch_ros"))
    spec = importlib.util.spec_from_file_location("lingbot_ros_launch_under_test", LAUNCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _launch(module, **values) -> list:
    """The actions the launch file's OpaqueFunction returns for these argument values."""
    description = module.generate_launch_description()
    entities = description.args[0]
    defaults = {e.args[0]: e.kwargs.get("default_value")
                for e in entities if type(e).__name__ == "DeclareLaunchArgument"}
    assert set(defaults) == ARGUMENTS
    assert set(values) <= ARGUMENTS, set(values) - ARGUMENTS
    opaque = [e for e in entities if type(e).__name__ == "OpaqueFunction"]
    assert len(opaque) == 1
    context = {name: (value if isinstance(value, str) else "<substitution>")
               for name, value in defaults.items()}
    context.update(values)
    return opaque[0].kwargs["function"](context)


def _launched_node(module, **values):
    actions = _launch(module, **values)
    nodes = [a for a in actions if type(a).__name__ == "LifecycleNode"]
    assert len(nodes) == 1
    node = nodes[0]
    assert node.kwargs["package"] == "lingbot_ros"
    assert node.kwargs["executable"] == "lingbot_ros_node"
    assert node.kwargs["name"] == "lingbot_ros"
    assert node.kwargs["namespace"].args == ("namespace",)
    return node


def _overrides(node) -> dict:
    params_file, overrides = node.kwargs["parameters"]
    assert params_file.args == ("params_file",)
    return overrides


def test_defaults_keep_the_params_file(launch_module):
    """Every argument at its default: only use_sim_time is set over the params file."""
    description = launch_module.generate_launch_description()
    defaults = {e.args[0]: e.kwargs.get("default_value") for e in description.args[0]
                if type(e).__name__ == "DeclareLaunchArgument"}
    assert {name: value for name, value in defaults.items() if name != "params_file"} == {
        "checkpoint": "", "image_topic": "/camera/image_raw", "camera_info_topic": "",
        "use_compressed": "", "device": "", "autostart": "", "base_frame": "",
        "bare_camera": "false", "use_sim_time": "false", "namespace": "", "use_rviz": "false",
        "scale_source": "", "aligned_depth_topic": "", "scale_odometry_input": "",
        "odom_topic": ""}
    actions = _launch(launch_module)
    assert [type(a).__name__ for a in actions] == ["RegisterEventHandler", "LifecycleNode"], \
        "no rviz2 by default"
    node = actions[1]
    # The launch ends with the node (a failed autostart fails the launch: tests/launch/).
    (handler,) = actions[0].args
    assert type(handler).__name__ == "OnProcessExit"
    assert handler.kwargs["target_action"] is node
    assert _overrides(node) == {"use_sim_time": False}
    assert node.kwargs["remappings"] == [("image", "/camera/image_raw"),
                                         ("camera_info", "/camera/camera_info")]


@pytest.mark.parametrize("value, expected", [("", None), ("true", True), ("True", True),
                                             ("false", False)])
def test_use_compressed_argument(launch_module, value, expected):
    node = _launched_node(launch_module, use_compressed=value)
    overrides = _overrides(node)
    # Empty: the params file's topics.use_compressed stands (no override).
    assert overrides.get("topics.use_compressed") is expected
    # The compressed input follows the 'image' rule (<image_topic>/compressed); camera_info
    # stays beside the base topic.
    assert node.kwargs["remappings"] == [("image", "/camera/image_raw"),
                                         ("camera_info", "/camera/camera_info")]


@pytest.mark.parametrize("value, expected", [("", None), ("true", True), ("FALSE", False)])
def test_autostart_argument(launch_module, value, expected):
    assert _overrides(_launched_node(launch_module, autostart=value)).get("autostart") \
        is expected


@pytest.mark.parametrize("value, expected", [("false", False), ("true", True),
                                             (" True ", True)])
def test_use_sim_time_argument(launch_module, value, expected):
    assert _overrides(_launched_node(launch_module, use_sim_time=value))["use_sim_time"] \
        is expected


@pytest.mark.parametrize("value, expected", [("", None), ("cpu", "cpu"), ("cuda", "cuda"),
                                             ("cuda:1", "cuda:1"), ("CUDA:0", "cuda:0")])
def test_device_argument(launch_module, value, expected):
    assert _overrides(_launched_node(launch_module, device=value)).get("device") == expected


@pytest.mark.parametrize("value", ["gpu", "cuda:", "cuda:x", "cpu,cuda"])
def test_device_argument_is_validated(launch_module, value):
    with pytest.raises(ValueError, match="device must be cpu, cuda, cuda:N or empty"):
        _launched_node(launch_module, device=value)


@pytest.mark.parametrize("value, expected", [("", None), ("/tmp/w.pt", "/tmp/w.pt")])
def test_checkpoint_argument(launch_module, value, expected):
    # Empty: the params file's checkpoint stands.
    assert _overrides(_launched_node(launch_module, checkpoint=value)).get("checkpoint") \
        == expected


@pytest.mark.parametrize("values, expected", [
    ({}, None),                                              # the params file's frames.base
    ({"base_frame": "base_footprint"}, "base_footprint"),
    ({"bare_camera": "true"}, ""),                           # camera-only: no base frame
    ({"bare_camera": "false", "base_frame": "robot"}, "robot"),
])
def test_base_frame_arguments(launch_module, values, expected):
    assert _overrides(_launched_node(launch_module, **values)).get("frames.base") == expected


@pytest.mark.parametrize("value, expected", [("", None), ("depth", "depth"),
                                             ("FIXED", "fixed"), ("none", "none")])
def test_scale_source_argument(launch_module, value, expected):
    assert _overrides(_launched_node(launch_module, scale_source=value)).get("scale.source") \
        == expected


def test_scale_source_argument_is_validated(launch_module):
    with pytest.raises(ValueError, match="scale_source must be one of"):
        _launched_node(launch_module, scale_source="lidar")


def test_aligned_depth_topic_argument_remaps_the_depth_input(launch_module):
    node = _launched_node(launch_module, image_topic="/camera/image_raw",
                          aligned_depth_topic="/camera/aligned_depth_to_color/image_raw")
    assert node.kwargs["remappings"] == [
        ("image", "/camera/image_raw"), ("camera_info", "/camera/camera_info"),
        ("aligned_depth", "/camera/aligned_depth_to_color/image_raw")]


@pytest.mark.parametrize("value, expected", [("", None), ("topic", "topic"), ("TF", "tf")])
def test_scale_odometry_input_argument(launch_module, value, expected):
    # Empty: the params file's scale.odometry_input (topic in the installed file) stands.
    assert _overrides(_launched_node(launch_module, scale_source="odometry",
                                     scale_odometry_input=value)) \
        .get("scale.odometry_input") == expected


def test_scale_odometry_input_argument_is_validated(launch_module):
    with pytest.raises(ValueError, match="scale_odometry_input must be one of topic, tf"):
        _launched_node(launch_module, scale_odometry_input="odom")


def test_odom_topic_argument_remaps_the_odometry_input(launch_module):
    node = _launched_node(launch_module, scale_source="odometry",
                          odom_topic="/wheel/odometry")
    assert node.kwargs["remappings"] == [
        ("image", "/camera/image_raw"), ("camera_info", "/camera/camera_info"),
        ("odom_in", "/wheel/odometry")]


def test_the_scale_arguments_set_parameters_the_node_has(launch_module):
    """scale_source and scale_odometry_input take the values the node's parameters allow."""
    from lingbot_ros.ros.params.table import ODOMETRY_INPUTS
    from lingbot_ros.scale import SCALE_SOURCES
    assert launch_module.SCALE_SOURCES == SCALE_SOURCES
    assert launch_module.ODOMETRY_INPUTS == ODOMETRY_INPUTS
    values = yaml.safe_load((REPO / "config" / "lingbot_ros.yaml").read_text())
    assert values["/**"]["ros__parameters"]["scale.odometry_input"] == "topic"


def test_bare_camera_and_base_frame_contradict(launch_module):
    with pytest.raises(ValueError, match="bare_camera:=true and base_frame:=base_link"):
        _launched_node(launch_module, bare_camera="true", base_frame="base_link")


@pytest.mark.parametrize("image_topic, expected", [
    ("/camera/image_raw", "/camera/camera_info"),
    ("/a/b/c/image", "/a/b/c/camera_info"),
    ("image", "camera_info"),
    ("cam0/image_rect", "cam0/camera_info"),
    ("/image", "/camera_info"),
    ("/camera/image_raw/", "/camera/camera_info"),
])
def test_camera_info_is_remapped_beside_the_image(launch_module, image_topic, expected):
    assert launch_module.camera_info_topic(image_topic) == expected
    node = _launched_node(launch_module, image_topic=image_topic)
    assert node.kwargs["remappings"] == [("image", image_topic), ("camera_info", expected)]


def test_camera_info_topic_argument_overrides(launch_module):
    node = _launched_node(launch_module, image_topic="/camera/image_raw",
                          camera_info_topic="/calib/camera_info")
    assert node.kwargs["remappings"] == [("image", "/camera/image_raw"),
                                         ("camera_info", "/calib/camera_info")]


def test_empty_image_topic_is_refused(launch_module):
    with pytest.raises(ValueError, match="image_topic must not be empty"):
        _launched_node(launch_module, image_topic="")


@pytest.mark.parametrize("namespace, prefix", [("", "/lingbot_ros"),
                                               ("robot1", "/robot1/lingbot_ros"),
                                               ("/robot1/", "/robot1/lingbot_ros")])
def test_use_rviz_starts_rviz2_with_the_installed_config(launch_module, monkeypatch,
                                                         namespace, prefix):
    # Where rviz2 is installed (it is not here: tests/launch/ checks the refusal for real).
    monkeypatch.setattr(launch_module, "rviz2_executable", lambda: "/opt/ros/x/lib/rviz2/rviz2")
    actions = _launch(launch_module, use_rviz="true", namespace=namespace, use_sim_time="true")
    assert [type(a).__name__ for a in actions] == ["RegisterEventHandler", "LifecycleNode",
                                                   "Node"]
    rviz = actions[2]
    assert (rviz.kwargs["package"], rviz.kwargs["executable"]) == ("rviz2", "rviz2")
    flag, config = rviz.kwargs["arguments"]
    assert flag == "-d"
    (parts,) = config.args
    assert parts[1:] == ["config", "lingbot_ros.rviz"]
    assert type(parts[0]).__name__ == "FindPackageShare" and parts[0].args == ("lingbot_ros",)
    assert rviz.kwargs["parameters"] == [{"use_sim_time": True}]
    # The config names /lingbot_ros/<topic>; under a namespace those are remapped.
    remaps = dict(rviz.kwargs["remappings"])
    if namespace:
        assert remaps == {f"/lingbot_ros/{t}": f"{prefix}/{t}"
                          for t in launch_module.RVIZ_TOPICS}
    else:
        assert remaps == {}
    rviz_yaml = yaml.safe_load((REPO / "config" / "lingbot_ros.rviz").read_text())
    topics = {d["Topic"]["Value"] for d in rviz_yaml["Visualization Manager"]["Displays"]
              if "Topic" in d}
    assert topics == {f"/lingbot_ros/{t}" for t in launch_module.RVIZ_TOPICS}


@pytest.mark.parametrize("name, allowed", [
    ("use_compressed", "true, false or empty"), ("autostart", "true, false or empty"),
    ("use_sim_time", "true or false"), ("use_rviz", "true or false"),
    ("bare_camera", "true or false")])
@pytest.mark.parametrize("value", ["yes", "1", "on"])
def test_boolean_arguments_are_validated(launch_module, name, allowed, value):
    with pytest.raises(ValueError, match=f"{name} must be {allowed}, got '{value}'"):
        _launch(launch_module, **{name: value})


@pytest.mark.parametrize("name", ["use_sim_time", "use_rviz", "bare_camera"])
def test_booleans_without_an_empty_meaning_refuse_empty(launch_module, name):
    with pytest.raises(ValueError, match=f"{name} must be true or false, got ''"):
        _launch(launch_module, **{name: ""})

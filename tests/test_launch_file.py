"""launch/lingbot_ros.launch.py, checked without ROS' `launch` package (not installable from
pip here): it compiles, and its syntax tree names the package, executable, node name, params
file and launch arguments that the rest of the package provides. Its one piece of logic (the
node's parameter overrides, built when launched) runs against stand-ins that record what the
launch file asks of `launch` and `launch_ros`."""
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
             "use_compressed"}


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
    nodes = calls(tree, "Node", "LifecycleNode")
    assert len(nodes) == 1, "one node"
    node = nodes[0]
    assert _string(keyword(node, "package")) == "lingbot_ros"
    assert _string(keyword(node, "executable")) == "lingbot_ros_node"
    # The params file's top-level key is the node name: they must agree.
    name = _string(keyword(node, "name"))
    params_yaml = yaml.safe_load((REPO / "config" / "lingbot_ros.yaml").read_text())
    assert name == "lingbot_ros" and name in params_yaml
    assert keyword(node, "parameters") is not None and keyword(node, "remappings") is not None
    remapped = [_string(t.elts[0]) for t in ast.walk(keyword(node, "remappings"))
                if isinstance(t, ast.Tuple) and len(t.elts) == 2]
    assert "image" in remapped, "the image topic is remapped from the image_topic argument"
    # The rule's source is the node's base image topic: the node resolves it (remaps applied)
    # before appending '/compressed', so the one rule moves the compressed input as well.
    assert params_yaml[name]["ros__parameters"]["topics.image"] == "image"
    assert "image/compressed" not in remapped


def test_the_executable_and_the_installed_files_exist():
    setup = (REPO / "setup.py").read_text()
    assert re.search(r"lingbot_ros_node\s*=\s*lingbot_ros\.ros\.node:main", setup)
    assert "launch/*.launch.py" in setup and "config/*.yaml" in setup
    assert (REPO / "config" / "lingbot_ros.yaml").is_file()


def test_uses_the_params_file(tree):
    strings = {_string(n) for n in ast.walk(tree)} - {None}
    assert "lingbot_ros.yaml" in strings or any(s.endswith("/lingbot_ros.yaml")
                                                for s in strings)


def test_declares_the_launch_arguments(tree):
    declared = [first_string(c, "name") for c in calls(tree, "DeclareLaunchArgument")]
    assert None not in declared, "argument names are literal strings"
    assert len(declared) == len(set(declared)), declared
    missing = ARGUMENTS - set(declared)
    assert not missing, f"launch arguments not declared: {sorted(missing)}"
    for call in calls(tree, "DeclareLaunchArgument"):
        assert keyword(call, "description") is not None, first_string(call, "name")
    # Every argument read is declared (a typo would be an unset substitution at launch).
    used = {first_string(c, "variable_name") for c in calls(tree, "LaunchConfiguration")}
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
             "launch.actions": ["DeclareLaunchArgument", "OpaqueFunction"],
             "launch.substitutions": ["PathJoinSubstitution"],
             "launch_ros.actions": ["LifecycleNode"],
             "launch_ros.descriptions": ["ParameterValue"],
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


def _launched_node(module, **values):
    description = module.generate_launch_description()
    entities = description.args[0]
    defaults = {e.args[0]: e.kwargs.get("default_value")
                for e in entities if type(e).__name__ == "DeclareLaunchArgument"}
    assert set(defaults) == ARGUMENTS and defaults["use_compressed"] == ""
    opaque = [e for e in entities if type(e).__name__ == "OpaqueFunction"]
    assert len(opaque) == 1
    context = {name: (value if isinstance(value, str) else "<substitution>")
               for name, value in defaults.items()}
    context.update(values)
    (node,) = opaque[0].kwargs["function"](context)
    assert type(node).__name__ == "LifecycleNode"
    return node


@pytest.mark.parametrize("value, expected", [("", None), ("true", True), ("True", True),
                                             ("false", False)])
def test_use_compressed_argument(launch_module, value, expected):
    node = _launched_node(launch_module, use_compressed=value)
    params_file, overrides = node.kwargs["parameters"]
    assert params_file.args == ("params_file",)
    assert set(overrides) >= {"checkpoint", "use_sim_time"}
    # Empty: the params file's topics.use_compressed stands (no override).
    assert overrides.get("topics.use_compressed") is expected
    ((source, target),) = node.kwargs["remappings"]
    assert source == "image" and target.args == ("image_topic",)


def test_use_compressed_argument_is_validated(launch_module):
    with pytest.raises(ValueError, match="use_compressed must be true, false or empty"):
        _launched_node(launch_module, use_compressed="yes")

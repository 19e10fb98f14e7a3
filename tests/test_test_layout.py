"""tests/ros is split by what a test starts: tests/ros/unit runs in one process, tests/ros/dds
starts processes (the node through tests/ros/node_harness.py, a bag replay, a DDS peer in a
child process, a script). The folder sets the marker (``ros_unit``/``ros_dds``, in
tests/ros/conftest.py), so a file in the wrong folder runs in the wrong group: this test reads
each file's imports (function-level ones included) and fails on a misplaced one.
"""
import ast
from pathlib import Path

import pytest

ROS = Path(__file__).resolve().parent / "ros"
# Modules whose use means the test starts a process or talks DDS to one.
PROCESS_MODULES = ("subprocess", "multiprocessing", "tests.ros.node_harness",
                   "tests.ros.robot_probe", "tests.ros.tf_publisher", "tests.ros.interface_server",
                   "tests.ros.dds", "lingbot_ros.clients.background_node",
                   "lingbot_ros.clients.probe")
# ...and these names of tests/ros/ros_helpers.py (the rest of it, e.g. ros_env, is in-process).
PROCESS_HELPERS = {"start_replay", "finish", "RawReceiver"}
OS_PROCESS_CALLS = ("fork", "system", "popen", "posix_spawn", "spawn", "exec")


def process_uses(path: Path) -> list[str]:
    """What in ``path`` starts a process or talks to one (empty for an in-process test)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith(PROCESS_MODULES)]
        elif isinstance(node, ast.ImportFrom) and node.module:
            if node.module.startswith(PROCESS_MODULES):
                found.append(node.module)
            elif node.module == "tests.ros.ros_helpers":
                found += [a.name for a in node.names if a.name in PROCESS_HELPERS]
        elif (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
              and node.value.id == "os" and node.attr.startswith(OS_PROCESS_CALLS)):
            found.append(f"os.{node.attr}")
    return found


def test_every_ros_test_is_in_a_group():
    assert sorted(p.name for p in ROS.glob("test_*.py")) == [], \
        "tests/ros/test_*.py: move each into tests/ros/unit or tests/ros/dds"
    assert len(list((ROS / "unit").glob("test_*.py"))) > 10
    assert len(list((ROS / "dds").glob("test_*.py"))) > 20


@pytest.mark.parametrize("path", sorted((ROS / "unit").glob("test_*.py")), ids=lambda p: p.name)
def test_unit_tests_start_no_process(path):
    assert process_uses(path) == [], f"{path.name} starts processes: move it to tests/ros/dds"


@pytest.mark.parametrize("path", sorted((ROS / "dds").glob("test_*.py")), ids=lambda p: p.name)
def test_dds_tests_start_processes(path):
    assert process_uses(path), f"{path.name} starts no process: move it to tests/ros/unit"


def test_the_check_sees_a_harness_and_a_replay(tmp_path):
    harness = tmp_path / "a.py"
    harness.write_text("def f():\n    from tests.ros.node_harness import NodeProcess\n")
    replay = tmp_path / "b.py"
    replay.write_text("from tests.ros.ros_helpers import ros_env, start_replay\n")
    alone = tmp_path / "c.py"
    alone.write_text("import os\nfrom tests.ros.ros_helpers import REPO, ros_env\nos.getpid()\n")
    assert process_uses(harness) == ["tests.ros.node_harness"]
    assert process_uses(replay) == ["start_replay"]
    assert process_uses(alone) == []

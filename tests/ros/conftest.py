"""Fixtures shared by the ROS tests: ``ros_env`` (loopback discovery, random domain, temp logs).

Each test under tests/ros gets the marker of its folder: ``ros_unit`` (tests/ros/unit: one
process, no child process, nothing sent between processes) or ``ros_dds`` (tests/ros/dds: a
child process, the node through tests/ros/node_harness.py, a bag replay, a DDS peer in another
process, or a script). ``make test PYTEST_ARGS="-m ros_unit"`` runs one group;
tests/test_test_layout.py keeps each file in the folder that matches what it imports.
"""
from pathlib import Path

import pytest

from tests.ros.ros_helpers import ros_env  # noqa: F401 -- re-exported as a fixture

HERE = Path(__file__).resolve().parent
GROUPS = {HERE / "unit": "ros_unit", HERE / "dds": "ros_dds"}


def pytest_collection_modifyitems(items) -> None:
    # pytest calls this hook with every collected item, not only those below this folder
    for item in items:
        for folder, marker in GROUPS.items():
            if folder in Path(item.path).resolve().parents:
                item.add_marker(getattr(pytest.mark, marker))

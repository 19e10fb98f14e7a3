"""Fixtures shared by the ROS tests: ``ros_env`` (loopback discovery, random domain, temp logs)."""
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- re-exported as a fixture

"""``lingbot-ros-view``'s console entry point: :func:`lingbot_ros.tools.view.cli.main`, given
the ROS subscriber of ``--ros`` (:mod:`.view_ros`, imported only then: a run's folder is
shown without ROS)."""
from __future__ import annotations

import sys

from ..tools.view.cli import main as view_main


def _ros_source(model, args):
    from .view_ros import RosViewSource  # rclpy: only for --ros
    return RosViewSource.from_args(model, args)


def main(argv=None) -> int:
    return view_main(argv, ros_source=_ros_source)


if __name__ == "__main__":
    sys.exit(main())

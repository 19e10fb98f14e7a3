"""Console entry points, by room: ``offline/`` (lingbot-ros-offline), ``sources/`` (where
frames come from), ``metrics/`` and ``eval/`` (how good), ``bench/`` (how fast), ``synthetic/``,
``replay/`` (bags onto ROS 2); the parity check and the checkpoint converter."""

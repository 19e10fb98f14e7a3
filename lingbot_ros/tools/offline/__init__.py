"""lingbot-ros-offline: the runner, its outputs, its --scale arguments, its snapshots, and the
offline demo."""

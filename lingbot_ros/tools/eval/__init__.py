"""lingbot-ros-eval: sequences x keyframe policies in one table, and the Ray fleet that runs
them on a cluster."""

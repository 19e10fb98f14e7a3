"""The back end's room in the node: the loop-closure back end (lingbot_ros/loop/) on its own
thread, and what its corrections change in the node's outputs (docs/node.md "Loop closure")."""

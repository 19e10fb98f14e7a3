"""The ROS 2 node; with ``clients/`` and ``tools/replay/``, the only code that imports rclpy and ROS
message packages.

- ``node``: the lifecycle node (``LingbotNode``); ``main``: the ``lingbot_ros_node`` entry
  point (``python -m lingbot_ros.ros.node`` runs it too); ``services``: the services, on
  narrow reads.
- ``params/``: every parameter, one row each (``table``), declared and checked
  (``declare``), built into ``NodeConfig`` (``node_config``); the image topic (``topics``).
- ``intake/``: the image subscription, conversion (``convert``), the queue, the worker thread
  (``worker``: queue -> session -> outputs, built without a node), ``StreamControl`` and the
  scale source's inputs.
- ``outputs/``: what leaves per frame (pose, odometry, TF, depth, points, ~/path, the map,
  ~/scale).
- ``tf/``: REP-105 frame algebra and our TF buffer (tree, listener, frame chain, robot frames).
- ``status/``: ~/status, ~/cache_info, /diagnostics, health, the telemetry counters, the
  worker's ``NodeFacts``, the collector's pauses.
- ``lifecycle/``: configure's heavy part on a background thread, stream snapshots, the file
  policy (files.root).

Interfaces of the node come from the companion package ``lingbot_ros_interfaces`` (built by
``scripts/setup_ros.sh`` or colcon; see docs/ros.md). Submodules are imported explicitly, so
``import lingbot_ros.ros`` alone loads no ROS package.
"""

"""``lingbot-ros-view``: the map, the trajectories, the camera and the counters in a browser
(docs/viewer.md). :mod:`.scene` (the scene, pure numpy, bounded), :mod:`.run_dir` (a finished
run's folder), :mod:`.live` (a stream handed over as it runs: ``lingbot-ros-offline --view``,
the ROS subscriber in ``lingbot_ros/clients/view_ros.py``), :mod:`.server` (viser, the
optional extra, imported there only), :mod:`.cli` (the command)."""

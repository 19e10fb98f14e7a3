"""The back end beside the stream: loop closure and stored place maps (docs/loop.md).

The streaming front end (session/) forgets: its window keeps 64 frames and a rollover
aligns a new segment to the last by Sim(3), so drift is never corrected. This package keeps
what the window forgets and corrects it, for the node and the offline runner alike:

* ``config.py``: ``LoopConfig``, the back end's settings (``loop.*`` parameters);
* ``place_db.py``: the keyframe database: per kept keyframe its stamp, stream pose,
  segment, a global place descriptor from the model's own features, a compact image and a
  downsampled depth; spatial thinning; top-k retrieval that skips recent keyframes;
* ``pose_graph.py``: the pose graph over keyframes (GTSAM): the front end's relative
  motions, rollover alignments and accepted loops (robust kernel), optimised incrementally;
  ``graph_types.py``: its inputs and results (numpy);
* ``synthetic.py``: a room-sized loop with injected drift, for the tests and benchmarks.

Numpy and GTSAM only; nothing here imports torch, the session's internals or ROS. GTSAM is
imported by ``pose_graph.py`` alone, at its top: this package imports it nowhere, so
``import lingbot_ros.loop`` works without GTSAM; import ``lingbot_ros.loop.pose_graph``
where the graph is used.
"""

"""The back end beside the stream: loop closure and stored place maps (docs/loop.md).

The streaming front end (session/) forgets: its window keeps 64 frames and a rollover
aligns a new segment to the last by Sim(3), so drift is never corrected. This package keeps
what the window forgets and corrects it, for the node and the offline runner alike:

* ``config.py``: ``LoopConfig``, the back end's settings (``loop.*`` parameters);
* ``place_descriptor.py``: a frame's global place descriptor from the model's own patch
  features (per-patch L2, signed GeM p = 3, a fixed orthonormal projection to 256);
* ``place_db.py``: ``PlaceDatabase``, the keyframe database: per kept keyframe its stamp,
  stream pose, segment, descriptor, a compact image and a downsampled depth (checked and
  compacted by ``place_inputs.py``); spatial thinning; top-k retrieval that skips recent
  and excluded keyframes; snapshots (their format and checks: ``place_db_state.py``);
* ``pose_graph.py``: the pose graph over keyframes (GTSAM): the front end's relative
  motions, rollover alignments and accepted loops (robust kernel), optimised incrementally;
  ``graph_types.py``: its inputs and results (numpy); ``graph_state.py``: its state (the
  snapshot's format and checks) and the rebuild when GTSAM fails (numpy);
* ``verify.py``: verification of a candidate: the pair's outputs tied to the map's scale,
  a Sim(3) loop measurement and its gates; ``confirm.py``: the confirmation of two
  (``LoopConfirmation``); ``pair_runner.py``: the model on the pair, a fresh two-frame
  session that the caller makes (loop/ imports neither the session nor torch);
* ``place_map.py``: ``PlaceMap``, a stored place map (the keyframes at their optimised poses,
  in metres once the scale is locked) and its folder format (``map_folder.py``: our marker,
  the manifest's and each file's SHA-256, the atomic replace of our own folder only);
* ``relocalize.py``: ``Relocalizer``, a stream's keyframes against a stored map: retrieval,
  verification, two that agree -> ``map -> odom`` in the map's frame;
* ``synthetic.py``: a room-sized loop with injected drift, for the tests and benchmarks;
* ``backend.py``: ``LoopBackend``, the one object the node and the offline runner drive
  (a keyframe in: retrieval, verification, confirmation, the graph; ``map -> odom`` out),
  over the contracts of ``backend_types.py``; its snapshot's own part in
  ``backend_state.py``. It imports ``pose_graph`` when a back end is made.

Numpy and GTSAM only; nothing here imports torch, the session's internals or ROS. GTSAM is
imported by ``pose_graph.py`` alone, at its top: this package imports it nowhere, so
``import lingbot_ros.loop`` works without GTSAM; import ``lingbot_ros.loop.pose_graph``
where the graph is used.
"""

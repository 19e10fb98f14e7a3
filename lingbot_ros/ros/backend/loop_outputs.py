"""LoopOutputs: what an accepted loop changes in the node's outputs, on the back end's thread.

``BackendThread`` calls ``on_loops`` after a keyframe whose step accepted loops (with the
back end, the keyframe's chain and the keyframes' stamps):

* each ``LoopEvent`` goes out on ``~/loop_closures`` (``lingbot_ros_interfaces/LoopClosure``,
  in the map frame; its correction as map -> odom in the node's frames);
* ``~/path`` is rewritten: the keyframes' optimised poses, then the frames published after
  the newest of them as they were (``PathPublisher.rewrite``);
* the voxel map (``publish.map_points``) is rebuilt from the stored keyframe depths in the
  optimised poses, bounded as the running map (``map.voxel_size``, ``map.max_points``), and
  swapped in whole (``MapPoints.replace``).

The path and the map have their own locks (the worker appends to them meanwhile); the heavy
part (unprojecting, voxelising) runs here, off the camera's path. ``/tf`` is not touched here:
the worker publishes the new map -> odom with its next frame (``BackendFacts.correction``).
"""
from __future__ import annotations

from ...loop.backend_types import LoopEvent
from ..outputs.messages import ns_to_stamp, transform
from ..tf.frame_chain import FrameChain
from .corrections import corrected_path, odom_correction, rebuild_map

__all__ = ["LoopOutputs", "loop_closure_msg"]


def loop_closure_msg(event: LoopEvent, chain: FrameChain, map_frame: str, odom_frame: str):
    """``LoopClosure`` of one accepted loop; its correction is map -> odom in the node's
    frames (``odom_correction``), as /tf carries it from the next frame on."""
    from lingbot_ros_interfaces.msg import LoopClosure
    stamp = ns_to_stamp(int(event.stamp_ns))
    msg = LoopClosure()
    msg.header.stamp, msg.header.frame_id = stamp, map_frame
    msg.keyframe_id, msg.keyframe_stamp = int(event.keyframe_id), stamp
    msg.matched_id = int(event.matched_id)
    msg.matched_stamp = ns_to_stamp(int(event.matched_stamp_ns))
    M = odom_correction(chain, event.correction)
    msg.correction = transform(M, stamp, map_frame, odom_frame).transform
    msg.jump_m, msg.jump_deg = float(event.jump_m), float(event.jump_deg)
    msg.residual_m, msg.residual_deg = float(event.residual_m), float(event.residual_deg)
    msg.inlier_fraction = float(event.inlier_fraction)
    msg.relative_scale = float(event.relative_scale)
    return msg


class LoopOutputs:
    def __init__(self, node, config, outputs) -> None:
        """``config``: the ``NodeConfig``; ``outputs``: the node's ``Outputs`` (its path and
        map are rewritten here, under their own locks)."""
        from lingbot_ros_interfaces.msg import LoopClosure
        self._node = node
        self._config = config
        self._outputs = outputs
        self.publisher = node.create_publisher(LoopClosure, "~/loop_closures", 10)
        self.num_published = 0
        self.num_rebuilds = 0

    def on_loops(self, events: tuple, backend, chain: FrameChain, stamps: dict) -> None:
        """The back end's thread: publish the loops, then rewrite ~/path and the map."""
        cfg = self._config
        for event in events:
            self.publisher.publish(loop_closure_msg(event, chain, cfg.map_frame,
                                                    cfg.odom_frame))
            self.num_published += 1
        poses = corrected_path(chain, backend.keyframe_poses(), stamps)
        self._outputs.path.rewrite(poses)
        points = self._outputs.map
        if points is not None:
            rebuilt = rebuild_map(backend.keyframe_depths(), chain, cfg.map_voxel_size,
                                  cfg.map_max_points)
            points.replace(rebuilt)
        self.num_rebuilds += 1

    def destroy(self) -> None:
        self._node.destroy_publisher(self.publisher)

"""The back end's correction in the node's frames, and what an accepted loop rebuilds.

Numpy only (no rclpy, no messages), so the unit tests run without ROS.

The back end (``LoopBackend``) works in the front end's world, the first camera's optical
frame, in the units of the poses it was given: the node hands it metres once a scale source
LOCKED (``metric_keyframe``), model units with ``scale.source: none``; so its correction is
already in the outputs' units and is never scaled here. ``C = T_map_odom`` there maps the
front end's poses to the optimised ones: ``T_map_cam = C @ c2w``. The node's frames are the
chain's (ros/tf/frame_chain.py): ``T_odom_base = bo @ c2w @ bo^-1`` (``bo``: the optical frame
in the base), so

    T_map_base = bo @ C @ c2w @ bo^-1 = (bo @ C @ bo^-1) @ T_odom_base

and REP-105's map -> odom is ``M = bo @ C @ bo^-1`` (``odom_correction``), a rigid transform
in metres at the boundary; odom -> base is left as it was.
"""
from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

import numpy as np

from ...geometry import VoxelMap, as_transforms, frame_points, rigid_inverse
from ...scale import c2w_to_metres, depth_to_metres
from ..tf.frame_chain import FrameChain

__all__ = ["odom_correction", "corrected_path", "rebuild_map", "metric_result", "KeyframeDepth",
           "frame_correction"]

KeyframeDepth = tuple  # (id, T_map_cam (4, 4), depth (h, w) float32, K (3, 3), stride)
REBUILD_GREY = 200  # the rebuilt map's colour: the stored depths carry no colour


def odom_correction(chain: FrameChain, C: np.ndarray) -> np.ndarray:
    """(4, 4) map -> odom in the node's frames from the back end's ``C`` (T_map_odom in the
    front end's world, the outputs' units): ``bo @ C @ bo^-1``. ValueError unless ``C`` is a
    finite (4, 4) transform."""
    C = as_transforms(C, "correction")
    if C.shape != (4, 4) or not np.isfinite(C).all():
        raise ValueError(f"correction must be one finite (4, 4) transform, got {C.shape}")
    bo = chain.T_base_optical
    return bo @ C @ rigid_inverse(bo)


def frame_correction(backend, chain: FrameChain) -> tuple[dict, str]:
    """What a frame's outputs take from the back end (``BackendThread``, None: loop.enable
    off): ``Outputs.publish``'s keywords (``map_to_odom``; ``hold_map_to_odom`` while a
    stored map's localization is awaited) and ~/status's note then ("" otherwise)."""
    if backend is None:
        return {}, ""
    facts = backend.facts()
    kw = {"map_to_odom": odom_correction(chain, facts.correction)}
    localization = facts.localization
    if not localization.hold_map_to_odom:
        return kw, ""
    return dict(kw, hold_map_to_odom=True), localization.status_note()


def corrected_path(chain: FrameChain, poses: dict, stamps: dict
                   ) -> list[tuple[int, np.ndarray]]:
    """The keyframes' optimised poses as ~/path poses: ``[(stamp_ns, T_map_tracked)]`` in
    stamp order. ``poses``: id -> (4, 4) T_map_cam (``LoopBackend.keyframe_poses()``);
    ``stamps``: id -> stamp ns (a keyframe without a stamp is skipped)."""
    out = []
    for kf_id, T in poses.items():
        stamp = stamps.get(kf_id)
        if stamp is not None:
            out.append((int(stamp), chain.tracked_in_map(np.asarray(T, float))))
    out.sort(key=lambda p: p[0])
    return out


@dataclasses.dataclass(frozen=True)
class _StoredDepth:
    """A stored keyframe depth as ``frame_points`` reads a frame (``DepthFrame``)."""

    depth: np.ndarray  # (h, w): every ``stride``-th model pixel
    depth_conf: np.ndarray
    rgb: Optional[np.ndarray]
    K_model: np.ndarray  # (3, 3) at the (h, w) grid
    c2w: np.ndarray


def rebuild_map(depths: Iterable[KeyframeDepth], chain: FrameChain, voxel_size: float,
                max_points: int) -> VoxelMap:
    """A new voxel map (bounded as the node's: ``voxel_size``, ``max_points``) from the
    stored keyframe depths in their optimised poses (``LoopBackend.keyframe_depths()``).
    A stored depth is ``depth[::stride, ::stride]`` of a model-resolution one, so its
    intrinsics are K with fx, fy, cx, cy divided by ``stride``: pixel u' is model pixel
    ``stride * u'``. Points are grey (``REBUILD_GREY``): the stored depth has no colour."""
    out = VoxelMap(voxel_size, max_points)
    for _, T_map_cam, depth, K, stride in depths:
        depth = np.asarray(depth, np.float32)  # (h, w) float16 stored -> float32
        K_grid = np.diag([1.0 / stride, 1.0 / stride, 1.0]) @ np.asarray(K, float)
        frame = _StoredDepth(depth, np.ones_like(depth), None, K_grid,
                             np.asarray(T_map_cam, float))
        xyz, rgb = frame_points(frame, stride=1, min_conf=0.0)
        if len(xyz):
            out.add(chain.points_in_map(xyz), np.full_like(rgb, REBUILD_GREY))
    return out


def metric_result(result, metres_per_unit: Optional[float]):
    """The frame as the back end takes it: with a LOCKED scale (``metres_per_unit``), its
    pose's translation and its depth in metres (the back end then works in metres, and its
    correction comes out in the outputs' units); None: as it is (model units)."""
    if metres_per_unit is None:
        return result
    depth = result.depth
    return dataclasses.replace(
        result, c2w=c2w_to_metres(result.c2w, metres_per_unit),
        depth=depth_to_metres(depth, metres_per_unit) if depth is not None else None)

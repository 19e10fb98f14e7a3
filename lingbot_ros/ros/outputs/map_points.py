"""~/map_points: keyframe points accumulated into a bounded voxel map, and ~/save_map's data.

The worker adds a keyframe's points at most ``map.rate_hz`` times a second (consecutive
keyframes overlap: the next one adds what is new); the node's executor publishes the map at
the same rate when it changed, so building a large cloud message never delays a pose. The
map is transient local (depth 1): a late RViz gets the last one. Memory stays under
``map.max_points`` points: the voxel map coarsens (its voxel edge doubles) instead of
forgetting places. Points come in the outputs' units (metres once a scale source has
locked; docs/scale.md), so the voxel edge is in those units too. The map owns its units: each
``add`` brings the scale snapshot its points are in, set under the same lock as the points,
so ~/save_map's header always states the units of the points it writes.
"""
from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from rclpy.clock import Clock, ClockType
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import PointCloud2

from ...geometry import VoxelMap, write_ply
from ...scale import ScaleEstimate
from .messages import point_cloud


class MapPoints:
    def __init__(self, node, frame_id: str, voxel_size: float, max_points: int,
                 rate_hz: float) -> None:
        self._node = node
        self._frame_id = frame_id
        self._period = 1.0 / rate_hz
        self._lock = threading.Lock()  # the worker adds, the executor publishes and saves
        self._map = VoxelMap(voxel_size, max_points)
        self._changed = False
        self._last_add = -math.inf  # time.monotonic() of the last add
        self._stamp = None  # the stamp of the last keyframe added
        self._units: Optional[ScaleEstimate] = None  # the scale of the last points added
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._pub = node.create_publisher(PointCloud2, "~/map_points", latched)
        # Steady clock: a paused /clock (use_sim_time) must not hold the map back.
        self._timer = node.create_timer(self._period, self._publish_if_changed,
                                        clock=Clock(clock_type=ClockType.STEADY_TIME))

    def due(self) -> bool:
        """Whether the next keyframe's points should be added (checked before computing them)."""
        return time.monotonic() - self._last_add >= self._period

    def add(self, xyz: np.ndarray, rgb: np.ndarray, stamp,
            units: Optional[ScaleEstimate] = None) -> None:
        """Points (N, 3) in the map frame with their colours, in the units of ``units`` (the
        frame's scale snapshot; None: model units); worker thread."""
        with self._lock:
            self._map.add(xyz, rgb)
            self._units = units
            self._changed = True
            self._last_add = time.monotonic()
            self._stamp = stamp

    def clear(self) -> None:
        """Forget the map (reset) and its units, and publish it empty at once."""
        with self._lock:
            self._map.clear()
            self._units = None
            self._changed = True
            self._last_add = -math.inf
        self._publish_if_changed()

    def save(self, path: Path, header: Callable[[Optional[ScaleEstimate]], list]
             ) -> tuple[int, Optional[ScaleEstimate]]:
        """Write the map as PLY (atomically); (the number of points written, their units).
        ``header(units)``: the header lines (units, scale source and value) of the points'
        units, taken with the points under one lock."""
        with self._lock:
            xyz, rgb = self._map.arrays()
            xyz, rgb, units = xyz.copy(), rgb.copy(), self._units
        write_ply(path, xyz, rgb, comments=header(units))
        return len(xyz), units

    def replace(self, rebuilt: VoxelMap) -> None:
        """Swap in a map rebuilt elsewhere (a loop's corrected keyframes, in the units of the
        points it replaces); published at the next period. Any thread."""
        with self._lock:
            self._map = rebuilt
            self._changed = True

    def units(self) -> Optional[ScaleEstimate]:
        """The scale snapshot of the map's last points (None: model units, or empty)."""
        with self._lock:
            return self._units

    def state_dict(self) -> dict:
        """The voxel map as plain data (a stream snapshot's part)."""
        with self._lock:
            return self._map.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Hold the map of a restored snapshot; published at the next period."""
        with self._lock:
            self._map.load_state_dict(state)
            self._changed = True

    def snapshot(self) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            xyz, rgb = self._map.arrays()
            return xyz.copy(), rgb.copy()

    def info(self) -> dict:
        with self._lock:
            return {"map_points": self._map.num_points,
                    "map_voxel_size": self._map.voxel_size,
                    "map_coarsenings": self._map.coarsenings,
                    "map_bytes": self._map.nbytes}

    def destroy(self) -> None:
        self._node.destroy_timer(self._timer)
        self._node.destroy_publisher(self._pub)

    def _publish_if_changed(self) -> None:
        with self._lock:
            if not self._changed:
                return
            self._changed = False
            xyz, rgb = self._map.arrays()
            xyz, rgb = xyz.copy(), rgb.copy()
            stamp = self._stamp
        if stamp is None or not len(xyz):
            stamp = self._node.get_clock().now().to_msg()
        self._pub.publish(point_cloud(xyz, rgb, stamp, self._frame_id))

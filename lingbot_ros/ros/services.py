"""The node's services: ~/reset, ~/get_cache_info, ~/save_trajectory."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from lingbot_ros_interfaces.msg import CacheInfo
from lingbot_ros_interfaces.srv import GetCacheInfo, SaveTrajectory
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from std_srvs.srv import Trigger

from ..session import write_tum
from .messages import cache_info, camera_in_map


class Services:
    def __init__(self, node) -> None:
        self._node = node
        group = MutuallyExclusiveCallbackGroup()  # never blocked by the image intake
        self._services = [
            node.create_service(Trigger, "~/reset", self._reset, callback_group=group),
            node.create_service(GetCacheInfo, "~/get_cache_info", self._cache_info,
                                callback_group=group),
            node.create_service(SaveTrajectory, "~/save_trajectory", self._save,
                                callback_group=group)]

    def destroy(self) -> None:
        for srv in self._services:
            self._node.destroy_service(srv)
        self._services = []

    def _reset(self, request, response):
        node = self._node
        message = node.reset_stream()
        if message is None:
            response.success, response.message = False, "not configured: nothing to reset"
            return response
        response.message = message
        response.success = True
        node.get_logger().info(response.message)
        return response

    def _cache_info(self, request, response):
        snapshot = self._node.info_snapshot
        stamp = self._node.get_clock().now().to_msg()
        if snapshot is None:
            response.success, response.message = False, "not configured: no cache"
            return response
        if snapshot["cache"] is None:  # configured, no frame yet: the cache is sized then
            response.success = True
            response.info = CacheInfo(stamp=stamp, max_special_frames=-1)
            response.message = "no frame received yet: the cache is allocated on the first one"
            return response
        response.info = cache_info(CacheInfo, snapshot["cache"], stamp)
        response.success = True
        c = snapshot["cache"]
        response.message = (f"{c['frames_cached']} frames cached, {c['special_frames']} with "
                            f"specials, {c['bytes_used'] / 2**20:.1f} of "
                            f"{c['bytes_reserved'] / 2**20:.1f} MiB")
        return response

    def _save(self, request, response):
        node = self._node
        session, settings = node.session, node.settings  # a cleanup may run meanwhile
        if session is None:
            response.success, response.message = False, "not configured: no trajectory"
            return response
        if not request.path:
            response.success, response.message = False, "cannot write '': no path given"
            return response
        # Relative paths are the node's working directory's; the answer names the absolute
        # path written, its folder resolved (the file itself is never followed: write_tum
        # refuses a target that is not a regular file, a symlink included).
        given = Path(request.path).expanduser()
        if given.name in ("", ".."):
            response.success = False
            response.message = (f"cannot write {request.path!r} "
                                f"({Path(os.path.abspath(given))}): it names a folder")
            return response
        if not given.parent.is_dir():
            response.success = False
            response.message = (f"cannot write {request.path!r} "
                                f"({Path(os.path.abspath(given))}): its folder does not exist")
            return response
        path = given.parent.resolve() / given.name
        stamps, poses = session.trajectory.snapshot()
        optical = settings.node.camera_is_optical
        in_map = np.array([camera_in_map(p, optical) for p in poses]).reshape(-1, 4, 4)
        try:
            write_tum(path, stamps, in_map)
        except (OSError, ValueError) as exc:  # ValueError: non-finite poses
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            response.success, response.message = False, f"cannot write {path}: {reason}"
            return response
        response.success, response.num_poses = True, len(stamps)
        response.message = f"wrote {len(stamps)} poses (map frame, TUM) to {path}"
        return response

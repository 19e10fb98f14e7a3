"""The node's services: ~/reset, ~/pause, ~/get_cache_info, ~/save_trajectory, ~/save_map,
~/save_session, ~/load_session."""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from lingbot_ros_interfaces.msg import CacheInfo
from lingbot_ros_interfaces.srv import (GetCacheInfo, LoadSession, SaveMap, SaveSession,
                                       SaveTrajectory)
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from std_srvs.srv import SetBool, Trigger

from ..geometry import write_tum
from .frames import FrameChain
from .messages import cache_info
from .robot_frames import DEFAULT_CAMERA_FRAME
from .session_snapshot import wait_done
from .stream_scale import units_header


class Services:
    def __init__(self, node) -> None:
        self._node = node
        group = MutuallyExclusiveCallbackGroup()  # never blocked by the image intake
        self._services = [
            node.create_service(Trigger, "~/reset", self._reset, callback_group=group),
            node.create_service(GetCacheInfo, "~/get_cache_info", self._cache_info,
                                callback_group=group),
            node.create_service(SaveTrajectory, "~/save_trajectory", self._save,
                                callback_group=group),
            node.create_service(SetBool, "~/pause", self._pause, callback_group=group),
            node.create_service(SaveMap, "~/save_map", self._save_map, callback_group=group),
            # its own group: a save being written (awaited) holds up no other service
            node.create_service(SaveSession, "~/save_session", self._save_session,
                                callback_group=MutuallyExclusiveCallbackGroup()),
            node.create_service(LoadSession, "~/load_session", self._load_session,
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
        snapshot = self._node.telemetry.session_info()
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

    def _pause(self, request, response):
        node = self._node
        if node.session is None:
            response.success, response.message = False, "not configured: nothing to pause"
            return response
        response.message = node.set_paused(bool(request.data))
        response.success = True
        node.get_logger().info(f"~/pause {request.data}: {response.message}")
        return response

    def _save(self, request, response):
        node = self._node
        session, settings = node.session, node.settings  # a cleanup may run meanwhile
        path = _target(session, "no trajectory", request.path, response)
        if path is None:
            return response
        stamps, poses = session.trajectory.snapshot()
        frames = node.robot_frames
        chain = frames.chain if frames is not None else None
        if chain is None:  # no pose published yet (so none to write): any chain will do
            chain = FrameChain.camera_only(DEFAULT_CAMERA_FRAME, True)
        scale = node.scale_estimate()  # the units of ~/pose: metres once the scale locked
        k = scale.output_factor if scale is not None else None
        in_map = np.array([chain.tracked_in_map(p, k) for p in poses]).reshape(-1, 4, 4)
        try:
            write_tum(path, stamps, in_map, frame=(
                f"{chain.tracked_frame} in {settings.node.map_frame} (REP-105, as ~/pose)"),
                header=units_header(scale))
        except (OSError, ValueError) as exc:  # ValueError: non-finite poses
            response.success, response.message = False, f"cannot write {path}: {_reason(exc)}"
            return response
        response.success, response.num_poses = True, len(stamps)
        response.message = (f"wrote {len(stamps)} poses of {chain.tracked_frame} in "
                            f"{settings.node.map_frame} (TUM, {'m' if k else 'model units'}) "
                            f"to {path}")
        return response

    def _save_map(self, request, response):
        node = self._node
        path = _target(node.session, "no map", request.path, response)
        if path is None:
            return response
        try:
            count = node.save_map(path)
        except (OSError, ValueError) as exc:
            response.success, response.message = False, f"cannot write {path}: {_reason(exc)}"
            return response
        if count is None:
            response.success = False
            response.message = "no map: set publish.map_points to true (and reconfigure)"
            return response
        response.success, response.num_points = True, count
        response.message = (f"wrote {count} points ({node.settings.node.map_frame} frame, PLY, "
                            f"{node.map_units()}) to {path}")
        return response


    async def _save_session(self, request, response):
        """~/save_session: the stream's snapshot (a directory), path rules as for
        ~/save_trajectory; the answer comes once it is on disk. A coroutine: the executor
        runs images, timers and the other services while the files are written
        (session_snapshot.wait_done); a second save waits for the first (its own group)."""
        node = self._node
        path = _target(node.session, "no stream", request.path, response)
        if path is None:
            return response
        job = node.save_session(path)
        ok, message, nbytes, frames = await wait_done(job, node.executor)
        response.success, response.message = ok, message
        response.bytes, response.frames = int(nbytes), int(frames)
        if ok:  # one severity per call site (rclpy refuses a change between calls)
            node.get_logger().info(f"~/save_session: {message}")
        else:
            node.get_logger().error(f"~/save_session: {message}")
        return response

    def _load_session(self, request, response):
        node = self._node
        if node.session is None:
            response.success, response.message = False, "not configured: no stream to replace"
            return response
        if not request.path:
            response.success, response.message = False, "no path given"
            return response
        path = Path(request.path).expanduser()
        ok, message, frames = node.load_session(path)
        response.success, response.message, response.frames = ok, message, int(frames)
        if ok:  # one severity per call site (rclpy refuses a change between calls)
            node.get_logger().info(f"~/load_session: {message}")
        else:
            node.get_logger().warning(f"~/load_session: {message}")
        return response


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _target(session, nothing: str, given_path: str, response) -> Path | None:
    """The absolute file a save request names, or None with ``response`` saying why (also
    when there is no ``session``: unconfigured, ``nothing`` to save).

    Relative paths are the node's working directory's; the answer names the absolute path
    written, its folder resolved (the file itself is never followed: the writers refuse a
    target that is not a regular file, a symlink included)."""
    if session is None:
        response.success, response.message = False, f"not configured: {nothing}"
        return None
    if not given_path:
        response.success, response.message = False, "cannot write '': no path given"
        return None
    given = Path(given_path).expanduser()
    if given.name in ("", ".."):
        response.success = False
        response.message = (f"cannot write {given_path!r} "
                            f"({Path(os.path.abspath(given))}): it names a folder")
        return None
    if not given.parent.is_dir():
        response.success = False
        response.message = (f"cannot write {given_path!r} "
                            f"({Path(os.path.abspath(given))}): its folder does not exist")
        return None
    return given.parent.resolve() / given.name

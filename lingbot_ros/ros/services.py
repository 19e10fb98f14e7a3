"""The node's services: ~/reset, ~/pause, ~/get_cache_info, ~/save_trajectory, ~/save_map,
~/save_session, ~/load_session."""
from __future__ import annotations

import inspect
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
from .node_files import write_target
from .robot_frames import DEFAULT_CAMERA_FRAME
from .session_snapshot import wait_done
from .stream_scale import units_header


class Services:
    """The handlers answer every request: a failure of any kind (an I/O error, a bad path,
    a bug) is ``success: false`` with the reason, never an exception in the executor (which
    would end the node)."""

    def __init__(self, node) -> None:
        self._node = node
        group = MutuallyExclusiveCallbackGroup()  # never blocked by the image intake
        self._services = [
            node.create_service(srv_type, name, self._answered(name, handler),
                                callback_group=own_group or group)
            for srv_type, name, handler, own_group in (
                (Trigger, "~/reset", self._reset, None),
                (GetCacheInfo, "~/get_cache_info", self._cache_info, None),
                (SaveTrajectory, "~/save_trajectory", self._save, None),
                (SetBool, "~/pause", self._pause, None),
                (SaveMap, "~/save_map", self._save_map, None),
                # its own group: a save being written (awaited) holds up no other service
                (SaveSession, "~/save_session", self._save_session,
                 MutuallyExclusiveCallbackGroup()),
                (LoadSession, "~/load_session", self._load_session, None))]

    def _answered(self, name: str, handler):
        """``handler`` that answers ``success: false`` with the reason for any exception (a
        coroutine handler stays one: rclpy's executor awaits it)."""
        if inspect.iscoroutinefunction(handler):
            async def answer_async(request, response):
                try:
                    return await handler(request, response)
                except Exception as exc:  # noqa: BLE001 -- answered, the node stays up
                    return self._failed(name, response, exc)
            return answer_async

        def answer(request, response):
            try:
                return handler(request, response)
            except Exception as exc:  # noqa: BLE001 -- answered, the node stays up
                return self._failed(name, response, exc)
        return answer

    def _failed(self, name: str, response, exc: Exception):
        reason = _reason(exc)
        filename = getattr(exc, "filename", None)
        if filename is not None and str(filename) not in reason:
            reason = f"{reason}: {filename}"
        response.success = False
        response.message = f"failed: {type(exc).__name__}: {reason}"
        self._node.get_logger().error(f"{name}: {response.message}")  # one severity here
        return response

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
        path = _target(node, session, "no trajectory", request.path, response)
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
        path = _target(node, node.session, "no map", request.path, response)
        if path is None:
            return response
        try:
            saved = node.save_map(path)
        except (OSError, ValueError) as exc:
            response.success, response.message = False, f"cannot write {path}: {_reason(exc)}"
            return response
        if saved is None:
            response.success = False
            response.message = "no map: set publish.map_points to true (and reconfigure)"
            return response
        count, units = saved  # the units the header states: those of the points written
        metres = units is not None and units.output_factor is not None
        response.success, response.num_points = True, count
        response.message = (f"wrote {count} points ({node.settings.node.map_frame} frame, PLY, "
                            f"{'m' if metres else 'model units'}) to {path}")
        return response


    async def _save_session(self, request, response):
        """~/save_session: the stream's snapshot (a directory), path rules as for
        ~/save_trajectory; the answer comes once it is on disk. A coroutine: the executor
        runs images, timers and the other services while the files are written
        (session_snapshot.wait_done); a second save waits for the first (its own group)."""
        node = self._node
        path = _target(node, node.session, "no stream", request.path, response)
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
        try:  # confined to files.root, every link followed (a folder is read, never written)
            path = node.files.resolve(request.path)
        except OSError as exc:
            response.success = False
            response.message = f"not loaded (the stream is unchanged): {_reason(exc)}"
            node.get_logger().warning(f"~/load_session: {response.message}")
            return response
        ok, message, frames = node.load_session(path)
        response.success, response.message, response.frames = ok, message, int(frames)
        if ok:  # one severity per call site (rclpy refuses a change between calls)
            node.get_logger().info(f"~/load_session: {message}")
        else:
            node.get_logger().warning(f"~/load_session: {message}")
        return response


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _target(node, session, nothing: str, given_path: str, response) -> Path | None:
    """The absolute file a save request names, or None with ``response`` saying why (also
    when there is no ``session``: unconfigured, ``nothing`` to save).

    The path is confined to ``files.root`` (relative paths are the root's; ``..``, absolute
    paths and symlinks leading outside are refused); the answer names the absolute path
    written, its folder resolved. The file itself is never followed: the writers refuse a
    target that is not a regular file (a symlink included) or one they did not write."""
    if session is None:
        response.success, response.message = False, f"not configured: {nothing}"
        return None
    try:
        return write_target(node.files, given_path)
    except OSError as exc:  # FileRefused, a missing folder, EACCES, ELOOP...
        response.success = False
        shown = given_path if len(given_path) <= 200 else given_path[:200] + "..."
        response.message = f"cannot write {shown!r}: {_reason(exc)}"
        return None

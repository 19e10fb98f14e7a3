"""The node's services: ~/reset, ~/pause, ~/get_cache_info, ~/save_trajectory, ~/save_map,
~/save_session, ~/load_session; ~/load_map and ~/localize_in_map (and ~/save_map's place
map) through ``MapHandlers`` (ros/backend/map_services.py).

The handlers get ``ServiceCalls``, not the node: the node's actions (reset, pause, saves,
load) and its reads (the configured stream's ``StreamView``, the session's info, the
worker's latest ``NodeFacts``), each a function."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
from lingbot_ros_interfaces.msg import CacheInfo
from lingbot_ros_interfaces.srv import (GetCacheInfo, LoadMap, LoadSession, LocalizeInMap,
                                       SaveMap, SaveSession, SaveTrajectory)
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from std_srvs.srv import SetBool, Trigger

from ..geometry import write_tum
from ..scale import units_header
from .backend.map_services import MapHandlers
from .lifecycle.file_policy import write_target
from .lifecycle.snapshot_handlers import wait_done
from .outputs.messages import cache_info
from .status.node_facts import NodeFacts
from .tf.frame_chain import FrameChain
from .tf.robot_frames import DEFAULT_CAMERA_FRAME


@dataclass(frozen=True)
class StreamView:
    """The configured stream, as the services read it at one request."""

    trajectory: Any  # the session's Trajectory (its snapshot() is locked)
    map_frame: str
    files: Any  # the FileRoot every caller's path is confined to
    scale: Any  # the ScaleEstimate ~/pose is in (None: no scale)


@dataclass(frozen=True)
class ServiceCalls:
    """What the services call and read (the node provides each)."""

    stream: Callable[[], Optional[StreamView]]  # None: unconfigured
    reset: Callable[[], Optional[str]]
    pause: Callable[[bool], str]
    save_map: Callable[[Path], Optional[tuple]]  # (points, their ScaleEstimate); None: no map
    save_session: Callable[[Path], Any]  # a SnapshotJob
    load_session: Callable[[Path], tuple[bool, str, int]]
    session_info: Callable[[], Optional[Any]]  # NodeTelemetry.session_info
    facts: Callable[[], Optional[NodeFacts]]  # the worker's latest
    maps: Callable[[], Optional[Any]] = lambda: None  # MapAccess (None: loop.enable off)


class Services:
    """The handlers answer every request: a failure of any kind (an I/O error, a bad path,
    a bug) is ``success: false`` with the reason, never an exception in the executor (which
    would end the node)."""

    def __init__(self, node, calls: ServiceCalls) -> None:
        """``node``: the rclpy node the services, the log and the clock belong to."""
        self._node = node
        self._calls = calls
        self._maps = MapHandlers(node, calls.stream, calls.maps)
        group = MutuallyExclusiveCallbackGroup()  # never blocked by the image intake
        maps = MutuallyExclusiveCallbackGroup()  # place maps: awaited on the back end's thread
        self._services = [
            node.create_service(srv_type, name, self._answered(name, handler),
                                callback_group=own_group or group)
            for srv_type, name, handler, own_group in (
                (Trigger, "~/reset", self._reset, None),
                (GetCacheInfo, "~/get_cache_info", self._cache_info, None),
                (SaveTrajectory, "~/save_trajectory", self._save, None),
                (SetBool, "~/pause", self._pause, None),
                (SaveMap, "~/save_map", self._save_map, maps),
                (LoadMap, "~/load_map", self._maps.load_map, maps),
                (LocalizeInMap, "~/localize_in_map", self._maps.localize_in_map, maps),
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
        message = self._calls.reset()
        if message is None:
            response.success, response.message = False, "not configured: nothing to reset"
            return response
        response.message = message
        response.success = True
        self._node.get_logger().info(response.message)
        return response

    def _cache_info(self, request, response):
        snapshot = self._calls.session_info()
        stamp = self._node.get_clock().now().to_msg()
        if snapshot is None:
            response.success, response.message = False, "not configured: no cache"
            return response
        c = snapshot.stream.cache
        if c is None:  # configured, no frame yet: the cache is sized then
            response.success = True
            response.info = CacheInfo(stamp=stamp, max_special_frames=-1)
            response.message = "no frame received yet: the cache is allocated on the first one"
            return response
        response.info = cache_info(CacheInfo, c, stamp)
        response.success = True
        response.message = (f"{c.frames_cached} frames cached, {c.special_frames} with "
                            f"specials, {c.bytes_used / 2**20:.1f} of "
                            f"{c.bytes_reserved / 2**20:.1f} MiB")
        return response

    def _pause(self, request, response):
        if self._calls.stream() is None:
            response.success, response.message = False, "not configured: nothing to pause"
            return response
        response.message = self._calls.pause(bool(request.data))
        response.success = True
        self._node.get_logger().info(f"~/pause {request.data}: {response.message}")
        return response

    def _save(self, request, response):
        stream = self._calls.stream()  # one read: a cleanup may run meanwhile
        path = _target(stream, "no trajectory", request.path, response)
        if path is None:
            return response
        stamps, poses = stream.trajectory.snapshot()
        facts = self._calls.facts()
        chain = facts.frames.chain if facts is not None else None
        if chain is None:  # no pose published yet (so none to write): any chain will do
            chain = FrameChain.camera_only(DEFAULT_CAMERA_FRAME, True)
        scale = stream.scale  # the units of ~/pose: metres once the scale locked
        k = scale.output_factor if scale is not None else None
        in_map = np.array([chain.tracked_in_map(p, k) for p in poses]).reshape(-1, 4, 4)
        try:
            write_tum(path, stamps, in_map, frame=(
                f"{chain.tracked_frame} in {stream.map_frame} (REP-105, as ~/pose)"),
                header=units_header(scale))
        except (OSError, ValueError) as exc:  # ValueError: non-finite poses
            response.success, response.message = False, f"cannot write {path}: {_reason(exc)}"
            return response
        response.success, response.num_poses = True, len(stamps)
        response.message = (f"wrote {len(stamps)} poses of {chain.tracked_frame} in "
                            f"{stream.map_frame} (TUM, {'m' if k else 'model units'}) "
                            f"to {path}")
        return response

    async def _save_map(self, request, response):
        """The PLY, then with ``place_map`` the back end's place map (on its thread,
        awaited: ``MapHandlers.save_place_map``); ``path`` "" with ``place_map``: the place
        map only (no PLY: ``publish.map_points`` may be off)."""
        if request.place_map and not request.path:
            response.success, response.message = True, "no PLY (path \"\")"
        else:
            self._save_ply(request, response)
        if response.success and request.place_map:
            ok, message, keyframes = await self._maps.save_place_map(request.place_map)
            response.success, response.keyframes = ok, keyframes
            response.message = f"{response.message}; {message}"
        return response

    def _save_ply(self, request, response):
        stream = self._calls.stream()
        path = _target(stream, "no map", request.path, response)
        if path is None:
            return response
        try:
            saved = self._calls.save_map(path)
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
        response.message = (f"wrote {count} points ({stream.map_frame} frame, PLY, "
                            f"{'m' if metres else 'model units'}) to {path}")
        return response

    async def _save_session(self, request, response):
        """~/save_session: the stream's snapshot (a directory), path rules as for
        ~/save_trajectory; the answer comes once it is on disk. A coroutine: the executor
        runs images, timers and the other services while the files are written
        (snapshot_handlers.wait_done); a second save waits for the first (its own group)."""
        node = self._node
        path = _target(self._calls.stream(), "no stream", request.path, response)
        if path is None:
            return response
        job = self._calls.save_session(path)
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
        stream = self._calls.stream()
        if stream is None:
            response.success, response.message = False, "not configured: no stream to replace"
            return response
        try:  # confined to files.root, every link followed (a folder is read, never written)
            path = stream.files.resolve(request.path)
        except OSError as exc:
            response.success = False
            response.message = f"not loaded (the stream is unchanged): {_reason(exc)}"
            node.get_logger().warning(f"~/load_session: {response.message}")
            return response
        ok, message, frames = self._calls.load_session(path)
        response.success, response.message, response.frames = ok, message, int(frames)
        if ok:  # one severity per call site (rclpy refuses a change between calls)
            node.get_logger().info(f"~/load_session: {message}")
        else:
            node.get_logger().warning(f"~/load_session: {message}")
        return response


def _reason(exc: Exception) -> str:
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


def _target(stream: Optional[StreamView], nothing: str, given_path: str,
            response) -> Path | None:
    """The absolute file a save request names, or None with ``response`` saying why (also
    when there is no ``stream``: unconfigured, ``nothing`` to save).

    The path is confined to ``files.root`` (relative paths are the root's; ``..``, absolute
    paths and symlinks leading outside are refused); the answer names the absolute path
    written, its folder resolved. The file itself is never followed: the writers refuse a
    target that is not a regular file (a symlink included) or one they did not write."""
    if stream is None:
        response.success, response.message = False, f"not configured: {nothing}"
        return None
    try:
        return write_target(stream.files, given_path)
    except OSError as exc:  # FileRefused, a missing folder, EACCES, ELOOP...
        response.success = False
        shown = given_path if len(given_path) <= 200 else given_path[:200] + "..."
        response.message = f"cannot write {shown!r}: {_reason(exc)}"
        return None

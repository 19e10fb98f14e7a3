"""The place-map services: ~/save_map's ``place_map``, ~/load_map, ~/localize_in_map
(docs/node.md "Stored maps and relocalization").

Each handler checks what it can at once (configured, ``loop.enable``, a metric scale
source, the path confined to ``files.root``), then hands the work to the back end's thread
as a command (``BackendThread.save_map`` / ``load_map`` / ``localize``) and awaits its
``Reply`` (``snapshot_handlers.wait_done``: the executor goes on meanwhile, a coroutine in
a callback group of its own). The map, its ``Relocalizer`` and the localization stay that
thread's; a refused request changes nothing.
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ...geometry import quaternion_to_rotation
from ..lifecycle.file_policy import write_target
from ..lifecycle.snapshot_handlers import wait_done
from ..outputs.messages import pose_of
from .factory import MapAccess
from .place_maps import LOCALIZED, node_place_map

__all__ = ["MapHandlers", "pose_matrix", "prior_of"]

LOOP_OFF = ("loop.enable is off: the node keeps no place map and cannot relocalize (set "
            "loop.enable: true, then configure again)")
NOT_METRIC = ("the stream's metric scale is not known (scale.source: none): a stored map is in "
              "metres, so relocalizing in it needs a metric scale source (docs/scale.md)")


def pose_matrix(pose) -> np.ndarray:
    """(4, 4) of a geometry_msgs/Pose; ValueError for a non-finite one or a quaternion
    far from unit length."""
    p, q = pose.position, pose.orientation
    quat = np.array([q.x, q.y, q.z, q.w], np.float64)
    xyz = np.array([p.x, p.y, p.z], np.float64)
    if not (np.isfinite(quat).all() and np.isfinite(xyz).all()):
        raise ValueError("prior_pose must be finite")
    if abs(np.linalg.norm(quat) - 1.0) > 1e-3:
        raise ValueError(f"prior_pose's orientation must be a unit quaternion, got norm "
                         f"{np.linalg.norm(quat):.6f}")
    T = np.eye(4)
    T[:3, :3] = quaternion_to_rotation(quat / np.linalg.norm(quat))
    T[:3, 3] = xyz
    return T


def prior_of(request) -> Optional[tuple[np.ndarray, float]]:
    """``(T_map_base, radius m)`` of a LocalizeInMap request with ``use_prior``; None
    without; ValueError for a bad pose or radius."""
    if not request.use_prior:
        return None
    r = float(request.prior_radius_m)
    if not (math.isfinite(r) and r > 0):
        raise ValueError(f"prior_radius_m must be a finite number > 0 with use_prior, got {r}")
    return pose_matrix(request.prior_pose), r


def _result(reply, n: int) -> tuple:
    """A command's result padded to ``n`` (a failed command gives (False, reason))."""
    result = tuple(reply) if reply is not None else (False, "no answer from the back end")
    return result + (None,) * (n - len(result))


class MapHandlers:
    """The handlers (``Services`` registers them); ``stream()``: the node's ``StreamView``
    (None: unconfigured), ``maps()``: its ``MapAccess`` (None: loop.enable off)."""

    def __init__(self, node, stream, maps) -> None:
        self._node, self._stream, self._maps = node, stream, maps

    def _refusal(self, need_metric: bool) -> tuple[Optional[object], Optional[MapAccess], str]:
        stream, maps = self._stream(), self._maps()
        if stream is None:
            return None, None, "not configured: no stream"
        if maps is None:
            return stream, None, LOOP_OFF
        if need_metric and not maps.metric:
            return stream, maps, NOT_METRIC
        return stream, maps, ""

    async def save_place_map(self, given: str) -> tuple[bool, str, int]:
        """~/save_map's ``place_map``: (ok, message, keyframes)."""
        stream, maps, refusal = self._refusal(need_metric=False)
        if refusal:
            return False, f"place_map not written: {refusal}", 0
        try:
            target = write_target(stream.files, given)
        except OSError as exc:
            return False, f"place_map {given!r} not written: {exc.strerror or exc}", 0
        scale = stream.scale
        k = scale.output_factor if scale is not None else None

        def write(backend, anchor):
            from ...loop.place_map import write_place_map
            m = node_place_map(backend, anchor, maps.map_frame, k, maps.scale_source)
            path = write_place_map(target, m)
            return True, f"place map of {len(m)} keyframes ({m.units}) in {path}", len(m)
        ok, message, keyframes = _result(await wait_done(maps.thread.save_map(write),
                                                         self._node.executor), 3)
        if ok and k is None:
            message += (" -- in model units (the scale never locked, or scale.source none): "
                        "it cannot be relocalized in")
            self._node.get_logger().warning(f"~/save_map: {message}")
        return bool(ok), str(message), int(keyframes or 0)

    def _resolve(self, stream, given: str):
        """The confined path of a map to read (every link followed), or the OSError."""
        return stream.files.resolve(given)

    async def load_map(self, request, response):
        stream, maps, refusal = self._refusal(need_metric=True)
        if not refusal:
            try:
                path = self._resolve(stream, request.path)
            except OSError as exc:
                refusal = exc.strerror or str(exc)
        if refusal:
            response.success, response.message = False, f"not loaded: {refusal}"
            self._node.get_logger().warning(f"~/load_map: {response.message}")
            return response
        reply = maps.thread.load_map(_reader(path), str(path))
        ok, message, keyframes, _ = _result(await wait_done(reply, self._node.executor), 4)
        response.success, response.keyframes = bool(ok), int(keyframes or 0)
        response.message = str(message) if ok else (
            f"not loaded (the stream and any loaded map are unchanged): {message}")
        self._log("~/load_map", ok, response.message)
        return response

    async def localize_in_map(self, request, response):
        stream, maps, refusal = self._refusal(need_metric=True)
        path = None
        if not refusal:
            try:
                prior = prior_of(request)
                path = self._resolve(stream, request.path) if request.path else None
            except (OSError, ValueError) as exc:
                refusal = getattr(exc, "strerror", None) or str(exc)
        if refusal:
            response.success, response.message = False, f"not localizing: {refusal}"
            self._node.get_logger().warning(f"~/localize_in_map: {response.message}")
            return response
        thread = maps.thread
        reply = (thread.load_map(_reader(path), str(path), (prior,)) if path is not None
                 else thread.localize(prior))
        ok, message, _, facts = _result(await wait_done(reply, self._node.executor), 4)
        response.success = bool(ok)
        if not ok:
            response.message = f"not localizing (nothing changed): {message}"
        else:
            scale = stream.scale
            waits = scale is None or scale.output_factor is None
            response.message = (
                f"localizing in the place map {facts.map_id} ({facts.map_keyframes} "
                "keyframes): map -> odom is published once localized (~/status, /diagnostics "
                "'localization')" + (": keyframes are tried once the scale locks" if waits
                                     else ""))
            if facts.state == LOCALIZED and facts.pose is not None:
                response.localized, response.pose = True, pose_of(facts.pose)
                response.matched_keyframe = int(facts.matched_keyframe)
        self._log("~/localize_in_map", ok, response.message)
        return response

    def _log(self, name: str, ok, message: str) -> None:
        if ok:  # one severity per call site (rclpy refuses a change between calls)
            self._node.get_logger().info(f"{name}: {message}")
        else:
            self._node.get_logger().warning(f"{name}: {message}")


def _reader(path):
    def read():
        from ...loop.place_map import read_place_map
        return read_place_map(path)
    return read

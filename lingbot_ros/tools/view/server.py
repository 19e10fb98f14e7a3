"""The browser side of ``lingbot-ros-view``: a :class:`SceneModel` drawn by viser.

viser is an optional extra (``pip install 'lingbot_ros[view]'``), imported here only, when a
:class:`Viewer` is made (:func:`require_viser` says how to install it when it is missing).
Its web client is served from the wheel: nothing is fetched from the internet when the page
opens (docs/viewer.md).

The viewer's own thread waits for the scene to change and re-sends only the parts that did,
at most ``max_rate_hz`` times a second: the stream that feeds the scene never waits for the
browser. The scene's nodes, by name (the browser test reads them):

- ``/points``: the map's points, coloured;
- ``/trajectory/front_end`` (a line) and ``/trajectory/front_end/poses`` (one point per pose
  shown), ``/trajectory/optimised`` and ``.../poses`` (loop closure);
- ``/keyframes``: a small frustum per keyframe (line segments);
- ``/camera``: the latest camera's frustum, with its image when there is one.

The panel (markdown) shows frames in, processed, dropped, keyframes, poses, points and the
scale's state and metres per unit.
"""
from __future__ import annotations

import contextlib
import io
import ipaddress
import logging
import math
import threading
import time
from typing import Optional

import numpy as np

from ...geometry import rotation_to_quaternion
from .scene import SceneModel, SceneSnapshot

__all__ = ["ViewerUnavailable", "require_viser", "Viewer", "LOOPBACK", "INSTALL_HINT"]

log = logging.getLogger("lingbot_ros.view")
LOOPBACK = "127.0.0.1"
INSTALL_HINT = "pip install 'lingbot_ros[view]' (or: pip install 'viser>=1.1,<2')"
FRONT_COLOUR, OPTIMISED_COLOUR = (230, 60, 40), (40, 170, 80)
KEYFRAME_COLOUR, CAMERA_COLOUR = (60, 110, 230), (250, 160, 0)
MAX_IMAGE_WIDTH = 320  # the frustum's image is sent at most this wide
UP_AXES = {"+x": (1, 0, 0), "-x": (-1, 0, 0), "+y": (0, 1, 0), "-y": (0, -1, 0),
           "+z": (0, 0, 1), "-z": (0, 0, -1)}


class ViewerUnavailable(RuntimeError):
    """viser is not installed (or does not import); the message says how to install it."""


def require_viser():
    """The viser module, or ViewerUnavailable saying how to install it."""
    try:
        import viser
    except ImportError as exc:
        raise ViewerUnavailable(f"the viewer needs viser, an optional extra that is not "
                                f"installed ({exc}): {INSTALL_HINT}") from None
    return viser


class Viewer:
    """Serves ``model`` at ``http://host:port`` (the next free port when ``port`` is taken;
    :attr:`url` says which) until :meth:`close`."""

    def __init__(self, model: SceneModel, host: str = LOOPBACK, port: int = 8080,
                 up: str = "-y", title: str = "lingbot_ros", max_rate_hz: float = 10.0) -> None:
        viser = require_viser()
        if not _is_loopback(host):
            log.warning("the viewer listens on %s: anyone who can reach this machine on port "
                        "%d can see the map and the camera images (default: %s only)",
                        host, port, LOOPBACK)
        self.model, self._period = model, 1.0 / max_rate_hz
        logging.getLogger("websockets").setLevel(logging.WARNING)  # one line per connection
        with contextlib.redirect_stdout(io.StringIO()):  # viser's banner: we print the URL
            self._server = viser.ViserServer(host=host, port=port, label=title, verbose=False)
        # viser's "share" relays the page through an outside server: never from here (nothing
        # leaves this machine but what --host opens); the button is hidden, a request refused
        self._server.request_share_url = _no_share
        if up not in UP_AXES:
            raise ValueError(f"up must be one of {sorted(UP_AXES)}, got {up!r}")
        self._up = np.array(UP_AXES[up], np.float64)
        self._server.scene.set_up_direction(up)
        self._server.gui.configure_theme(show_logo=False,
                                         show_share_button=False)
        self._panel = self._server.gui.add_markdown("waiting for the first frame ...")
        self._handles: dict = {}
        self._sent: dict = {}
        self._framed_size = 0.0  # the scene's size when the initial view was last set
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="lingbot-ros-view",
                                        daemon=True)
        self.sync()
        self._thread.start()

    @property
    def url(self) -> str:
        host = self._server.get_host()
        return f"http://{'127.0.0.1' if host in ('0.0.0.0', '') else host}:" \
               f"{self._server.get_port()}"

    @property
    def port(self) -> int:
        return self._server.get_port()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        with contextlib.redirect_stdout(io.StringIO()):
            self._server.stop()

    def sync(self) -> dict:
        """Send what changed since the last sync; returns the scene's state numbers."""
        snap = self.model.snapshot()
        with self._lock:
            self._draw(snap)
        return snap.state()

    # -- the viewer's thread ------------------------------------------------------------
    def _loop(self) -> None:
        seen = -1
        while not self._stop.is_set():
            seen = self.model.wait_changed(seen, timeout=0.25)
            if self._stop.is_set():
                return
            started = time.monotonic()
            try:
                self.sync()
            except Exception:  # noqa: BLE001 -- a bad update must not end the viewer
                log.exception("the viewer could not draw the scene")
            self._stop.wait(max(0.0, self._period - (time.monotonic() - started)))

    def _changed(self, snap: SceneSnapshot, part: str) -> bool:
        if self._sent.get(part) == snap.versions.get(part):
            return False
        self._sent[part] = snap.versions.get(part)
        return True

    def _draw(self, snap: SceneSnapshot) -> None:
        scene = self._server.scene
        size = _scene_size(snap)
        if self._changed(snap, "points"):
            self._replace("/points", None if len(snap.points_xyz) == 0 else (
                lambda: scene.add_point_cloud("/points", snap.points_xyz, snap.points_rgb,
                                              point_size=size / 250.0, point_shape="circle",
                                              precision="float32")))
        if self._changed(snap, "trajectory"):
            self._trajectory("/trajectory/front_end", snap.front_end, FRONT_COLOUR, size)
            self._trajectory("/trajectory/optimised", snap.optimised, OPTIMISED_COLOUR, size)
        if self._changed(snap, "keyframes"):
            segments = _frustum_segments(snap.keyframes, size / 40.0)
            self._replace("/keyframes", None if len(segments) == 0 else (
                lambda: scene.add_line_segments("/keyframes", segments, KEYFRAME_COLOUR,
                                                thickness=2.0, thickness_units="screen")))
        if self._changed(snap, "camera"):
            self._camera(snap, size)
        text = _panel_text(snap)
        if text != self._sent.get("panel"):
            self._panel.content = self._sent["panel"] = text
        if len(snap.front_end) and size > 1.5 * self._framed_size:
            self._frame_view(snap, size)  # the view for new pages and "reset view" only

    def _replace(self, name: str, make) -> None:
        old = self._handles.pop(name, None)
        if old is not None:
            old.remove()
        if make is not None:
            self._handles[name] = make()

    def _trajectory(self, name: str, xyz: np.ndarray, colour, size: float) -> None:
        scene = self._server.scene
        self._replace(name + "/poses", None)  # first: removing a node removes its children
        self._replace(name, None if len(xyz) < 2 else (lambda: scene.add_line_segments(
            name, np.stack([xyz[:-1], xyz[1:]], axis=1).astype(np.float32), colour,
            thickness=3.0, thickness_units="screen")))
        self._replace(name + "/poses", None if len(xyz) == 0 else (
            lambda: scene.add_point_cloud(name + "/poses", xyz.astype(np.float32), colour,
                                          point_size=size / 120.0, point_shape="circle",
                                          precision="float32")))

    def _camera(self, snap: SceneSnapshot, size: float) -> None:
        cam = snap.camera
        if cam is None:
            self._replace("/camera", None)
            return
        image = _thumbnail(cam.image)
        wxyz = _wxyz(cam.c2w[:3, :3])
        self._replace("/camera", lambda: self._server.scene.add_camera_frustum(
            "/camera", fov=cam.fov_y, aspect=cam.aspect, scale=size / 12.0, image=image,
            format="jpeg", color=CAMERA_COLOUR, thickness=3.0, thickness_units="screen",
            wxyz=wxyz, position=cam.c2w[:3, 3]))

    def _frame_view(self, snap: SceneSnapshot, size: float) -> None:
        """Look at the scene from above and behind its start (again when it has grown);
        the pages already open keep their own view."""
        pts = np.concatenate([snap.front_end, snap.points_xyz.astype(np.float64)])
        centre = np.median(pts, axis=0)
        cam = self._server.initial_camera
        up = self._up
        start = snap.front_end[0]
        away = start - centre
        away = away - up * np.dot(away, up)
        away = away / (np.linalg.norm(away) or 1.0)
        cam.look_at = tuple(centre)
        cam.position = tuple(centre + 0.7 * size * away + 0.6 * size * up)
        self._framed_size = size


def _is_loopback(host: str) -> bool:
    """Whether listening on ``host`` keeps the viewer on this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _no_share(*_args, **_kwargs) -> None:
    log.warning("the viewer does not share its page through an outside server")
    return None


def _scene_size(snap: SceneSnapshot) -> float:
    """The scene's extent (the bounding box diagonal of trajectory and points; 1 if none)."""
    parts = [p for p in (snap.front_end, snap.points_xyz) if len(p)]
    if not parts:
        return 1.0
    pts = np.concatenate([p.astype(np.float64) for p in parts])
    lo, hi = np.percentile(pts, 2, axis=0), np.percentile(pts, 98, axis=0)
    diag = float(np.linalg.norm(hi - lo))
    return diag if math.isfinite(diag) and diag > 1e-6 else 1.0


def _frustum_segments(c2w: np.ndarray, scale: float) -> np.ndarray:
    """(8 K, 2, 3) float32: a small pyramid (apex, 4 edges, the far rectangle) per pose."""
    if len(c2w) == 0:
        return np.zeros((0, 2, 3), np.float32)
    corners = np.array([[-0.6, -0.45, 1.0], [0.6, -0.45, 1.0], [0.6, 0.45, 1.0],
                        [-0.6, 0.45, 1.0]]) * scale  # camera optical: z forward
    world = np.einsum("kij,cj->kci", c2w[:, :3, :3], corners) + c2w[:, None, :3, 3]
    apex = np.repeat(c2w[:, None, :3, 3], 4, axis=1)
    edges = np.stack([apex, world], axis=2)  # (K, 4, 2, 3)
    rim = np.stack([world, np.roll(world, -1, axis=1)], axis=2)
    return np.concatenate([edges, rim], axis=1).reshape(-1, 2, 3).astype(np.float32)


def _thumbnail(image: Optional[np.ndarray]) -> Optional[np.ndarray]:
    if image is None:
        return None
    image = np.asarray(image)
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    step = max(1, math.ceil(image.shape[1] / MAX_IMAGE_WIDTH))
    return np.ascontiguousarray(image[::step, ::step, :3]).astype(np.uint8)


def _wxyz(R: np.ndarray) -> np.ndarray:
    q = rotation_to_quaternion(R)  # (x, y, z, w)
    return np.array([q[3], q[0], q[1], q[2]])


def _panel_text(snap: SceneSnapshot) -> str:
    c, s = snap.counters, snap.state()
    return "\n".join([
        "**lingbot_ros**", "",
        f"frames in: {c.frames_in}  ", f"processed: {c.processed}  ",
        f"dropped: {c.dropped}  ", f"keyframes: {c.keyframes}  ",
        f"poses: {s['poses']}  ", f"points: {s['points']}  ",
        f"scale: {snap.scale.text()}"])

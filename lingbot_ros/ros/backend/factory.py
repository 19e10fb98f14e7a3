"""The node's back end, built at configure from its settings and the stream's session.

``LoopBackend`` (lingbot_ros/loop/backend.py) is imported here lazily, with GTSAM behind it:
a node with ``loop.enable: false`` never loads either. Verification runs the stream's own
model (``session.model``, stateless) on the pair in a fresh two-frame session
(``loop.pair_runner.run_pair``), on the back end's thread, beside the stream's steps; the
stream's session, caches and window are never touched.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...session import StreamingSession
from .backend_thread import BackendThread

__all__ = ["make_backend_thread", "NodeBackend", "MapAccess"]


@dataclass(frozen=True)
class MapAccess:
    """What the place-map services (ros/backend/map_services.py) use of the back end."""

    thread: BackendThread
    map_frame: str
    scale_source: str  # scale.source
    metric: bool  # the scale source is a metric one (not "none"): a stored map can be used


def make_backend_thread(settings, session, log) -> BackendThread:
    """A ``BackendThread`` (not started) over fresh ``LoopBackend``s for ``settings.loop``,
    verifying with ``session``'s model at its settings. ImportError (the reason) when the
    back end or GTSAM is not installed."""
    from ...loop.backend import LoopBackend, keyframe_input
    from ...loop.pair_runner import run_pair
    from ...loop.relocalize import Relocalizer

    model, stream_config = session.model, session.config

    def make_session(config):
        return StreamingSession(model, config)

    def pair(keyframe, image):
        return run_pair(make_session, stream_config, keyframe, image)

    def make_backend():
        return LoopBackend(settings.loop, pair, window=stream_config.window)

    def make_relocalizer(place_map):  # ValueError: not in metres
        return Relocalizer(settings.loop, place_map, pair)

    return BackendThread(make_backend, keyframe_input, queue_size=settings.node.loop_queue_size,
                         log=log, make_relocalizer=make_relocalizer)


def start_problem(settings) -> Optional[str]:
    """Why ``map.load_on_start`` / ``map.localize_on_start`` cannot work with these
    settings (None: they can)."""
    if settings.map_localize_on_start and not settings.map_load_on_start:
        return "map.localize_on_start needs map.load_on_start (the map to localize in)"
    if settings.map_load_on_start and not settings.loop.enable:
        return "map.load_on_start needs loop.enable: true (the back end relocalizes)"
    if settings.map_load_on_start and not settings.scale.metric:
        return ("map.load_on_start: a stored map is in metres and scale.source is 'none': "
                "the stream's metric scale must be known (docs/scale.md)")
    return None


class NodeBackend:
    """The back end's lifetime in the node (executor thread): its thread from configure to
    cleanup, like the stream it follows; its outputs (``LoopOutputs``) while active."""

    def __init__(self) -> None:
        self.thread: Optional[BackendThread] = None  # None: loop.enable off (or unconfigured)
        self.outputs = None  # LoopOutputs while active
        self.maps: Optional[MapAccess] = None  # while configured with loop.enable

    def map_access(self) -> Optional[MapAccess]:
        return self.maps

    def configure(self, settings, session, log, files) -> Optional[str]:
        """Build and start the thread when ``loop.enable``, loading ``map.load_on_start``
        (confined to ``files``) first; the reason when it cannot."""
        problem = start_problem(settings)
        if problem is not None or not settings.loop.enable:
            return problem
        try:
            thread = make_backend_thread(settings, session, log)
        except ImportError as exc:
            return f"loop.enable: the back end cannot be loaded: {exc}"
        if settings.map_load_on_start:  # the thread is not running: the load runs here
            from ...loop.place_map import read_place_map
            try:
                path = files.resolve(settings.map_load_on_start)
            except OSError as exc:
                return f"map.load_on_start: {exc}"
            ok, message = thread.load_map(  # a failed command answers (False, reason)
                lambda: read_place_map(path), str(path),
                (None,) if settings.map_localize_on_start else None).wait()[:2]
            if not ok:
                return f"map.load_on_start: not loaded: {message}"
            log.info(f"map.load_on_start: {message}")
        self.thread = thread
        self.maps = MapAccess(thread, settings.node.map_frame, settings.scale.source,
                              settings.scale.metric)
        thread.start()
        return None

    def activate(self, node, config, outputs) -> None:
        """~/loop_closures, and an accepted loop's rewrite of ~/path and the map."""
        if self.thread is None:
            return
        from .loop_outputs import LoopOutputs
        self.outputs = LoopOutputs(node, config, outputs)
        self.thread.set_on_loops(self.outputs.on_loops)

    def deactivate(self) -> None:
        if self.thread is not None:
            self.thread.set_on_loops(None)
        if self.outputs is not None:
            self.outputs.destroy()
            self.outputs = None

    def release(self) -> None:
        """Cleanup: the thread stops (the keyframe in hand finished), the back end goes."""
        self.deactivate()
        self.maps = None
        if self.thread is not None:
            self.thread.stop()
            self.thread = None

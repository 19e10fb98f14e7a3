"""The node's back end, built at configure from its settings and the stream's session.

``LoopBackend`` (lingbot_ros/loop/backend.py) is imported here lazily, with GTSAM behind it:
a node with ``loop.enable: false`` never loads either. Verification runs the stream's own
model (``session.model``, stateless) on the pair in a fresh two-frame session
(``loop.pair_runner.run_pair``), on the back end's thread, beside the stream's steps; the
stream's session, caches and window are never touched.
"""
from __future__ import annotations

from typing import Optional

from ...session import StreamingSession
from .backend_thread import BackendThread

__all__ = ["make_backend_thread"]


def make_backend_thread(settings, session, log) -> BackendThread:
    """A ``BackendThread`` (not started) over fresh ``LoopBackend``s for ``settings.loop``,
    verifying with ``session``'s model at its settings. ImportError (the reason) when the
    back end or GTSAM is not installed."""
    from ...loop.backend import LoopBackend, keyframe_input
    from ...loop.pair_runner import run_pair

    model, stream_config = session.model, session.config

    def make_session(config):
        return StreamingSession(model, config)

    def pair(keyframe, image):
        return run_pair(make_session, stream_config, keyframe, image)

    def make_backend():
        return LoopBackend(settings.loop, pair, window=stream_config.window)

    return BackendThread(make_backend, keyframe_input, queue_size=settings.node.loop_queue_size,
                         log=log)


class NodeBackend:
    """The back end's lifetime in the node (executor thread): its thread from configure to
    cleanup, like the stream it follows; its outputs (``LoopOutputs``) while active."""

    def __init__(self) -> None:
        self.thread: Optional[BackendThread] = None  # None: loop.enable off (or unconfigured)
        self.outputs = None  # LoopOutputs while active

    def configure(self, settings, session, log) -> Optional[str]:
        """Build and start the thread when ``loop.enable``; the reason when it cannot."""
        if settings.map_load_on_start or settings.map_localize_on_start:
            return ("map.load_on_start / map.localize_on_start: stored place maps are not "
                    "implemented in the node yet (issue 34, item 5); leave them unset")
        if not settings.loop.enable:
            return None
        try:
            self.thread = make_backend_thread(settings, session, log)
        except ImportError as exc:
            return f"loop.enable: the back end cannot be loaded: {exc}"
        self.thread.start()
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
        if self.thread is not None:
            self.thread.stop()
            self.thread = None

"""StreamControl: reset, load and save of the node's stream, one procedure each, with or
without a running worker.

The stream (the session and its scale estimate) lives from configure to cleanup; the worker
thread and its outputs only while active. ``StreamControl`` holds the lock that serialises a
frame with a reset, a load or a save's copy, and runs each of them between two frames: the
worker, while one is attached (``attach``), publishes its frame in flight first, drops its
queue and pending contexts (counted ``dropped_reset``) and clears its outputs; without one
(configured, not active) there is nothing in flight, so the same procedure simply skips those
steps. While a reset waits for the lock the worker takes no next frame (``wait_turn``), so a
plain lock's unfairness cannot starve it under overload.
"""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Callable, Optional, Protocol

from ...session import LOOP_BACKEND, front_end_state, read_manifest, saved_part
from ..backend.backend_thread import BackendThread
from ..lifecycle.snapshot_handlers import SnapshotJob, check_scale, restore_scale, take_state
from ..status.telemetry import NodeTelemetry
from ...scale import ScaleStream


class AttachedWorker(Protocol):
    """The worker's side of a new stream (``FrameWorker``); called under the lock."""

    def publish_in_flight(self) -> None: ...
    def drop_queue(self) -> int: ...  # images queued before now are dropped: how many
    # pending contexts dropped (counted), outputs cleared; a pending extrinsic applied
    def new_stream(self, *, restart_frames: bool) -> None: ...
    def node_state(self) -> Optional[dict]: ...  # the outputs' own state for a snapshot
    def scale_changed(self, estimate) -> None: ...  # ~/scale
    def publish_facts(self) -> None: ...


class StreamControl:
    def __init__(self, session, telemetry: NodeTelemetry, log,
                 scale: Optional[ScaleStream] = None,
                 backend: Optional[BackendThread] = None) -> None:
        """``backend``: the loop-closure back end's thread (``loop.enable``): reset, loaded
        and saved with the stream."""
        self.session = session
        self.scale = scale
        self.backend = backend
        self._telemetry = telemetry
        self._log = log
        self.lock = threading.Lock()  # the session: a frame vs a reset, load or save's copy
        self._no_reset_waiting = threading.Event()  # cleared while one waits for the lock
        self._no_reset_waiting.set()
        self._worker: Optional[AttachedWorker] = None

    def attach(self, worker: Optional[AttachedWorker]) -> None:
        """The running worker (None: detached, e.g. stopped at deactivate)."""
        with self.lock:
            self._worker = worker

    def wait_turn(self) -> None:
        """The worker, before taking the lock for a frame: a waiting reset goes first."""
        self._no_reset_waiting.wait()

    @contextmanager
    def between_frames(self):
        """Hold the stream between two of the worker's frames (at once when none runs)."""
        self._no_reset_waiting.clear()
        try:
            with self.lock:
                yield self._worker
        finally:
            self._no_reset_waiting.set()

    def reset(self) -> int:
        """Clear the stream: the frame in flight (published first), queue, session, pending
        contexts, outputs, scale. Returns the number of images dropped from the queue
        (counted ``dropped_reset``, as are anchors waiting in the session)."""
        with self.between_frames() as worker:
            dropped = 0
            if worker is not None:
                dropped = worker.drop_queue()
                self._telemetry.count("dropped_reset", dropped)
                worker.publish_in_flight()
            self.session.reset()
            if self.backend is not None:
                self.backend.reset()
            if worker is not None:
                worker.new_stream(restart_frames=True)
            self._reset_scale(worker)
            self._telemetry.stream_reset(self.session.info())
            if worker is not None:
                worker.publish_facts()
        return dropped

    def load(self, path, load_node_state: Callable[[Optional[dict]], None]) -> dict:
        """Replace the stream by the snapshot at ``path`` between two frames (the frame in
        flight is published first; queued images are dropped, counted ``dropped_reset``).
        ``load_node_state``: takes the snapshot's map and path (the outputs while active,
        else held until activate). The scale estimate continues from the snapshot's (one
        made under another ``scale.source`` is refused before anything changes).
        ``SnapshotError``, and the stream untouched, when it cannot be restored. Returns its
        manifest."""
        with self.between_frames() as worker:
            if worker is not None:
                worker.publish_in_flight()
            if self.scale is not None:  # refused before the stream is touched
                check_scale(read_manifest(path), self.scale)
            manifest = self.session.snapshots.restore(path)
            self.restore_backend(manifest)
            if worker is not None:
                self._telemetry.count("dropped_reset", worker.drop_queue())
                worker.new_stream(restart_frames=False)
            self._restore_scale(manifest, worker)
            load_node_state(manifest.get("front_end_state"))
            self._telemetry.stream_reset(self.session.info())
            if worker is not None:
                worker.publish_facts()
            return manifest

    def save(self, path, extra: Optional[dict] = None) -> SnapshotJob:
        """~/save_session: the returned ``SnapshotJob`` takes the stream on its own thread
        between two frames (the frame in flight is published first, then the stream, the
        outputs' state and the scale estimate are copied to the host: all the worker waits
        for), then writes it; the caller never waits for either. A stream that cannot be
        taken fails the job (``SnapshotError``'s reason)."""
        def take():
            with self.between_frames() as worker:
                state = None
                if worker is not None:
                    worker.publish_in_flight()
                    state = worker.node_state()
                return take_state(self.session, with_backend(state, self.backend), extra,
                                  scale=self.scale)
        return SnapshotJob(take, path)

    def restore_backend(self, manifest: dict) -> None:
        """The restored stream's back end continues from the snapshot's (its arrays come with
        the stream's restore: read once). A snapshot without one (saved with loop.enable
        off, or by an older build), or one it cannot continue, starts a fresh back end, with
        a warning: the stream itself is restored either way."""
        if self.backend is None:
            return
        saved = saved_part(manifest.get("front_end_state"), LOOP_BACKEND)
        prepared, warning = None, "the snapshot holds no loop back end: it starts anew"
        if saved is not None:
            try:
                prepared, warning = self.backend.prepare_load(saved), None
            except ValueError as exc:
                warning = f"the snapshot's loop back end cannot continue ({exc}): it starts anew"
        self.backend.adopt(prepared)
        if warning:
            self._log.warning(warning)

    def _reset_scale(self, worker) -> None:
        if self.scale is not None:
            estimate = self.scale.reset()
            if worker is not None:
                worker.scale_changed(estimate)

    def _restore_scale(self, manifest: dict, worker) -> None:
        """A restored stream's scale: the snapshot's estimate continues (or, without one in
        the snapshot, a new estimate, with a warning)."""
        if self.scale is None:
            return
        try:
            estimate, warning = restore_scale(manifest, self.scale)
        except ValueError as exc:  # checked before the restore: only a file changed meanwhile
            estimate, warning = self.scale.reset(), f"{exc}: the scale is estimated anew"
        if warning:
            self._log.warning(warning)
        if worker is not None:
            worker.scale_changed(estimate)


def with_backend(state: Optional[dict], backend: Optional[BackendThread]) -> Optional[dict]:
    """The outputs' snapshot parts with the back end's (``LOOP_BACKEND``) when it runs."""
    if backend is None:
        return state
    return dict(state or {}, **front_end_state({LOOP_BACKEND: backend}))

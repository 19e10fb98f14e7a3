"""The node's side of stream snapshots: ~/save_session, ~/load_session,
``session.resume_from`` and ``session.save_on_shutdown`` (docs/node.md, Resume after a
restart).

A save is taken between two frames, like a reset: the frame in flight is published first,
then the stream's state is copied to the host (``snapshot_state``: the only time the worker
is held), then the files are written. Both run on the job's own thread (``SnapshotJob``),
and the service answers once the files are on disk. The service callback is a coroutine that
awaits the job (``wait_done``): the node's one executor thread takes images into the queue,
ticks /diagnostics and answers other services meanwhile (at the released size the copy
alone is hundreds of MB to GB: the executor never waits for it).

The node's own state (the voxel map of ~/map_points, the ~/path history) and the stream's
scale estimate (its ``state_dict``) go into the same directory (``front_end_state``), each
as the snapshot part the one registry names (``session/snapshot_parts.py``).

On restore the scale estimate continues (LOCKED stays LOCKED at the same metres per unit):
``check_scale`` refuses a snapshot whose estimate was made under another ``scale.source``
(or other estimate settings) *before* the stream is touched; ``restore_scale`` then loads it.
A snapshot without an estimate (saved by an older build) restarts the estimate, with a
warning.

``NodeSnapshots`` holds the node's handlers (the node delegates to it, passing the stream's
``StreamControl`` and the outputs as they are at each call: it holds no node), and owns a
restored snapshot's map and path while the node is inactive (``resume_from``,
~/load_session while inactive); the outputs load them at activate (``load_pending``). The
load itself is ``StreamControl.load``, one procedure with or without a running worker.
"""
from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Optional

from ...session import (LOOP_BACKEND, SCALE, SnapshotError, front_end_state, saved_part,
                        write_snapshot)

__all__ = ["SnapshotJob", "wait_done", "take_state", "start_save", "SnapshotError",
           "scale_state", "check_scale", "restore_scale", "NodeSnapshots"]

class SnapshotJob:
    """A snapshot being taken and written in the background; ``wait`` gives (success,
    message, bytes, frames). ``take()`` runs first on the job's thread and returns the host
    copy (``take_state``); the files are written after it. ``add_done_callback`` runs a
    function once it is written (in the job's thread, or at once if it is done): the service
    awaits that, never blocking the executor (``wait_done``). ``SnapshotJob.refused(message)``:
    one that failed before it began."""

    def __init__(self, take: Optional[Callable[[], tuple]], path) -> None:
        self.path = Path(path)
        self.frames, self.blocked_ms, self.nbytes = 0, 0.0, 0
        self.error: Optional[str] = None
        self._done = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list = []
        if take is None:  # refused
            return
        self._thread = threading.Thread(target=self._run, args=(take,),
                                        name="lingbot_snapshot", daemon=True)
        self._thread.start()

    @classmethod
    def refused(cls, path, message: str) -> "SnapshotJob":
        job = cls(None, path)
        job.error = message
        job._finish()
        return job

    def _run(self, take) -> None:
        try:
            try:
                data, self.blocked_ms = take()
            except SnapshotError as exc:
                self.error = str(exc)
                return
            except Exception as exc:  # noqa: BLE001 -- answered, never a dead thread
                self.error = f"cannot take the stream: {type(exc).__name__}: {exc}"
                return
            self.frames = int(data.manifest["frames_processed"])
            try:
                _, self.nbytes = write_snapshot(data, self.path)
            except (OSError, ValueError) as exc:
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                self.error = f"cannot write {self.path}: {reason}"
            except Exception as exc:  # noqa: BLE001 -- answered, never a dead thread
                self.error = f"cannot write {self.path}: {type(exc).__name__}: {exc}"
        finally:
            self._finish()

    def _finish(self) -> None:
        with self._lock:
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def add_done_callback(self, callback) -> None:
        """``callback()`` once the files are on disk (or the write failed)."""
        with self._lock:
            if not self._done.is_set():
                self._callbacks.append(callback)
                return
        callback()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: Optional[float] = None) -> tuple[bool, str, int, int]:
        if not self._done.wait(timeout):
            return False, f"{self.path}: still being written after {timeout} s", 0, 0
        thread = getattr(self, "_thread", None)
        if timeout is None and thread is not None and thread is not threading.current_thread():
            thread.join()  # gone, not only done: a node exiting after it leaves no thread behind
        if self.error is not None:
            return False, self.error, 0, self.frames
        return (True, f"wrote the stream ({self.frames} frames, {self.nbytes / 2**20:.1f} MiB;"
                f" the worker waited {self.blocked_ms:.1f} ms) to {self.path}",
                self.nbytes, self.frames)


async def wait_done(job: SnapshotJob, executor) -> tuple[bool, str, int, int]:
    """``job.wait()`` for an ``async`` service callback: the coroutine yields to the executor
    until the writing thread is done, so images, timers and other services go on meanwhile.

    rclpy (9.x) resumes a task awaiting a ``Future`` only when the executor wakes; the writing
    thread completes an ``rclpy.task.Future`` bound to the executor, and its done callback
    makes the executor schedule a task (``Executor.create_task`` triggers its guard
    condition), which wakes it. Without an executor (a test calling the handler) it blocks."""
    if executor is None:
        return job.wait()
    from rclpy.task import Future
    future = Future(executor=executor)
    future.add_done_callback(lambda _future: None)  # scheduled on completion: a wake-up
    job.add_done_callback(lambda: future.set_result(None))
    await future
    return job.wait(0)


def take_state(session, front_end: Optional[dict] = None,
               extra: Optional[dict] = None, scale=None) -> tuple:
    """(the stream's host copy, the ms it took): call it between frames (the caller holds
    the worker). ``scale``: the stream's ``ScaleStream`` (its estimate is saved with the
    node's state). ``SnapshotError`` if the session is mid-frame."""
    t0 = time.perf_counter()
    if scale is not None:
        front_end = dict(front_end or {}, **front_end_state({SCALE: scale}))
    data = session.snapshots.take(extra=extra, front_end_state=front_end)
    return data, (time.perf_counter() - t0) * 1e3


def start_save(session, path, front_end_state: Optional[dict] = None,
               extra: Optional[dict] = None, scale=None) -> SnapshotJob:
    """Take (``take_state``) and write the stream of an idle ``session`` (no worker) in the
    background."""
    return SnapshotJob(lambda: take_state(session, front_end_state, extra, scale), path)


def scale_state(manifest: Optional[dict]) -> Optional[dict]:
    """The scale estimate a snapshot's manifest holds (None: saved without one)."""
    return saved_part((manifest or {}).get("front_end_state"), SCALE)


def check_scale(manifest: Optional[dict], scale) -> None:
    """``SnapshotError`` unless the snapshot's scale estimate can continue in ``scale`` (a
    ``ScaleStream``): call it before the stream is restored, so a refusal changes nothing.
    A snapshot without an estimate passes (``restore_scale`` restarts it)."""
    state = scale_state(manifest)
    if scale is None or state is None:
        return
    try:
        scale.check_state_dict(state)
    except ValueError as exc:
        raise SnapshotError(str(exc)) from None


def restore_scale(manifest: Optional[dict], scale):
    """Continue the snapshot's scale estimate in ``scale`` (checked by ``check_scale``);
    returns ``(estimate, warning)``: the warning (else None) says the estimate restarted
    because the snapshot holds none."""
    state = scale_state(manifest)
    if state is None:
        estimate = scale.reset()
        if not scale.kind.samples:  # none, fixed: nothing was estimated
            return estimate, None
        return estimate, (f"the snapshot holds no scale estimate (an older build saved it): "
                          f"the {scale.config.source} scale is estimated anew")
    try:
        return scale.load_state_dict(state), None
    except ValueError as exc:
        raise SnapshotError(str(exc)) from None


class NodeSnapshots:
    """The lifecycle node's snapshot handlers: ``session.resume_from`` at configure,
    ~/save_session, ~/load_session, ``session.save_on_shutdown``. Called on the executor
    thread; while active the worker takes or restores the snapshot between two frames."""

    def __init__(self, log) -> None:
        """``log``: the node's logger."""
        self._log = log
        self._pending: Optional[dict] = None  # a restored snapshot's map and path

    # -- configure (session.resume_from) ------------------------------------------------------
    def continue_scale(self, resumed: dict, scale, path) -> bool:
        """The restored snapshot's scale estimate continues in ``scale``; False (logged at
        ERROR) when it is refused: the configure fails."""
        log = self._log
        try:
            _, warning = restore_scale(resumed, scale)
        except SnapshotError as exc:
            log.error(f"configure failed: {path}: {exc}")
            return False
        if warning:
            log.warning(warning)
        return True

    def resumed(self, resumed: dict, path) -> None:
        """The configure restored ``resumed``: its map and path wait for activate."""
        self._pending = resumed.get("front_end_state")
        self._log.info(
            f"resumed the stream of {path}: "
            f"{resumed.get('frames_processed', 0)} frames, the same map frame")

    def load_pending(self, outputs) -> None:
        """Activate: a restored snapshot's map and path into the new ``outputs`` (once)."""
        if self._pending is not None:
            outputs.load_node_state(self._pending)
            self._pending = None

    def discard_pending(self) -> None:
        """The session is released (cleanup, a failed configure): a restored snapshot's map
        and path go with the stream they belong to."""
        self._pending = None

    def _hold(self, front_end_state: Optional[dict]) -> None:
        """~/load_session while inactive: the map and path wait for activate."""
        self._pending = front_end_state

    # -- shutdown (session.save_on_shutdown) --------------------------------------------------
    def save_on_shutdown(self, settings, stream, worker, outputs) -> None:
        """``session.save_on_shutdown``: the worker stops (the frame in flight published),
        then the stream (``stream``: its ``StreamControl``), map and path are written (once;
        a failure is logged)."""
        if settings is None or stream is None or not settings.save_on_shutdown:
            return
        if worker is not None:
            worker.stop()
        session = stream.session
        try:
            if session.in_flight:  # the worker stopped mid-frame: finish it into the stream
                session.collect()
            state = outputs.node_state() if outputs is not None else None
            if stream.backend is not None:  # loop.enable: the back end's state with them
                state = dict(state or {}, **front_end_state({LOOP_BACKEND: stream.backend}))
            ok, message, _, _ = start_save(session, settings.save_on_shutdown, state,
                                           scale=stream.scale).wait()
        except Exception as exc:  # noqa: BLE001 -- shutting down anyway: say why
            ok, message = False, f"{type(exc).__name__}: {exc}"
        if ok:  # one severity per call site (rclpy refuses a change between calls)
            self._log.info(f"session.save_on_shutdown: {message}")
        else:
            self._log.error(f"session.save_on_shutdown: {message}")

    # -- services -----------------------------------------------------------------------------
    def load(self, stream, path, outputs=None) -> tuple[bool, str, int]:
        """~/load_session (``StreamControl.load``): (success, message, frames). Active, the
        snapshot's map and path go into ``outputs``; inactive, they wait for activate."""
        try:
            manifest = stream.load(path, outputs.load_node_state if outputs is not None
                                   else self._hold)
        except SnapshotError as exc:
            return False, f"not loaded (the stream is unchanged): {exc}", 0
        frames = int(manifest.get("frames_processed", 0))
        return True, f"loaded {path}: {frames} frames; the stream continues from it", frames

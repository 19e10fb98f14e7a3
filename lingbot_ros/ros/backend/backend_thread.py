"""BackendThread: the loop-closure back end (``LoopBackend``, lingbot_ros/loop/) on a thread
of its own, fed by the worker's committed keyframes, never in the camera's way.

The worker hands each published keyframe in (``offer``: an append under a condition, O(1),
never a wait); this thread turns it into a ``KeyframeInput`` and offers it to the back end,
which owns the place database, the verification (a model step on a pair per candidate) and
the pose graph. Only this thread calls the back end (it is single-threaded, docs/loop.md);
a reset, a load or a snapshot waits for the keyframe in hand, then runs here under the same
lock.

Nothing is lost: the queue bounds *verification*, not keyframes. At most ``queue_size``
keyframes wait to be verified; a keyframe that arrives beyond them is still queued, but
marked unverified: the back end adds it to the database and the graph (their continuity
needs every keyframe) without running the model on its candidates, counted ``busy``. An
unverified offer costs a descriptor and a graph node (milliseconds), so that backlog drains
far faster than keyframes come; its high-water mark is on /diagnostics.

What the others read is one frozen ``BackendFacts`` (counts, the current T_map_odom, the
last loop, the localization), replaced whole after each keyframe (a reference swap, as
``FactsBoard``): the worker reads its correction for each frame's outputs, /diagnostics its
counts. An accepted loop goes to ``on_loops`` (``LoopOutputs``: ~/loop_closures, ~/path, the
map) on this thread.

Stored place maps (``place_maps.py``): ~/save_map's place map, ~/load_map and
~/localize_in_map are *commands* (``submit``): run on this thread between two keyframes,
under the same lock, each answered through a ``Reply`` the service awaits (the executor
never waits). The loaded map and its ``Relocalizer`` belong to this thread; a command that
fails changes nothing.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Callable, NamedTuple, Optional

import numpy as np

from ...loop.backend_types import REJECT_REASONS, LoopCounts, LoopEvent
from .corrections import metric_result
from .place_maps import LocalizationFacts, MapLocalization

__all__ = ["BackendFacts", "BackendThread", "Reply", "STATE_VERSION"]

STATE_VERSION = 1  # of ``BackendThread.state_dict``'s own keys around the back end's state


@dataclass(frozen=True)
class BackendFacts:
    """The back end's facts after a keyframe (immutable: safe to read from any thread)."""

    # (4, 4) T_map_odom in the front end's world, the outputs' units (corrections.py)
    correction: np.ndarray = field(default_factory=lambda: np.eye(4), repr=False)
    counts: LoopCounts = LoopCounts()
    last_loop: Optional[LoopEvent] = None
    loops: int = 0  # accepted loops so far (this stream)
    queued: int = 0  # keyframes waiting now
    busy: int = 0  # keyframes added unverified: the verification queue was full
    backlog_max: int = 0  # the most keyframes ever waiting (the unverified ones included)
    failures: int = 0  # keyframes the back end could not take (the reason: last_error)
    last_error: str = ""
    localization: LocalizationFacts = LocalizationFacts()  # a stored map (place_maps.py)

    def info(self) -> dict:
        """/diagnostics key/values (``loop_*``)."""
        c = self.counts
        out = {"loop_keyframes": c.keyframes, "loop_kept": c.kept,
               "loop_candidates": c.candidates, "loop_verified": c.verified,
               "loop_accepted": c.accepted, "loop_closures": self.loops,
               "loop_queued": self.queued,
               "loop_busy": self.busy, "loop_backlog_max": self.backlog_max,
               "loop_failures": self.failures}
        out.update({f"loop_rejected_{r}": int(c.rejected.get(r, 0)) for r in REJECT_REASONS})
        if self.last_error:
            out["loop_last_error"] = self.last_error
        if self.last_loop is not None:
            e = self.last_loop
            out["loop_last"] = (f"keyframe {e.keyframe_id} -> {e.matched_id}: jump "
                                f"{e.jump_m:.3f} / {e.jump_deg:.2f} deg, inliers "
                                f"{e.inlier_fraction:.2f}")
        out.update(self.localization.info())
        return out


class Reply:
    """The answer of a command run on the back end's thread: ``wait`` / a done callback
    (what ``snapshot_handlers.wait_done`` awaits in an async service)."""

    def __init__(self) -> None:
        self._done = threading.Event()
        self._result = None
        self._callbacks: list = []
        self._cb_lock = threading.Lock()

    def set(self, result) -> None:
        self._result = result
        with self._cb_lock:
            self._done.set()
            callbacks, self._callbacks = self._callbacks, []
        for cb in callbacks:
            cb()

    def add_done_callback(self, cb: Callable[[], None]) -> None:
        with self._cb_lock:
            if not self._done.is_set():
                self._callbacks.append(cb)
                return
        cb()

    def wait(self, timeout: Optional[float] = None):
        """The command's result (None when not done within ``timeout`` s)."""
        self._done.wait(timeout)
        return self._result


class _Item(NamedTuple):
    result: object  # the FrameResult (features, depth, image), as the session gave it
    chain: object  # its FrameChain (the frames its outputs went out in)
    metres_per_unit: Optional[float]  # its scale when the back end works in metres
    verify: bool
    generation: int


LoopsHandler = Callable[[tuple, object, object, dict], None]  # (events, backend, chain, stamps)


class BackendThread:
    def __init__(self, make_backend: Callable[[], object],
                 keyframe_input: Callable[[object], object], *, queue_size: int, log,
                 on_loops: Optional[LoopsHandler] = None,
                 make_relocalizer: Optional[Callable[[object], object]] = None) -> None:
        """``make_backend()``: a fresh ``LoopBackend`` (a new stream, a reset, a load);
        ``keyframe_input``: ``loop.backend.keyframe_input`` (a ``FrameResult`` into a
        ``KeyframeInput``); ``queue_size``: keyframes waiting for verification, at most;
        ``make_relocalizer(place_map)``: a ``Relocalizer`` of a loaded map (ValueError for
        a map it cannot use)."""
        if queue_size < 1:
            raise ValueError(f"queue_size must be >= 1, got {queue_size!r}")
        self._make_backend = make_backend
        self._own = np.eye(4)  # the stream's own correction (its loops), under ``_lock``
        self._keyframe_input = keyframe_input
        self._queue_size = queue_size
        self._log = log
        self._on_loops = on_loops
        self._cv = threading.Condition()  # the queue, the generation, the stop flag
        self._queue: deque[_Item] = deque()
        self._verify_waiting = 0  # items in the queue with verify set
        self._generation = 0  # a reset or load: items queued before it are dropped
        self._stopping = False
        self._lock = threading.Lock()  # the back end: this thread's keyframe vs reset/load/save
        self._backend = make_backend()
        self._stamps: dict[int, int] = {}  # keyframe id -> stamp ns (~/path's rebuild)
        self._facts = BackendFacts()
        self._thread: Optional[threading.Thread] = None
        self.make_relocalizer = make_relocalizer
        self._maps = MapLocalization()  # this thread's: the loaded map, the localization
        self._commands: deque[tuple[Callable[[], object], Reply]] = deque()

    # -- any thread ----------------------------------------------------------------------------
    def facts(self) -> BackendFacts:
        return self._facts

    def set_on_loops(self, on_loops: Optional[LoopsHandler]) -> None:
        """Where accepted loops go (the outputs while active; None: counted only); waits
        for the keyframe in hand, so a deactivate never pulls the outputs from under it."""
        with self._lock:
            self._on_loops = on_loops

    # -- the worker's side ---------------------------------------------------------------------
    def offer(self, result, chain, metres_per_unit: Optional[float] = None) -> bool:
        """Queue a committed keyframe (never waits for the back end); True when it will be
        verified, False when it goes in unverified (``busy``: the verification queue is full)."""
        with self._cv:
            verify = self._verify_waiting < self._queue_size
            self._queue.append(_Item(result, chain, metres_per_unit, verify, self._generation))
            self._verify_waiting += verify
            facts = self._facts
            self._facts = replace(facts, queued=len(self._queue),
                                  busy=facts.busy + (not verify),
                                  backlog_max=max(facts.backlog_max, len(self._queue)))
            self._cv.notify()
        return verify

    # -- the stream's side (reset, load, save: the stream's lock is held by the caller) ------
    def reset(self) -> None:
        """A new stream: the keyframes waiting are dropped, a fresh back end (identity)."""
        with self._cv:
            self._drop_queue()
        with self._lock:
            self._backend = self._make_backend()
            self._stamps, self._own = {}, np.eye(4)
            self._maps.new_stream()
            with self._cv:
                self._facts = BackendFacts(localization=self._maps.facts)

    def state_dict(self) -> dict:
        """The back end's state for a stream snapshot (JSON values and numpy arrays). The
        keyframes still waiting go in first, unverified: the snapshot covers every keyframe
        the stream committed."""
        with self._cv:
            items = list(self._queue)
            self._drop_queue()
        with self._lock:
            for item in items:
                self._step(item._replace(verify=False))
            ids = np.array(sorted(self._stamps), np.int64)
            return {"version": STATE_VERSION, "backend": self._backend.state_dict(),
                    "keyframe_ids": ids,
                    "keyframe_stamps_ns": np.array([self._stamps[i] for i in ids], np.int64),
                    "correction": np.array(self._own, np.float64),  # not the anchor
                    "loops": self._facts.loops}

    def prepare_load(self, state) -> tuple:
        """A fresh back end holding ``state`` (what ``state_dict`` gave), without touching
        the running one: ValueError (the reason) for a state it cannot continue. Call it
        before the stream is restored, then ``adopt`` the result."""
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"the back end's state is not version {STATE_VERSION} of "
                             "BackendThread.state_dict")
        try:
            backend = self._make_backend()
            backend.load_state_dict(state["backend"])
            ids = np.asarray(state["keyframe_ids"], np.int64).reshape(-1)
            stamps = np.asarray(state["keyframe_stamps_ns"], np.int64).reshape(-1)
            correction = np.asarray(state["correction"], np.float64)
            loops = int(state["loops"])
        except (KeyError, TypeError) as exc:
            raise ValueError(f"the back end's state is incomplete: {exc}") from None
        if ids.shape != stamps.shape or correction.shape != (4, 4) \
                or not np.isfinite(correction).all():
            raise ValueError("the back end's state has mismatched keyframe stamps or a bad "
                             "correction")
        return backend, dict(zip(ids.tolist(), stamps.tolist())), correction, loops

    def adopt(self, prepared: Optional[tuple]) -> None:
        """Continue from ``prepare_load``'s result (None: a fresh back end, as ``reset``)."""
        if prepared is None:
            self.reset()
            return
        backend, stamps, correction, loops = prepared
        with self._cv:
            self._drop_queue()
        with self._lock:
            self._backend, self._stamps, self._own = backend, stamps, correction
            self._maps.new_stream()
            with self._cv:
                self._facts = BackendFacts(correction=correction, counts=backend.counts,
                                           loops=loops, localization=self._maps.facts)

    # -- the thread ----------------------------------------------------------------------------
    def start(self) -> None:
        with self._cv:
            self._stopping = False
        self._thread = threading.Thread(target=self._work, name="lingbot_backend", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the keyframe in hand; those still waiting stay queued (a later
        ``start`` or ``state_dict`` takes them); commands not run yet are answered
        ``(False, reason)`` (a service awaiting one is never left hanging)."""
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None
        with self._cv:
            pending, self._commands = list(self._commands), deque()
        for _, reply in pending:
            reply.set((False, "the back end stopped (a cleanup or shutdown) before it ran"))

    def run_once(self, timeout: float = 0.1) -> bool:
        """Take one keyframe (waiting at most ``timeout`` s) and offer it to the back end;
        False when none was waiting. (The thread loops on this; a test may call it.)"""
        with self._cv:
            if not self._queue and not self._commands:
                self._cv.wait(timeout)
            if self._commands:
                command = self._commands.popleft()
            elif not self._queue:
                return False
            else:
                command = None
        if command is not None:
            self._run_command(*command)
            return True
        with self._cv:
            if not self._queue:
                return False
            item = self._queue.popleft()
            self._verify_waiting -= item.verify
            self._facts = replace(self._facts, queued=len(self._queue))
        with self._lock:
            if item.generation == self._generation:
                self._step(item)
        return True

    # -- commands (place maps): run on this thread between keyframes ---------------------------
    def submit(self, command: Callable[[], object]) -> Reply:
        """Run ``command()`` on this thread between two keyframes, under the back end's lock
        (at once on the caller's thread when the thread is not running: a configure, a
        test); its result, or ``(False, reason)`` for an exception, goes to the ``Reply``."""
        reply = Reply()
        with self._cv:
            running = self._thread is not None and not self._stopping
            if running:
                self._commands.append((command, reply))
                self._cv.notify()
        if not running:
            self._run_command(command, reply)
        return reply

    def _run_command(self, command, reply: Reply) -> None:
        try:
            with self._lock:
                result = command()
        except Exception as exc:  # noqa: BLE001 -- answered with the reason
            result = (False, f"{type(exc).__name__}: {exc}")
        reply.set(result)

    def save_map(self, write: Callable[[object, Optional[np.ndarray]], tuple]) -> Reply:
        """~/save_map's place map: ``write(backend, anchor)`` (place_maps.node_place_map,
        then the file) on this thread."""
        return self.submit(lambda: write(self._backend, self._maps.anchor))

    def load_map(self, read: Callable[[], object], path: str,
                 localize: Optional[tuple] = None) -> Reply:
        """~/load_map (and ~/localize_in_map with a path): ``read()`` the place map (a
        ``PlaceMapError`` says why not), make its ``Relocalizer`` (ValueError: a map not in
        metres), then install it; ``localize``: ``(prior,)`` to localize in it at once
        (prior: (T_map_base, radius) or None). Nothing changes unless all of it works.
        Result: (ok, message, keyframes, LocalizationFacts)."""
        def command():
            if self.make_relocalizer is None:
                return False, "no relocalizer: loop.enable is off", 0, self._maps.facts
            place_map = read()
            relocalizer = self.make_relocalizer(place_map)
            self._maps.install(relocalizer, path)
            if localize is not None:
                self._maps.request(localize[0])
            self._publish_localization()
            return (True, f"loaded the place map {place_map.map_id} ({len(place_map)} "
                    f"keyframes, {place_map.units}, scale source {place_map.scale_source}) "
                    f"from {path}", len(place_map), self._maps.facts)
        return self.submit(command)

    def localize(self, prior: Optional[tuple]) -> Reply:
        """~/localize_in_map in the loaded map: from the next keyframe on. Result as
        ``load_map``'s (ok False: no map loaded)."""
        def command():
            try:
                self._maps.request(prior)
            except ValueError as exc:
                return False, str(exc), 0, self._maps.facts
            self._publish_localization()
            facts = self._maps.facts
            return True, "localizing", facts.map_keyframes, facts
        return self.submit(command)

    def _publish_localization(self) -> None:
        with self._cv:
            self._facts = replace(self._facts, localization=self._maps.facts,
                                  correction=self._maps.corrected(self._own_correction()))

    def _own_correction(self) -> np.ndarray:
        """The stream's own T_map_odom now (under ``_lock``)."""
        return np.array(self._own, np.float64)

    def _work(self) -> None:
        while True:
            with self._cv:
                if self._stopping:
                    return
            self.run_once()

    def _step(self, item: _Item) -> None:
        """One keyframe into the back end (under ``_lock``); a failure is counted, never
        raised: the thread goes on with the next keyframe."""
        try:
            kf = self._keyframe_input(metric_result(item.result, item.metres_per_unit))
            step = self._backend.offer(kf, verify=item.verify)
        except Exception as exc:  # noqa: BLE001 -- a bad keyframe, a pair that failed
            error = f"{type(exc).__name__}: {exc}"
            with self._cv:
                self._facts = replace(self._facts, failures=self._facts.failures + 1,
                                      last_error=error)
            self._log.error(f"loop back end: keyframe {getattr(item.result, 'index', '?')} "
                            f"not taken: {error}")
            return
        self._stamps[int(kf.keyframe_id)] = int(kf.stamp_ns)
        self._own = np.array(step.correction, np.float64)
        maps = self._maps
        localized = item.verify and item.metres_per_unit is not None and maps.offer(
            kf, item.chain, self._own, self._log)
        loops = tuple(step.loops)
        if maps.anchor is not None:  # localized: every correction into the stored map
            loops = tuple(replace(e, correction=maps.corrected(e.correction)) for e in loops)
        with self._cv:  # the worker's offer replaces the facts too (queued, busy)
            facts = self._facts
            self._facts = replace(
                facts, correction=maps.corrected(self._own),
                counts=self._backend.counts, loops=facts.loops + len(loops),
                last_loop=loops[-1] if loops else facts.last_loop,
                localization=maps.facts)
        on_loops = self._on_loops
        if (loops or localized) and on_loops is not None:  # localized: ~/path, map moved
            try:
                on_loops(loops, maps.view(self._backend), item.chain, dict(self._stamps))
            except Exception as exc:  # noqa: BLE001 -- a publisher went away: logged
                self._log.error(f"loop back end: publishing loop: {type(exc).__name__}: {exc}")

    def _drop_queue(self) -> None:
        """(under ``_cv``) Forget the keyframes waiting; a new generation."""
        self._queue.clear()
        self._verify_waiting = 0
        self._generation += 1
        self._facts = replace(self._facts, queued=0)


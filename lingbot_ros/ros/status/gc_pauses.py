"""GcPauses: the cyclic garbage collector's full collections in the node process, timed.

A full (generation 2) collection walks every object the process tracks. In a node process
(torch, rclpy, the model's modules: ~200,000 objects) one takes ~110 ms on the CI machine
(``scripts/gc_pause_probe.py``), with the GIL held, in whichever thread allocated the object
that triggered it: if that is the worker, the frame waits. Python starts one whenever the
objects that survived two younger collections reach a quarter of those the last full
collection found. ``gc_freeze`` moves what exists after configure out of those walks. These
figures, on /diagnostics, say whether and how long the stream paused for them
(``scripts/node_bench.py`` reports them per phase, beside its stalls).

``GcPauses.install()`` registers a ``gc.callbacks`` hook; ``uninstall()`` removes it. The
hook runs inside the collector with the GIL held, in any thread: it takes no lock (a lock
held by the thread that triggered the collection would deadlock it) and publishes its
figures as one tuple, replaced whole, so a reader never sees half an update. Collections
the node asks for itself (``gc.collect()`` at configure and release) run inside
``explicit()`` and are not counted: they are not pauses of the stream.

``freeze()`` / ``unfreeze()`` are the node's ``gc_freeze`` (after configure / at release).
The number of frozen objects is counted there, once: ``gc.get_freeze_count()`` walks every
frozen object (~17 ms with the GIL held over a built session), so ``describe()``, which each
/diagnostics tick calls, reads only figures kept here and costs the same over any heap.
"""
from __future__ import annotations

import gc
import sys
import time
from contextlib import contextmanager
from typing import Iterator, Optional

__all__ = ["GcPauses", "gc_functions_called"]


class GcPauses:
    """Counts and times the automatic full collections while installed."""

    def __init__(self) -> None:
        # (automatic full collections, last pause ms, longest pause ms, total ms): one tuple,
        # replaced whole by the hook, read whole by describe()
        self._figures: tuple[int, Optional[float], Optional[float], float] = (0, None, None, 0.0)
        self._started: Optional[float] = None  # perf_counter() at the current full collection
        self._explicit = 0  # > 0 while the node's own gc.collect() runs
        self._installed = False
        self._frozen = 0  # objects freeze() kept out of the walks (counted once, there)

    def install(self) -> None:
        """Start timing (idempotent)."""
        if not self._installed:
            gc.callbacks.append(self._hook)
            self._installed = True

    def uninstall(self) -> None:
        """Stop timing (idempotent); the figures so far stay readable."""
        if self._installed:
            gc.callbacks.remove(self._hook)
            self._installed = False

    @contextmanager
    def explicit(self) -> Iterator[None]:
        """Collections run in this block are the caller's own and are not counted."""
        self._explicit += 1
        try:
            yield
        finally:
            self._explicit -= 1

    def freeze(self) -> None:
        """gc_freeze: a full collection of the garbage so far (not counted), then everything
        left is kept out of the collector's walks; the frozen objects are counted here, once."""
        with self.explicit():
            gc.collect()
        gc.freeze()
        self._frozen = gc.get_freeze_count()

    def unfreeze(self) -> None:
        """Give what ``freeze()`` kept back to the collector, and collect it (not counted)."""
        gc.unfreeze()
        self._frozen = 0
        with self.explicit():
            gc.collect()

    def _hook(self, phase: str, info: dict) -> None:
        if info.get("generation") != 2 or self._explicit:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif phase == "stop" and self._started is not None:
            ms = (time.perf_counter() - self._started) * 1e3
            self._started = None
            count, _, longest, total = self._figures
            self._figures = (count + 1, ms, ms if longest is None else max(longest, ms),
                             total + ms)

    def describe(self) -> dict:
        """The diagnostics key/values: ``gc_full_collections`` (automatic ones since the node
        started), ``gc_full_pause_last_ms`` / ``gc_full_pause_max_ms`` / ``gc_full_pause_total_ms``
        (-1 before the first) and ``gc_frozen_objects`` (kept out of the walks by
        ``freeze()``, counted when it ran). O(1): reads no object of the heap."""
        count, last, longest, total = self._figures
        return {"gc_full_collections": count,
                "gc_full_pause_last_ms": -1.0 if last is None else last,
                "gc_full_pause_max_ms": -1.0 if longest is None else longest,
                "gc_full_pause_total_ms": total,
                "gc_frozen_objects": self._frozen}


def gc_functions_called(call) -> list[str]:
    """The gc module's functions that ``call()`` ran, seen by the profiler (a real call
    observed, nothing replaced): the check that a diagnostics tick walks no heap
    (tests/ros/unit/test_gc_pauses.py, scripts/diagnostics_tick_bench.py)."""
    called: list[str] = []

    def profile(frame, event, arg):
        if event == "c_call" and getattr(arg, "__module__", None) == "gc":
            called.append(arg.__name__)
    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return called

"""GcPauses: full collections counted and timed, the node's own left out, no lock in the hook."""
from __future__ import annotations

import gc
import threading

import pytest

from lingbot_ros.ros.status.gc_pauses import GcPauses, gc_functions_called


@pytest.fixture
def pauses():
    p = GcPauses()
    p.install()
    yield p
    p.uninstall()


def cycles(n: int = 2000) -> None:
    """Garbage only the cyclic collector can free."""
    for _ in range(n):
        a: list = []
        a.append(a)


def test_nothing_before_the_first_full_collection(pauses):
    d = pauses.describe()
    assert d["gc_full_collections"] == 0
    assert d["gc_full_pause_last_ms"] == d["gc_full_pause_max_ms"] == -1.0
    assert d["gc_full_pause_total_ms"] == 0.0


def test_a_full_collection_is_counted_and_timed(pauses):
    cycles()
    gc.collect(2)
    d = pauses.describe()
    assert d["gc_full_collections"] == 1
    assert d["gc_full_pause_last_ms"] > 0.0
    assert d["gc_full_pause_max_ms"] == d["gc_full_pause_last_ms"] == d["gc_full_pause_total_ms"]
    gc.collect(2)
    d2 = pauses.describe()
    assert d2["gc_full_collections"] == 2
    assert d2["gc_full_pause_max_ms"] == max(d["gc_full_pause_last_ms"],
                                             d2["gc_full_pause_last_ms"])
    assert d2["gc_full_pause_total_ms"] == pytest.approx(
        d["gc_full_pause_last_ms"] + d2["gc_full_pause_last_ms"])


def test_young_collections_are_not_full_ones(pauses):
    gc.collect(0)
    gc.collect(1)
    assert pauses.describe()["gc_full_collections"] == 0


def test_the_callers_own_collections_are_not_counted(pauses):
    with pauses.explicit():
        gc.collect()
        with pauses.explicit():  # nested
            gc.collect()
        gc.collect()
    assert pauses.describe()["gc_full_collections"] == 0
    gc.collect()  # after the block: counted again
    assert pauses.describe()["gc_full_collections"] == 1


def test_install_is_idempotent_and_uninstall_stops_counting():
    before = len(gc.callbacks)
    p = GcPauses()
    p.install()
    p.install()
    try:
        assert len(gc.callbacks) == before + 1
        gc.collect()
        assert p.describe()["gc_full_collections"] == 1
    finally:
        p.uninstall()
        p.uninstall()
    assert len(gc.callbacks) == before
    gc.collect()
    assert p.describe()["gc_full_collections"] == 1  # the figures so far stay readable


def test_freeze_counts_the_frozen_objects_and_unfreeze_gives_them_back(pauses):
    assert pauses.describe()["gc_frozen_objects"] == 0
    pauses.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert pauses.describe()["gc_frozen_objects"] == frozen
    finally:
        pauses.unfreeze()
    assert gc.get_freeze_count() == 0
    assert pauses.describe()["gc_frozen_objects"] == 0
    assert pauses.describe()["gc_full_collections"] == 0  # its own collections: not pauses


def test_describe_walks_no_heap_however_many_objects_are_frozen(pauses):
    """Each /diagnostics tick calls describe(): gc.get_freeze_count() walks every frozen
    object (~17 ms per tick over a built session, the worker starved at 100 Hz). describe()
    calls no function of the gc module, before and after a million objects are frozen, and
    reports the count freeze() took."""
    assert gc_functions_called(pauses.describe) == []
    kept = [[i] for i in range(1_000_000)]  # tracked containers, as a session's modules
    pauses.freeze()
    try:
        called = gc_functions_called(pauses.describe)
        assert called == [], f"describe() called gc.{called}: it walks the heap per tick"
        assert pauses.describe()["gc_frozen_objects"] >= len(kept)
    finally:
        pauses.unfreeze()
    del kept


def test_collections_in_other_threads_while_figures_are_read(pauses):
    """The hook runs in whichever thread triggers a collection and takes no lock: readers on
    another thread neither block it nor see a torn tuple (count and total agree)."""
    done = threading.Event()

    def collect():
        for _ in range(30):
            cycles(200)
            gc.collect()
        done.set()

    thread = threading.Thread(target=collect)
    thread.start()
    reads = 0
    while not done.is_set():
        d = pauses.describe()
        assert (d["gc_full_collections"] == 0) == (d["gc_full_pause_max_ms"] == -1.0)
        assert d["gc_full_pause_total_ms"] >= max(0.0, d["gc_full_pause_max_ms"])
        reads += 1
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert pauses.describe()["gc_full_collections"] == 30
    assert reads > 0

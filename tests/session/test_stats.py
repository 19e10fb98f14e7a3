"""LatencyWindow: percentiles, and safe to share between a worker, a timer and a reset."""
import threading

from lingbot_ros.session import LatencyWindow


def test_summary_of_the_kept_window():
    w = LatencyWindow(size=4)
    assert w.summary()["count"] == 0 and w.summary()["p50"] is None
    for ms in (1, 2, 3, 4, 100):
        w.add(ms)
    s = w.summary()
    assert s["count"] == 5 and s["last"] == 100 and s["max"] == 100
    assert s["p50"] == 3.5  # over the last 4: 2, 3, 4, 100


def test_add_clear_and_summary_from_three_threads_never_raise():
    """The node's worker adds, its diagnostics timer summarises and its reset clears, all at
    once: without the lock a summary read a value the clear had just removed (IndexError)."""
    w = LatencyWindow(size=1000)
    stop = threading.Event()
    errors = []

    def run(fn):
        try:
            while not stop.is_set():
                fn()
        except Exception as exc:  # noqa: BLE001 -- the failure under test
            errors.append(exc)
            stop.set()

    threads = [threading.Thread(target=run, args=(fn,)) for fn in
               (lambda: w.add(1.0), w.clear, w.summary, w.summary)]
    for t in threads:
        t.start()
    summaries = 0
    for _ in range(20_000):
        if stop.is_set():
            break
        s = w.summary()
        assert s["count"] == 0 or s["last"] == 1.0
        summaries += 1
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors
    assert summaries == 20_000


def test_a_summary_is_computed_once_per_change_of_the_window():
    """The diagnostics timer reads the summary more often than frames come: the same window
    gives the same figures (computed once), each add, clear or load gives new ones."""
    w = LatencyWindow(size=4)
    for ms in (1, 2, 3):
        w.add(ms)
    first = w.summary()
    first["p50"] = -1.0  # a caller's copy: the kept summary is not changed through it
    assert w.summary() == {"count": 3, "last": 3.0, "p50": 2.0, "p90": 2.8,
                           "p99": 2.98, "max": 3.0}
    w.add(10)
    assert w.summary()["last"] == 10.0 and w.summary()["count"] == 4
    w.clear()
    assert w.summary()["count"] == 0 and w.summary()["p50"] is None
    w.load_state_dict({"values": [5.0, 7.0], "count": 9})
    assert w.summary()["count"] == 9 and w.summary()["p50"] == 6.0

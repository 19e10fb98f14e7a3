"""RigGather (ros/intake/rig_gather.py): a rig's latest-frame slots gathered into ticks, on a
fake clock (no sleeps): every live camera's frame, or the oldest waiting max_wait_ms; newer
frames replace waiting ones (dropped per camera); a late camera is waited for once."""
from __future__ import annotations

import threading

import pytest

from lingbot_ros.ros.intake.rig_gather import RigGather


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance_ms(self, ms: float) -> None:
        self.now += ms / 1000.0


def make(names=("front", "rear"), max_wait_ms=30.0):
    clock = FakeClock()
    return RigGather(names, max_wait_ms, clock=clock), clock


def test_a_tick_is_ready_when_every_camera_has_a_frame():
    g, clock = make()
    assert g.take() is None and not g.ready() and g.deadline() is None
    g.put("front", "f1")
    assert not g.ready() and g.take() is None
    assert g.deadline() == pytest.approx(clock.now + 0.030)
    clock.advance_ms(5)
    g.put("rear", "r1")
    tick = g.take()
    assert dict(tick.frames) == {"front": "f1", "rear": "r1"}
    assert list(tick.frames) == ["front", "rear"]  # the rig's name order
    assert tick.missing == () and not tick.timed_out
    assert tick.waited_s == pytest.approx(0.005)
    assert g.take() is None and g.waiting() == ()  # the slots are empty again


def test_the_order_of_puts_does_not_change_the_ticks_order():
    g, _ = make(("a", "b", "c"))
    for name in ("c", "a", "b"):
        g.put(name, name.upper())
    assert list(g.take().frames) == ["a", "b", "c"]


def test_after_max_wait_the_tick_runs_with_the_frames_that_are_there():
    g, clock = make()
    g.put("front", "f1")
    clock.advance_ms(29.9)
    assert g.take() is None
    clock.advance_ms(0.1)  # the oldest frame is max_wait_ms old
    tick = g.take()
    assert dict(tick.frames) == {"front": "f1"} and tick.missing == ("rear",)
    assert tick.timed_out and tick.waited_s == pytest.approx(0.030)
    counts = g.counts()
    assert counts["rear"].missed == 1 and not counts["rear"].live
    assert counts["front"].taken == 1 and counts["front"].missed == 0


def test_a_late_camera_is_waited_for_once_then_again_from_its_next_frame():
    g, clock = make()
    g.put("front", "f1")
    clock.advance_ms(30)
    assert g.take().missing == ("rear",)
    g.put("front", "f2")  # rear not live: the front runs at once
    tick = g.take()
    assert dict(tick.frames) == {"front": "f2"} and not tick.timed_out and tick.waited_s == 0
    assert g.counts()["rear"].missed == 1  # not counted again while it is not live
    g.put("rear", "r3")  # back: waited for again
    assert g.counts()["rear"].live
    tick = g.take()  # every live camera has a frame (rear is live, front too)
    assert tick is None  # front is live and has none: wait for it
    g.put("front", "f3")
    assert dict(g.take().frames) == {"front": "f3", "rear": "r3"}


def test_the_deadline_is_the_oldest_frames():
    g, clock = make(("a", "b", "c"))
    g.put("a", 1)
    clock.advance_ms(20)
    g.put("b", 2)
    assert g.deadline() == pytest.approx(clock.now + 0.010)
    clock.advance_ms(10)
    tick = g.take()
    assert dict(tick.frames) == {"a": 1, "b": 2} and tick.missing == ("c",)
    assert tick.waited_s == pytest.approx(0.030)


def test_newer_frames_replace_waiting_ones_counted_per_camera():
    g, clock = make()
    assert g.put("front", "f1") is False
    clock.advance_ms(10)
    assert g.put("front", "f2") is True  # f1 never ran
    assert g.put("front", "f3") is True
    assert g.deadline() == pytest.approx(clock.now + 0.030)  # the newest frame's wait
    g.put("rear", "r1")
    assert dict(g.take().frames) == {"front": "f3", "rear": "r1"}
    counts = g.counts()
    assert (counts["front"].received, counts["front"].dropped, counts["front"].taken) == (3, 2, 1)
    assert (counts["rear"].received, counts["rear"].dropped) == (1, 0)


def test_clear_drops_one_camera_or_all():
    g, _ = make()
    g.put("front", "f1")
    g.put("rear", "r1")
    assert g.clear("rear") == 1 and g.waiting() == ("front",)
    assert g.clear("rear") == 0
    g.put("rear", "r2")
    assert g.clear() == 2 and g.waiting() == ()
    counts = g.counts()
    assert counts["rear"].cleared == 2 and counts["front"].cleared == 1
    assert counts["front"].dropped == 0


def test_zero_wait_runs_any_waiting_frame_at_once():
    g, _ = make(max_wait_ms=0.0)
    g.put("rear", "r1")
    assert dict(g.take().frames) == {"rear": "r1"}


def test_one_camera_ticks_on_every_frame():
    g, _ = make(("cam",))
    g.put("cam", 1)
    assert dict(g.take().frames) == {"cam": 1}


def test_wait_returns_a_ready_tick_or_none_after_its_timeout():
    g, clock = make()
    assert g.wait(0.0) is None
    g.put("front", "f1")
    assert g.wait(0.0) is None  # the fake clock does not move: rear is still waited for
    clock.advance_ms(30)
    assert dict(g.wait(0.0).frames) == {"front": "f1"}
    # a frame put from another thread wakes a waiting worker
    got = []
    worker = threading.Thread(target=lambda: got.append(g.wait(10.0)))
    worker.start()
    g.put("rear", "r2")  # live again; the front (live) has none yet: not ready
    g.put("front", "f2")
    worker.join(10.0)
    assert not worker.is_alive() and dict(got[0].frames) == {"front": "f2", "rear": "r2"}


def test_bad_arguments():
    with pytest.raises(ValueError, match="distinct camera names"):
        RigGather(("a", "a"), 30.0)
    with pytest.raises(ValueError, match="distinct camera names"):
        RigGather((), 30.0)
    with pytest.raises(ValueError, match="max_wait_ms must be >= 0"):
        RigGather(("a",), -1.0)
    g, _ = make()
    with pytest.raises(ValueError, match="no camera 'left' in the rig"):
        g.put("left", 1)
    with pytest.raises(ValueError, match="no camera 'left'"):
        g.clear("left")

"""BackendThread without ROS (ros/backend/backend_thread.py): its queue bounds verification
and loses no keyframe, a failure is counted and the next keyframe goes on, reset and load
start anew between two keyframes, a snapshot covers every keyframe offered, and accepted
loops reach ``on_loops`` with the back end's correction in the facts.

The back end here is ``ScriptedBackend``: the planned ``LoopBackend`` API (offer, counts,
correction, state) over a plain list, which records every keyframe and its verify flag and
accepts a loop where the test says. It stands in for loop/backend.py, which is tested in
tests/loop/; what is tested here is the thread's bookkeeping, driven through ``run_once``
(no sleeps: deterministic).
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from types import MappingProxyType

import numpy as np
import pytest

from lingbot_ros.loop.backend_types import (REJECT_REASONS, BackendStep, LoopCounts,
                                            LoopEvent)
from lingbot_ros.ros.backend.backend_thread import BackendThread

LOG = logging.getLogger("test_backend_thread")


@dataclass(frozen=True)
class Frame:
    index: int
    stamp_ns: int


@dataclass(frozen=True)
class Keyframe:
    keyframe_id: int
    stamp_ns: int


def keyframe_input(result: Frame) -> Keyframe:
    if result.index < 0:
        raise ValueError("the frame result has no features")
    return Keyframe(result.index, result.stamp_ns)


def shift(x: float) -> np.ndarray:
    T = np.eye(4)
    T[0, 3] = x
    return T


class ScriptedBackend:
    """The planned LoopBackend API; a loop is accepted at the ids in ``loops_at``."""

    def __init__(self, loops_at=()) -> None:
        self.offered: list[tuple[int, bool]] = []
        self.loops_at = set(loops_at)
        self.correction = np.eye(4)
        self.busy = 0

    def offer(self, kf: Keyframe, verify: bool = True) -> BackendStep:
        self.offered.append((kf.keyframe_id, verify))
        self.busy += not verify
        loops = ()
        if kf.keyframe_id in self.loops_at:
            self.correction = shift(0.1 * kf.keyframe_id)
            loops = (LoopEvent(kf.stamp_ns, kf.keyframe_id, 0, 0, self.correction, 0.1, 0.0,
                               0.01, 0.1, 0.9, 1.0),)
        return BackendStep(kf.keyframe_id, True, (), (), loops, self.correction, bool(loops))

    @property
    def counts(self) -> LoopCounts:
        rejected = dict.fromkeys(REJECT_REASONS, 0)
        rejected["busy"] = self.busy
        return LoopCounts(keyframes=len(self.offered), kept=len(self.offered),
                          rejected=MappingProxyType(rejected))

    def keyframe_poses(self) -> dict:
        return {i: self.correction for i, _ in self.offered}

    def state_dict(self) -> dict:
        return {"offered": np.array([i for i, _ in self.offered], np.int64),
                "correction": self.correction.copy()}

    def load_state_dict(self, state) -> None:
        if "offered" not in state:
            raise ValueError("back end state: no offered keyframes")
        self.offered = [(int(i), False) for i in state["offered"]]
        self.correction = np.asarray(state["correction"], float)


def make(queue_size: int = 2, loops_at=(), on_loops=None):
    made: list[ScriptedBackend] = []

    def factory():
        made.append(ScriptedBackend(loops_at))
        return made[-1]
    thread = BackendThread(factory, keyframe_input, queue_size=queue_size, log=LOG,
                           on_loops=on_loops)
    return thread, made


def drain(thread: BackendThread) -> None:
    while thread.run_once(timeout=0.0):
        pass


def test_beyond_the_queue_keyframes_go_in_unverified_and_none_is_lost():
    thread, made = make(queue_size=2)
    flags = [thread.offer(Frame(i, 1000 * i), chain=None) for i in range(6)]
    assert flags == [True, True, False, False, False, False]
    facts = thread.facts()
    assert facts.busy == 4 and facts.queued == 6 and facts.backlog_max == 6
    drain(thread)
    assert made[-1].offered == [(0, True), (1, True), (2, False), (3, False), (4, False),
                                (5, False)]
    assert thread.facts().queued == 0 and thread.facts().counts.keyframes == 6
    # the queue is free again: the next one is verified
    assert thread.offer(Frame(6, 6000), chain=None)
    drain(thread)
    assert made[-1].offered[-1] == (6, True)


def test_a_keyframe_the_back_end_cannot_take_is_counted_and_the_next_goes_on():
    thread, made = make()
    thread.offer(Frame(-1, 0), chain=None)
    thread.offer(Frame(1, 1000), chain=None)
    drain(thread)
    facts = thread.facts()
    assert facts.failures == 1 and "features" in facts.last_error
    assert made[-1].offered == [(1, True)]
    assert facts.info()["loop_failures"] == 1


def test_an_accepted_loop_reaches_on_loops_and_the_facts_carry_its_correction():
    calls = []
    thread, made = make(loops_at={3}, on_loops=lambda *a: calls.append(a))
    for i in range(5):
        thread.offer(Frame(i, 1000 * i), chain="chain")
    drain(thread)
    assert len(calls) == 1
    events, backend, chain, stamps = calls[0]
    assert events[0].keyframe_id == 3 and backend is made[-1] and chain == "chain"
    assert stamps == {0: 0, 1: 1000, 2: 2000, 3: 3000}  # the keyframes so far
    facts = thread.facts()
    assert facts.loops == 1 and facts.last_loop.keyframe_id == 3
    np.testing.assert_allclose(facts.correction, shift(0.3))
    info = facts.info()
    assert info["loop_keyframes"] == 5 and "keyframe 3 -> 0" in info["loop_last"]
    assert set(f"loop_rejected_{r}" for r in REJECT_REASONS) <= set(info)


def test_a_failing_on_loops_is_logged_and_the_thread_goes_on():
    def broken(*args):
        raise RuntimeError("publisher gone")
    thread, made = make(loops_at={0}, on_loops=broken)
    thread.offer(Frame(0, 0), chain=None)
    thread.offer(Frame(1, 1), chain=None)
    drain(thread)
    assert [i for i, _ in made[-1].offered] == [0, 1] and thread.facts().loops == 1


def test_reset_drops_the_waiting_keyframes_and_starts_a_fresh_back_end():
    thread, made = make(loops_at={0})
    thread.offer(Frame(0, 0), chain=None)
    drain(thread)
    thread.offer(Frame(1, 1), chain=None)
    thread.reset()
    drain(thread)
    assert len(made) == 2 and made[-1].offered == []
    facts = thread.facts()
    assert facts.loops == 0 and facts.queued == 0
    np.testing.assert_allclose(facts.correction, np.eye(4))


def test_a_snapshot_takes_the_waiting_keyframes_in_unverified_and_loads_back():
    thread, made = make(loops_at={1})
    for i in range(4):
        thread.offer(Frame(i, 10 * i), chain=None)
    thread.run_once(timeout=0.0)
    thread.run_once(timeout=0.0)  # 0 and 1 verified; 2 and 3 still waiting
    state = thread.state_dict()
    assert made[-1].offered == [(0, True), (1, True), (2, False), (3, False)]
    assert state["keyframe_ids"].tolist() == [0, 1, 2, 3]
    assert state["keyframe_stamps_ns"].tolist() == [0, 10, 20, 30]
    other, made2 = make()
    other.offer(Frame(7, 70), chain=None)
    drain(other)
    prepared = other.prepare_load(state)
    assert made2[0].offered == [(7, True)]  # the running back end is untouched until adopt
    assert other.facts().counts.keyframes == 1
    other.adopt(prepared)
    facts = other.facts()
    np.testing.assert_allclose(facts.correction, shift(0.1))
    assert facts.loops == 1 and [i for i, _ in made2[-1].offered] == [0, 1, 2, 3]


@pytest.mark.parametrize("state", [None, {"version": 99}, {"version": 1, "backend": {}},
                                   {"version": 1, "backend": {"offered": [0],
                                                              "correction": np.eye(4)}}])
def test_a_state_it_cannot_continue_is_refused_with_the_running_one_untouched(state):
    thread, made = make()
    thread.offer(Frame(0, 0), chain=None)
    drain(thread)
    with pytest.raises(ValueError):
        thread.prepare_load(state)
    assert made[0].offered == [(0, True)] and thread.facts().counts.keyframes == 1


def test_the_thread_takes_keyframes_offered_from_another_thread():
    thread, made = make(queue_size=1)
    thread.start()
    try:
        workers = [threading.Thread(target=lambda i=i: thread.offer(Frame(i, i), None))
                   for i in range(20)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        thread.stop()
    drain(thread)  # what the thread left when it stopped
    assert sorted(i for i, _ in made[-1].offered) == list(range(20))
    assert thread.facts().busy == sum(not v for _, v in made[-1].offered)


def test_the_real_back_end_through_the_thread_closes_the_loop_and_snapshots():
    """loop/backend.py's ``LoopBackend`` on tests/loop/backend_scene.py's drifted loop (its
    pair built from the geometry), through the thread: loops reach ``on_loops`` with a back
    end whose optimised poses and stored depths rebuild a path and a map, the facts carry
    its correction, and a snapshot continues in a second thread, bit for bit."""
    pytest.importorskip("gtsam")
    from lingbot_ros.loop.backend import LoopBackend
    from lingbot_ros.loop.config import LoopConfig
    from lingbot_ros.ros.backend.corrections import corrected_path, rebuild_map
    from lingbot_ros.ros.tf.frame_chain import FrameChain
    from tests.loop.backend_scene import Scene

    scene = Scene(revisit=6)
    config = LoopConfig(min_keyframe_distance_m=0.0, min_age_s=5.0)
    seen = []

    def on_loops(events, backend, chain, stamps):
        poses = corrected_path(chain, backend.keyframe_poses(), stamps)
        points = rebuild_map(backend.keyframe_depths(), chain, 0.05, 10_000)
        seen.append((events, len(poses), points.num_points))

    made = []

    def make_backend():
        made.append(LoopBackend(config, scene.pair, window=4))
        return made[-1]
    thread = BackendThread(make_backend, lambda kf: kf, queue_size=10_000, log=LOG,
                           on_loops=on_loops)
    chain = FrameChain.camera_only("cam", True)
    for k in range(scene.n):
        thread.offer(scene.keyframe(k), chain)
    drain(thread)
    facts = thread.facts()
    assert seen and facts.loops == sum(len(e) for e, _, _ in seen) and facts.busy == 0
    events, n_poses, n_points = seen[0]
    assert n_poses == events[-1].keyframe_id + 1 and n_points > 0
    assert not np.allclose(facts.correction, np.eye(4))  # the drift is corrected
    last = scene.keyframe(scene.n - 1)  # the facts: the back end's map -> odom now
    np.testing.assert_allclose(facts.correction, made[-1].correction_at(last.T_odom_cam),
                               atol=1e-12)
    state = thread.state_dict()
    other = BackendThread(make_backend, lambda kf: kf, queue_size=2, log=LOG)
    other.adopt(other.prepare_load(state))
    np.testing.assert_array_equal(other.facts().correction, facts.correction)
    assert other.facts().counts.accepted == facts.counts.accepted

"""MultiStreamSession: each stream's outcomes equal those of its own StreamingSession fed the
same frames (poses and depth to 1e-5, keyframe decisions, tickets and cache counts exact),
per keyframe policy, with mixed policies, a late stream, and one stream reset, rolled over
(blocking, sliced), restored or rejecting frames mid-run; names and settings are checked."""
import dataclasses
import gc

import numpy as np
import pytest

from lingbot_ros.config import KeyframeConfig, SessionConfig
from lingbot_ros.session import (FrameFailed, FrameIn, FrameRejected, MultiStreamSession,
                                 StreamingSession)
from lingbot_ros.session.multi_session import SequentialSteps
from tests.session.micro_model import SIZE_42x56, micro_model
from tests.session.test_streaming_session import DT, STAMP0, frames

POLICIES = {"all": KeyframeConfig(policy="all"),
            "every_n": KeyframeConfig(policy="every_n", n=2),
            # random weights: huge flows; decided from the outputs, the gap rule caps it
            "flow": KeyframeConfig(policy="flow", flow_threshold=1e5, max_gap=4)}
MODEL = micro_model()


def config(policy="every_n", **kw) -> SessionConfig:
    kw.setdefault("num_scale_frames", 3)
    kw.setdefault("window", 3)
    kw.setdefault("rollover_keyframes", 6)
    return SessionConfig(preprocess=SIZE_42x56, attention_backend="torch_ref",
                         keyframes=POLICIES[policy], **kw)


def schedule(names, n, seed=0, skip=None):
    """``n`` ticks of frames for ``names`` (each its own images); ``skip``: name -> ticks
    where that stream has no frame."""
    imgs = {name: frames(n, seed=seed + i) for i, name in enumerate(names)}
    skip = skip or {}
    return [{name: FrameIn(imgs[name][t], STAMP0 + t * DT) for name in names
             if t not in skip.get(name, ())} for t in range(n)]


def drive(rig, ticks, events=None):
    """Run ``ticks`` through the rig (collecting each ticked stream without waiting) and
    through one StreamingSession per stream fed the same frames. ``events``: tick ->
    callables(session, name) run on both sides before that tick. Returns (rig outcomes,
    alone outcomes, alone sessions, returns) by name."""
    events = events or {}
    alone = {name: StreamingSession(MODEL, rig.stream(name).config) for name in rig.names}
    got = {name: [] for name in rig.names}
    want = {name: [] for name in rig.names}
    returned = {name: [] for name in rig.names}
    for t, tick in enumerate(ticks):
        for name, action in events.get(t, ()):
            got[name] += action(rig, name, rig.stream(name))
            want[name] += action(None, name, alone[name])
        out = rig.submit_many(tick)
        assert sorted(out) == sorted(tick)
        for name, f in tick.items():
            returned[name].append(out[name])
            try:
                ticket = alone[name].submit(f.image, f.stamp_ns, f.encoding,
                                            with_depth=f.with_depth)
                assert out[name] == ticket
            except FrameRejected as exc:
                assert isinstance(out[name], FrameRejected) and out[name].reason == exc.reason
            got[name] += rig.collect(name, wait=False)
            want[name] += alone[name].collect(wait=False)
    for name in rig.names:
        got[name] += rig.collect(name)
        want[name] += alone[name].collect()
    return got, want, alone, returned


def assert_same(rig, got, want, alone):
    for name in rig.names:
        a_list, b_list = got[name], want[name]
        assert len(a_list) == len(b_list) and a_list, name
        for a, b in zip(a_list, b_list):
            assert type(a) is type(b), name
            if isinstance(a, FrameFailed):
                assert a.tickets == b.tickets
                continue
            assert (a.index, a.ticket, a.stamp_ns, a.keyframe, a.segment) == \
                (b.index, b.ticket, b.stamp_ns, b.keyframe, b.segment), (name, a.index)
            np.testing.assert_allclose(a.pose_enc, b.pose_enc, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(a.c2w, b.c2w, rtol=1e-5, atol=1e-5)
            assert (a.depth is None) == (b.depth is None), (name, a.index)
            if a.depth is not None:
                np.testing.assert_allclose(a.depth, b.depth, rtol=1e-5, atol=1e-5)
        ia, ib = rig.info()[name].as_dict(), alone[name].info().as_dict()
        ia.pop("latency_ms"), ib.pop("latency_ms")
        for info in (ia, ib):  # the rig's camera blocks are sized by the shared pool
            for key in ("capacity_frames", "bytes_reserved"):
                info["camera_cache"].pop(key)
        assert ia == ib, name
        assert [(r.segment, r.frame_index) for r in rig.stream(name).rollovers] == \
            [(r.segment, r.frame_index) for r in alone[name].rollovers], name


@pytest.mark.parametrize("policy", list(POLICIES))
def test_each_stream_equals_its_own_session_per_policy(policy):
    rig = MultiStreamSession(MODEL, {"front": config(policy), "rear": config(policy)})
    got, want, alone, _ = drive(rig, schedule(rig.names, 11, seed=3))
    assert_same(rig, got, want, alone)
    assert rig.info()["front"].rollovers >= 1
    (batch,) = rig.steps.batch.values()  # one engine: the streams' frames ran as one step
    assert batch.info()["steps"].get(2, 0) >= 5
    if policy != "all":
        assert any(not r.keyframe for r in got["front"] + got["rear"])


def test_mixed_policies_and_rollover_modes_in_one_tick():
    rig = MultiStreamSession(MODEL, {
        "a": config("all", rollover_mode="sliced", rollover_slices_per_frame=3),
        "b": config("every_n", rollover_keyframes=None, window=2),  # depth only if asked
        "c": config("flow", num_scale_frames=2, rollover_mode="sliced",
                    rollover_slices_per_frame=50)})
    ticks = schedule(rig.names, 14, seed=5)
    ticks[4]["b"] = dataclasses.replace(ticks[4]["b"], with_depth=False)
    got, want, alone, _ = drive(rig, ticks)
    assert_same(rig, got, want, alone)
    info = rig.info()
    assert info["a"].rollovers >= 1 and info["c"].rollovers >= 1
    assert got["b"][4].depth is None and got["a"][4].depth is not None


def test_a_late_stream_is_untouched_by_the_ticks_it_misses():
    rig = MultiStreamSession(MODEL, {"front": config("every_n"), "rear": config("flow")})
    ticks = schedule(rig.names, 16, seed=7, skip={"rear": {0, 1, 5, 6, 7, 12}})
    got, want, alone, _ = drive(rig, ticks)
    assert_same(rig, got, want, alone)
    assert rig.info()["rear"].frames_in == 10 and rig.info()["front"].frames_in == 16


def test_a_reset_of_one_stream_leaves_the_others_as_they_were():
    rig = MultiStreamSession(MODEL, {"a": config("every_n"), "b": config("all")})

    def reset(owner, name, session):
        if owner is not None:
            owner.reset(name)
        else:
            session.reset()
        return []

    got, want, alone, _ = drive(rig, schedule(rig.names, 14, seed=9), {8: [("a", reset)]})
    assert_same(rig, got, want, alone)
    assert rig.info()["a"].frames_in == 6 and rig.info()["b"].frames_in == 14


def test_a_snapshot_restored_into_one_stream_mid_run():
    rig = MultiStreamSession(MODEL, {"a": config("flow"), "b": config("every_n")})
    saved = {}

    def save(owner, name, session):
        out = session.collect()  # between frames
        saved[owner is not None] = session.snapshots.state_dict()
        return out

    def restore(owner, name, session):
        out = session.collect()
        session.snapshots.load_state_dict(saved[owner is not None])
        return out

    got, want, alone, _ = drive(rig, schedule(rig.names, 16, seed=11),
                                {6: [("a", save)], 11: [("a", restore)]})
    assert_same(rig, got, want, alone)
    # frames 6..10 of stream a were forgotten: it went on from frame 6's state
    assert [r.index for r in got["a"]][-5:] == [6, 7, 8, 9, 10]
    assert rig.runners.made == 3  # a's and b's first frames, a's restore: the rig's runners
    # the replaced runner's page table and camera block went back to the shared pools
    gc.collect()
    (shared,) = rig.runners.shared.values()
    assert shared.kv_pool.info()["streams"] == 2 and shared.camera_pool.num_live == 2
    shared.kv_pool.check_invariants()


def test_rejected_frames_are_counted_by_their_own_stream():
    rig = MultiStreamSession(MODEL, {"a": config("all"), "b": config("all")})
    ticks = schedule(rig.names, 8, seed=13)
    ticks[5]["a"] = dataclasses.replace(ticks[5]["a"], stamp_ns=ticks[4]["a"].stamp_ns)
    ticks[6]["b"] = dataclasses.replace(ticks[6]["b"], image=np.zeros((5, 5), np.uint8))
    got, want, alone, returned = drive(rig, ticks)
    assert_same(rig, got, want, alone)
    assert isinstance(returned["a"][5], FrameRejected)
    assert isinstance(returned["b"][6], FrameRejected)
    info = rig.info()
    assert info["a"].rejected_by_reason == {returned["a"][5].reason: 1}
    assert info["b"].rejected_by_reason == {returned["b"][6].reason: 1}
    assert info["a"].frames_processed == info["b"].frames_processed == 7


class FailOnSecond(SequentialSteps):
    """The tick's step call fails after the first stream's step ran (a CUDA error)."""

    def __init__(self):
        self.fail = False

    def run(self, images, runners, txns, *, with_depth=True):
        if not self.fail:
            return super().run(images, runners, txns, with_depth=with_depth)
        runners[0].run(images[:1], txns[0], with_depth=with_depth)
        try:
            raise RuntimeError("device lost")
        except RuntimeError:
            for txn in txns:
                if txn.state == "pending":
                    txn.rollback()
            raise


def test_a_failed_step_call_rolls_every_stream_back_once_and_the_streams_go_on():
    rig = MultiStreamSession(MODEL, {"a": config("all"), "b": config("every_n")})
    rig.steps = steps = FailOnSecond()
    ticks = schedule(rig.names, 10, seed=15)
    for tick in ticks[:5]:
        rig.submit_many(tick)
    first = {n: rig.collect(n) for n in rig.names}  # no step in flight now
    before = {n: rig.stream(n).runner.kv_cache.info() for n in rig.names}
    steps.fail = True
    with pytest.raises(RuntimeError, match="device lost") as info:
        rig.submit_many(ticks[5])
    assert "stream(s): a, b" in str(info.value.__notes__)
    for n in rig.names:
        after = rig.stream(n).runner.kv_cache.info()
        assert after["step_pending"] == 0
        assert after["frames_rolled_back"] == before[n]["frames_rolled_back"] + 1
    steps.fail = False
    for tick in ticks[6:]:
        out = rig.submit_many(tick)
        assert all(isinstance(v, int) for v in out.values())
    for n in rig.names:  # the failed tick's frames are lost, as a failed submit's alone
        assert [r.index for r in first[n] + rig.collect(n)] == [0, 1, 2, 3, 4, 6, 7, 8, 9]


@pytest.mark.parametrize("configs, match", [
    ({}, "at least one stream"),
    ({"Front": SessionConfig()}, "lower-case"),
    ({"front-left": SessionConfig()}, "lower-case"),
    ({"a": "cpu"}, "must be a SessionConfig"),
    ({"a": SessionConfig(), "b": SessionConfig(kv_splits=2)}, "kv_splits is 4 and 2"),
    ({"a": SessionConfig(), "b": SessionConfig(preprocess=SIZE_42x56)}, "preprocess.width is"),
])
def test_names_and_shared_settings_are_checked(configs, match):
    with pytest.raises(ValueError, match=match):
        MultiStreamSession(MODEL, configs)


def test_unknown_streams_and_bad_frames_change_nothing():
    rig = MultiStreamSession(MODEL, {"a": config("all"), "b": config("all")})
    tick = schedule(rig.names, 1)[0]
    with pytest.raises(ValueError, match="no stream 'c'"):
        rig.submit_many({**tick, "c": tick["a"]})
    with pytest.raises(ValueError, match="must be a FrameIn"):
        rig.submit_many({"a": (tick["a"].image, STAMP0)})
    with pytest.raises(ValueError, match="no stream 'c'"):
        rig.collect("c")
    assert all(i.frames_in == 0 for i in rig.info().values())
    assert rig.names == ("a", "b") and rig.submit_many({}) == {}

"""The pipelined API (``submit`` / ``collect``): the same outcomes as ``push``, in input
order, one frame in flight at most, failures as outcomes, and a reset drops the frame in
flight. (The overlap itself is a GPU matter: ``lingbot-ros-bench --pipeline`` measures it.)"""
import numpy as np
import pytest

from lingbot_ros.config import KeyframeConfig
from lingbot_ros.session import FrameFailed, FrameRejected
from tests.session.test_non_finite import NanOnce, cache_state
from tests.session.test_streaming_session import DT, STAMP0, frames, run, session

POLICIES = {"all": KeyframeConfig(policy="all"), "every_n": KeyframeConfig(policy="every_n", n=2),
            "flow": KeyframeConfig(policy="flow", flow_threshold=0.5)}


def pipelined(s, images, first=0):
    """Every frame submitted before the previous one is collected, as a pipeline does."""
    out = []
    for i, img in enumerate(images):
        s.submit(img, STAMP0 + (first + i) * DT)
        out += s.collect(wait=False)
    return out + s.collect()


@pytest.mark.parametrize("policy", list(POLICIES))
def test_pipelined_frames_give_what_push_gives_in_input_order(policy):
    imgs = frames(9, seed=1)
    ref = run(session(keyframes=POLICIES[policy], rollover_keyframes=5), imgs)
    got = pipelined(session(keyframes=POLICIES[policy], rollover_keyframes=5), imgs)
    assert [r.index for r in got] == [r.index for r in ref] == list(range(9))
    assert [r.keyframe for r in got] == [r.keyframe for r in ref]
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a.pose_enc, b.pose_enc)
        np.testing.assert_array_equal(a.c2w, b.c2w)
        np.testing.assert_array_equal(a.depth, b.depth)
        np.testing.assert_array_equal(a.rgb, b.rgb)


def test_one_frame_in_flight_and_its_outcome_arrives_with_the_next_submit():
    s = session()
    imgs = frames(5, seed=2)
    s.submit(imgs[0], STAMP0)
    assert not s.in_flight and s.collect() == []  # an anchor: buffered
    s.submit(imgs[1], STAMP0 + DT)
    assert not s.in_flight  # the scale phase ran at once
    assert [r.index for r in s.collect(wait=False)] == [0, 1]
    s.submit(imgs[2], STAMP0 + 2 * DT)
    assert s.in_flight
    s.submit(imgs[3], STAMP0 + 3 * DT)  # finishes frame 2 first
    assert s.in_flight
    assert s.in_flight_done()  # on the CPU a step is done when submit returns
    assert [r.index for r in s.collect(wait=False)] == [2, 3]  # finished: not waited for
    assert not s.in_flight and s.collect() == []


def test_a_rejected_frame_leaves_the_frame_in_flight_alone():
    s = session()
    imgs = frames(5, seed=3)
    for i in range(3):
        s.submit(imgs[i], STAMP0 + i * DT)
    with pytest.raises(FrameRejected):
        s.submit(imgs[3], STAMP0 + 2 * DT)  # duplicate stamp
    assert s.in_flight
    assert [r.index for r in s.collect()] == [0, 1, 2]
    assert s.info().rejected_by_reason == {"duplicate_stamp": 1}


def test_a_non_finite_frame_is_an_outcome_and_is_rolled_back():
    s = session(rollover_keyframes=None)
    hook = NanOnce(s.model)
    imgs = frames(6, seed=4)
    for i in range(3):
        s.submit(imgs[i], STAMP0 + i * DT)
    assert [r.index for r in s.collect()] == [0, 1, 2]
    before = cache_state(s)
    hook.armed = True
    s.submit(imgs[3], STAMP0 + 3 * DT)
    hook.armed = False
    s.submit(imgs[4], STAMP0 + 4 * DT)  # finishes frame 3: rolled back before 4 begins
    outcomes = s.collect()
    assert isinstance(outcomes[0], FrameFailed) and outcomes[0].reason == "non_finite"
    assert outcomes[1].index == 4 and np.isfinite(outcomes[1].c2w).all()
    cache, camera, poses, keyframes = cache_state(s)
    assert (poses, keyframes) == (before[2] + 1, before[3] + 1)  # frame 4 only
    assert s.info().frames_failed == 1


def test_push_raises_the_failure_of_its_own_frame():
    s = session(rollover_keyframes=None)
    hook = NanOnce(s.model)
    imgs = frames(4, seed=5)
    run(s, imgs[:3])
    hook.armed = True
    with pytest.raises(FrameFailed):
        s.push(imgs[3], STAMP0 + 3 * DT)


def test_a_reset_drops_the_frame_in_flight_and_the_uncollected_outcomes():
    s = session()
    imgs = frames(6, seed=6)
    for i in range(4):
        s.submit(imgs[i], STAMP0 + i * DT)
    assert s.in_flight
    s.reset()
    assert not s.in_flight and s.collect() == []
    assert s.info().trajectory_poses == 0
    out = pipelined(s, imgs[:3])  # a new stream from scratch
    assert [r.index for r in out] == [0, 1, 2]


def test_depth_can_be_skipped_per_frame():
    s = session(rollover_keyframes=None)
    imgs = frames(5, seed=7)
    run(s, imgs[:2])
    s.submit(imgs[2], STAMP0 + 2 * DT, with_depth=False)
    s.submit(imgs[3], STAMP0 + 3 * DT)
    no_depth, with_depth = s.collect()
    assert no_depth.depth is None and no_depth.rgb is None
    assert with_depth.depth is not None and with_depth.depth.shape == with_depth.model_hw
    # the flow policy decides from depth: it is computed whatever the caller wants
    f = session(keyframes=POLICIES["flow"], rollover_keyframes=None, return_depth=False)
    run(f, imgs[:2])
    f.submit(imgs[2], STAMP0 + 2 * DT, with_depth=False)
    assert f.collect()[0].index == 2


def test_a_failure_names_the_stamps_of_its_frames():
    s = session(rollover_keyframes=None)
    hook = NanOnce(s.model)
    imgs = frames(4, seed=8)
    hook.armed = True
    s.submit(imgs[0], STAMP0)
    s.submit(imgs[1], STAMP0 + DT)  # the anchor step fails as a whole
    (failed,) = s.collect()
    assert failed.stamps == (STAMP0, STAMP0 + DT)
    hook.armed = False
    s.submit(imgs[2], STAMP0 + 2 * DT)
    s.submit(imgs[3], STAMP0 + 3 * DT)
    assert [r.stamp_ns for r in s.collect()] == [STAMP0 + 2 * DT, STAMP0 + 3 * DT]
    hook.armed = True
    for i in (4, 5):
        s.submit(imgs[i % 4], STAMP0 + i * DT)
    outcomes = s.collect()
    assert [o.stamps for o in outcomes] == [(STAMP0 + 4 * DT,), (STAMP0 + 5 * DT,)]


class RaiseOnce:
    """A forward hook on the camera head that raises in the call it is armed for (a CUDA
    error or an out-of-memory in the middle of a step)."""

    def __init__(self, model) -> None:
        self.armed = False
        self.handle = model.camera_head.register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        if self.armed:
            self.armed = False
            raise RuntimeError("step failed on purpose")


def test_the_frame_before_is_reported_when_the_next_frame_cannot_be_queued():
    # frame t's result is built after frame t+1's step is queued; when queueing t+1 fails,
    # t's result must still come out, once, and t+1 must leave the caches as they were
    s = session(rollover_keyframes=None)
    hook = RaiseOnce(s.model)
    imgs = frames(6, seed=9)
    run(s, imgs[:2])  # the anchors
    before = cache_state(s)
    s.submit(imgs[2], STAMP0 + 2 * DT)
    assert s.in_flight
    hook.armed = True
    with pytest.raises(RuntimeError, match="on purpose"):
        s.submit(imgs[3], STAMP0 + 3 * DT)
    assert not s.in_flight
    (frame2,) = s.collect()
    assert frame2.index == 2 and frame2.keyframe
    cache, camera, poses, keyframes = cache_state(s)
    assert (poses, keyframes) == (before[2] + 1, before[3] + 1)  # frame 2 only, committed
    assert cache["frames_cached"] == before[0]["frames_cached"] + 1
    s.submit(imgs[4], STAMP0 + 4 * DT)  # the stream goes on
    assert [r.index for r in s.collect()] == [4]
    hook.handle.remove()


def test_a_rollover_is_done_before_the_next_frame_begins():
    # the commit that completes a segment rolls over before the next step opens, so the next
    # frame is the new segment's first; pipelined and push agree (bit for bit, above)
    s = session(rollover_keyframes=4)
    out = pipelined(s, frames(8, seed=10))
    rolled_after = [r.frame_index for r in s.rollovers]  # the frame whose commit rolled over
    assert len(rolled_after) >= 2
    for r in out:
        assert r.segment == sum(i < r.index for i in rolled_after), r.index


def test_host_time_is_recorded_per_phase_when_asked():
    s = session(rollover_keyframes=None)
    imgs = frames(6, seed=11)
    pipelined(s, imgs[:2])
    assert s.timing.host_ms() == {}  # off by default
    s.timing.time_host(True)
    pipelined(s, imgs[2:], first=2)
    ms = s.timing.host_ms()
    # eager (CPU) steps: plan + model instead of the graph's load / plan / launch
    assert set(ms) == {"checks_preprocess", "begin", "plan", "model", "readback_start",
                       "wait", "close", "report", "plan_ahead"}
    assert len(ms["checks_preprocess"]) == len(ms["begin"]) == 4
    assert len(ms["report"]) == 4 and all(v >= 0 for lap in ms.values() for v in lap)
    assert s.timing.host_ms() == {}  # taken


@pytest.mark.parametrize("policy", list(POLICIES))
def test_the_next_step_is_planned_while_a_frame_runs(policy):
    # the forecast made while frame t runs is kept when frame t+1 begins as forecast: every
    # step of `all`; under every_n the guess (a known keyframe commits, other frames roll
    # back) holds too; under flow a frame the policy keeps makes the next forecast wrong
    keyframes = POLICIES[policy]
    if policy == "flow":  # random weights: huge flows; the gap rule keeps every 4th frame
        keyframes = KeyframeConfig(policy="flow", flow_threshold=1e6, max_gap=4)
    s = session(keyframes=keyframes, rollover_keyframes=None)
    imgs = frames(12, seed=12)
    out = pipelined(s, imgs)
    stream = [r for r in out if r.index >= s.config.num_scale_frames]  # after the anchors
    used = s.info().stream.steps_planned_ahead
    if policy == "flow":  # right after each frame that was rolled back
        assert used == sum(not r.keyframe for r in stream[:-1])
        assert 0 < used < len(stream) - 1  # (this sequence has both kinds)
    else:
        assert used == len(stream) - 1  # all but the first streaming frame


def test_a_wrong_forecast_is_not_used():
    # a failed frame is rolled back although it was expected to commit: the next step's
    # plan differs from the forecast and is made anew (the results stay exact)
    s = session(rollover_keyframes=None)
    hook = NanOnce(s.model)
    imgs = frames(6, seed=13)
    run(s, imgs[:2])
    s.submit(imgs[2], STAMP0 + 2 * DT)
    hook.armed = True
    s.submit(imgs[3], STAMP0 + 3 * DT)
    hook.armed = False
    s.submit(imgs[4], STAMP0 + 4 * DT)
    s.submit(imgs[5], STAMP0 + 5 * DT)
    outcomes = s.collect()
    assert isinstance(outcomes[1], FrameFailed)
    # frames 3, 5 begin as forecast; frame 4 follows the failed frame 3: planned anew
    assert s.info().stream.steps_planned_ahead == 2
    ref = session(rollover_keyframes=None)
    want = run(ref, [imgs[i] for i in (0, 1, 2, 4, 5)])
    got = [o for o in outcomes if not isinstance(o, FrameFailed)]
    for a, b in zip(got[-2:], want[-2:]):
        np.testing.assert_allclose(a.pose_enc, b.pose_enc, atol=0)

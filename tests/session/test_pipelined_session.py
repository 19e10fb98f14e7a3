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
    assert s.info()["rejected_by_reason"] == {"duplicate_stamp": 1}


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
    assert s.info()["frames_failed"] == 1


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
    assert s.info()["trajectory_poses"] == 0
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

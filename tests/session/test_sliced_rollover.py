"""``rollover_mode: sliced``: the next segment's anchor step is built a few slices per frame
beside the stream, then taken between two frames. The anchors' estimate equals the blocking
rollover's bit for bit; the segment goes on meanwhile; reset, snapshot and the pipelined API
keep their contracts."""
import dataclasses

import numpy as np
import pytest
import torch

from lingbot_ros.cache import StepKind
from lingbot_ros.config import KeyframeConfig, SessionConfig
from lingbot_ros.model import run_to_end
from lingbot_ros.session import SnapshotError, StreamingSession
from lingbot_ros.session.stream_runner import StreamRunner
from tests.session.micro_model import SIZE_42x56, micro_model
from tests.session.test_pipelined_session import pipelined
from tests.session.test_streaming_session import DT, STAMP0, frames, run

EVERY2 = KeyframeConfig(policy="every_n", n=2)


def config(**kw) -> SessionConfig:
    kw.setdefault("num_scale_frames", 3)
    kw.setdefault("window", 3)
    kw.setdefault("rollover_keyframes", 7)
    kw.setdefault("keyframes", EVERY2)
    return SessionConfig(preprocess=SIZE_42x56, **kw)


def slices_of_anchor_step(model, cfg: SessionConfig) -> int:
    """How many slices the micro model's anchor step has (DINO, frame, global blocks...)."""
    runner = StreamRunner(model, dataclasses.replace(cfg, window=1), (42, 56))
    images = torch.rand(cfg.num_scale_frames, 3, 42, 56)
    slices = runner.run_slices(images, runner.begin(cfg.num_scale_frames, StepKind.KEYFRAME))
    count = 0
    try:
        while True:
            next(slices)
            count += 1
    except StopIteration:
        return count


def test_a_sliced_forward_drained_at_once_is_the_plain_forward():
    model = micro_model()
    cfg = config()
    outs = []
    for sliced in (False, True):
        runner = StreamRunner(model, cfg, (42, 56))
        images = torch.rand(3, 3, 42, 56, generator=torch.Generator().manual_seed(1))
        txn = runner.begin(3, StepKind.KEYFRAME)
        outs.append(run_to_end(runner.run_slices(images, txn)) if sliced
                    else runner.run(images, txn))
        txn.commit()
    for name in ("pose_enc", "c2w", "depth", "depth_conf", "patch_tokens"):
        assert torch.equal(getattr(outs[0], name), getattr(outs[1], name)), name


@pytest.mark.parametrize("per_frame", [1, 3, 1000])
def test_sliced_anchors_give_the_blocking_rollover_bit_for_bit(per_frame):
    imgs = frames(30, seed=3)
    blocking = StreamingSession(micro_model(), config())
    sliced = StreamingSession(micro_model(), config(rollover_mode="sliced",
                                                    rollover_slices_per_frame=per_frame))
    ref, out = run(blocking, imgs), run(sliced, imgs)
    first_b, first_s = blocking.rollovers[0], sliced.rollovers[0]
    # the same anchors (the last keyframes when the segment completed), the same estimate
    assert first_s.frame_index == first_b.frame_index
    assert first_s.alignment.scale == first_b.alignment.scale
    np.testing.assert_array_equal(first_s.alignment.rotation, first_b.alignment.rotation)
    np.testing.assert_array_equal(first_s.alignment.translation, first_b.alignment.translation)
    np.testing.assert_array_equal(first_s.anchor_c2w_aligned, first_b.anchor_c2w_aligned)
    # up to the completing frame both streams are one segment, bit for bit
    for a, b in zip(ref, out):
        if a.index > first_b.frame_index:
            break
        np.testing.assert_array_equal(a.c2w, b.c2w)
    assert all(np.isfinite(r.c2w).all() for r in out) and len(out) == len(ref)


@pytest.mark.parametrize("per_frame", [1, 4])
def test_the_segment_goes_on_while_the_next_one_is_built(per_frame):
    model = micro_model()
    cfg = config(rollover_mode="sliced", rollover_slices_per_frame=per_frame)
    total = slices_of_anchor_step(model, cfg)
    s = StreamingSession(model, cfg)
    results = run(s, frames(40, seed=5))
    assert s.info().rollovers >= 2
    by_index = {r.index: r for r in results}
    for roll in s.rollovers:
        completing = roll.frame_index  # the last anchor: the keyframe that completed it
        switch = next(r.index for r in results if r.segment == roll.segment)
        # the frame after the completing one is launched first, then the build starts;
        # each later frame queues `per_frame` slices (the outputs come with one more
        # `next`); the frame after that one starts the new segment
        assert switch == completing + 1 + -(-(total + 1) // per_frame), (roll, switch)
        assert all(by_index[i].segment == roll.segment - 1 for i in range(completing, switch))
        assert by_index[switch].keyframe  # the new segment's first keyframe
        # continuity as for a blocking rollover: the anchor stays where it was published
        np.testing.assert_allclose(roll.anchor_c2w_aligned[:3, 3],
                                   roll.anchor_c2w_published[:3, 3], atol=1e-5)
        np.testing.assert_allclose(by_index[completing].c2w, roll.anchor_c2w_published)
    assert all(np.isfinite(r.c2w).all() for r in results)


def test_pipelined_sliced_rollovers_give_what_push_gives():
    imgs = frames(30, seed=7)
    cfg = config(rollover_mode="sliced", rollover_slices_per_frame=2)
    ref = run(StreamingSession(micro_model(), cfg), imgs)
    s = StreamingSession(micro_model(), cfg)
    out = pipelined(s, imgs)
    assert s.info().rollovers >= 1
    assert [r.index for r in out] == [r.index for r in ref]
    for a, b in zip(ref, out):
        assert (a.segment, a.keyframe) == (b.segment, b.keyframe)
        np.testing.assert_array_equal(a.c2w, b.c2w)


def frames_until_building(s, imgs):
    for i, img in enumerate(imgs):
        s.push(img, STAMP0 + i * DT)
        if s.info().rollover_building:
            return i + 1
    raise AssertionError("no rollover started building")


def test_a_reset_drops_the_build_and_the_stream_starts_afresh():
    cfg = config(rollover_mode="sliced", rollover_slices_per_frame=1)
    s = StreamingSession(micro_model(), cfg)
    frames_until_building(s, frames(30, seed=9))
    s.reset()
    assert not s.info().rollover_building and s.info().rollovers == 0
    fresh = StreamingSession(micro_model(), cfg)
    imgs = frames(12, seed=10)
    for a, b in zip(run(s, imgs), run(fresh, imgs)):
        np.testing.assert_array_equal(a.c2w, b.c2w)


@pytest.mark.parametrize("after", [0, 1, 5, 10, 11])
def test_a_stream_saved_during_a_build_continues_as_the_uninterrupted_one(tmp_path, after):
    # saved `after` frames into the build (10: every slice queued; 11: built, not taken): the
    # restored build reruns its slices and switches at the frame the original does
    cfg = config(rollover_mode="sliced", rollover_slices_per_frame=1)
    imgs = frames(40, seed=11)
    s = StreamingSession(micro_model(), cfg)
    n = frames_until_building(s, imgs)
    run(s, imgs[n:n + after], first=n)
    n += after
    assert s.info().rollover_building
    segment = s.info().segment
    s.snapshots.save(tmp_path / "snap")
    restored = StreamingSession(micro_model(), cfg)
    restored.snapshots.restore(tmp_path / "snap")
    assert restored.info().rollover_building
    rest = imgs[n:n + 16]
    a, b = run(s, rest, first=n), run(restored, rest, first=n)
    assert [r.index for r in a] == [r.index for r in b] and a
    assert a[-1].segment == segment + 1  # the switch is among them
    for x, y in zip(a, b):
        assert (x.segment, x.keyframe) == (y.segment, y.keyframe)
        np.testing.assert_array_equal(x.c2w, y.c2w)


def test_a_sliced_stream_is_not_restored_into_a_blocking_one(tmp_path):
    # the mode sizes the caches (the slack) and decides when the saved segment ends: refused
    # with the difference named, the running stream untouched
    s = StreamingSession(micro_model(), config(rollover_mode="sliced"))
    run(s, frames(5, seed=15))
    s.snapshots.save(tmp_path / "snap")
    blocking = StreamingSession(micro_model(), config())
    run(blocking, frames(5, seed=16))
    before = blocking.info().frames_processed
    with pytest.raises(SnapshotError, match="rollover_mode: saved 'sliced', here 'blocking'"):
        blocking.snapshots.restore(tmp_path / "snap")
    assert blocking.info().frames_processed == before


@pytest.mark.parametrize("bad", [{"rollover_mode": "later"}, {"rollover_slices_per_frame": 0}])
def test_bad_rollover_settings_are_refused(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        config(**bad)


def test_sliced_caches_hold_the_slack_so_nothing_grows_meanwhile():
    blocking, sliced = config(), config(rollover_mode="sliced")
    assert sliced.camera_chunk_frames() == blocking.camera_chunk_frames() + 64
    s = StreamingSession(micro_model(), config(rollover_mode="sliced",
                                               rollover_slices_per_frame=1))
    run(s, frames(6, seed=12))
    camera = s.runner.camera_cache.data.data_ptr()
    storage = s.runner.kv_cache.storage.data.data_ptr()
    run(s, frames(40, seed=13), first=6)
    assert s.info().rollovers >= 2
    assert (s.runner.camera_cache.data.data_ptr(), s.runner.kv_cache.storage.data.data_ptr()) \
        == (camera, storage)


def test_a_build_still_running_when_the_slack_is_used_up_is_finished_at_once(monkeypatch):
    import lingbot_ros.session.next_segment as next_segment_module
    monkeypatch.setattr(next_segment_module, "ROLLOVER_SLACK_KEYFRAMES", 2)
    cfg = config(rollover_mode="sliced", rollover_slices_per_frame=1,
                 keyframes=KeyframeConfig(policy="all"))
    s = StreamingSession(micro_model(), cfg)
    results = run(s, frames(30, seed=14))
    assert s.info().rollovers >= 2
    for roll in s.rollovers:
        switch = next(r.index for r in results if r.segment == roll.segment)
        # slack 2 at one keyframe per frame (push: a frame's step closes in its own push):
        # started by the completing frame, one slice by the next, finished at once by the
        # one after it (the segment then holds rollover_keyframes + 2), taken by the third
        assert switch == roll.frame_index + 3, (roll.frame_index, switch)
    # a segment never holds more than rollover_keyframes + slack + 1 frames
    assert s.runner.camera_cache.num_frames <= 7 + 2 + 1

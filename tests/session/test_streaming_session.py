"""StreamingSession: start-up buffering, keyframes with rollback, bad input, reset."""
import numpy as np
import pytest

import torch

from lingbot_ros.config import KeyframeConfig, PreprocessConfig, SessionConfig
from lingbot_ros.preprocess import preprocess
from lingbot_ros.session import FrameRejected, StepKind, StreamingSession
from tests.session.micro_model import SIZE_42x56, micro_model
from tests.session.runners import make_runner

STAMP0, DT = 1_700_000_000_000_000_000, 33_333_333


def frames(n, seed=0, hw=(60, 80)):
    rng = np.random.default_rng(seed)
    return [(rng.random(hw + (3,)) * 255).astype(np.uint8) for _ in range(n)]


def session(**kw):
    kw.setdefault("num_scale_frames", 2)
    kw.setdefault("window", 3)
    kw.setdefault("preprocess", SIZE_42x56)
    return StreamingSession(micro_model(), SessionConfig(**kw))


def run(s, images, first=0):
    out = []
    for i, img in enumerate(images):
        out += s.push(img, STAMP0 + (first + i) * DT)
    return out


def test_scale_frames_are_buffered_then_emitted_together_with_their_stamps():
    s = session(num_scale_frames=3)
    imgs = frames(5)
    assert s.push(imgs[0], STAMP0) == [] and s.push(imgs[1], STAMP0 + DT) == []
    assert s.info().phase == "scale_frames" and s.info().scale_frames_buffered == 2
    first = s.push(imgs[2], STAMP0 + 2 * DT)
    assert [r.index for r in first] == [0, 1, 2]
    assert [r.stamp_ns for r in first] == [STAMP0, STAMP0 + DT, STAMP0 + 2 * DT]
    assert all(r.keyframe and r.segment == 0 for r in first)
    np.testing.assert_allclose(first[0].c2w[:3, :3] @ first[0].c2w[:3, :3].T, np.eye(3),
                               atol=1e-5)
    nxt = s.push(imgs[3], STAMP0 + 3 * DT)
    assert len(nxt) == 1 and nxt[0].index == 3 and s.info().phase == "streaming"
    r = nxt[0]
    assert r.depth.shape == (42, 56) and r.depth_conf.shape == (42, 56)
    assert r.rgb.shape == (42, 56, 3) and r.rgb.dtype == np.uint8
    assert np.isfinite(r.depth).all() and (r.depth > 0).all()
    # K maps back to the 60x80 original: principal point near its centre.
    assert abs(r.K[0, 2] - 39.5) < 1.0 and abs(r.K[1, 2] - 29.5) < 1.0


def test_every_n_rolls_back_non_keyframes_and_matches_a_run_without_them():
    imgs = frames(12, seed=1)
    spec = session(keyframes=KeyframeConfig(policy="every_n", n=3), rollover_keyframes=None)
    results = run(spec, imgs)
    flags = [r.keyframe for r in results]
    # scale frames 0,1; then the first streaming frame and every 3rd after it
    assert flags == [True, True, True, False, False, True, False, False, True, False, False, True]
    kept = [i for i, k in enumerate(flags) if k]
    assert spec.info().stream.cache.frames_committed == len(kept)
    assert spec.info().stream.camera_cache.frames_cached == len(kept)
    # A stream that only ever saw the keyframes gives the same keyframe poses.
    plain = session(rollover_keyframes=None)
    ref = run(plain, [imgs[i] for i in kept])
    for i, r in zip(kept, ref):
        np.testing.assert_allclose(results[i].pose_enc, r.pose_enc, atol=1e-6)


def test_every_n_keyframes_evict_first_and_the_frames_between_see_the_untrimmed_window():
    imgs = frames(12, seed=2)
    s = session(keyframes=KeyframeConfig(policy="every_n", n=2), rollover_keyframes=None)
    seen = []
    run(s, imgs[:2])
    runner = s.runner
    real_begin = runner.begin

    def recording_begin(num_frames, kind):
        txn = real_begin(num_frames, kind)
        seen.append((StepKind(kind), runner.kv_cache.table.patches.visible_frames()))
        return txn
    runner.begin = recording_begin
    run(s, imgs[2:], first=2)
    kinds = [k for k, _ in seen]
    assert kinds == [StepKind.KEYFRAME, StepKind.SPECULATIVE] * 5
    # keyframe steps see the trimmed window (scale 2 + 3 incl. their own page); speculative
    # steps once the window is full see 6 pages: one window frame more
    assert [len(v) for k, v in seen] == [3, 4, 4, 5, 5, 6, 5, 6, 5, 6]


def test_a_flow_keyframe_equals_a_speculative_step_and_evicts_like_a_keyframe():
    """The flow policy decides from the frame's own outputs: every frame is a speculative
    step, so a frame it keeps has exactly the outputs of that frame run speculatively, and
    its commit leaves the cache a keyframe step's commit would."""
    imgs = frames(10, seed=3)
    flow = session(keyframes=KeyframeConfig(policy="flow", flow_threshold=0.0),
                   rollover_keyframes=None)
    results = run(flow, imgs)
    assert all(r.keyframe for r in results)  # threshold 0: every frame moved enough
    cfg = flow.config
    runner = make_runner(flow.model, (42, 56), cfg.num_scale_frames, cfg.window)
    twin = make_runner(flow.model, (42, 56), cfg.num_scale_frames, cfg.window)
    tensors = torch.stack([preprocess(im, "rgb8", cfg.preprocess)[0] for im in imgs])
    for r in (runner, twin):
        r.step(tensors[:2], StepKind.KEYFRAME)[1].commit()
    for i in range(2, len(imgs)):
        out, txn = runner.step(tensors[i:i + 1], StepKind.SPECULATIVE)
        np.testing.assert_array_equal(results[i].pose_enc, out.pose_enc[0].numpy())
        txn.commit()
        twin.step(tensors[i:i + 1], StepKind.KEYFRAME)[1].commit()
        assert (runner.kv_cache.table.patches.visible_frames()
                == twin.kv_cache.table.patches.visible_frames())
        assert runner.kv_cache.table.stats() == twin.kv_cache.table.stats()
    assert flow.runner.kv_cache.table.stats() == runner.kv_cache.table.stats()


def test_bad_frames_are_rejected_counted_and_the_stream_goes_on():
    # The reference size rule (height from the aspect): 60x80 -> 42x56, 60x60 -> 56x56.
    s = session(preprocess=PreprocessConfig(width=56, max_height=56), on_stamp_backwards="drop")
    imgs = frames(4)
    run(s, imgs[:2])
    with pytest.raises(FrameRejected) as e:
        s.push(np.zeros((0, 5, 3), np.uint8), STAMP0 + 10 * DT)
    assert e.value.reason == "bad_image"
    with pytest.raises(FrameRejected) as e:
        s.push(imgs[2], STAMP0)  # stamp before the last one, policy drop
    assert e.value.reason == "non_monotonic_stamp" and "session.on_stamp_backwards" in str(e.value)
    with pytest.raises(FrameRejected) as e:
        s.push(imgs[2], STAMP0 + DT)  # the same stamp again
    assert e.value.reason == "duplicate_stamp"
    with pytest.raises(FrameRejected) as e:
        s.push(frames(1, hw=(60, 60))[0], STAMP0 + 11 * DT)  # other aspect -> other size
    assert e.value.reason == "size_changed" and "1 of 3" in str(e.value)
    with pytest.raises(FrameRejected) as e:
        s.push(imgs[2], STAMP0 + 12 * DT, encoding="yuv422")
    assert e.value.reason == "bad_image" and "encoding" in str(e.value)
    out = s.push(imgs[2], STAMP0 + 13 * DT)
    assert len(out) == 1 and out[0].index == 2  # rejected frames take no index
    info = s.info()
    assert info.frames_rejected == 5 and info.frames_in == 8 and info.restarts == 0
    assert info.rejected_by_reason == {"bad_image": 2, "non_monotonic_stamp": 1,
                                          "duplicate_stamp": 1, "size_changed": 1}
    assert s.pop_events() == []


def test_a_stamp_going_backwards_restarts_the_stream_on_that_frame():
    """A looped bag or a restarted player: the stream starts again, nothing is rejected."""
    s = session()
    imgs = frames(8)
    first = run(s, imgs[:5])
    assert [r.index for r in first] == [0, 1, 2, 3, 4]
    again = run(s, imgs[:5])  # the same stamps again: the loop
    assert [r.index for r in again] == [0, 1, 2, 3, 4] and all(r.segment == 0 for r in again)
    for a, b in zip(first, again):  # a fresh stream on the same frames: the same poses
        np.testing.assert_array_equal(a.pose_enc, b.pose_enc)
    events = s.pop_events()
    assert [e.kind for e in events] == ["restart_stamp_backwards"]
    assert str(STAMP0) in events[0].message and str(STAMP0 + 4 * DT) in events[0].message
    info = s.info()
    assert info.restarts_by_reason == {"restart_stamp_backwards": 1}
    assert info.frames_rejected == 0 and info.frames_in == 10  # counters go on
    assert len(s.trajectory) == 5  # the trajectory is the new stream's


def test_a_forward_gap_over_max_gap_s_restarts_the_stream():
    s = session(max_gap_s=1.0)
    imgs = frames(6)
    run(s, imgs[:3])
    out = s.push(imgs[3], STAMP0 + 2 * DT + 1_500_000_000)  # 1.5 s later
    assert out == [] and s.info().phase == "scale_frames"  # the first anchor of a new stream
    (event,) = s.pop_events()
    assert event.kind == "restart_stamp_gap" and "1.500 s" in event.message
    assert session(max_gap_s=None).config.max_gap_s is None  # never


def test_a_new_size_that_persists_restarts_the_stream_on_it():
    s = session(preprocess=PreprocessConfig(width=56, max_height=56), size_change_frames=3)
    run(s, frames(3))  # 60x80 -> 42x56
    square = frames(4, seed=9, hw=(60, 60))  # -> 56x56
    t = STAMP0 + 10 * DT
    for i in range(2):
        with pytest.raises(FrameRejected, match=f"{i + 1} of 3"):
            s.push(square[i], t + i * DT)
    s.push(frames(1)[0], t + 2 * DT)  # one frame of the old size: the count starts over
    for i in range(2):
        with pytest.raises(FrameRejected, match=f"{i + 1} of 3"):
            s.push(square[i], t + (3 + i) * DT)
    out = s.push(square[2], t + 5 * DT)  # the third in a row: a new stream at 56x56
    assert out == [] and s.info().model_hw == (56, 56)
    (event,) = s.pop_events()
    assert event.kind == "restart_size_changed" and "42x56" in event.message \
        and "56x56" in event.message
    assert len(s.push(square[3], t + 6 * DT)) == 2  # the 2 anchors of the new stream


def test_reset_restarts_the_stream_and_keeps_the_allocation():
    s = session()
    run(s, frames(6))
    ptr = s.runner.kv_cache.storage.data.data_ptr()
    s.reset()
    info = s.info()
    assert info.frames_processed == 0 and info.phase == "scale_frames"
    assert info.stream.cache.frames_committed == 0 and info.stream.camera_cache.frames_cached == 0
    assert len(s.trajectory) == 0
    out = run(s, frames(3, seed=5), first=100)
    assert [r.index for r in out] == [0, 1, 2]
    assert s.runner.kv_cache.storage.data.data_ptr() == ptr


def test_depth_head_off_still_gives_poses():
    s = session(with_depth=False, rollover_keyframes=None)
    out = run(s, frames(4))
    assert out[-1].depth is None and np.isfinite(out[-1].c2w).all()


def test_a_dropped_session_frees_its_caches_without_the_garbage_collector():
    # Reference cycles would keep the KV pool (gigabytes on a GPU) alive until a gc pass.
    import gc
    import weakref
    gc.collect()
    gc.disable()
    try:
        s = session(keyframes=KeyframeConfig(policy="every_n", n=2))
        run(s, frames(6))
        storage = weakref.ref(s.runner.kv_cache.storage)
        camera = weakref.ref(s.runner.camera_cache)
        del s
        assert storage() is None and camera() is None
    finally:
        gc.enable()


def test_a_reset_lets_the_next_stream_have_another_size():
    s = session(preprocess=PreprocessConfig(width=56, max_height=56))
    run(s, frames(3))  # 60x80 -> 42x56
    s.reset()
    out = run(s, frames(3, hw=(60, 60)))  # -> 56x56: a new allocation, no rejection
    assert s.info().model_hw == (56, 56) and len(out) == 3
    assert s.info().frames_rejected == 0


def test_a_backend_that_cannot_run_is_refused_before_the_first_frame():
    with pytest.raises(RuntimeError, match="CUDA device"):
        session(attention_backend="flashinfer")  # the CPU: nothing allocated, nothing pushed

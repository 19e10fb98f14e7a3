"""Speculative steps: a rolled-back frame leaves both caches as they were, and the frames
after it get exactly the poses of a run that never saw it."""
import pytest
import torch

from .conftest import SCALE_FRAMES, Stream

HW = (112, 154)


def cache_state(stream: Stream):
    """Everything observable of both caches: counters and the visible K/V of every layer."""
    cache, camera = stream.cache, stream.camera
    rows = cache.current_layout().token_slots()
    ps = cache.config.page_size
    kv = [cache.storage.layer_tokens(layer)[torch.cat([rows, rows + ps])].clone()
          for layer in range(cache.config.num_layers)]
    cam = [torch.stack(camera.keys_values(it, layer)).clone()
           for it in range(camera.num_iterations) for layer in range(camera.num_layers)]
    info = {k: v for k, v in cache.info().items() if k not in ("frames_seen", "frames_rolled_back")}
    return info, camera.num_frames, rows.tolist(), kv, cam


def assert_same_state(a, b):
    assert a[:3] == b[:3]
    assert all(torch.equal(x, y) for x, y in zip(a[3], b[3]))
    assert all(torch.equal(x, y) for x, y in zip(a[4], b[4]))


def run(model, frames, rollback_at=(), skip=()):
    """Stream ``frames``; roll back the frames in ``rollback_at``; never feed those in ``skip``."""
    stream = Stream(model.config, HW)
    outputs, txn = model.step(frames[:SCALE_FRAMES], stream.cache, stream.camera, stream.backend,
                              SCALE_FRAMES)
    txn.commit()
    poses, states = {}, {}
    for i in range(SCALE_FRAMES, frames.shape[0]):
        if i in skip:
            continue
        states[i] = cache_state(stream)
        outputs, txn = model.step(frames[i:i + 1], stream.cache, stream.camera, stream.backend,
                                  SCALE_FRAMES, with_depth=False)
        poses[i] = outputs.pose_enc
        txn.rollback() if i in rollback_at else txn.commit()
        if i in rollback_at:
            assert_same_state(cache_state(stream), states[i])
    return poses, stream


def test_rollback_restores_both_caches_and_later_poses_match_a_run_without_the_frame(
        tiny_model, frames):
    rolled = (4, 7, 8)  # before and after the first eviction (frame 5), twice in a row
    with_rollbacks, stream = run(tiny_model, frames, rollback_at=rolled)
    without, reference = run(tiny_model, frames, skip=rolled)
    assert sorted(without) == [i for i in range(SCALE_FRAMES, 12) if i not in rolled]
    for i in without:
        assert torch.equal(with_rollbacks[i], without[i]), i
    assert_same_state(cache_state(stream), cache_state(reference))
    assert stream.cache.info()["frames_rolled_back"] == len(rolled)
    assert stream.camera.num_frames == 12 - len(rolled)
    for i in rolled:  # the rolled-back frames got a real prediction too
        assert torch.isfinite(with_rollbacks[i]).all()


def test_a_rolled_back_frame_sees_the_committed_frames(tiny_model, frames):
    """Its pose differs from a frame that saw nothing but itself: it attended to the cache."""
    poses, _ = run(tiny_model, frames[:6], rollback_at=(5,))
    alone = Stream(tiny_model.config, HW)
    outputs, txn = tiny_model.step(frames[5:6], alone.cache, alone.camera, alone.backend, 1)
    txn.rollback()
    assert (poses[5] - outputs.pose_enc).abs().max() > 1e-3


def test_exception_inside_the_step_context_rolls_back_both_caches(tiny_model, frames):
    stream = Stream(tiny_model.config, HW)
    tiny_model.step(frames[:2], stream.cache, stream.camera, stream.backend, 2).txn.commit()
    before = cache_state(stream)
    with pytest.raises(KeyError):
        with tiny_model.step(frames[2:3], stream.cache, stream.camera, stream.backend, 2).txn:
            raise KeyError("decided nothing")
    assert_same_state(cache_state(stream), before)


def test_a_step_is_finished_exactly_once(tiny_model, frames):
    stream = Stream(tiny_model.config, HW)
    _, txn = tiny_model.step(frames[:2], stream.cache, stream.camera, stream.backend, 2)
    txn.commit()
    with pytest.raises(RuntimeError, match="already committed"):
        txn.rollback()
    _, txn = tiny_model.step(frames[2:3], stream.cache, stream.camera, stream.backend, 2)
    with pytest.raises(Exception, match="pending"):  # the next step waits for a decision
        tiny_model.step(frames[3:4], stream.cache, stream.camera, stream.backend, 2)
    txn.rollback()
    assert stream.cache.frames_committed == stream.camera.num_frames == 2


def test_invalid_steps_are_refused_before_touching_the_caches(tiny_model, frames):
    stream = Stream(tiny_model.config, HW)
    tiny_model.step(frames[:2], stream.cache, stream.camera, stream.backend, 2).txn.commit()
    before = cache_state(stream)
    with pytest.raises(ValueError, match="only allowed on empty caches"):
        tiny_model.step(frames[2:4], stream.cache, stream.camera, stream.backend, 2)
    with pytest.raises(ValueError, match="multiples of the patch size"):
        tiny_model.step(frames[2:3, :, :100], stream.cache, stream.camera, stream.backend, 2)
    stream.camera.reset()
    with pytest.raises(ValueError, match="reset both together"):
        tiny_model.step(frames[2:3], stream.cache, stream.camera, stream.backend, 2)
    assert cache_state(stream)[0] == before[0]

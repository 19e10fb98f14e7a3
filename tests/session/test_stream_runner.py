"""StreamRunner: the owner of a stream's caches, backend and graphs, and its step
transactions. A rolled-back frame leaves both caches as they were; frames after it get
exactly the poses of a run that never saw it; the step kind decides what a step sees."""
import pytest
import torch

from lingbot_ros.cache import StepKind, TransactionError
from tests.conftest import SCALE_FRAMES

from .runners import make_runner

HW = (112, 154)
KEY, SPEC = StepKind.KEYFRAME, StepKind.SPECULATIVE


def cache_state(runner):
    """Everything observable of both caches: counters and the visible K/V of every layer."""
    cache, camera = runner.kv_cache, runner.camera_cache
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


def run(model, frames, rollback_at=(), skip=(), kind=SPEC):
    """Stream ``frames``; roll back the frames in ``rollback_at``; never feed those in ``skip``.
    Frames that are kept are keyframe steps; those rolled back are ``kind`` steps."""
    runner = make_runner(model, HW)
    runner.step(frames[:SCALE_FRAMES], KEY)[1].commit()
    poses, states = {}, {}
    for i in range(SCALE_FRAMES, frames.shape[0]):
        if i in skip:
            continue
        states[i] = cache_state(runner)
        outputs, txn = runner.step(frames[i:i + 1], kind if i in rollback_at else KEY,
                                   with_depth=False)
        poses[i] = outputs.pose_enc
        txn.rollback() if i in rollback_at else txn.commit()
        if i in rollback_at:
            assert_same_state(cache_state(runner), states[i])
    return poses, runner


@pytest.mark.parametrize("kind", [KEY, SPEC])
def test_rollback_restores_both_caches_and_later_poses_match_a_run_without_the_frame(
        tiny_model, frames, kind):
    rolled = (4, 7, 8)  # before and after the first eviction (frame 5), twice in a row
    with_rollbacks, runner = run(tiny_model, frames, rollback_at=rolled, kind=kind)
    without, reference = run(tiny_model, frames, skip=rolled)
    assert sorted(without) == [i for i in range(SCALE_FRAMES, 12) if i not in rolled]
    for i in without:
        assert torch.equal(with_rollbacks[i], without[i]), i
    assert_same_state(cache_state(runner), cache_state(reference))
    assert runner.kv_cache.info()["frames_rolled_back"] == len(rolled)
    assert runner.camera_cache.num_frames == 12 - len(rolled)
    for i in rolled:  # the rolled-back frames got a real prediction too
        assert torch.isfinite(with_rollbacks[i]).all()


def test_a_speculative_step_sees_one_window_frame_more_once_the_window_is_full(
        tiny_model, frames):
    """Window 3 is full after frame 4: a speculative frame 5 still sees frame 2 (which its
    commit would evict), so its outputs differ from the same frame begun as a keyframe; both
    commits evict the same page and leave the same bookkeeping (the K/V the frame wrote
    differ, as its own layers saw different contexts); before the window fills the kinds
    agree exactly."""
    outs, states = {}, {}
    for kind in (KEY, SPEC):
        runner = make_runner(tiny_model, HW)
        runner.step(frames[:2], KEY)[1].commit()
        early, txn = runner.step(frames[2:3], kind)  # window not full: nothing to evict
        txn.commit()
        outs[kind, "early"] = early.pose_enc
        for i in (3, 4):
            runner.step(frames[i:i + 1], KEY)[1].commit()
        out, txn = runner.step(frames[5:6], kind)
        visible = runner.kv_cache.table.patches.visible_frames()
        assert visible == ([0, 1, 3, 4, 5] if kind is KEY else [0, 1, 2, 3, 4, 5])
        txn.commit()
        outs[kind] = out.pose_enc
        states[kind] = cache_state(runner)
    assert torch.equal(outs[KEY, "early"], outs[SPEC, "early"])
    assert (outs[KEY] - outs[SPEC]).abs().max() > 1e-4
    assert states[KEY][:3] == states[SPEC][:3]


def test_a_rolled_back_frame_sees_the_committed_frames(tiny_model, frames):
    """Its pose differs from a frame that saw nothing but itself: it attended to the cache."""
    poses, _ = run(tiny_model, frames[:6], rollback_at=(5,))
    alone = make_runner(tiny_model, HW, scale_frames=1)
    outputs, txn = alone.step(frames[5:6], SPEC)
    txn.rollback()
    assert (poses[5] - outputs.pose_enc).abs().max() > 1e-3


def test_exception_inside_the_step_context_rolls_back_both_caches(tiny_model, frames):
    runner = make_runner(tiny_model, HW)
    runner.step(frames[:2], KEY)[1].commit()
    before = cache_state(runner)
    with pytest.raises(KeyError):
        with runner.step(frames[2:3], SPEC)[1]:
            raise KeyError("decided nothing")
    assert_same_state(cache_state(runner), before)


def test_a_failing_run_rolls_the_step_back(tiny_model, frames):
    runner = make_runner(tiny_model, HW)
    runner.step(frames[:2], KEY)[1].commit()
    before = cache_state(runner)
    txn = runner.begin(1, SPEC)
    with pytest.raises(ValueError, match="does not fit"):
        runner.run(torch.rand(1, 3, 28, 28), txn)
    assert txn.state == "rolled back"
    assert_same_state(cache_state(runner), before)
    with pytest.raises(TransactionError, match="already rolled back"):
        runner.run(frames[2:3], txn)


def test_a_step_is_finished_exactly_once(tiny_model, frames):
    runner = make_runner(tiny_model, HW)
    _, txn = runner.step(frames[:2], KEY)
    txn.commit()
    with pytest.raises(TransactionError, match="already committed"):
        txn.rollback()
    _, txn = runner.step(frames[2:3], SPEC)
    with pytest.raises(TransactionError, match="pending"):  # the next step waits for a decision
        runner.step(frames[3:4], SPEC)
    txn.rollback()
    assert runner.frames_committed == runner.camera_cache.num_frames == 2


def test_invalid_steps_are_refused_before_touching_the_caches(tiny_model, frames):
    runner = make_runner(tiny_model, HW)
    runner.step(frames[:2], KEY)[1].commit()
    before = cache_state(runner)
    with pytest.raises(ValueError, match="only allowed on empty caches"):
        runner.step(frames[2:4], KEY)
    with pytest.raises(ValueError, match="multiples of the patch size"):
        runner.step(frames[2:3, :, :100], KEY)
    with pytest.raises(ValueError, match="step kind"):
        runner.begin(1, "keep")
    with pytest.raises(ValueError, match="exceeds num_scale_frames"):
        make_runner(tiny_model, HW).step(frames[:3], KEY)
    assert_same_state(cache_state(runner), before)


def test_reset_forgets_both_caches_and_keeps_the_allocation(tiny_model, frames):
    runner = make_runner(tiny_model, HW)
    runner.step(frames[:2], KEY)[1].commit()
    txn = runner.begin(1, SPEC)
    ptr = runner.kv_cache.storage.data.data_ptr()
    runner.reset()
    assert runner.kv_cache.storage.data.data_ptr() == ptr
    with pytest.raises(Exception, match="reset"):
        txn.commit()
    info = runner.info()
    assert info["cache"]["frames_committed"] == info["camera_cache"]["frames_cached"] == 0
    assert info["attention"] == "torch_ref" and info["fast_path"].startswith("eager")
    runner.step(frames[:2], KEY)[1].commit()  # usable right away


def test_the_fused_kernel_choice_belongs_to_the_stream_not_the_model(tiny_model):
    """Two streams on one model may choose differently; the model holds no switch."""
    on_cpu = make_runner(tiny_model, HW, fused_kernels="auto")
    off = make_runner(tiny_model, HW, fused_kernels="off")
    assert on_cpu.fused_kernels is False and off.fused_kernels is False
    with pytest.raises(RuntimeError, match="needs CUDA"):
        make_runner(tiny_model, HW, fused_kernels="on")
    assert not any(hasattr(m, "fused") for m in tiny_model.modules())


def test_single_fused_kernels_can_be_left_off_by_name(tiny_model):
    from lingbot_ros.model.fused_kernels import FusedKernels
    every = FusedKernels.select(True, ("add_norm",))
    assert every.names() == ["qk_rope", "kv_write", "split_merge"]
    assert FusedKernels.select(False).names() == []
    with pytest.raises(ValueError, match="fused_kernels_off: unknown kernel"):
        make_runner(tiny_model, HW, fused_kernels_off=("fast_gelu",))
    assert make_runner(tiny_model, HW).info()["fused_kernel_names"] == []  # CPU: none

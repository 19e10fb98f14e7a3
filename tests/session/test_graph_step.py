"""GraphedStep: the CUDA-graph fast path of streaming steps.

CPU: the graph's body (everything read from static buffers, camera attention over the whole
cache capacity with a mask) reproduces eager steps, commit and rollback included.
GPU (marked, run on the device machine): captured replays in a real session agree with the
eager session, survive resets and rollovers, and are recaptured when the caches grow.
"""
import numpy as np
import pytest
import torch

from lingbot_ros.attention import choose_backend, make_backend
from lingbot_ros.cache import StepKind
from lingbot_ros.config import KeyframeConfig, PreprocessConfig, SessionConfig
from lingbot_ros.model.presets import preset_config, random_model
from lingbot_ros.session import StreamingSession
from lingbot_ros.session.graph_step import GraphedStep
from tests.session.micro_model import micro_model
from tests.session.runners import make_runner

NSF, WINDOW, HW = 2, 3, (42, 56)
OUTPUT_KEYS = ("pose_enc", "pose_enc_list", "c2w", "intrinsics", "depth", "depth_conf",
               "patch_tokens")
KEY, SPEC = StepKind.KEYFRAME, StepKind.SPECULATIVE


def uncaptured_graph_runner(model):
    """A runner whose single-frame steps go through the graph's body without capturing it
    (CPU): the static buffers, the masked full-capacity camera reads and the graph plan."""
    runner = make_runner(model, HW, NSF, WINDOW, rollover_keyframes=3)  # chunks of 4 frames
    runner.graph = GraphedStep(model, runner.kv_cache, runner.camera_cache,
                               make_backend("torch_ref", runner.kv_cache.storage), NSF,
                               capture=False)
    return runner


def test_the_graph_body_reproduces_eager_steps_of_both_kinds_with_commit_and_rollback():
    model = micro_model()
    torch.manual_seed(1)
    images = torch.rand(24, 3, *HW)
    eager = make_runner(model, HW, NSF, WINDOW, rollover_keyframes=3)
    graphed = uncaptured_graph_runner(model)
    replays = []
    body_run = graphed.graph.run
    graphed.graph.run = lambda *a, **k: replays.append(1) or body_run(*a, **k)
    for runner in (eager, graphed):
        runner.step(images[:NSF], KEY)[1].commit()
    assert not replays  # the anchor phase is never a graph step
    for i in range(NSF, images.shape[0]):
        kind = SPEC if i % 3 else KEY  # every third frame a keyframe known in advance
        out_a, txn_a = eager.step(images[i:i + 1], kind)
        out_b, txn_b = graphed.step(images[i:i + 1], kind)
        assert txn_b.first_frame == txn_a.first_frame
        for key in OUTPUT_KEYS:
            torch.testing.assert_close(getattr(out_b, key), getattr(out_a, key), atol=1e-5,
                                       rtol=1e-5, msg=f"frame {i}: {key}")
        if i % 3 == 1:  # non-keyframes: the body's writes must vanish with the rollback
            txn_a.rollback()
            txn_b.rollback()
        else:
            txn_a.commit()
            txn_b.commit()
    assert len(replays) == images.shape[0] - NSF
    cache_a, cache_b = eager.kv_cache, graphed.kv_cache
    camera_a, camera_b = eager.camera_cache, graphed.camera_cache
    # Both caches hold the same frames; the camera cache grew past its first chunk, so the
    # masked full-capacity reads were exercised with unused (and rolled-back) rows present.
    assert cache_a.info() == cache_b.info() and camera_a.num_frames == camera_b.num_frames
    assert camera_b.capacity > 4 and camera_b.num_frames > 4
    rows = cache_a.current_layout().token_slots()
    for layer in range(cache_a.config.num_layers):
        torch.testing.assert_close(cache_b.storage.layer_tokens(layer)[rows],
                                   cache_a.storage.layer_tokens(layer)[rows])
    for it in range(camera_a.num_iterations):
        for layer in range(camera_a.num_layers):
            for a, b in zip(camera_a.keys_values(it, layer), camera_b.keys_values(it, layer)):
                torch.testing.assert_close(b, a)


def test_a_failed_graph_step_rolls_both_caches_back():
    model = micro_model()
    runner = uncaptured_graph_runner(model)
    runner.step(torch.rand(NSF, 3, *HW), KEY)[1].commit()
    cache, camera = runner.kv_cache, runner.camera_cache

    def state():  # what the next step sees (the seen/rolled-back counters do move)
        info = cache.info()
        return ({k: v for k, v in info.items() if k not in ("frames_seen", "frames_rolled_back")},
                camera.num_frames, cache.current_layout().kv_indices.tolist())
    before = state()
    with pytest.raises(ValueError, match="does not fit"):
        runner.step(torch.rand(1, 3, 28, 28), SPEC)  # another size than the cache's pages
    assert state() == before

    def failing_kernel(layer, q):
        raise RuntimeError("kernel failed")
    runner.graph.backend.run = failing_kernel  # a failure in the middle of the body
    with pytest.raises(RuntimeError, match="kernel failed"):
        runner.step(torch.rand(1, 3, *HW), SPEC)
    assert state() == before
    assert cache.info()["step_pending"] == 0 and camera.pending is None
    runner.graph = None
    runner.step(torch.rand(1, 3, *HW), KEY)[1].commit()  # goes on


def test_sessions_say_which_path_they_run():
    model = micro_model()

    def path(**kw):
        return StreamingSession(model, SessionConfig(**kw)).fast_path()
    assert path() == "eager (device cpu)"
    assert path(cuda_graphs=False) == "eager (cuda_graphs off)"
    if torch.cuda.is_available():
        assert path(device="cuda", attention_backend="torch_ref") == \
            "eager (attention backend torch_ref; configured)"
        # auto does not pick flashinfer for a float32 network (its cache would be float32)
        assert path(device="cuda") == \
            "eager (attention backend torch_ref; auto: float32 cache (flashinfer needs bf16))"
        assert path(device="cuda", attention_backend="flashinfer") == "cuda_graph"


def test_auto_attention_picks_flashinfer_only_where_it_runs():
    cuda = torch.device("cuda")
    assert choose_backend("torch_ref", cuda, torch.bfloat16) == ("torch_ref", "configured")
    assert choose_backend("flashinfer", torch.device("cpu"), torch.float32)[0] == "flashinfer"
    assert choose_backend("auto", torch.device("cpu"), torch.bfloat16) == \
        ("torch_ref", "auto: device cpu")
    assert choose_backend("auto", cuda, torch.float32)[0] == "torch_ref"
    expected = "flashinfer" if HAVE_FLASHINFER else "torch_ref"
    assert choose_backend("auto", cuda, torch.bfloat16)[0] == expected


def test_a_failed_capture_falls_back_to_eager_for_the_rest_of_the_session():
    images = [(np.random.default_rng(i).random(HW + (3,)) * 255).astype(np.uint8)
              for i in range(8)]
    cfg = SessionConfig(num_scale_frames=NSF, window=WINDOW,
                        preprocess=PreprocessConfig(width=HW[1], height=HW[0]))
    model = micro_model()
    plain, graphed = StreamingSession(model, cfg), StreamingSession(model, cfg)
    expected = [r for i, im in enumerate(images) for r in plain.push(im, 1_000 + i)]
    got = [r for i, im in enumerate(images[:NSF]) for r in graphed.push(im, 1_000 + i)]
    # A graph step whose capture fails (as when a kernel is not capturable on some setup).
    class CaptureFails(GraphedStep):
        def record(self, with_depth, first_frame):
            raise RuntimeError("operation not permitted when stream is capturing")

    runner = graphed.runner
    step = CaptureFails(model, runner.kv_cache, runner.camera_cache,
                        make_backend("torch_ref", runner.kv_cache.storage), NSF, capture=False)
    step.capture = True
    runner.graph = step
    for i, image in enumerate(images[NSF:], start=NSF):
        got += graphed.push(image, 1_000 + i)  # no frame is lost or fails
    info = graphed.info()
    assert info.stream.fast_path.startswith("eager (CUDA-graph capture failed: RuntimeError")
    assert info.stream.graph_capture_failures == 1 and info.frames_processed == len(images)
    for a, b in zip(got, expected):
        np.testing.assert_allclose(a.pose_enc, b.pose_enc, atol=1e-6)


def test_torch_ref_cannot_be_built_for_a_graph():
    runner = make_runner(micro_model(), HW, NSF, WINDOW)
    with pytest.raises(ValueError, match="CUDA graph"):
        make_backend("torch_ref", runner.kv_cache.storage, graph_query_tokens=10)


# -- GPU ----------------------------------------------------------------------------------------
try:
    import flashinfer  # noqa: F401
    HAVE_FLASHINFER = True
except ImportError:
    HAVE_FLASHINFER = False



def gpu(test):
    """Marked ``gpu``; skipped without CUDA or flashinfer (CI), run on the device machine."""
    test = pytest.mark.skipif(not HAVE_FLASHINFER, reason="needs flashinfer")(test)
    test = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(test)
    return pytest.mark.gpu(test)


def run_session(model, images, cuda_graphs, variant, **kw):
    cfg = SessionConfig(num_scale_frames=NSF, window=WINDOW, preprocess=PreprocessConfig(
        width=HW[1], height=HW[0]), attention_backend="flashinfer", flashinfer_variant=variant,
        cuda_graphs=cuda_graphs, device="cuda", **kw)
    session = StreamingSession(model, cfg)
    results = []
    for i, image in enumerate(images):
        results += session.push(image, 1_000 + i)
    return session, results


def gpu_frames(n):
    rng = np.random.default_rng(0)
    return [(rng.random(HW + (3,)) * 255).astype(np.uint8) for _ in range(n)]


@pytest.fixture(scope="module")
def tiny_bf16():
    return random_model(preset_config("tiny"), seed=0).prepare("cuda", "bf16")


@gpu
@pytest.mark.parametrize("variant", ["fa2", "fa3"])
def test_graph_replays_match_the_eager_session_through_rollovers_and_resets(tiny_bf16, variant):
    images = gpu_frames(70)
    kw = dict(rollover_keyframes=10, keyframes=KeyframeConfig(policy="every_n", n=2))
    graph_s, graph_r = run_session(tiny_bf16, images, True, variant, **kw)
    eager_s, eager_r = run_session(tiny_bf16, images, False, variant, **kw)
    info = graph_s.info()
    assert info.stream.fast_path == "cuda_graph" and eager_s.info().stream.fast_path.startswith("eager")
    assert info.rollovers >= 4 and info.stream.graph_captures == 1  # rollovers reuse the graph
    assert [r.keyframe for r in graph_r] == [r.keyframe for r in eager_r]
    diff = max(np.abs(g.pose_enc - e.pose_enc).max() for g, e in zip(graph_r, eager_r))
    assert np.isfinite([r.pose_enc for r in graph_r]).all() and diff < 1e-2
    depth = max(np.abs(g.depth - e.depth).max() / np.abs(e.depth).max()
                for g, e in zip(graph_r, eager_r))
    assert depth < 2e-2
    graph_s.reset()  # a reset keeps the caches, so the captured graph stays valid
    again = [r for i, image in enumerate(images[:12]) for r in graph_s.push(image, 10_000 + i)]
    assert graph_s.info().stream.graph_captures == 1
    assert max(np.abs(a.pose_enc - g.pose_enc).max() for a, g in zip(again, graph_r)) < 1e-2


@gpu
def test_a_growing_cache_is_recaptured(tiny_bf16):
    # One endless window: the camera-head cache grows by a chunk at 256 frames, which moves
    # the captured addresses; the step must notice and capture again, and stay correct.
    images = gpu_frames(8)
    cycle = [images[i % 8] for i in range(270)]
    graph_s, graph_r = run_session(tiny_bf16, cycle, True, "fa3", rollover_keyframes=None)
    _, eager_r = run_session(tiny_bf16, cycle, False, "fa3", rollover_keyframes=None)
    assert graph_s.info().stream.graph_captures == 2
    diff = max(np.abs(g.pose_enc - e.pose_enc).max() for g, e in zip(graph_r, eager_r))
    assert diff < 1e-2


@gpu
def test_fused_kernels_in_the_graph_match_the_unfused_eager_session(tiny_bf16):
    images = gpu_frames(30)
    fused_s, fused_r = run_session(tiny_bf16, images, True, "fa3", fused_kernels="on")
    assert fused_s.info().stream.fused_kernels is True
    plain_s, plain_r = run_session(tiny_bf16, images, False, "fa3", fused_kernels="off")
    assert plain_s.info().stream.fused_kernels is False
    diff = max(np.abs(f.pose_enc - p.pose_enc).max() for f, p in zip(fused_r, plain_r))
    assert np.isfinite([r.pose_enc for r in fused_r]).all() and diff < 1e-2


@gpu
@pytest.mark.parametrize("policy", ["all", "every_n"])
def test_steps_planned_while_the_gpu_is_busy_equal_steps_planned_after(tiny_bf16, policy):
    # A pipelined session plans frame t+1's attention while frame t still runs: its uploads
    # queue behind the step in flight and must not change what that step reads. A busy wait
    # queued before every step keeps the GPU busy while the next step is planned.
    images = gpu_frames(60)
    keyframes = KeyframeConfig(policy=policy, n=2)

    def stream(plan_ahead: bool):
        cfg = SessionConfig(num_scale_frames=NSF, window=WINDOW, preprocess=PreprocessConfig(
            width=HW[1], height=HW[0]), attention_backend="flashinfer", flashinfer_variant="fa3",
            cuda_graphs=True, device="cuda", rollover_keyframes=20, keyframes=keyframes)
        session = StreamingSession(tiny_bf16, cfg)
        out = []
        for i, image in enumerate(images):
            torch.cuda._sleep(5_000_000)  # a few ms of GPU time ahead of the step
            session.submit(image, 1_000 + i)
            if not plan_ahead:  # (the runner exists once the first frame is in)
                session.runner.prepare_next = lambda *args: None
            out += session.collect(wait=False)
        return session, out + session.collect()

    ahead_s, ahead = stream(True)
    after_s, after = stream(False)
    assert ahead_s.info().stream.steps_planned_ahead > 30
    assert after_s.info().stream.steps_planned_ahead == 0
    assert [r.index for r in ahead] == [r.index for r in after] == list(range(60))
    for a, b in zip(ahead, after):
        np.testing.assert_array_equal(a.pose_enc, b.pose_enc)
        np.testing.assert_array_equal(a.depth, b.depth)

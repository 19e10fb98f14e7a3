"""BatchGraphs: the batched step as a CUDA graph per batch size.

CPU: a failed capture turns the graphs off for good and the step runs eagerly, its steps
still pending (the graph's body itself is checked against each stream alone in
test_batch_step.py, ``graph_body``). GPU (marked, run on the device machine): captured
replays of B = 1, 2, 3 streams agree with each stream's eager run alone within the graph
step's bounds, one capture per batch size until a pool grows, then one more.
"""
import random

import pytest
import torch

from lingbot_ros.attention import make_backend
from lingbot_ros.cache import StepKind
from lingbot_ros.config import SessionConfig
from lingbot_ros.model.presets import preset_config, random_model
from lingbot_ros.session import StreamRunner
from lingbot_ros.session.batch_graph import BatchGraphs
from lingbot_ros.session.batch_step import BatchRunner, SharedStreams
from tests.session.micro_model import micro_model

HW = (42, 56)
KEY, SPEC = StepKind.KEYFRAME, StepKind.SPECULATIVE


def test_a_failed_capture_runs_the_batch_eagerly_and_turns_the_graphs_off():
    model = micro_model()
    cfg = SessionConfig(num_scale_frames=2, window=3, rollover_keyframes=None,
                        attention_backend="torch_ref", cuda_graphs=False)
    shared = SharedStreams(model, cfg, HW)
    runners = [StreamRunner(model, cfg, HW, shared=shared) for _ in range(2)]
    alone = [StreamRunner(model, cfg, HW) for _ in range(2)]
    torch.manual_seed(0)
    frames = torch.rand(4, 3, *HW)
    for runner in runners + alone:
        runner.step(frames[:2], KEY)[1].commit()

    class CaptureFails(BatchGraphs):
        def record(self, batch, splits, with_depth):
            raise RuntimeError("operation not permitted when stream is capturing")
    batch = BatchRunner(model, cfg, HW, shared)
    batch.graphs = CaptureFails(model, shared, lambda b, s: make_backend(
        "torch_ref", shared.kv_pool.storage), capture=False)
    batch.graphs.capture = True  # as on a GPU: the capture is attempted, and fails
    txns = [r.begin(1, kind) for r, kind in zip(runners, (KEY, SPEC))]
    outputs = batch.run(frames[2:4], runners, txns)
    info = batch.info()
    assert info["fast_path"].startswith("eager (CUDA-graph capture failed: RuntimeError")
    assert info["graph_capture_failures"] == 1 and batch.graphs is None
    assert [t.state for t in txns] == ["pending"] * 2
    for b, (runner, kind) in enumerate(zip(alone, (KEY, SPEC))):
        want = runner.run(frames[2 + b:3 + b], runner.begin(1, kind))
        torch.testing.assert_close(outputs[b].pose_enc, want.pose_enc, atol=1e-5, rtol=1e-5)


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


def gpu_config(cuda_graphs: bool, **fields) -> SessionConfig:
    base = dict(rollover_keyframes=None, attention_backend="flashinfer", device="cuda",
                cuda_graphs=cuda_graphs)
    base.update(fields)
    return SessionConfig(**base)


def run_rig(model, streams: dict, ticks: int, seed: int = 0):
    """Each stream batched (graphs) and alone (eager flashinfer): the largest pose and
    relative depth differences, and the batch's info."""
    first = next(iter(streams.values()))
    shared = SharedStreams(model, gpu_config(True, **first), HW)
    batch = BatchRunner(model, gpu_config(True, **first), HW, shared)
    batched = {n: StreamRunner(model, gpu_config(True, **f), HW, shared=shared)
               for n, f in streams.items()}
    alone = {n: StreamRunner(model, gpu_config(False, **f), HW) for n, f in streams.items()}
    rng = random.Random(seed)
    gen = torch.Generator(device="cuda").manual_seed(seed)
    pose_diff = depth_diff = 0.0
    for name, fields in streams.items():
        anchors = torch.rand(fields["num_scale_frames"], 3, *HW, device="cuda", generator=gen)
        for runner in (batched[name], alone[name]):
            runner.step(anchors, KEY)[1].commit()
    for tick in range(ticks):
        names = [n for n in streams if rng.random() < 0.8] or list(streams)[:1]
        kinds = {n: rng.choice((KEY, SPEC)) for n in names}
        images = torch.rand(len(names), 3, *HW, device="cuda", generator=gen)
        txns = [batched[n].begin(1, kinds[n]) for n in names]
        outputs = batch.run(images, [batched[n] for n in names], txns)
        for b, name in enumerate(names):
            txn = alone[name].begin(1, kinds[name])
            want = alone[name].run(images[b:b + 1], txn)
            got = outputs[b]
            assert torch.isfinite(got.pose_enc).all()
            pose_diff = max(pose_diff, (got.pose_enc - want.pose_enc).abs().max().item())
            depth_diff = max(depth_diff, ((got.depth - want.depth).abs().max()
                                          / want.depth.abs().max()).item())
            commit = kinds[name] == KEY or rng.random() < 0.5
            for t in (txns[b], txn):
                t.commit() if commit else t.rollback()
            assert batched[name].kv_cache.info() == alone[name].kv_cache.info()
    return pose_diff, depth_diff, batch.info()


@pytest.fixture(scope="module")
def tiny_bf16():
    return random_model(preset_config("tiny"), seed=0).prepare("cuda", "bf16")


@gpu
def test_graph_replays_of_one_to_three_streams_match_each_stream_alone(tiny_bf16):
    streams = {"front": dict(num_scale_frames=2, window=3),
               "rear": dict(num_scale_frames=3, window=5),
               "left": dict(num_scale_frames=2, window=4, max_special_frames=3)}
    pose_diff, depth_diff, info = run_rig(tiny_bf16, streams, ticks=40)
    assert info["fast_path"] == "cuda_graph" and info["graph_capture_failures"] == 0
    assert set(info["graph_steps"]) >= {2, 3}
    assert all(info["graph_captures"][b] == 1 for b in info["graph_steps"])
    assert pose_diff < 1e-2 and depth_diff < 2e-2


@gpu
def test_a_growing_pool_is_recaptured(tiny_bf16):
    # rollover_keyframes=3: the special pool and the camera pool grow by chunks of 4 frames,
    # which moves the captured addresses: the graphs must notice, capture again, stay right.
    streams = {"front": dict(num_scale_frames=2, window=3, rollover_keyframes=3),
               "rear": dict(num_scale_frames=2, window=3)}
    pose_diff, depth_diff, info = run_rig(tiny_bf16, streams, ticks=30, seed=1)
    assert max(info["graph_captures"].values()) >= 2
    assert pose_diff < 1e-2 and depth_diff < 2e-2

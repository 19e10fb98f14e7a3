"""BatchRunner: B streams' single-frame steps as one forward over shared pools.

Each stream of a batch gets the outputs of its step run alone (separate StreamRunners, not
shared) to 1e-5 on the CPU in fp32, and its caches the same counts, over many ticks that mix
keyframes and speculative steps (committed or rolled back), streams at different frame
counts, with different windows, anchors and special-pool growth, a stream absent from some
ticks and a stream reset mid-run. A failure rolls every pending step back exactly once.
"""
import random

import pytest
import torch

from lingbot_ros.attention import make_backend
from lingbot_ros.cache import StepKind, TransactionError
from lingbot_ros.config import SessionConfig
from lingbot_ros.session import StreamRunner
from lingbot_ros.session.batch_graph import BatchGraphs
from lingbot_ros.session.batch_step import BatchRunner, SharedStreams, check_batchable
from tests.session.micro_model import micro_model

HW = (42, 56)  # 3 x 4 patches
KEY, SPEC = StepKind.KEYFRAME, StepKind.SPECULATIVE
OUTPUT_KEYS = ("pose_enc", "pose_enc_list", "c2w", "intrinsics", "depth", "depth_conf",
               "world_points", "world_points_conf", "patch_tokens")
# Windows, anchors and special-pool growth differ (rollover_keyframes=3: chunks of 4 frames)
STREAMS = {"front": dict(num_scale_frames=2, window=3, rollover_keyframes=3),
           "rear": dict(num_scale_frames=3, window=4),
           "left": dict(num_scale_frames=2, window=5, max_special_frames=3)}


def config(**fields) -> SessionConfig:
    base = dict(rollover_keyframes=None, attention_backend="torch_ref", cuda_graphs=False,
                device="cpu")
    base.update(fields)
    return SessionConfig(**base)


class Pair:
    """One stream twice: drawing from the shared pools (batched) and alone."""

    def __init__(self, model, cfg: SessionConfig, shared: SharedStreams) -> None:
        self.batched = StreamRunner(model, cfg, HW, shared=shared)
        self.alone = StreamRunner(model, cfg, HW)
        self.nsf = cfg.num_scale_frames

    def anchors(self, frames: torch.Tensor) -> None:
        for runner in (self.batched, self.alone):
            outputs, txn = runner.step(frames[:self.nsf], KEY)
            txn.commit()
        self.check_caches()

    def check_caches(self) -> None:
        a, b = self.batched, self.alone
        assert a.kv_cache.info() == b.kv_cache.info()
        keep = ("frames_cached", "step_pending")  # the capacity is the shared pool's
        assert ({k: a.camera_cache.info()[k] for k in keep}
                == {k: b.camera_cache.info()[k] for k in keep})
        assert a.frames_committed == b.frames_committed


def assert_outputs_close(got, want, what: str, atol: float = 1e-5) -> None:
    for key in OUTPUT_KEYS:
        x, y = getattr(got, key), getattr(want, key)
        assert (x is None) == (y is None), f"{what}: {key}"
        if x is not None:
            assert x.shape == y.shape, f"{what}: {key} {tuple(x.shape)} vs {tuple(y.shape)}"
            torch.testing.assert_close(x, y, atol=atol, rtol=atol, msg=f"{what}: {key}")


def make_streams(model, names=tuple(STREAMS), graphed: bool = False):
    """The shared pools, the batch runner and each stream's pair of runners; ``graphed``:
    the batch runs the CUDA graph's body without capturing it (every B, B = 1 included)."""
    configs = {name: config(**STREAMS[name]) for name in names}
    check_batchable(configs)
    first = configs[names[0]]
    shared = SharedStreams(model, first, HW)
    pairs = {name: Pair(model, cfg, shared) for name, cfg in configs.items()}
    batch = BatchRunner(model, first, HW, shared)
    if graphed:
        batch.graphs = BatchGraphs(
            model, shared, lambda b, splits: make_backend("torch_ref", shared.kv_pool.storage),
            capture=False)
    return shared, batch, pairs


@pytest.fixture(scope="module")
def model():
    return micro_model()


@pytest.mark.parametrize("graphed", [False, True], ids=["eager", "graph_body"])
def test_batched_streams_equal_each_stream_alone_over_mixed_ticks(model, graphed):
    shared, batch, pairs = make_streams(model, graphed=graphed)
    specials = pairs["front"].batched.kv_cache.info()["special_pages_total"]
    rng = random.Random(3)
    torch.manual_seed(5)
    frames = {name: torch.rand(30, 3, *HW) for name in pairs}
    used = {name: 0 for name in pairs}  # frames of each stream fed so far
    started = {"front": 0, "rear": 0, "left": 4}  # the tick each stream's anchors run
    mixed_kinds = both_fates = 0
    for tick in range(16):
        if tick == 9:  # one stream resets mid-run: anchors again, the others go on
            for runner in (pairs["rear"].batched, pairs["rear"].alone):
                runner.reset()
            started["rear"] = tick
        active = []
        for name, pair in pairs.items():
            if tick == started[name]:
                pair.anchors(frames[name][used[name]:used[name] + pair.nsf])
                used[name] += pair.nsf
            elif tick > started[name] and rng.random() < 0.85:  # sometimes late: absent
                active.append(name)
        if not active:
            continue
        kinds = {name: rng.choice((KEY, SPEC)) for name in active}
        txns = {name: pairs[name].batched.begin(1, kinds[name]) for name in active}
        images = torch.cat([frames[name][used[name]:used[name] + 1] for name in active])
        outputs = batch.run(images, [pairs[n].batched for n in active],
                            [txns[n] for n in active])
        assert len(outputs) == len(active)
        mixed_kinds += len(set(kinds.values())) == 2
        fates = []
        for name, got in zip(active, outputs):
            pair = pairs[name]
            txn_alone = pair.alone.begin(1, kinds[name])
            want = pair.alone.run(frames[name][used[name]:used[name] + 1], txn_alone)
            assert_outputs_close(got, want, f"tick {tick}, stream {name}")
            commit = kinds[name] == KEY or rng.random() < 0.5
            fates.append(commit)
            for txn in (txns[name], txn_alone):
                txn.commit() if commit else txn.rollback()
            used[name] += 1
            pair.check_caches()
        both_fates += len(set(fates)) == 2
    assert mixed_kinds >= 3 and both_fates >= 3  # a keyframe beside a speculative step
    assert min(p.batched.frames_committed for p in pairs.values()) >= 4
    # the front stream's special pool grew in chunks: the shared storage grew meanwhile
    assert pairs["front"].batched.kv_cache.info()["special_pages_total"] > specials
    shared.kv_pool.check_invariants()
    steps = batch.info()["steps"]
    assert steps.get(2, 0) + steps.get(3, 0) >= 8
    assert batch.info()["graph_steps"] == (steps if graphed else {})


def test_one_stream_is_exactly_its_runners_run(model):
    shared, batch, pairs = make_streams(model, ("front",))
    pair = pairs["front"]
    torch.manual_seed(2)
    frames = torch.rand(6, 3, *HW)
    pair.anchors(frames[:2])
    for i in range(2, 6):
        kind = SPEC if i % 2 else KEY
        txn = pair.batched.begin(1, kind)
        got, = batch.run(frames[i:i + 1], [pair.batched], [txn])
        txn_alone = pair.alone.begin(1, kind)
        want = pair.alone.run(frames[i:i + 1], txn_alone)
        for key in OUTPUT_KEYS:
            x, y = getattr(got, key), getattr(want, key)
            assert (x is None and y is None) or torch.equal(x, y), key
        txn.commit()
        txn_alone.commit()
        pair.check_caches()
    assert batch.info()["steps"] == {1: 4}


def counted_rollbacks(txns) -> list:
    """Each txn's rollback calls (a counter around the real method)."""
    counts = []
    for txn in txns:
        counts.append([0])

        def rollback(real=txn.rollback, count=counts[-1]):
            count[0] += 1
            real()
        txn.rollback = rollback
    return counts


def open_tick(pairs, names, kinds):
    return [pairs[n].batched.begin(1, k) for n, k in zip(names, kinds)]


def test_a_failure_mid_forward_rolls_every_step_back_once(model):
    shared, batch, pairs = make_streams(model)
    torch.manual_seed(4)
    frames = torch.rand(12, 3, *HW)
    names = list(pairs)
    for name in names:
        pairs[name].anchors(frames[:pairs[name].nsf])
    before = {n: pairs[n].batched.kv_cache.info() for n in names}
    block = model.aggregator.global_blocks[2]  # after two layers' K/V writes

    def fail(*args):
        raise RuntimeError("injected failure in global block 2")
    handle = block.register_forward_hook(fail)
    try:
        txns = open_tick(pairs, names, (KEY, SPEC, KEY))
        counts = counted_rollbacks(txns)
        with pytest.raises(RuntimeError, match="injected failure"):
            batch.run(frames[4:7], [pairs[n].batched for n in names], txns)
    finally:
        handle.remove()
    assert [c[0] for c in counts] == [1, 1, 1]
    assert [t.state for t in txns] == ["rolled back"] * 3
    for name in names:
        info = pairs[name].batched.kv_cache.info()
        assert info["frames_committed"] == before[name]["frames_committed"]
        assert info["step_pending"] == 0 and pairs[name].batched.camera_cache.pending is None
    for name, kind in zip(names, (KEY, SPEC, KEY)):  # alone: the same steps, rolled back
        pairs[name].alone.begin(1, kind).rollback()
        pairs[name].check_caches()
    # the streams go on as after any rolled-back step
    txns = open_tick(pairs, names, (KEY, KEY, SPEC))
    outputs = batch.run(frames[4:7], [pairs[n].batched for n in names], txns)
    for b, name in enumerate(names):
        alone = pairs[name].alone
        txn = alone.begin(1, txns[b].kind)
        assert_outputs_close(outputs[b], alone.run(frames[4 + b:5 + b], txn), name)
        txns[b].commit()
        txn.commit()
        pairs[name].check_caches()


def test_a_bad_batch_rolls_back_every_pending_step_and_names_the_problem(model):
    shared, batch, pairs = make_streams(model, ("front", "rear"))
    torch.manual_seed(6)
    frames = torch.rand(8, 3, *HW)
    front, rear = pairs["front"].batched, pairs["rear"].batched
    pairs["front"].anchors(frames[:2])
    pairs["rear"].anchors(frames[:3])
    cases = [
        (lambda t: (frames[:1], [front, rear], t), ValueError, r"\(2, 3, H, W\)"),
        (lambda t: (frames[:2], [front, front], t), ValueError, "given twice"),
        (lambda t: (frames[:2], [rear, front], t), ValueError, "not runner 0's open step"),
    ]
    for args, error, match in cases:
        txns = open_tick(pairs, ("front", "rear"), (KEY, SPEC))
        counts = counted_rollbacks(txns)
        with pytest.raises(error, match=match):
            batch.run(*args(txns))
        assert [c[0] for c in counts] == [1, 1]
    txns = open_tick(pairs, ("front", "rear"), (KEY, SPEC))
    txns[0].commit()  # closed before the batch: not pending
    counts = counted_rollbacks(txns)
    with pytest.raises(TransactionError, match="step 0 is not a pending step"):
        batch.run(frames[:2], [front, rear], txns)
    assert [c[0] for c in counts] == [0, 1] and txns[0].state == "committed"
    alone = StreamRunner(model, config(**STREAMS["front"]), HW)  # not of these pools
    alone.step(frames[:2], KEY)[1].commit()
    txns = [alone.begin(1, KEY), rear.begin(1, KEY)]
    with pytest.raises(ValueError, match="runner 0 does not draw from this engine"):
        batch.run(frames[:2], [alone, rear], txns)
    assert [t.state for t in txns] == ["rolled back"] * 2
    fresh = StreamRunner(model, config(**STREAMS["front"]), HW, shared=shared)
    txns = [fresh.begin(2, KEY), rear.begin(1, KEY)]  # an anchor step: run alone
    with pytest.raises(ValueError, match="step 0 is not a streaming step"):
        batch.run(frames[:2], [fresh, rear], txns)
    assert [t.state for t in txns] == ["rolled back"] * 2


def test_check_batchable_names_the_field_and_the_streams(model):
    check_batchable([config(window=3), config(window=9, num_scale_frames=4)])
    with pytest.raises(ValueError, match="'front' and 'rear'.*kv_splits is 4 and 2"):
        check_batchable({"front": config(), "rear": config(kv_splits=2)})
    with pytest.raises(ValueError, match=r"'#0' and '#1'.*preprocess.width"):
        check_batchable([config(), config(preprocess=config().preprocess.__class__(width=504))])
    with pytest.raises(ValueError, match="no stream configs"):
        check_batchable([])
    shared = SharedStreams(model, config(), HW)
    with pytest.raises(ValueError, match="fused_kernels is 'auto' and 'off'"):
        StreamRunner(model, config(fused_kernels="off"), HW, shared=shared)
    with pytest.raises(ValueError, match=r"\(28, 28\) model inputs"):
        StreamRunner(model, config(), (28, 28), shared=shared)
    assert StreamRunner(model, config(), HW, shared=shared).info()["fast_path"] == (
        StreamRunner(model, config(), HW).info()["fast_path"])  # on the CPU: eager


def test_a_stream_restored_into_the_pools_batches_on_as_it_was(model):
    shared, batch, pairs = make_streams(model, ("front", "rear"))
    torch.manual_seed(8)
    frames = torch.rand(10, 3, *HW)
    pairs["front"].anchors(frames[:2])
    pairs["rear"].anchors(frames[:3])
    names = ["front", "rear"]
    for i in range(3, 6):  # a few batched ticks
        txns = open_tick(pairs, names, (KEY, KEY))
        batch.run(frames[i:i + 2], [pairs[n].batched for n in names], txns)
        for n, b in zip(names, range(2)):
            pairs[n].alone.step(frames[i + b:i + b + 1], KEY)[1].commit()
        for txn in txns:
            txn.commit()
    state = pairs["front"].batched.state_dict()  # a snapshot of one stream, host tensors
    restored = StreamRunner(model, config(**STREAMS["front"]), HW, shared=shared)
    restored.load_state_dict(state)
    pairs["front"].batched.reset()  # the old runner's pages: no longer visible to anyone
    pairs["front"].batched = restored
    pairs["front"].check_caches()
    for i in range(6, 9):
        txns = open_tick(pairs, names, (SPEC, KEY))
        outputs = batch.run(frames[i:i + 2], [pairs[n].batched for n in names], txns)
        for b, name in enumerate(names):
            alone = pairs[name].alone
            txn = alone.begin(1, txns[b].kind)
            assert_outputs_close(outputs[b], alone.run(frames[i + b:i + b + 1], txn), name)
            for t in (txns[b], txn):
                t.commit()
            pairs[name].check_caches()
    shared.kv_pool.check_invariants()

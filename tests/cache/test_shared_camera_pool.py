"""N camera-head caches on one ``SharedCameraPool`` against N separate ``CameraKVCache``s.

Random begin / write / commit / rollback / reset / restore on random streams (seeded): each
shared stream holds what its separate twin holds, frame for frame, and nothing one stream
does changes another stream's rows.
"""
from __future__ import annotations

import gc
import random

import pytest
import torch

from lingbot_ros.cache import CameraKVCache, SharedCameraPool

DIMS = dict(num_iterations=2, num_layers=2, num_heads=1, head_dim=3)
N = 3


def write_all(txn, uid: int) -> None:
    for it in range(DIMS["num_iterations"]):
        for layer in range(DIMS["num_layers"]):
            k = torch.arange(txn.num_frames * 3, dtype=torch.float32).view(-1, 1, 3)
            k = k + 1000 * uid + 100 * it + 10 * layer
            txn.write(it, layer, k, -k)


def committed(cache: CameraKVCache) -> list[torch.Tensor]:
    return [torch.stack(cache.keys_values(it, layer)).clone()
            for it in range(DIMS["num_iterations"]) for layer in range(DIMS["num_layers"])]


def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
    return len(a) == len(b) and all(torch.equal(x, y) for x, y in zip(a, b))


@pytest.mark.parametrize("seed", range(4))
def test_random_operations_equal_separate_caches(seed):
    rng = random.Random(seed)
    pool = SharedCameraPool(**DIMS, chunk_frames=3)
    shared = [CameraKVCache(**DIMS, shared=pool) for _ in range(N)]
    alone = [CameraKVCache(**DIMS, chunk_frames=3) for _ in range(N)]
    txns: list = [None] * N
    uid = 0
    for _ in range(300):
        i = rng.randrange(N)
        before = {j: committed(shared[j]) for j in range(N) if j != i}
        op = rng.choices(["step", "reset", "restore"], [20, 1, 1])[0]
        if op == "reset":
            for c in (shared[i], alone[i]):
                c.reset()
            txns[i] = None
        elif op == "restore" and txns[i] is None:
            state, data = alone[i].state_dict()
            for c in (shared[i], alone[i]):
                c.load_state_dict(state, data)
        elif txns[i] is None:
            uid += 1
            n = rng.choice([1, 1, 1, 2])
            txns[i] = [c.begin(n) for c in (shared[i], alone[i])]
            for txn in txns[i]:
                write_all(txn, uid)
            a, b = (t.visible(1, 1) for t in txns[i])
            assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        else:
            action = rng.choice(["commit", "commit", "rollback"])
            for txn in txns[i]:
                getattr(txn, action)()
            txns[i] = None
        for j in range(N):
            assert shared[j].num_frames == alone[j].num_frames
            assert same(committed(shared[j]), committed(alone[j]))
            assert shared[j].capacity == pool.capacity >= alone[j].capacity
            if j != i:
                assert same(committed(shared[j]), before[j])
    assert pool.capacity > 3  # growth exercised
    assert pool.data.shape[3] == N * pool.capacity


def test_each_stream_owns_one_block_of_the_pool():
    pool = SharedCameraPool(**DIMS, chunk_frames=2)
    caches = [CameraKVCache(**DIMS, shared=pool) for _ in range(2)]
    txn = caches[1].begin(1)
    write_all(txn, 7)
    txn.commit()
    assert pool.row_offset(1) == pool.capacity == 2
    assert torch.equal(pool.data[:, :, :, 2:3], caches[1].data[:, :, :, :1])
    assert not pool.data[:, :, :, :2].any()  # stream 0 untouched
    assert caches[1].nbytes * 2 == pool.nbytes and caches[1].slot == 1


def test_a_dropped_cache_gives_its_block_to_the_next_stream():
    pool = SharedCameraPool(**DIMS, chunk_frames=2)
    keep, dropped = CameraKVCache(**DIMS, shared=pool), CameraKVCache(**DIMS, shared=pool)
    for cache, uid in ((keep, 1), (dropped, 2)):
        txn = cache.begin(1)
        write_all(txn, uid)
        txn.commit()
    before = committed(keep)
    del dropped, txn, cache
    gc.collect()
    assert pool.num_live == 1 and pool.num_streams == 2
    again = CameraKVCache(**DIMS, shared=pool)  # the freed block, zeroed; no new one
    assert again.slot == 1 and pool.num_streams == 2 and pool.num_live == 2
    assert not again.data.any() and same(committed(keep), before)
    with pytest.raises(ValueError, match="not in use"):
        pool.release_stream(5)


def test_a_cache_of_other_dimensions_is_refused():
    pool = SharedCameraPool(**DIMS)
    with pytest.raises(ValueError, match="head_dim=4 cannot share a pool of head_dim=3"):
        CameraKVCache(**{**DIMS, "head_dim": 4}, shared=pool)
    with pytest.raises(ValueError, match="cannot share a pool of torch.float32"):
        CameraKVCache(**DIMS, dtype=torch.bfloat16, shared=pool)
    assert pool.num_streams == 0

"""N page tables on one ``SharedKVPool`` against N separate ``PagedKVCache``s.

Random begin / write / commit / rollback / reset / restore on random streams (seeded, so
deterministic): after every operation each shared stream's ``info()`` equals its separate
twin's, the K/V it sees are the twin's token for token, the pool's invariants hold (no id in
two tables, free + owned = total) and every other stream's pages keep their bytes.
"""
from __future__ import annotations

import random

import pytest
import torch

from lingbot_ros.cache import (CacheError, CacheFullError, PagedKVCache, PageLedger,
                               SharedKVPool, StepKind)
from lingbot_ros.config import CacheConfig
from tests.cache.naive_model import frame_kv

NUM_LAYERS = 2
SHAPE = dict(num_layers=NUM_LAYERS, num_heads=1, head_dim=2, page_size=3)
# Streams of one pool: the page shape agrees, the retention policy differs.
STREAMS = (dict(scale_frames=2, window=3, special_chunk_frames=1),
           dict(scale_frames=0, window=2, max_special_frames=4, special_chunk_frames=2),
           dict(scale_frames=3, window=1, special_chunk_frames=3))


def configs(n: int) -> list[CacheConfig]:
    return [CacheConfig(**SHAPE, **STREAMS[i % len(STREAMS)]) for i in range(n)]


def visible_kv(cache: PagedKVCache) -> list[torch.Tensor]:
    layout = cache.current_layout()
    if layout is None:
        return []
    rows = layout.token_slots()
    rows = torch.cat([rows, rows + cache.config.page_size])
    return [cache.storage.layer_tokens(layer)[rows] for layer in range(NUM_LAYERS)]


def owned_bytes(cache: PagedKVCache) -> torch.Tensor:
    """The stream's pages (every id its pools own), id order."""
    index = torch.tensor(sorted(cache.table.page_ids()), dtype=torch.int64)
    return cache.storage.data.index_select(1, index).clone()


class Rig:
    """N shared streams, each with a separate twin, driven the same way."""

    def __init__(self, n: int, budget: int | None = None) -> None:
        self.pool = SharedKVPool(CacheConfig(**SHAPE, max_cache_bytes=budget))
        self.shared = [PagedKVCache(c, shared=self.pool) for c in configs(n)]
        self.alone = [PagedKVCache(c) for c in configs(n)]
        self.txns: list = [None] * n
        self.uid = 1

    def begin(self, i: int, n: int, kind: StepKind) -> None:
        pair = self.shared[i], self.alone[i]
        try:
            txns = [c.begin(n, kind) for c in pair]
        except CacheError:  # both refuse (checked equal below), neither changed
            with pytest.raises(CacheError):
                pair[0].begin(n, kind)
            return
        tpf = pair[0].config.tokens_per_frame
        kvs = [frame_kv(self.uid + f, NUM_LAYERS, tpf) for f in range(n)]
        self.uid += n
        for layer in range(NUM_LAYERS):
            k = torch.cat([kv[0][layer] for kv in kvs])
            v = torch.cat([kv[1][layer] for kv in kvs])
            for txn in txns:
                txn.write(layer, k, v)
        self.txns[i] = txns

    def close(self, i: int, action: str) -> None:
        for txn in self.txns[i]:
            getattr(txn, action)()
        self.txns[i] = None

    def reset(self, i: int) -> None:
        for cache in (self.shared[i], self.alone[i]):
            cache.reset()
        self.txns[i] = None

    def restore(self, i: int) -> None:
        """Snapshot the separate twin, restore it into a fresh table of the pool."""
        state, tensors = self.alone[i].state_dict()
        self.shared[i].load_state_dict(state, tensors)
        self.alone[i].load_state_dict(state, tensors)

    def check(self) -> None:
        self.pool.check_invariants()
        for shared, alone in zip(self.shared, self.alone):
            shared.check_invariants()
            alone.check_invariants()
            assert shared.info() == alone.info()
            for a, b in zip(visible_kv(shared), visible_kv(alone), strict=True):
                assert torch.equal(a, b)
        owned = [c.table.page_ids() for c in self.shared]
        assert sum(map(len, owned)) + self.pool.ledger.num_free == self.pool.storage.num_pages


@pytest.mark.parametrize("seed", range(6))
def test_random_operations_equal_separate_streams(seed):
    rng = random.Random(seed)
    rig = Rig(3)
    rig.check()
    for _ in range(400):
        i = rng.randrange(3)
        others = [j for j in range(3) if j != i]
        before = {j: owned_bytes(rig.shared[j]) for j in others}
        seen = {j: visible_kv(rig.shared[j]) for j in others}
        op = rng.choices(["step", "reset", "restore"], [20, 1, 1])[0]
        if op == "reset":
            rig.reset(i)
        elif op == "restore" and rig.txns[i] is None:
            rig.restore(i)
        elif rig.txns[i] is None:
            rig.begin(i, rng.choice([1, 1, 1, 1, 2, 3]),
                      rng.choice([StepKind.KEYFRAME, StepKind.SPECULATIVE]))
        else:
            rig.close(i, rng.choice(["commit", "commit", "rollback"]))
        rig.check()
        for j in others:  # what one stream does leaves the others' bytes alone
            assert torch.equal(owned_bytes(rig.shared[j]), before[j])
            for a, b in zip(visible_kv(rig.shared[j]), seen[j], strict=True):
                assert torch.equal(a, b)
    grown = [c.info()["special_pages_total"] for c in rig.shared]
    assert grown != [c.table.pool_sizes(c.config)[1] for c in rig.shared]  # growth exercised


def test_one_pool_holds_the_pages_of_every_stream():
    rig = Rig(3)
    pages = sum(c.table.num_pages for c in rig.alone)
    assert rig.pool.storage.num_pages == pages
    assert rig.pool.info()["bytes_reserved"] == sum(c.storage.nbytes for c in rig.alone)
    assert rig.pool.info()["streams"] == 3


def test_released_ids_are_granted_again_without_growth():
    pool = SharedKVPool(CacheConfig(**SHAPE))
    first, second = (PagedKVCache(c, shared=pool) for c in configs(2))
    ids, total = first.table.page_ids(), pool.storage.num_pages
    pool.release(first.table)
    pool.check_invariants()
    third = PagedKVCache(configs(1)[0], shared=pool)
    assert sorted(third.table.page_ids()) == sorted(ids)
    assert pool.storage.num_pages == total
    pool.check_invariants()
    with pytest.raises(ValueError, match="not made by this pool"):
        pool.release(first.table)
    assert second.info()["frames_committed"] == 0


def test_budget_is_for_the_whole_pool_and_names_the_knob():
    one = PagedKVCache(configs(1)[0]).storage.nbytes
    pool = SharedKVPool(CacheConfig(**SHAPE, max_cache_bytes=one + 1))
    cache = PagedKVCache(configs(1)[0], shared=pool)
    with pytest.raises(CacheFullError, match="max_cache_bytes"):
        PagedKVCache(configs(1)[0], shared=pool)
    assert pool.info()["streams"] == 1 and pool.storage.num_pages == cache.table.num_pages
    pool.check_invariants()
    # the stream's special pool must grow past the budget: refused, nothing changed
    before = cache.info()
    with pytest.raises(CacheFullError, match="max_cache_bytes"):
        for _ in range(20):
            txn = cache.begin(1)
            txn.commit()
    assert cache.info()["special_pages_total"] == before["special_pages_total"]
    cache.check_invariants()


def test_a_stream_of_another_page_shape_is_refused():
    pool = SharedKVPool(CacheConfig(**SHAPE))
    other = CacheConfig(**{**SHAPE, "page_size": 4})
    with pytest.raises(ValueError, match="page_size=4 cannot share a KV pool of page_size=3"):
        PagedKVCache(other, shared=pool)
    assert pool.info()["streams"] == 0 and pool.storage.num_pages == 0


def test_ledger_grants_lowest_ids_and_checks_ownership():
    ledger = PageLedger(0)
    assert ledger.shortfall(4) == 4
    ledger.extend(4)
    assert ledger.grant(3) == [0, 1, 2] and ledger.num_free == 1
    with pytest.raises(CacheError):
        ledger.grant(2)
    ledger.give_back([1])
    assert ledger.free_ids() == [1, 3]
    ledger.check([[0, 2]])
    with pytest.raises(AssertionError):
        ledger.check([[0, 2], [2]])  # an id in two tables
    with pytest.raises(AssertionError):
        ledger.check([[0]])  # id 2 lost
    with pytest.raises(CacheError):
        ledger.give_back([3])  # already free

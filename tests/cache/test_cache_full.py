"""The unbounded special pool grows up to the byte budget, then raises a typed error."""
import pytest
import torch

from lingbot_ros.cache import CacheFullError, PagedKVCache
from lingbot_ros.config import CacheConfig


def test_budget_exhaustion_raises_cache_full_and_keeps_state():
    cfg = CacheConfig(num_layers=1, num_heads=1, head_dim=2, page_size=6, scale_frames=1,
                      window=2, special_chunk_frames=2)
    cfg = CacheConfig(**{**{f: getattr(cfg, f) for f in cfg.__slots__},
                         "max_cache_bytes": 12 * cfg.bytes_per_page})
    cache = PagedKVCache(cfg)
    kv = torch.zeros(cfg.tokens_per_frame, 1, 2)
    committed = 0
    with pytest.raises(CacheFullError) as err:
        while True:
            before = cache.info()
            txn = cache.begin(1)
            txn.write(0, kv, kv)
            txn.commit()
            committed += 1
    assert "max_special_frames" in str(err.value) and "max_cache_bytes" in str(err.value)
    assert cache.info() == before  # the failed begin changed nothing (no step pending)
    assert before["step_pending"] == 0
    assert cache.storage.nbytes <= cfg.max_cache_bytes
    assert committed == cache.info()["frames_committed"] > 0
    cache.check_invariants()


def test_initial_allocation_over_budget_is_a_clear_error():
    with pytest.raises(CacheFullError, match="max_cache_bytes"):
        PagedKVCache(CacheConfig(num_layers=2, num_heads=1, head_dim=2, page_size=4,
                                 max_cache_bytes=64))

"""Trajectory-memory bound: 10,000 frames at constant pages, bytes and visible tokens."""
import torch

from lingbot_ros.cache import PagedKVCache
from lingbot_ros.config import CacheConfig


def _push(cache, keep: bool) -> None:
    txn = cache.begin(1)
    kv = torch.ones(cache.config.tokens_per_frame, 1, 2)
    for layer in range(cache.config.num_layers):
        txn.write(layer, kv, kv)
    txn.commit() if keep else txn.rollback()


def test_ten_thousand_frames_constant_memory_with_bound():
    cfg = CacheConfig(num_layers=2, num_heads=1, head_dim=2, page_size=10, scale_frames=3,
                      window=5, max_special_frames=40)
    cache = PagedKVCache(cfg)
    ptr, reserved = cache.storage.data.data_ptr(), cache.storage.nbytes
    seen = []
    for i in range(10_000):
        _push(cache, keep=i % 4 != 3)  # every 4th frame is a rolled-back non-keyframe
        if i >= 500:
            info = cache.info()
            seen.append((info["patch_pages_used"], info["special_pages_used"],
                         info["bytes_used"], info["tokens_visible"]))
    assert cache.storage.data.data_ptr() == ptr and cache.storage.nbytes == reserved
    patch_pages = {s[0] for s in seen}
    special_pages = {s[1] for s in seen}
    bytes_used = {s[2] for s in seen}
    tokens = [s[3] for s in seen]
    assert patch_pages == {cfg.scale_frames + cfg.window}
    # Pages are released whole: usage may step by one page as the tail fills, never grow.
    assert max(special_pages) - min(special_pages) <= 1
    assert max(bytes_used) - min(bytes_used) <= cfg.bytes_per_page
    assert max(tokens) - min(tokens) <= cfg.page_size
    info = cache.info()
    assert info["frames_committed"] == 7500
    assert info["special_frames"] >= cfg.max_special_frames  # at least the last M frames
    cache.check_invariants()


def test_unbounded_specials_grow_without_limit_in_chunks():
    cfg = CacheConfig(num_layers=1, num_heads=1, head_dim=2, page_size=12, scale_frames=1,
                      window=2, special_chunk_frames=4)
    cache = PagedKVCache(cfg)
    start_pages = cache.storage.num_pages
    for _ in range(50):
        _push(cache, keep=True)
    info = cache.info()
    assert info["special_tokens"] == 50 * 6  # every frame's specials kept, as the reference
    assert cache.storage.num_pages > start_pages
    assert (cache.storage.num_pages - start_pages) % 2 == 0  # grew by whole chunks (2 pages)
    cache.check_invariants()

"""Frame transactions: exact restore on rollback, misuse errors, reset, context manager."""
import pytest
import torch

from lingbot_ros.cache import CacheError, PagedKVCache, StepKind, TransactionError
from lingbot_ros.config import CacheConfig
from tests.cache.naive_model import state_info

CFG = CacheConfig(num_layers=2, num_heads=1, head_dim=2, page_size=8, scale_frames=2, window=3)


def _step(cache, value: float, n: int = 1, kind=StepKind.KEYFRAME):
    txn = cache.begin(n, kind)
    kv = torch.full((n * cache.config.tokens_per_frame, 1, 2), value)
    for layer in range(cache.config.num_layers):
        txn.write(layer, kv, kv)
    return txn


def _state(cache):
    """Everything observable: counters, free lists and the visible K/V of every layer."""
    layout = cache.current_layout()
    rows = layout.token_slots()
    kv = [cache.storage.layer_tokens(layer)[torch.cat([rows, rows + 8])].clone()
          for layer in range(cache.config.num_layers)]
    t = cache.table
    return (state_info(cache), t.patch_pool.free_ids(), t.special_pool.free_ids(),
            layout.kv_indices.tolist(), int(layout.kv_last_page_len), kv)


def _equal(a, b):
    return a[:5] == b[:5] and all(torch.equal(x, y) for x, y in zip(a[5], b[5]))


def test_rollback_restores_everything_including_a_partial_special_page():
    cache = PagedKVCache(CFG)
    _step(cache, 1.0, n=2).commit()  # scale-frame phase: 2 frames at once
    for i in range(5):
        _step(cache, 2.0 + i).commit()
    before = _state(cache)
    assert before[4] not in (CFG.page_size,)  # the special tail page is partial
    _step(cache, 99.0).rollback()
    assert _equal(_state(cache), before)
    # A rolled-back frame that opens a new special page gives that page back too.
    while cache.info()["special_tokens"] % CFG.page_size <= CFG.page_size - 6:
        _step(cache, 3.0).commit()
    before = _state(cache)
    _step(cache, 98.0).rollback()
    assert _equal(_state(cache), before)


def _patch_frames(cache):
    return cache.table.patches.visible_frames()


def test_keyframe_step_sees_the_window_its_commit_leaves():
    cache = PagedKVCache(CFG)
    _step(cache, 1.0, n=2).commit()
    for i in range(3):
        _step(cache, 2.0 + i).commit()
    assert _patch_frames(cache) == [0, 1, 2, 3, 4]  # scale 2 + a full window of 3
    txn = _step(cache, 7.0)
    # append, evict, attend: frame 2 is already out of its view
    assert _patch_frames(cache) == [0, 1, 3, 4, 5]
    assert txn.layout.num_pages == 5 + len(cache.table.specials.visible()[0])
    txn.commit()
    assert _patch_frames(cache) == [0, 1, 3, 4, 5]
    assert cache.info()["frames_cached"] == 5


def test_speculative_step_sees_the_untrimmed_window_and_its_commit_evicts():
    cache = PagedKVCache(CFG)
    _step(cache, 1.0, n=2).commit()
    for i in range(3):
        _step(cache, 2.0 + i).commit()
    before = _state(cache)
    txn = _step(cache, 7.0, kind=StepKind.SPECULATIVE)
    assert txn.kind is StepKind.SPECULATIVE
    # append, attend: the oldest window frame (2) is still seen, one frame more than a keyframe
    assert _patch_frames(cache) == [0, 1, 2, 3, 4, 5]
    assert txn.layout.num_pages == 6 + len(cache.table.specials.visible()[0])
    txn.rollback()  # nothing was evicted: nothing to restore
    assert _equal(_state(cache), before)
    txn = _step(cache, 7.0, kind=StepKind.SPECULATIVE)
    txn.commit()  # the deferred eviction runs now
    assert _patch_frames(cache) == [0, 1, 3, 4, 5]
    assert cache.info()["frames_cached"] == 5


def test_speculative_step_keeps_releasable_specials_visible_until_commit():
    cfg = CacheConfig(num_layers=1, num_heads=1, head_dim=2, page_size=6, scale_frames=1,
                      window=1, max_special_frames=2)  # one frame of specials per page
    cache = PagedKVCache(cfg)
    for i in range(4):
        _step(cache, float(i)).commit()
    committed = cache.current_layout().num_kv_tokens
    txn = _step(cache, 9.0, kind=StepKind.SPECULATIVE)
    spec_tokens = txn.layout.num_kv_tokens
    txn.rollback()
    txn = _step(cache, 9.0)
    key_tokens = txn.layout.num_kv_tokens
    txn.commit()
    # the speculative view: everything committed + its own frame (patch page + 6 specials)
    assert spec_tokens == committed + cfg.tokens_per_frame
    # the keyframe view also drops one window frame's patches and one frame's specials
    assert key_tokens == spec_tokens - cfg.page_size - cfg.num_special


def test_step_kind_is_checked_before_anything_changes():
    cache = PagedKVCache(CFG)
    with pytest.raises(ValueError, match="step kind must be one of"):
        cache.begin(1, "maybe")
    assert cache.info()["frames_seen"] == 0 and cache.info()["step_pending"] == 0


def test_misuse_is_refused_with_a_clear_message_and_no_change():
    cache = PagedKVCache(CFG)
    _step(cache, 1.0).commit()
    txn = _step(cache, 2.0)
    before = _state(cache)
    with pytest.raises(TransactionError, match="still pending"):
        cache.begin(1)
    with pytest.raises(TransactionError, match="shape"):
        txn.write(0, torch.zeros(3, 1, 2), torch.zeros(3, 1, 2))
    with pytest.raises(TransactionError, match="float64"):
        bad = torch.zeros(CFG.tokens_per_frame, 1, 2, dtype=torch.float64)
        txn.write(0, bad, bad)
    with pytest.raises(TransactionError, match="layer 5"):
        good = torch.zeros(CFG.tokens_per_frame, 1, 2)
        txn.write(5, good, good)
    assert _equal(_state(cache), before)
    txn.commit()
    after = _state(cache)
    with pytest.raises(TransactionError, match="already committed"):
        txn.commit()
    with pytest.raises(TransactionError, match="already committed"):
        txn.rollback()
    assert _equal(_state(cache), after)
    with pytest.raises(CacheError, match="at least one frame"):
        cache.begin(0)


def test_multi_frame_step_that_would_overflow_the_window_is_refused():
    cache = PagedKVCache(CFG)
    with pytest.raises(CacheError, match="window"):
        cache.begin(CFG.scale_frames + CFG.window + 1)
    assert cache.info()["frames_seen"] == 0


def test_reset_invalidates_a_pending_step_and_keeps_the_allocation():
    cache = PagedKVCache(CFG)
    for i in range(6):
        _step(cache, float(i)).commit()
    txn = _step(cache, 9.0)
    ptr = cache.storage.data.data_ptr()
    cache.reset()
    assert cache.storage.data.data_ptr() == ptr
    with pytest.raises(TransactionError, match="reset"):
        txn.commit()
    info = cache.info()
    assert info["frames_committed"] == info["frames_cached"] == info["special_tokens"] == 0
    assert info["bytes_used"] == 0 and cache.current_layout() is None
    _step(cache, 1.0).commit()  # usable right away
    cache.check_invariants()


def test_context_manager_rolls_back_on_error():
    cache = PagedKVCache(CFG)
    _step(cache, 1.0).commit()
    before = _state(cache)
    with pytest.raises(ValueError):
        with _step(cache, 5.0):
            raise ValueError("model failed mid-step")
    assert _equal(_state(cache), before)
    with pytest.raises(TransactionError, match="neither committed nor rolled back"):
        with _step(cache, 5.0):
            pass
    assert _equal(_state(cache), before)
    with _step(cache, 6.0) as txn:
        txn.commit()
    assert cache.info()["frames_committed"] == 2


def test_info_reports_the_documented_fields():
    cache = PagedKVCache(CFG)
    _step(cache, 1.0, n=2).commit()
    info = cache.info()
    for key in ("frames_seen", "frames_cached", "scale_frames", "window_frames", "special_frames",
                "special_tokens", "patch_pages_used", "patch_pages_total", "special_pages_used",
                "special_pages_total", "bytes_used", "bytes_reserved", "page_size",
                "tokens_visible"):
        assert key in info, key
    assert info["tokens_visible"] == 2 * CFG.page_size + 12
    assert info["bytes_used"] == 4 * CFG.bytes_per_page  # 2 patch pages + 2 special pages

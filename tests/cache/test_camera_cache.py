"""CameraKVCache: per-step transactions, bidirectional phase 1, chunked growth, reset."""
import pytest
import torch

from lingbot_ros.cache import CacheError, TransactionError
from lingbot_ros.cache.camera_cache import CameraKVCache

DIMS = dict(num_iterations=2, num_layers=3, num_heads=2, head_dim=4)


def kv(n: int, value: float):
    return torch.full((n, 2, 4), value), torch.full((n, 2, 4), -value)


def write_all(txn, value: float):
    for it in range(DIMS["num_iterations"]):
        for layer in range(DIMS["num_layers"]):
            txn.write(it, layer, *kv(txn.num_frames, value + 10 * it + 100 * layer))


def test_phase_one_frames_see_each_other_and_later_frames_see_all_cached_plus_themselves():
    cache = CameraKVCache(**DIMS, chunk_frames=4)
    txn = cache.begin(3)
    write_all(txn, 1.0)
    k, v = txn.visible(1, 2)
    assert k.shape == (3, 2, 4) and torch.equal(k, torch.full((3, 2, 4), 1.0 + 10 + 200))
    assert torch.equal(v, -k)
    txn.commit()
    txn = cache.begin(1)
    write_all(txn, 5.0)
    k, _ = txn.visible(0, 0)
    assert k[:, 0, 0].tolist() == [1.0, 1.0, 1.0, 5.0]  # committed frames, then its own
    txn.commit()
    assert cache.num_frames == 4
    assert cache.keys_values(0, 0)[0][:, 0, 0].tolist() == [1.0, 1.0, 1.0, 5.0]


def test_rollback_leaves_committed_contents_and_counters_unchanged():
    cache = CameraKVCache(**DIMS, chunk_frames=2)
    for value in (1.0, 2.0, 3.0):
        txn = cache.begin(1)
        write_all(txn, value)
        txn.commit()
    before = [torch.stack(cache.keys_values(i, l)).clone() for i in range(2) for l in range(3)]
    txn = cache.begin(1)  # grows: capacity 4 is enough, 3 + 1
    write_all(txn, 9.0)
    assert txn.visible(1, 1)[0].shape[0] == 4
    txn.rollback()
    after = [torch.stack(cache.keys_values(i, l)) for i in range(2) for l in range(3)]
    assert cache.num_frames == 3 and all(torch.equal(a, b) for a, b in zip(before, after))
    txn = cache.begin(1)
    write_all(txn, 4.0)
    txn.commit()
    assert cache.keys_values(0, 0)[0][:, 0, 0].tolist() == [1.0, 2.0, 3.0, 4.0]


def test_storage_grows_in_chunks_and_keeps_its_contents():
    cache = CameraKVCache(**DIMS, chunk_frames=4)
    assert cache.capacity == 4
    for value in range(9):
        txn = cache.begin(1)
        write_all(txn, float(value))
        txn.commit()
    assert cache.capacity == 12  # grew twice, by whole chunks, not per frame
    assert cache.keys_values(1, 2)[0][:, 0, 0].tolist() == [v + 210.0 for v in range(9)]
    txn = cache.begin(5)  # a step larger than a chunk
    assert cache.capacity == 16
    txn.rollback()


def test_each_step_is_finished_exactly_once_and_one_at_a_time():
    cache = CameraKVCache(**DIMS)
    txn = cache.begin(1)
    with pytest.raises(TransactionError, match="still pending"):
        cache.begin(1)
    txn.commit()
    for action in (txn.commit, txn.rollback):
        with pytest.raises(TransactionError, match="already committed"):
            action()
    with pytest.raises(TransactionError, match="already committed"):
        txn.write(0, 0, *kv(1, 1.0))
    with pytest.raises(CacheError, match="at least one frame"):
        cache.begin(0)


def test_writes_are_validated():
    txn = CameraKVCache(**DIMS).begin(2)
    with pytest.raises(TransactionError, match=r"expects \(2, 2, 4\)"):
        txn.write(0, 0, *kv(1, 1.0))
    with pytest.raises(TransactionError, match="outside"):
        txn.write(2, 0, *kv(2, 1.0))


def test_reset_forgets_frames_and_invalidates_a_pending_step():
    cache = CameraKVCache(**DIMS)
    txn = cache.begin(2)
    write_all(txn, 1.0)
    txn.commit()
    pending = cache.begin(1)
    cache.reset()
    assert cache.num_frames == 0 and cache.pending is None
    with pytest.raises(TransactionError, match="reset"):
        pending.commit()
    cache.begin(1).commit()
    assert cache.info()["frames_cached"] == 1


def test_bad_sizes_raise_value_error():
    with pytest.raises(ValueError, match="num_heads"):
        CameraKVCache(num_iterations=1, num_layers=1, num_heads=0, head_dim=4)

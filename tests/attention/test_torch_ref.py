"""torch_ref (page gather + SDPA) equals dense SDPA over the same token set, in fp32."""
import pytest
import torch
import torch.nn.functional as F

from lingbot_ros.attention import TorchRefBackend, make_backend
from lingbot_ros.cache import PagedKVCache
from lingbot_ros.config import CacheConfig
from tests.attention.kv_fill import RecordingFiller


def dense_attention(q, k, v):
    """q (Tq, H, D), k/v (Tk, H, D) -> (Tq, H, D); plain softmax(q k^T / sqrt(D)) v."""
    scores = torch.einsum("qhd,khd->hqk", q, k) / q.shape[-1] ** 0.5
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v)


@pytest.mark.parametrize("page_size,steps", [(7, 12), (13, 3), (5, 20)])
def test_torch_ref_matches_dense_sdpa_fp32(page_size, steps):
    cfg = CacheConfig(num_layers=3, num_heads=4, head_dim=16, page_size=page_size,
                      scale_frames=2, window=3)
    cache = PagedKVCache(cfg)
    fill = RecordingFiller(cache, seed=page_size)
    backend = make_backend("torch_ref", cache.storage)
    fill.push(n=2)
    for i in range(steps):
        fill.push(keep=i % 3 != 2)
    txn, uids = fill.begin(1)
    backend.plan(txn.layout)
    q = torch.randn(cfg.tokens_per_frame, cfg.num_heads, cfg.head_dim)
    for layer in range(cfg.num_layers):
        k, v = fill.dense_kv(fill.committed + uids, layer)
        assert txn.layout.num_kv_tokens == k.shape[0]
        diff = (backend.run(layer, q) - dense_attention(q, k, v)).abs().max().item()
        assert diff <= 1e-5, diff
        # Token order inside the set does not matter (non-causal): shuffle and compare.
        perm = torch.randperm(k.shape[0])
        ref = F.scaled_dot_product_attention(q.transpose(0, 1), k[perm].transpose(0, 1),
                                             v[perm].transpose(0, 1)).transpose(0, 1)
        assert (backend.run(layer, q) - ref).abs().max().item() <= 1e-5
    txn.rollback()


def test_run_before_plan_and_wrong_query_count_are_clear_errors():
    cache = PagedKVCache(CacheConfig(num_layers=1, num_heads=1, head_dim=4, page_size=3))
    backend = TorchRefBackend(cache.storage)
    with pytest.raises(RuntimeError, match="before plan"):
        backend.run(0, torch.zeros(9, 1, 4))
    txn = cache.begin(1)
    backend.plan(txn.layout)
    with pytest.raises(ValueError, match="tokens"):
        backend.run(0, torch.zeros(2, 1, 4))


def test_flashinfer_on_a_cpu_cache_is_a_clear_error():
    cache = PagedKVCache(CacheConfig(num_layers=1, num_heads=1, head_dim=4, page_size=3))
    with pytest.raises(RuntimeError, match="CUDA"):
        make_backend("flashinfer", cache.storage)
    with pytest.raises(ValueError, match="unknown attention backend"):
        make_backend("sdpa", cache.storage)

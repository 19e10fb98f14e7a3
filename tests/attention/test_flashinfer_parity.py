"""GPU: FlashInfer fa2 / fa3 paged prefill vs torch_ref in bf16 (run on the device).

Page sizes 972 (378x504) and 999 (378x518), the full window (8 scale + 64 window frames),
a partial last special page, a full last special page, right after a rollback, and the
multi-frame scale-frame phase; split-KV (2-4 parts, merged by log-sum-exp), eager and in
CUDA-graph mode.
"""
import math

import pytest
import torch

from lingbot_ros.attention import make_backend
from lingbot_ros.cache import PagedKVCache
from lingbot_ros.config import CacheConfig
from tests.attention.kv_fill import RecordingFiller

try:
    import flashinfer  # noqa: F401
    HAVE_FLASHINFER = True
except ImportError:
    HAVE_FLASHINFER = False

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(not HAVE_FLASHINFER, reason="needs flashinfer (GPU machine)"),
]
REL_TOL = 1e-2


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def _compare(cache, txn, variants, splits=1, graph_tokens=None):
    ref = make_backend("torch_ref", cache.storage)
    ref.plan(txn.layout)
    cfg = cache.config
    q = torch.randn(txn.layout.num_query_tokens, cfg.num_heads, cfg.head_dim,
                    device="cuda", dtype=torch.bfloat16)
    errors = {}
    for variant in variants:
        fi = make_backend("flashinfer", cache.storage, variant=variant, kv_splits=splits,
                          graph_query_tokens=graph_tokens)
        fi.plan(txn.layout)
        for layer in range(cfg.num_layers):
            out = fi.run(layer, q)
            assert not torch.isnan(out).any(), (variant, layer)
            err = rel_err(out, ref.run(layer, q))
            errors[(variant, layer)] = err
            assert err <= REL_TOL, (variant, layer, err)
    return errors


@pytest.mark.parametrize("page_size", [972, 999])
@pytest.mark.parametrize("last_page", ["partial", "full"])
def test_flashinfer_matches_torch_ref_at_full_window(page_size, last_page):
    cfg = CacheConfig(num_layers=2, num_heads=16, head_dim=64, page_size=page_size,
                      scale_frames=8, window=64, dtype="bfloat16", device="cuda")
    cache = PagedKVCache(cfg)
    fill = RecordingFiller(cache)
    fill.push(n=8)
    # "full": the step's specials end exactly on a page boundary (972: 162 frames, 999: 333).
    frames = 80 if last_page == "partial" else page_size // math.gcd(page_size, 6)
    while len(fill.committed) < frames - 1:
        fill.push()
    txn, _ = fill.begin(1)
    last = int(txn.layout.kv_last_page_len)
    assert (last == page_size) == (last_page == "full"), last
    _compare(cache, txn, ["fa2", "fa3"])
    txn.rollback()


@pytest.mark.parametrize("page_size", [972, 999])
def test_flashinfer_matches_torch_ref_right_after_a_rollback(page_size):
    cfg = CacheConfig(num_layers=2, num_heads=16, head_dim=64, page_size=page_size,
                      scale_frames=8, window=64, dtype="bfloat16", device="cuda")
    cache = PagedKVCache(cfg)
    fill = RecordingFiller(cache, seed=1)
    fill.push(n=8)
    for i in range(70):
        fill.push(keep=i % 2 == 0)
    fill.push(keep=False)
    txn, _ = fill.begin(1)
    _compare(cache, txn, ["fa2", "fa3"])
    txn.commit()


def test_flashinfer_scale_frame_phase_multi_frame_step():
    cfg = CacheConfig(num_layers=1, num_heads=16, head_dim=64, page_size=972,
                      scale_frames=8, window=64, dtype="bfloat16", device="cuda")
    cache = PagedKVCache(cfg)
    txn, _ = RecordingFiller(cache, seed=2).begin(8)
    assert txn.layout.num_query_tokens == 8 * 978
    _compare(cache, txn, ["fa2", "fa3"])
    txn.commit()


@pytest.mark.parametrize("splits", [2, 3, 4])
@pytest.mark.parametrize("graph", [False, True])
def test_split_kv_matches_torch_ref(splits, graph):
    cfg = CacheConfig(num_layers=2, num_heads=16, head_dim=64, page_size=972,
                      scale_frames=8, window=64, dtype="bfloat16", device="cuda")
    cache = PagedKVCache(cfg)
    fill = RecordingFiller(cache, seed=3)
    fill.push(n=8)
    for i in range(75):
        fill.push(keep=i % 3 != 0)
    txn, _ = fill.begin(1)
    _compare(cache, txn, ["fa2", "fa3"], splits=splits,
             graph_tokens=txn.layout.num_query_tokens if graph else None)
    txn.rollback()


def test_a_graph_backend_refuses_a_step_of_another_size():
    cfg = CacheConfig(num_layers=1, num_heads=16, head_dim=64, page_size=972,
                      scale_frames=8, window=64, dtype="bfloat16", device="cuda")
    cache = PagedKVCache(cfg)
    txn, _ = RecordingFiller(cache, seed=4).begin(8)
    fi = make_backend("flashinfer", cache.storage, variant="fa3", graph_query_tokens=978)
    with pytest.raises(ValueError, match="query tokens"):
        fi.plan(txn.layout)
    txn.rollback()

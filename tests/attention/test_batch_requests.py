"""One request per stream: ``PagedKVLayout.concat`` and the backends over B requests.

Each stream is a real ``PagedKVCache`` filled with random frames (its own retention: scale
frames, window, bounded specials); its pages are then copied into one storage at an offset,
as a shared pool would hold them, and its layout's page ids moved by that offset. The
batched run over the concatenated layout must give each stream's rows exactly as that
stream's own run on its own cache (CPU), and FlashInfer's B x S requests must match
torch_ref (GPU, marked ``gpu``).
"""
import dataclasses
import math

import pytest
import torch

from lingbot_ros.attention import make_backend
from lingbot_ros.attention.flashinfer_paged import FlashInferPagedBackend
from lingbot_ros.attention.split_merge import merge_torch
from lingbot_ros.cache import PagedKVCache, PagedKVLayout
from lingbot_ros.cache.storage import KVStorage
from lingbot_ros.config import CacheConfig
from tests.attention.kv_fill import RecordingFiller

SHAPE = dict(num_layers=2, num_heads=3, head_dim=8, page_size=7, special_chunk_frames=8)
# Per stream: retention, committed steps, frames of the pending step.
STREAMS = [
    (dict(scale_frames=2, window=3), 9, 1),
    (dict(scale_frames=1, window=5, max_special_frames=4), 14, 1),
    (dict(scale_frames=3, window=2), 2, 1),
    (dict(scale_frames=4, window=4), 0, 2),  # the scale-frame phase: a 2-frame step
]


def _stream(index, device="cpu", dtype="float32"):
    retention, steps, pending = STREAMS[index]
    cache = PagedKVCache(CacheConfig(**SHAPE, **retention, device=device, dtype=dtype))
    fill = RecordingFiller(cache, seed=10 + index)
    fill.push(n=min(2, retention["scale_frames"] or 1))
    for i in range(steps):
        fill.push(keep=i % 4 != 3)
    txn, _ = fill.begin(pending)
    return cache, txn


def _pooled(streams):
    """One storage holding every stream's pages; each layout's page ids moved to it."""
    caches = [cache for cache, _ in streams]
    pool = KVStorage(caches[0].config, sum(c.storage.num_pages for c in caches))
    layouts, offset = [], 0
    for cache, txn in streams:
        n = cache.storage.num_pages
        pool.data[:, offset:offset + n].copy_(cache.storage.data)
        moved = (txn.layout.kv_indices + offset).to(torch.int32)
        layouts.append(dataclasses.replace(txn.layout, kv_indices=moved))
        offset += n
    return pool, layouts


def _queries(layouts, device="cpu", dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(lay.num_query_tokens, SHAPE["num_heads"], SHAPE["head_dim"],
                        generator=gen).to(device, dtype) for lay in layouts]


def test_concat_of_one_layout_is_that_layout():
    _, txn = _stream(0)
    assert PagedKVLayout.concat([txn.layout]) is txn.layout
    assert txn.layout.num_requests == 1
    assert txn.layout.kv_token_indptr() == [0, txn.layout.num_kv_tokens]


def test_concat_makes_one_request_per_stream():
    pool, layouts = _pooled([_stream(i) for i in range(4)])
    joined = PagedKVLayout.concat(layouts)
    assert joined.num_requests == 4
    assert joined.qo_indptr.dtype == joined.kv_indptr.dtype == torch.int32
    assert joined.qo_indptr.tolist() == [0, 13, 26, 39, 65]  # 13 tokens per frame
    pages = [lay.num_pages for lay in layouts]
    assert joined.kv_indptr.tolist() == [sum(pages[:i]) for i in range(5)]
    assert torch.equal(joined.kv_indices, torch.cat([lay.kv_indices for lay in layouts]))
    assert joined.kv_last_page_len.tolist() == [int(lay.kv_last_page_len) for lay in layouts]
    keys = [lay.num_kv_tokens for lay in layouts]
    assert joined.kv_token_indptr() == [sum(keys[:i]) for i in range(5)]
    assert joined.num_kv_tokens == sum(keys)
    assert joined.num_query_tokens == 65
    for i, lay in enumerate(layouts):
        assert torch.equal(joined.token_slots(i), lay.token_slots())
    assert torch.equal(joined.token_slots(), torch.cat([lay.token_slots() for lay in layouts]))
    # Concatenation is associative: a batch of batches is the flat batch.
    nested = PagedKVLayout.concat([PagedKVLayout.concat(layouts[:2]),
                                   PagedKVLayout.concat(layouts[2:])])
    for name in ("qo_indptr", "kv_indptr", "kv_indices", "kv_last_page_len"):
        assert torch.equal(getattr(nested, name), getattr(joined, name)), name
    assert any(int(lay.kv_last_page_len) < SHAPE["page_size"] for lay in layouts)


def test_concat_errors_are_clear():
    _, txn = _stream(0)
    with pytest.raises(ValueError, match="no layouts"):
        PagedKVLayout.concat([])
    other = dataclasses.replace(txn.layout, page_size=8)
    with pytest.raises(ValueError, match="page sizes"):
        PagedKVLayout.concat([txn.layout, other])
    wrong = dataclasses.replace(txn.layout, num_kv_tokens=txn.layout.num_kv_tokens + 1)
    with pytest.raises(ValueError, match="num_kv_tokens"):
        PagedKVLayout.concat([txn.layout, wrong])
    with pytest.raises(ValueError, match="request 1"):
        txn.layout.token_slots(1)


@pytest.mark.parametrize("streams", [(0,), (0, 1), (2, 0, 3), (0, 1, 2, 3), (1, 1)])
def test_torch_ref_batch_equals_each_stream_run_alone(streams):
    alone = [_stream(i) for i in streams]
    pool, layouts = _pooled(alone)
    queries = _queries(layouts, seed=len(streams))
    batched = make_backend("torch_ref", pool)
    batched.plan(PagedKVLayout.concat(layouts))
    for layer in range(SHAPE["num_layers"]):
        out = batched.run(layer, torch.cat(queries))
        assert out.shape == (sum(q.shape[0] for q in queries),) + queries[0].shape[1:]
        rows = 0
        for (cache, txn), q in zip(alone, queries):
            own = make_backend("torch_ref", cache.storage)
            own.plan(txn.layout)
            expected = own.run(layer, q)
            assert torch.equal(out[rows:rows + q.shape[0]], expected), (streams, layer)
            rows += q.shape[0]


def test_torch_ref_one_request_is_todays_dense_call():
    """B = 1: the pooled layout of one stream is its own layout, and the backend's single
    request path gives today's result on the stream's own storage, bit for bit."""
    cache, txn = _stream(1)
    q = _queries([txn.layout])[0]
    backend = make_backend("torch_ref", cache.storage)
    backend.plan(PagedKVLayout.concat([txn.layout]))
    flat = cache.storage.layer_tokens(1)
    rows = txn.layout.token_slots()
    k, v = flat.index_select(0, rows), flat.index_select(0, rows + SHAPE["page_size"])
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(0, 1)[None], k.transpose(0, 1)[None], v.transpose(0, 1)[None])
    assert torch.equal(backend.run(1, q), ref[0].transpose(0, 1))


def test_batch_rejects_a_query_count_that_is_not_the_plans():
    pool, layouts = _pooled([_stream(0), _stream(2)])
    backend = make_backend("torch_ref", pool)
    backend.plan(PagedKVLayout.concat(layouts))
    with pytest.raises(ValueError, match="tokens"):
        backend.run(0, _queries(layouts[:1])[0])


def _attend_lse(q, k, v):
    """Dense attention and its base-2 log-sum-exp (FlashInfer's convention)."""
    scores = torch.einsum("qhd,khd->hqk", q, k) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(scores, dim=-1).transpose(0, 1) / math.log(2)  # (q, h)
    return torch.einsum("hqk,khd->qhd", scores.softmax(-1), v), lse


@pytest.mark.parametrize("streams,splits", [((0,), 2), ((0, 1), 2), ((1, 3, 0), 3),
                                            ((0, 1, 2, 3), 2), ((3, 1), 1)])
def test_split_requests_are_copy_major_and_merge_to_the_batch(streams, splits):
    """FlashInfer's B x S request arrays (CPU): request s * B + b is copy s of stream b's
    queries over the s-th part of its pages; attending each request and merging the S
    copies by log-sum-exp gives the batched torch_ref result."""
    pool, layouts = _pooled([_stream(i) for i in streams])
    joined = PagedKVLayout.concat(layouts)
    qo, kv, indices, last = FlashInferPagedBackend._split(joined, splits)
    b, tokens = len(streams), joined.num_query_tokens
    assert len(qo) == len(kv) == b * splits + 1 and len(last) == b * splits
    split = PagedKVLayout(page_size=joined.page_size, num_query_tokens=splits * tokens,
                          num_kv_tokens=0, qo_indptr=qo, kv_indptr=kv, kv_indices=indices,
                          kv_last_page_len=last)
    assert split.kv_token_indptr()[-1] == joined.num_kv_tokens  # each key in one request ...
    for r in range(b):  # ... and each stream's pages, over its S parts, are its own pages
        parts = [indices[kv[s * b + r]:kv[s * b + r + 1]] for s in range(splits)]
        assert torch.equal(torch.cat(parts), layouts[r].kv_indices)
        for s in range(splits):
            assert qo[s * b + r] == s * tokens + joined.qo_indptr[r]
            assert qo[s * b + r + 1] == s * tokens + joined.qo_indptr[r + 1]
            assert int(last[s * b + r]) == (int(layouts[r].kv_last_page_len)
                                            if s == splits - 1 else joined.page_size)
    q = torch.cat(_queries(layouts, seed=3))
    reference = make_backend("torch_ref", pool)
    reference.plan(joined)
    for layer in range(SHAPE["num_layers"]):
        flat = pool.layer_tokens(layer)
        outs, lses = [], []
        for i in range(b * splits):
            rows = split.token_slots(i)
            qi = q.repeat(splits, 1, 1)[int(qo[i]):int(qo[i + 1])]
            o, lse = _attend_lse(qi, flat[rows], flat[rows + joined.page_size])
            outs.append(o)
            lses.append(lse)
        merged = merge_torch(torch.cat(outs), torch.cat(lses), splits)
        diff = (merged - reference.run(layer, q)).abs().max().item()
        assert diff <= 1e-5, (layer, diff)


def test_one_stream_split_arrays_are_todays():
    _, txn = _stream(1)
    lay = txn.layout
    n, tokens = lay.num_pages, lay.num_query_tokens
    qo, kv, indices, last = FlashInferPagedBackend._split(lay, 3)
    assert qo.tolist() == [0, tokens, 2 * tokens, 3 * tokens]
    assert kv.tolist() == [round(i * n / 3) for i in range(4)]
    assert indices is lay.kv_indices
    assert last.tolist() == [7, 7, int(lay.kv_last_page_len)]
    assert all(a is b for a, b in zip(FlashInferPagedBackend._split(lay, 1),
                                      (lay.qo_indptr, lay.kv_indptr, lay.kv_indices,
                                       lay.kv_last_page_len)))


try:
    import flashinfer  # noqa: F401
    HAVE_FLASHINFER = True
except ImportError:
    HAVE_FLASHINFER = False

REL_TOL = 1e-2  # today's bf16 bound (test_flashinfer_parity.py)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.skipif(not HAVE_FLASHINFER, reason="needs flashinfer (GPU machine)")
@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("splits", [1, 2, 4])
@pytest.mark.parametrize("streams", [(0,), (0, 1), (0, 1, 2, 0), (2, 3)])
@pytest.mark.parametrize("variant", ["fa2", "fa3"])
def test_flashinfer_batch_matches_torch_ref(variant, streams, splits, graph):
    """B x S requests, eager and with the graph wrapper's fixed buffers (planned and run
    without capture), q once or already repeated, against torch_ref in bf16."""
    if variant == "fa3" and torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("fa3 needs a Hopper GPU")
    alone = [_stream(i, device="cuda", dtype="bfloat16") for i in streams]
    pool, layouts = _pooled(alone)
    joined = PagedKVLayout.concat(layouts)
    if graph and len({lay.num_query_tokens for lay in layouts}) > 1:
        pytest.skip("a graph step's requests have equal query counts")
    splits = min(splits, min(lay.num_pages for lay in layouts))
    q = torch.cat(_queries(layouts, device="cuda", dtype=torch.bfloat16))
    reference = make_backend("torch_ref", pool)
    reference.plan(joined)
    fi = make_backend("flashinfer", pool, variant=variant, kv_splits=splits,
                      graph_query_tokens=joined.num_query_tokens if graph else None,
                      graph_requests=len(streams))
    fi.plan(joined)
    assert fi.query_copies == splits
    for layer in range(SHAPE["num_layers"]):
        ref = reference.run(layer, q).float()
        for q_in in (q, q.repeat(splits, 1, 1)):  # q once, or already repeated per copy
            out = fi.run(layer, q_in).float()
            assert not torch.isnan(out).any()
            err = ((out - ref).norm() / ref.norm()).item()
            assert err <= REL_TOL, (variant, streams, splits, graph, layer, err)

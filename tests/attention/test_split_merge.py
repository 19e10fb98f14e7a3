"""merge_splits: the split-KV partial results merged by their base-2 log-sum-exp equal the
attention over all keys (torch, CPU); the Triton kernel equals the torch merge and
FlashInfer's pairwise merge_state chain (GPU)."""
import math

import pytest
import torch

from lingbot_ros.attention import split_merge
from lingbot_ros.attention.split_merge import MAX_COPIES, merge_splits, merge_torch
from tests.kernel_cases import max_ulps, split_merge_case

CUDA = torch.cuda.is_available()


def partial_attention(q, k, v, bounds):
    """Each split's softmax output and base-2 lse, in float64, FlashInfer's layout.

    q (T, H, D), k/v (N, H, D); split s attends to keys ``bounds[s]:bounds[s + 1]``
    (possibly none: lse -inf, output 0). Returns out (S*T, H, D), lse (S*T, H), copy-major.
    """
    outs, lses = [], []
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        scores = torch.einsum("thd,nhd->thn", q, k[lo:hi]) / math.sqrt(q.shape[-1])
        if hi == lo:
            outs.append(torch.zeros_like(q))
            lses.append(torch.full(q.shape[:2], float("-inf"), dtype=q.dtype))
            continue
        outs.append(torch.einsum("thn,nhd->thd", scores.softmax(-1), v[lo:hi]))
        lses.append(torch.logsumexp(scores, -1) / math.log(2))  # base 2, as FlashInfer
    return torch.cat(outs), torch.cat(lses)


def full_attention(q, k, v):
    scores = torch.einsum("thd,nhd->thn", q, k) / math.sqrt(q.shape[-1])
    return torch.einsum("thn,nhd->thd", scores.softmax(-1), v)


@pytest.mark.parametrize("bounds", [[0, 40, 80, 120, 160], [0, 7, 7, 150, 160], [0, 160]])
def test_merged_splits_equal_attention_over_all_keys(bounds):
    torch.manual_seed(0)
    q = 2 * torch.randn(9, 3, 16, dtype=torch.float64)  # peaked softmaxes: lse far apart
    k, v = torch.randn(2, 160, 3, 16, dtype=torch.float64)
    out, lse = partial_attention(q, k, v, bounds)
    copies = len(bounds) - 1
    expect = full_attention(q, k, v)
    got = merge_torch(out.float(), lse.float(), copies)  # float32 parts: float32 accuracy
    assert got.shape == (9, 3, 16) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), expect, rtol=1e-5, atol=1e-6)
    got16 = merge_splits(out.to(torch.bfloat16), lse.float(), copies)  # CPU: the torch merge
    assert got16.dtype == torch.bfloat16
    # bf16 parts (half an ulp each, averaged) and one more rounding: within a bf16 ulp of
    # the largest part
    assert (got16.double() - expect).abs().max() <= 2 ** -8 * out.abs().max()


def test_a_pair_no_split_saw_is_zero_not_nan():
    out = torch.randn(3 * 4, 2, 8, dtype=torch.bfloat16)
    lse = torch.randn(3 * 4, 2)
    lse.view(3, 4, 2)[:, 1, 0] = float("-inf")  # token 1, head 0: no keys in any split
    lse.view(3, 4, 2)[1:, 2, 1] = float("-inf")  # token 2, head 1: split 0 only
    got = merge_splits(out, lse, 3)
    assert torch.isfinite(got).all() and not got[1, 0].any()
    assert torch.equal(got[2, 1], out[2, 1])  # weight 1 on split 0
    single = merge_splits(out[:4], lse[:4].clamp_min(0), 1)
    assert torch.equal(single, out[:4])  # one split: itself


@pytest.mark.parametrize("args,error,match", [
    (((12, 2, 8), (12, 2), 0), ValueError, "copies"),
    (((12, 2, 8), (12, 2), MAX_COPIES + 1), ValueError, "copies"),
    (((12, 2, 8), (12, 2), True), ValueError, "copies"),
    (((12, 16), (12, 2), 3), ValueError, r"\(rows, heads, dim\)"),
    (((12, 2, 8), (12, 3), 3), ValueError, "must share"),
    (((12, 2, 8), (12, 2), 5), ValueError, "must share"),
])
def test_shapes_are_checked(args, error, match):
    out_shape, lse_shape, copies = args
    with pytest.raises(error, match=match):
        merge_splits(torch.zeros(out_shape, dtype=torch.bfloat16), torch.zeros(lse_shape), copies)


def test_dtypes_are_checked():
    with pytest.raises(TypeError, match="lse float32"):
        merge_splits(torch.zeros(4, 2, 8, dtype=torch.bfloat16),
                     torch.zeros(4, 2, dtype=torch.float16), 2)
    with pytest.raises(TypeError, match="out must be one of"):
        merge_splits(torch.zeros(4, 2, 8, dtype=torch.int32), torch.zeros(4, 2), 2)


@pytest.mark.parametrize("copies", [2, 3, 4, 8])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.skipif(bool(split_merge.triton_status()), reason="needs Triton")
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_kernel_matches_the_torch_merge(copies, dtype):
    print(split_merge_case("cuda", dtype, tokens=978, heads=16, dim=64, copies=copies))
    out = torch.randn(copies * 5, 2, 64, device="cuda", dtype=dtype)
    lse = torch.randn(copies * 5, 2, device="cuda")
    # on CUDA merge_splits is the kernel
    assert torch.equal(merge_splits(out, lse, copies), split_merge.merge_triton(out, lse, copies))


@pytest.mark.parametrize("copies", [2, 3, 4])
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_kernel_matches_flashinfer_merge_state_chain(copies):
    flashinfer = pytest.importorskip("flashinfer", reason="needs flashinfer (GPU machine)")
    torch.manual_seed(copies)
    tokens = 978
    out = torch.randn(copies * tokens, 16, 64, device="cuda", dtype=torch.bfloat16)
    lse = torch.randn(copies * tokens, 16, device="cuda") * 4 + 10
    parts = [(out[i * tokens:(i + 1) * tokens], lse[i * tokens:(i + 1) * tokens])
             for i in range(copies)]
    while len(parts) > 1:  # the backend's pairwise merges (rounded to bf16 at every step)
        merged = [flashinfer.merge_state(*parts[i], *parts[i + 1])
                  for i in range(0, len(parts) - 1, 2)]
        parts = merged + ([parts[-1]] if len(parts) % 2 else [])
    exact = merge_torch(out, lse, copies)  # float32, rounded once
    assert max_ulps(merge_splits(out, lse, copies), exact) <= 1
    # the chain rounds every intermediate to bf16 (near-cancelling sums lose many ulps):
    # it agrees with the exact merge only to bf16 precision overall, ours to one ulp
    chain = parts[0][0].float()
    assert (chain - exact.float()).norm() / exact.float().norm() < 1e-2

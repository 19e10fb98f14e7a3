"""Each Triton kernel against its torch fallback, on one device.

Shared by the GPU tests (device ``cuda``) and the interpreter test, which runs this module
in a subprocess with ``TRITON_INTERPRET=1`` (CPU tensors; ``python -m tests.kernel_cases
NAME`` prints the observed differences as one JSON line). Each case asserts its tolerance
and returns its differences: ``*_ulps`` in units in the last place of the output dtype,
``*_abs`` absolute.
"""
from __future__ import annotations

import json
import os
import sys

import torch
from torch import nn

from lingbot_ros.attention.split_merge import merge_torch, merge_triton
from lingbot_ros.model.add_norm import add_scaled_norm_torch, add_scaled_norm_triton
from lingbot_ros.model.qk_fused import norm_rope_torch, norm_rope_triton
from lingbot_ros.model.rope import FrameRope, VideoRope

MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}


def max_ulps(got: torch.Tensor, ref: torch.Tensor, rel_floor: float = 2 ** -8) -> float:
    """Largest |got - ref| in units in the last place of ``ref`` (its dtype). Values below
    ``rel_floor * max|ref|`` count at that floor's ulp: near zero, float32 cancellation in
    any summation order is larger than the output's ulp."""
    assert got.dtype == ref.dtype and got.shape == ref.shape, (got.dtype, ref.dtype)
    ref64, got64 = ref.double(), got.double()
    floor = rel_floor * ref64.abs().max().clamp_min(1e-30)
    _, exponent = torch.frexp(torch.maximum(ref64.abs(), floor))  # |ref| = m 2^e, m in [.5, 1)
    ulp = torch.ldexp(torch.ones_like(ref64), exponent - 1 - MANTISSA_BITS[ref.dtype])
    return ((got64 - ref64).abs() / ulp).max().item()


def max_abs(got: torch.Tensor, ref: torch.Tensor) -> float:
    return (got.double() - ref.double()).abs().max().item()


def split_merge_case(device: str, dtype=torch.bfloat16, tokens: int = 37, heads: int = 3,
                     dim: int = 64, copies: int = 4, seed: int = 0) -> dict[str, float]:
    """merge_triton vs merge_torch; some splits see no key (lse -inf), pair (0, 0) none at all."""
    gen = torch.Generator().manual_seed(seed)
    out = torch.randn(copies * tokens, heads, dim, generator=gen).to(device, dtype)
    lse = (torch.randn(copies * tokens, heads, generator=gen) * 4 + 10).to(device)
    dead = torch.rand(copies * tokens, heads, generator=gen) < 0.2
    lse[dead.to(device)] = float("-inf")
    lse.view(copies, tokens, heads)[:, 0, 0] = float("-inf")
    got, ref = merge_triton(out, lse, copies), merge_torch(out, lse, copies)
    assert got.shape == (tokens, heads, dim) and got.dtype == dtype and got.is_contiguous()
    assert torch.isfinite(got).all() and not got[0, 0].any() and not ref[0, 0].any()
    diffs = {"out_ulps": max_ulps(got, ref), "out_abs": max_abs(got, ref)}
    assert diffs["out_ulps"] <= 1, diffs
    return diffs


def layer_norm(width: int, dtype: torch.dtype, device: str, affine: bool = True,
               seed: int = 0) -> nn.LayerNorm:
    """A LayerNorm with trained-like affine parameters (not the identity init)."""
    norm = nn.LayerNorm(width, eps=1e-6, elementwise_affine=affine)
    if affine:
        gen = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            norm.weight.copy_(1 + 0.3 * torch.randn(width, generator=gen))
            norm.bias.copy_(0.3 * torch.randn(width, generator=gen))
    return norm.to(device, dtype)


def add_norm_case(device: str, dtype=torch.bfloat16, rows: int = 7, width: int = 1024,
                  norm_dtype=None, affine: bool = True, y_layout: str = "contiguous",
                  seed: int = 0) -> dict[str, float]:
    """add_scaled_norm_triton vs addcmul + LayerNorm: the residual bit for bit, the normed
    rows within one ulp. ``y_layout``: ``contiguous``, ``sliced`` (a column slice of a wider
    tensor: a row stride) or ``transposed`` (leading dims that do not flatten: copied)."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, width, generator=gen).to(device, dtype)
    if y_layout == "sliced":
        y = torch.randn(rows, width + 24, generator=gen).to(device, dtype)[:, 8:8 + width]
    elif y_layout == "transposed":
        x = x.view(1, rows, width)
        y = torch.randn(rows, 1, width, generator=gen).to(device, dtype).transpose(0, 1)
    else:
        y = torch.randn(rows, width, generator=gen).to(device, dtype)
    gamma = (0.5 * torch.randn(width, generator=gen)).to(device, dtype)
    norm = layer_norm(width, norm_dtype or dtype, device, affine, seed)
    (x_got, n_got), (x_ref, n_ref) = (f(x, y, gamma, norm) for f in
                                      (add_scaled_norm_triton, add_scaled_norm_torch))
    assert x_got.dtype == n_got.dtype == n_ref.dtype == dtype and x_got.shape == x.shape
    diffs = {"x_new_ulps": max_ulps(x_got, x_ref), "x_new_abs": max_abs(x_got, x_ref),
             "normed_ulps": max_ulps(n_got, n_ref), "normed_abs": max_abs(n_got, n_ref)}
    assert diffs["x_new_abs"] == 0, diffs
    # float32 rows: summed in another order than torch's, ~1/256 of a bf16 ulp
    assert diffs["normed_ulps"] <= (1 if dtype != torch.float32 else 256), diffs
    return diffs


def qk_inputs(device: str, rows: int, heads: int, dim: int, rope: str, seed: int = 0):
    """(qkv bf16 (rows, 3 heads dim), q_norm, k_norm float32, the rope's tables)."""
    gen = torch.Generator().manual_seed(seed)
    qkv = torch.randn(rows, 3 * heads * dim, generator=gen).to(device, torch.bfloat16)
    norms = [layer_norm(dim, torch.float32, device, seed=seed + i) for i in (1, 2)]
    if rope == "frame":  # 2D tables of one frame, repeated over the batch (r % R)
        tables = FrameRope.for_grid((3, 4), 6, dim, 100.0, device).tables()
        assert rows % tables[0].shape[0] == 0
    else:  # 3D tables, one row per token
        dims = (dim // 4, 3 * dim // 8, 3 * dim // 8)  # (time, y, x) channels
        tables = VideoRope.for_frames(5, 1, (rows - 2, 1), 2, dims, 10000.0, device).tables()
    return qkv, *norms, tables


def qk_case(device: str, rows: int = 36, heads: int = 3, dim: int = 64, rope: str = "frame",
            q_copies: int = 3, seed: int = 0) -> dict[str, float]:
    """norm_rope_triton vs norm_rope_torch; then its options vs its default: q written
    ``q_copies`` times and k, v scattered into a cache layer, bit for bit."""
    qkv, q_norm, k_norm, tables = qk_inputs(device, rows, heads, dim, rope, seed)
    q, k = norm_rope_triton(qkv, heads, q_norm, k_norm, tables)
    q_ref, k_ref = norm_rope_torch(qkv, heads, q_norm, k_norm, tables)
    diffs = {"q_ulps": max_ulps(q, q_ref), "k_ulps": max_ulps(k, k_ref)}
    assert max(diffs.values()) <= 1, diffs
    gen = torch.Generator().manual_seed(seed + 3)
    slots = 2 * rows + 11
    flat = torch.randn(slots, heads, dim, generator=gen).to(device, torch.bfloat16)
    before = flat.clone()
    perm = torch.randperm(slots, generator=gen).to(device)
    k_rows, v_rows = perm[:rows], perm[rows:2 * rows]
    q_rep, none = norm_rope_triton(qkv, heads, q_norm, k_norm, tables, q_copies=q_copies,
                                   kv_dst=(flat, k_rows, v_rows))
    assert none is None and q_rep.shape == (q_copies * rows, heads, dim)
    assert torch.equal(q_rep, q.repeat(q_copies, 1, 1))
    assert torch.equal(flat[k_rows], k)
    assert torch.equal(flat[v_rows], qkv.view(rows, 3, heads, dim)[:, 2])
    untouched = perm[2 * rows:]
    assert torch.equal(flat[untouched], before[untouched])
    return diffs


CASES = {  # the interpreter's runs: small, odd row counts, every option
    "split_merge": [
        dict(dtype=torch.bfloat16, tokens=37, heads=3, dim=64, copies=4),
        dict(dtype=torch.float16, tokens=5, heads=2, dim=32, copies=3),
        dict(dtype=torch.float32, tokens=9, heads=1, dim=16, copies=1),
        dict(dtype=torch.bfloat16, tokens=11, heads=2, dim=64, copies=16),
    ],
    "add_norm": [
        dict(dtype=torch.bfloat16, rows=7, width=1024),
        dict(dtype=torch.bfloat16, rows=9, width=1000, affine=False, y_layout="sliced"),
        dict(dtype=torch.bfloat16, rows=5, width=2048, norm_dtype=torch.float32,
             y_layout="transposed"),
        dict(dtype=torch.float32, rows=7, width=2048),
    ],
    "qk": [
        dict(rows=36, heads=3, dim=64, rope="frame", q_copies=3),
        dict(rows=13, heads=2, dim=16, rope="video", q_copies=1),
    ],
}
RUNNERS = {"split_merge": split_merge_case, "add_norm": add_norm_case, "qk": qk_case}


def run_cases(name: str, device: str) -> list[dict]:
    """Every case of ``name`` on ``device``: its settings and observed differences each."""
    return [{"case": {k: str(v).replace("torch.", "") for k, v in case.items()},
             **RUNNERS[name](device, **case)} for case in CASES[name]]


def round_like_the_gpu() -> None:
    """Make Triton's interpreter round as the GPU does, in this process only (the subprocess
    of the interpreter test). Triton 3.6's interpreter truncates float32 -> bfloat16 (the
    GPU rounds to nearest even) and computes ``tl.fma`` as a product and a sum, rounded
    twice (the GPU: once); either would put bf16 outputs an ulp off and the residual of
    ``add_norm`` could not be checked bit for bit against torch."""
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    truncating, twice_rounded = builder.cast_impl, builder.create_fma

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            rounded = torch.from_numpy(np.ascontiguousarray(src.data)).to(torch.bfloat16)
            bits = rounded.view(torch.int16).numpy().view(np.uint16)
            return interpreter.TensorHandle(bits, dst_type.scalar)
        return truncating(self, src, dst_type)

    def create_fma(self, x, y, z):
        if z.dtype.scalar != tl.float32:
            return twice_rounded(self, x, y, z)
        # the float32 product is exact in float64; the sum is rounded to float32 (via
        # float64: a double rounding only on exact float64 ties, never seen here)
        exact = x.data.astype(np.float64) * y.data.astype(np.float64) + z.data
        return interpreter.TensorHandle(exact.astype(np.float32), z.dtype.scalar)

    builder.cast_impl, builder.create_fma = cast_impl, create_fma


if __name__ == "__main__":
    if os.environ.get("TRITON_INTERPRET") == "1":
        round_like_the_gpu()
    print(json.dumps(run_cases(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "cpu")))

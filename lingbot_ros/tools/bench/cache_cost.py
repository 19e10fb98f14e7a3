"""lingbot-ros-bench-cache: cost of the cache bookkeeping (CPU) and of one attention call (GPU).

1. Bookkeeping per frame step at the released geometry (page 972 = 378x504, 8 scale + 64
   window frames), steady state, keyframes and rolled-back non-keyframes alternating: the
   pure-Python page table alone, its forecast of the next step while one is pending (the
   pipelined session's plan-ahead), and the whole ``PagedKVCache.begin`` (layout and
   write-slot tensors) + commit/rollback.
2. On a CUDA machine: one global-attention call per layer (978 queries = 972 patches + 6
   specials, 16 heads x 64, bf16) at full window, for FlashInfer fa2, fa3 (also split-KV in
   2-4 parts) and torch_ref, with a short and a long trajectory memory; and, as the bound a
   contiguous layout could reach, dense SDPA on the same keys already contiguous (flash,
   cuDNN and memory-efficient kernels). CUDA-event medians.

Prints a table and writes JSON (``--out``). Not a test: numbers, not assertions.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from ...attention import make_backend
from ...cache import PagedKVCache
from ...cache.page_table import PageTable
from ...config import CacheConfig
from ..out_folder import OutRefused, check_out_file, json_report_begins, write_json_report

GEOMETRY = dict(page_size=972, scale_frames=8, window=64)
BACKENDS = (  # (report name, flashinfer variant or None for torch_ref, kv_splits)
    ("fa2", "fa2", 1), ("fa3", "fa3", 1), ("fa3_split2", "fa3", 2), ("fa3_split4", "fa3", 4),
    ("fa3_split6", "fa3", 6), ("fa3_split8", "fa3", 8), ("torch_ref", None, 1))


def _median_us(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        fn()
        times.append((time.perf_counter_ns() - t0) / 1e3)
    return statistics.median(times)


def bench_bookkeeping(repeat: int) -> dict:
    out = {}
    for bound in (None, 2048):
        # Bookkeeping only (no storage): give the unbounded table room for every step.
        cfg = CacheConfig(num_layers=24, num_heads=16, head_dim=64, max_special_frames=bound,
                          special_chunk_frames=repeat + 1000, **GEOMETRY)
        table = PageTable(cfg)
        for _ in range(400):  # past warm-up: window full, specials several pages long
            table.begin(1)
            table.commit(table.generation)
        flip = [False]

        def step():
            table.begin(1)
            flip[0] = not flip[0]
            (table.commit if flip[0] else table.rollback)(table.generation)

        key = "unbounded" if bound is None else f"max_special_frames_{bound}"
        out[f"page_table_step_us_{key}"] = _median_us(step, repeat)
        # The plan-ahead of a pipelined step: the next plan, forecast while a step is pending.
        table.begin(1)
        out[f"page_table_forecast_us_{key}"] = _median_us(lambda: table.forecast(True, 1),
                                                          repeat)
        table.rollback(table.generation)
    # The whole begin (layout + write-slot tensors) on a storage with one tiny layer: the
    # bookkeeping does not depend on layers, heads or head_dim.
    cache = PagedKVCache(CacheConfig(num_layers=1, num_heads=1, head_dim=1,
                                     max_special_frames=2048, **GEOMETRY))
    for _ in range(400):
        cache.begin(1).commit()
    flip = [False]

    def full_step():
        txn = cache.begin(1)
        flip[0] = not flip[0]
        txn.commit() if flip[0] else txn.rollback()

    out["cache_step_us_with_tensors"] = _median_us(full_step, repeat)
    return out


def bench_attention(frames: int, repeat: int) -> dict:
    cfg = CacheConfig(num_layers=1, num_heads=16, head_dim=64, dtype="bfloat16", device="cuda",
                      **GEOMETRY)
    cache = PagedKVCache(cfg)
    kv = torch.randn(cfg.tokens_per_frame, 16, 64, device="cuda", dtype=torch.bfloat16)
    anchors = cache.begin(8)
    anchors.write(0, torch.cat([kv] * 8), torch.cat([kv] * 8))
    anchors.commit()
    while cache.frames_committed < frames - 1:
        txn = cache.begin(1)
        txn.write(0, kv, kv)
        txn.commit()
    txn = cache.begin(1)
    txn.write(0, kv, kv)
    q = torch.randn_like(kv)
    reference = make_backend("torch_ref", cache.storage)
    reference.plan(txn.layout)
    expected = reference.run(0, q).float()
    result = {"frames": frames, "num_kv_tokens": txn.layout.num_kv_tokens,
              "num_pages": txn.layout.num_pages}
    for name, variant, splits in BACKENDS:
        backend = (make_backend("torch_ref", cache.storage) if variant is None
                   else make_backend("flashinfer", cache.storage, variant=variant,
                                     kv_splits=splits))
        t0 = time.perf_counter()
        backend.plan(txn.layout)
        backend.run(0, q)  # first run JIT-compiles FlashInfer kernels
        torch.cuda.synchronize()
        first_s = time.perf_counter() - t0
        plan_us = _median_us(lambda: backend.plan(txn.layout), 50)
        out = backend.run(0, q).float()
        result[name] = {"run_ms_median": _median_ms(lambda: backend.run(0, q), repeat),
                        "plan_us_median": plan_us,
                        "first_call_s": first_s, "has_nan": bool(out.isnan().any()),
                        "rel_err_vs_torch_ref": ((out - expected).norm() / expected.norm()).item()}
    result["dense_sdpa"] = bench_dense_sdpa(q, reference, cache, repeat)
    txn.rollback()
    return result


def _median_ms(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def bench_dense_sdpa(q, reference, cache, repeat: int) -> dict:
    """SDPA kernels on the same keys gathered once into contiguous (1, heads, N, dim)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    flat = cache.storage.layer_tokens(0)
    k = flat.index_select(0, reference._k_rows).transpose(0, 1)[None].contiguous()
    v = flat.index_select(0, reference._v_rows).transpose(0, 1)[None].contiguous()
    qh = q.transpose(0, 1)[None].contiguous()
    out = {}
    for name, kernel in (("flash", SDPBackend.FLASH_ATTENTION),
                         ("cudnn", SDPBackend.CUDNN_ATTENTION),
                         ("efficient", SDPBackend.EFFICIENT_ATTENTION)):
        try:
            with sdpa_kernel([kernel]):
                torch.nn.functional.scaled_dot_product_attention(qh, k, v)
                out[name] = _median_ms(
                    lambda: torch.nn.functional.scaled_dot_product_attention(qh, k, v), repeat)
        except RuntimeError as exc:  # a kernel this build or GPU does not have
            out[name] = f"unavailable: {str(exc).splitlines()[0][:120]}"
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="lingbot-ros-bench-cache", description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=2000, help="timed repetitions (default 2000)")
    p.add_argument("--frames", default="72,400,3000",
                   help="trajectory lengths of the attention timings (comma list)")
    p.add_argument("--out", default="bench_cache.json",
                   help="JSON output path (replaces only a report of this tool)")
    args = p.parse_args(argv)
    tool = "lingbot-ros-bench-cache"
    try:  # before the timings: --out can be written and replaces only our report
        check_out_file(args.out, json_report_begins(tool))
    except OutRefused as exc:
        print(f"{tool}: error: {exc}", file=sys.stderr)
        return 2
    report = {"torch": torch.__version__, "bookkeeping": bench_bookkeeping(args.repeat)}
    for key, value in report["bookkeeping"].items():
        print(f"{key:<45} {value:9.1f} us")
    if torch.cuda.is_available():
        report["gpu"] = torch.cuda.get_device_name()
        report["attention"] = [bench_attention(frames, min(args.repeat, 500))
                               for frames in map(int, args.frames.split(","))]
        for row in report["attention"]:
            print(f"attention @ {row['frames']} frames ({row['num_kv_tokens']} keys, "
                  f"{row['num_pages']} pages):")
            for name, _, _ in BACKENDS:
                r = row[name]
                print(f"  {name:<10} {r['run_ms_median']:7.3f} ms/call   plan "
                      f"{r['plan_us_median']:7.1f} us   rel err {r['rel_err_vs_torch_ref']:.1e}"
                      f"{'  NaN!' if r['has_nan'] else ''}")
            print("  dense SDPA on contiguous K/V: " + ", ".join(
                f"{k} {v if isinstance(v, str) else f'{v:.3f} ms'}"
                for k, v in row["dense_sdpa"].items()))
    else:
        print("no CUDA device: attention timings skipped (run on a GPU machine)")
    write_json_report(args.out, tool, report)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

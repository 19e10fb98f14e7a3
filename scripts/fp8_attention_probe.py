"""Probe (not product code): would fp8 (e4m3) K/V/Q make the global attention faster?

One paged-prefill call at the full window of the released geometry (978 queries, 72 pages of
972 tokens + 6 special pages, 16 heads x 64), FlashInfer fa3, bf16 against fp8 e4m3 inputs
(unit scales, bf16 output), one request and split into 4 requests (the session's split-KV
without the merge). Reports CUDA-event medians and the fp8 output's error against bf16.

    python3 scripts/fp8_attention_probe.py --out fp8_probe.json
"""
from __future__ import annotations

import argparse
import json
import statistics

import torch

PAGE, PAGES, HEADS, DIM, QUERIES = 972, 78, 16, 64, 978


def median_ms(fn, repeat=200):
    for _ in range(10):
        fn()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def call(flashinfer, q, k, v, splits, dtype):
    dev = q.device
    i32 = dict(dtype=torch.int32, device=dev)
    bounds = [round(PAGES * i / splits) for i in range(splits + 1)]
    wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(
        torch.empty(256 << 20, dtype=torch.uint8, device=dev), "NHD", backend="fa3")
    wrapper.plan(torch.tensor([QUERIES * i for i in range(splits + 1)], **i32),
                 torch.tensor(bounds, **i32), torch.arange(PAGES, **i32),
                 torch.tensor([PAGE] * splits, **i32), HEADS, HEADS, DIM, PAGE, causal=False,
                 q_data_type=dtype, kv_data_type=dtype, o_data_type=torch.bfloat16)
    qs = torch.cat([q] * splits).to(dtype)
    kc, vc = k.to(dtype), v.to(dtype)
    return lambda: wrapper.run(qs, (kc, vc))


def main():
    import flashinfer
    p = argparse.ArgumentParser()
    p.add_argument("--out", default="fp8_probe.json")
    args = p.parse_args()
    torch.manual_seed(0)
    q = torch.randn(QUERIES, HEADS, DIM, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(PAGES, PAGE, HEADS, DIM, device="cuda", dtype=torch.bfloat16)
    v = torch.randn_like(k)
    report = {"flashinfer": flashinfer.__version__, "queries": QUERIES,
              "kv_tokens": PAGES * PAGE}
    for splits in (1, 4):
        ref = None
        for name, dtype in (("bf16", torch.bfloat16), ("fp8_e4m3", torch.float8_e4m3fn)):
            key = f"{name}_split{splits}"
            try:
                run = call(flashinfer, q, k, v, splits, dtype)
                out = run().float()
                entry = {"ms_median": median_ms(run), "nan": bool(out.isnan().any())}
                if ref is None:
                    ref = out
                else:
                    entry["rel_err_vs_bf16"] = ((out - ref).norm() / ref.norm()).item()
            except Exception as exc:  # a build without the fp8 kernel: say so, go on
                entry = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:300]}"}
            report[key] = entry
            print(key, json.dumps(entry), flush=True)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=2)


if __name__ == "__main__":
    main()

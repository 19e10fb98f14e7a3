"""lingbot-ros-demo: stream frames through the paged KV cache on the embedded default.

The network is not wired in yet, so each frame's keys and values are synthetic (random);
everything else is the production path: one transaction per frame, one attention plan per
frame, a per-layer write + attend loop, keyframes committed and non-keyframes rolled back,
and the trajectory-memory bound keeping memory flat. Runs on the CPU in seconds.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from ..attention import BACKENDS, make_backend
from ..cache import PagedKVCache
from ..config import CacheConfig, cache_overrides

# Tiny default: the golden fixture's geometry (112x154 input -> 8x11 = 88 patches), 4 global
# layers of 2 heads x 64, a small window so eviction and the special bound show quickly.
DEFAULT = dict(num_layers=4, num_heads=2, head_dim=64, page_size=88, scale_frames=2, window=8,
               max_special_frames=64, special_chunk_frames=64, dtype="float32", device="cpu")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="lingbot-ros-demo", description=__doc__.splitlines()[0])
    p.add_argument("--frames", type=int, default=600, help="frames to stream (default 600)")
    p.add_argument("--keyframe-every", type=int, default=2,
                   help="commit every Nth frame, roll the others back (default 2)")
    p.add_argument("--params", help="ROS 2 params file; its cache.* entries override the demo")
    p.add_argument("--backend", choices=BACKENDS, default="torch_ref")
    p.add_argument("--device", default="cpu")
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    overrides = {}
    if args.params:
        from .params_file import load_params
        overrides = cache_overrides(load_params(args.params))
    cfg = CacheConfig(**{**DEFAULT, **overrides, "device": args.device})
    print("lingbot-ros-demo: NOTE no model runs yet in this demo; keys/values are synthetic, "
          "the cache, transactions and attention are real.")
    print(f"cache: {cfg.num_layers} layers x {cfg.num_heads} heads x {cfg.head_dim}, page "
          f"{cfg.page_size} tokens, scale {cfg.scale_frames} + window {cfg.window}, "
          f"max_special_frames {cfg.max_special_frames}, {cfg.dtype} on {cfg.device}, "
          f"backend {args.backend}")
    cache = PagedKVCache(cfg)
    backend = make_backend(args.backend, cache.storage)
    gen = torch.Generator(device=cfg.device).manual_seed(args.seed)
    dtype = cache.storage.dtype
    step_ms = []
    header = f"{'frame':>6} {'kept':>6} {'cached':>6} {'specials':>8} {'pages':>9} " \
             f"{'MiB used':>9} {'step ms':>8}"
    print(header)
    for i in range(args.frames):
        n = cfg.scale_frames if i == 0 and cfg.scale_frames > 1 else 1
        shape = (n * cfg.tokens_per_frame, cfg.num_heads, cfg.head_dim)
        t0 = time.perf_counter()
        txn = cache.begin(n)
        backend.plan(txn.layout)
        for layer in range(cfg.num_layers):
            q, k, v = (torch.randn(shape, generator=gen, device=cfg.device, dtype=dtype)
                       for _ in range(3))
            txn.write(layer, k, v)
            backend.run(layer, q)
        keyframe = i < cfg.scale_frames or i % args.keyframe_every == 0
        txn.commit() if keyframe else txn.rollback()
        step_ms.append((time.perf_counter() - t0) * 1e3)
        if (i + 1) % max(1, args.frames // 6) == 0 or i + 1 == args.frames:
            info = cache.info()
            pages = f"{info['patch_pages_used'] + info['special_pages_used']}/" \
                    f"{info['patch_pages_total'] + info['special_pages_total']}"
            print(f"{i + 1:>6} {info['frames_committed']:>6} {info['frames_cached']:>6} "
                  f"{info['special_frames']:>8} {pages:>9} {info['bytes_used'] / 2**20:>9.2f} "
                  f"{statistics.median(step_ms[-50:]):>8.2f}")
    info = cache.info()
    cache.reset()
    print(f"done: {info['frames_seen']} frames, {info['frames_committed']} kept, "
          f"{info['frames_rolled_back']} rolled back; {info['bytes_reserved'] / 2**20:.1f} MiB "
          f"reserved; median step {statistics.median(step_ms):.2f} ms; reset -> "
          f"{cache.info()['frames_cached']} frames cached")
    return 0


if __name__ == "__main__":
    sys.exit(main())

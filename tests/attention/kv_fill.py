"""Fill a cache with random frames and remember what was written, for backend tests."""
from __future__ import annotations

import torch

from lingbot_ros.cache import PagedKVCache


class RecordingFiller:
    """Pushes random frames through a cache; ``written[uid]`` holds (layers, T, H, D) K and V."""

    def __init__(self, cache: PagedKVCache, seed: int = 0) -> None:
        self.cache = cache
        self.gen = torch.Generator().manual_seed(seed)
        self.written: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.committed: list[int] = []
        self.next_uid = 0

    def begin(self, n: int = 1):
        c = self.cache.config
        txn = self.cache.begin(n)
        uids = list(range(self.next_uid, self.next_uid + n))
        self.next_uid += n
        shape = (c.num_layers, c.tokens_per_frame, c.num_heads, c.head_dim)
        for uid in uids:
            k = torch.randn(shape, generator=self.gen)
            v = torch.randn(shape, generator=self.gen)
            self.written[uid] = (k, v)
        dev, dt = self.cache.storage.device, self.cache.storage.dtype
        for layer in range(c.num_layers):
            k = torch.cat([self.written[u][0][layer] for u in uids]).to(dev, dt)
            v = torch.cat([self.written[u][1][layer] for u in uids]).to(dev, dt)
            txn.write(layer, k, v)
        return txn, uids

    def push(self, n: int = 1, keep: bool = True) -> None:
        txn, uids = self.begin(n)
        if keep:
            txn.commit()
            self.committed += uids
        else:
            txn.rollback()

    def dense_kv(self, frames: list[int], layer: int, bound: int | None = None):
        """K, V of the visible token set, assembled from what was written (unbounded specials).

        ``frames``: committed + pending uids since reset, in order.
        """
        c = self.cache.config
        pinned = frames[:c.scale_frames]
        windowed = frames[c.scale_frames:][-c.window:]
        ks, vs = [], []
        for uid in pinned + windowed:
            ks.append(self.written[uid][0][layer, c.num_special:])
            vs.append(self.written[uid][1][layer, c.num_special:])
        for uid in frames:
            ks.append(self.written[uid][0][layer, :c.num_special])
            vs.append(self.written[uid][1][layer, :c.num_special])
        return torch.cat(ks), torch.cat(vs)  # (tokens, heads, head_dim)

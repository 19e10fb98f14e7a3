"""A deliberately naive model of which tokens a query sees, for checking the page table.

It knows nothing about pages except the one rule that needs them (specials are released in
whole pages): it keeps the committed frames in a list and recomputes the visible set from
scratch every time. The deferred-eviction rule: a keyframe step sees the cache as it will be
once committed; a speculative step sees the committed cache as it is (nothing trimmed) plus
its own frames.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

NUM_SPECIAL = 6


@dataclass
class NaiveCache:
    page_size: int
    scale_frames: int
    window: int
    max_special_frames: int | None
    committed: list[int] = field(default_factory=list)  # frame uids since reset
    pending: list[int] = field(default_factory=list)
    pending_speculative: bool = False  # the pending step's kind

    def visible(self) -> list[tuple[int, int]]:
        """(frame uid, token index in frame) of every visible token, layout order."""
        frames = self.committed + self.pending
        pinned = frames[:self.scale_frames]
        if self.pending_speculative:  # the committed window untrimmed, then the step's own
            windowed = (self.committed[self.scale_frames:][-self.window:]
                        + [f for f in self.pending if f not in pinned])
        else:
            windowed = frames[self.scale_frames:][-self.window:]
        # Specials are trimmed by the frame count after the commit, or before it (speculative).
        kept_count = len(self.committed) if self.pending_speculative else len(frames)
        out = [(f, NUM_SPECIAL + i) for f in pinned + windowed for i in range(self.page_size)]
        num_tokens = NUM_SPECIAL * len(frames)
        ps = self.page_size
        pinned_chunks = -(-self.scale_frames * NUM_SPECIAL // ps)
        for chunk in range(-(-num_tokens // ps)):
            last_frame = ((chunk + 1) * ps - 1) // NUM_SPECIAL
            released = (self.max_special_frames is not None and chunk >= pinned_chunks
                        and last_frame < kept_count - self.max_special_frames)
            if not released:
                for g in range(chunk * ps, min((chunk + 1) * ps, num_tokens)):
                    out.append((frames[g // NUM_SPECIAL], g % NUM_SPECIAL))
        return out


def frame_kv(uid: int, num_layers: int, tokens_per_frame: int) -> tuple[torch.Tensor, ...]:
    """K and V of one frame that encode (uid, token, layer) exactly in float32.

    Shape (layers, tokens, 1 head, 2 dims): K = (uid, token + 1000 * layer), V = -K - 0.5.
    """
    tok = torch.arange(tokens_per_frame, dtype=torch.float32)
    layers = torch.arange(num_layers, dtype=torch.float32)[:, None]
    k = torch.stack([torch.full((num_layers, tokens_per_frame), float(uid)),
                     tok[None, :] + 1000 * layers], dim=-1)[:, :, None, :]
    return k, -k - 0.5


def expected_kv(visible: list[tuple[int, int]], layer: int) -> tuple[torch.Tensor, ...]:
    k = torch.tensor([[float(uid), float(tok + 1000 * layer)] for uid, tok in visible],
                     dtype=torch.float32).reshape(-1, 1, 2)
    return k, -k - 0.5


TRAFFIC_COUNTERS = ("frames_seen", "frames_rolled_back")  # statistics, not cache state


def state_info(cache) -> dict:
    """cache.info() without the traffic statistics that a rollback rightly advances."""
    return {k: v for k, v in cache.info().items() if k not in TRAFFIC_COUNTERS}

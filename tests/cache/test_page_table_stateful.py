"""Hypothesis stateful test: >= 10,000 random cache operations against a naive model.

After every operation the K/V gathered from the pages equals the naive expectation token for
token, the invariants hold, and misuse leaves the state untouched. Steps are opened as
keyframe or speculative steps at random; a twin cache runs the same frames, always opened as
keyframes, to pin down the deferred-eviction rule:

* a speculative step sees exactly the committed cache's tokens plus its own;
* once committed (or rolled back), the cache equals its twin, page for page.

Forecasts (``PagedKVCache.forecast``, what a pipelined session plans while a step runs) are
made at random too: they never change the cache, the next single-frame step's plan equals the
forecast whenever the step before closed as the forecast assumed, and ``begin`` is always handed
the last forecast, right or wrong (the K/V checks then cover the reused layout and rows).
"""
from __future__ import annotations

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule, run_state_machine_as_test)

from lingbot_ros.cache import CacheError, PagedKVCache, StepKind, TransactionError
from lingbot_ros.config import CacheConfig
from tests.cache.naive_model import NaiveCache, expected_kv, frame_kv, state_info

NUM_LAYERS = 2
OPS = {"count": 0, "forecasts_right": 0}


def snapshot(cache: PagedKVCache):
    t = cache.table
    return (state_info(cache), t.patch_pool.free_ids(), t.special_pool.free_ids(),
            t.patches.visible_pages(), t.specials.visible())


def visible_rows(cache: PagedKVCache) -> set[int]:
    """K-slot rows of every token a query sees now (pending step included)."""
    layout = cache.current_layout()
    return set() if layout is None else set(layout.token_slots().tolist())


def visible_kv(cache: PagedKVCache) -> list[torch.Tensor]:
    layout = cache.current_layout()
    if layout is None:
        return []
    rows = layout.token_slots()
    return [cache.storage.layer_tokens(layer)[torch.cat([rows, rows + cache.config.page_size])]
            for layer in range(NUM_LAYERS)]


class CacheMachine(RuleBasedStateMachine):
    @initialize(page_size=st.integers(2, 5), scale=st.integers(0, 3), window=st.integers(1, 4),
                bound=st.one_of(st.none(), st.integers(3, 6)), chunk=st.integers(1, 3))
    def setup(self, page_size, scale, window, bound, chunk):
        self.cfg = CacheConfig(num_layers=NUM_LAYERS, num_heads=1, head_dim=2,
                               page_size=page_size, scale_frames=scale, window=window,
                               max_special_frames=bound, special_chunk_frames=chunk)
        self.cache = PagedKVCache(self.cfg)
        self.twin = PagedKVCache(self.cfg)  # the same frames, every step a keyframe step
        self.naive = NaiveCache(page_size, scale, window, bound)
        self.txn = self.twin_txn = None
        self.done = None  # the last finished step, for misuse checks
        self.next_uid = 1
        self.fc = None  # (forecast, pending step commits?, kind, still right?)

    def _step_frames_ok(self, n: int) -> bool:
        """Whether the cache must accept a step of n frames (the naive rule)."""
        pinned_free = max(0, self.cfg.scale_frames - len(self.naive.committed))
        windowed = n - min(n, pinned_free)
        bound_ok = self.cfg.max_special_frames is None or n <= self.cfg.max_special_frames
        free_pages = self.cache.table.patch_pool.num_free
        return windowed <= self.cfg.window and bound_ok and n <= free_pages

    @precondition(lambda self: self.txn is None)
    @rule(n=st.sampled_from([1, 1, 1, 1, 2, 3, 5]),
          kind=st.sampled_from([StepKind.KEYFRAME, StepKind.SPECULATIVE]))
    def begin(self, n, kind):
        OPS["count"] += 1
        if not self._step_frames_ok(n):
            before = snapshot(self.cache)
            with pytest.raises(CacheError):
                self.cache.begin(n, kind)
            assert snapshot(self.cache) == before
            return
        committed_rows = visible_rows(self.cache)
        fc, self.fc = self.fc, None
        forecast = fc[0] if fc is not None else None
        self.txn = self.cache.begin(n, kind, forecast)
        if forecast is not None and fc[3] and n == 1 and kind is fc[2]:
            assert self.txn.plan == forecast.plan and self.txn.as_forecast
            assert self.txn.layout is forecast.layout  # reused, not rebuilt
            OPS["forecasts_right"] += 1
        # the forecast's tensors are used exactly when its plan is the step's
        assert self.txn.as_forecast == (forecast is not None and self.txn.plan == forecast.plan)
        self.twin_txn = self.twin.begin(n, StepKind.KEYFRAME)
        uids = list(range(self.next_uid, self.next_uid + n))
        self.next_uid += n
        assert self.txn.first_frame == len(self.naive.committed)
        assert self.txn.kind is kind
        kvs = [frame_kv(u, NUM_LAYERS, self.cfg.tokens_per_frame) for u in uids]
        for layer in range(NUM_LAYERS):
            k = torch.cat([kv[0][layer] for kv in kvs])  # (n * tokens_per_frame, 1, 2)
            v = torch.cat([kv[1][layer] for kv in kvs])
            self.txn.write(layer, k, v)
            self.twin_txn.write(layer, k, v)
        self.naive.pending = uids
        self.naive.pending_speculative = kind is StepKind.SPECULATIVE
        if kind is StepKind.SPECULATIVE:
            # The rule itself: the committed view, untouched, plus the step's own tokens.
            own = set(self.txn.write_rows[0].tolist())
            assert visible_rows(self.cache) == committed_rows | own
            assert not committed_rows & own

    def _finish(self, action: str):
        OPS["count"] += 1
        if self.fc is not None and self.fc[3] == "pending":  # made while this step ran
            self.fc = (*self.fc[:3], (action == "commit") == self.fc[1])
        getattr(self.txn, action)()
        getattr(self.twin_txn, action)()
        if action == "commit":
            self.naive.committed += self.naive.pending
        self.naive.pending, self.naive.pending_speculative = [], False
        self.txn, self.twin_txn, self.done = None, None, self.txn
        # Whatever the step saw, the state after it equals the keyframe twin's.
        assert snapshot(self.cache) == snapshot(self.twin)
        for a, b in zip(visible_kv(self.cache), visible_kv(self.twin)):
            assert torch.equal(a, b)

    @precondition(lambda self: self.txn is not None)
    @rule()
    def commit(self):
        self._finish("commit")

    @precondition(lambda self: self.txn is not None)
    @rule()
    def rollback(self):
        self._finish("rollback")

    @rule(commits=st.booleans(), kind=st.sampled_from([StepKind.KEYFRAME, StepKind.SPECULATIVE]))
    def forecast(self, commits, kind):
        OPS["count"] += 1
        before = snapshot(self.cache)
        forecast = self.cache.forecast(commits, 1, kind)
        assert snapshot(self.cache) == before  # computed without changing the cache
        if forecast is not None:
            assert forecast.plan.num_frames == 1 and forecast.plan.kind is kind
            # right so far: with no step pending there is nothing to guess
            self.fc = (forecast, commits, kind, "pending" if self.txn is not None else True)

    @rule()
    def reset(self):
        OPS["count"] += 1
        self.fc = None  # (a forecast from before a reset is of another generation)
        old = self.txn
        self.cache.reset()
        self.twin.reset()
        self.naive.committed, self.naive.pending, self.txn, self.twin_txn = [], [], None, None
        self.naive.pending_speculative = False
        if old is not None:  # a step begun before the reset can no longer land
            with pytest.raises(TransactionError):
                old.commit()
            self.done = old

    @rule(which=st.sampled_from(["commit", "rollback", "begin", "write", "bad_shape"]))
    def misuse(self, which):
        """Double commit, rollback with nothing pending, a second step, bad writes."""
        OPS["count"] += 1
        if which in ("begin", "bad_shape") and self.txn is None:
            return
        if which in ("commit", "rollback", "write") and self.done is None:
            return
        before = snapshot(self.cache)
        with pytest.raises(TransactionError):
            if which == "begin":
                self.cache.begin(1)
            elif which == "bad_shape":
                self.txn.write(0, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
            elif which == "write":
                self.done.write(0, torch.zeros(1, 1, 2), torch.zeros(1, 1, 2))
            else:
                getattr(self.done, which)()
        assert snapshot(self.cache) == before

    @invariant()
    def matches_naive_model(self):
        if not hasattr(self, "cache"):
            return
        self.cache.check_invariants()
        visible = self.naive.visible()
        layout = self.cache.current_layout()
        if layout is None:
            assert visible == []
            return
        assert layout.num_kv_tokens == len(visible)
        assert 1 <= int(layout.kv_last_page_len) <= self.cfg.page_size
        rows = layout.token_slots()
        for layer in range(NUM_LAYERS):
            flat = self.cache.storage.layer_tokens(layer)
            k_exp, v_exp = expected_kv(visible, layer)
            assert torch.equal(flat[rows], k_exp)
            assert torch.equal(flat[rows + self.cfg.page_size], v_exp)
        info = self.cache.info()
        assert info["frames_committed"] == len(self.naive.committed)
        assert info["frames_cached"] == min(len(self.naive.committed), self.cfg.scale_frames) + \
            min(max(0, len(self.naive.committed) - self.cfg.scale_frames), self.cfg.window)


def test_random_operations_match_naive_model():
    OPS["count"] = OPS["forecasts_right"] = 0
    run_state_machine_as_test(CacheMachine, settings=settings(
        max_examples=300, stateful_step_count=60, deadline=None, derandomize=True,
        database=None, suppress_health_check=list(HealthCheck)))
    assert OPS["count"] >= 10_000, OPS["count"]
    assert OPS["forecasts_right"] >= 100, OPS["forecasts_right"]  # the reuse was exercised

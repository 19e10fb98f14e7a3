"""The page table shared by all global layers, and its frame transactions. Pure Python.

Every global layer has the same layout at a step, so one table serves all of them: a step is
planned once and its page list is reused by each layer's kernel call. The visible order is

    | scale pages | window pages | special pages (the last one may be partial) |

so that FlashInfer's single ``last_page_len`` describes the only partial page.

A step is a transaction: ``begin(n, kind)`` checks everything first and raises before
mutating, then reserves the pages (a keyframe step also hides what its commit will evict, a
speculative step sees the un-evicted window: ``StepKind``); ``commit()`` runs the deferred
eviction, ``rollback()`` returns the reserved pages and restores every counter.

``forecast`` says what the next step's plan will be once the pending step is closed, without
touching the table (each stream computes its state after that close, no copy): a pipelined caller plans the next step's attention while the
current one still runs on the GPU, and keeps that work only if ``begin`` returns the same plan.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..config import CacheConfig, is_positive_int
from .errors import CacheError, TransactionError
from .page_pool import PagePool
from .patch_stream import PatchStream
from .special_stream import SpecialStream, ceil_div
from .step_kind import StepKind


@dataclass(frozen=True, slots=True)
class StepPlan:
    """What one step writes and what its queries see (plain ints, no tensors)."""

    generation: int  # reset counter when the step began; a reset invalidates the step
    kind: StepKind  # keyframe (sees the trimmed window) | speculative (sees the un-trimmed one)
    first_frame: int  # time index of the step's first frame (committed frames before it)
    num_frames: int  # frames in the step (>1 only for the scale-frame phase)
    patch_pages: tuple[int, ...]  # page of each new frame's patch tokens
    special_slots: tuple[tuple[int, int], ...]  # (page, offset) of each new special token
    page_indices: tuple[int, ...]  # visible pages, layout order
    last_page_len: int  # valid tokens in the last visible page, 1..page_size
    num_kv_tokens: int  # tokens the queries attend to


class PageTable:
    def __init__(self, config: CacheConfig,
                 pools: tuple[PagePool, PagePool] | None = None) -> None:
        """``pools``: (patch pool, special pool) over ids of a shared storage, sized by
        ``pool_sizes`` (``SharedKVPool.table_for``); None: ids ``[0, patch)`` and
        ``[patch, patch + special)`` of the cache's own storage."""
        self.config = config
        ps, nsp = config.page_size, config.num_special
        num_patch_pages, num_special_pages = self.pool_sizes(config)
        if pools is None:
            pools = PagePool(0, num_patch_pages), PagePool(num_patch_pages, num_special_pages)
        elif (pools[0].num_total, pools[1].num_total) != (num_patch_pages, num_special_pages):
            raise ValueError(f"pools of {pools[0].num_total} patch and {pools[1].num_total} "
                             f"special pages; this configuration needs {num_patch_pages} and "
                             f"{num_special_pages}")
        self.patch_pool, self.special_pool = pools
        self.patches = PatchStream(self.patch_pool, config.scale_frames, config.window)
        self.specials = SpecialStream(self.special_pool, ps, nsp, config.scale_frames,
                                      config.max_special_frames)
        self.generation = 0
        self.frames_seen = 0  # frames begun since reset (committed + rolled back + pending)
        self.frames_rolled_back = 0
        self._pending: StepPlan | None = None

    @staticmethod
    def pool_sizes(config: CacheConfig) -> tuple[int, int]:
        """(patch pages, initial special pages) of a table of ``config``."""
        ps, nsp = config.page_size, config.num_special
        # +1: the step's own page, taken before the commit releases the oldest window page
        num_patch_pages = config.scale_frames + config.window + 1
        if config.max_special_frames is None:
            return num_patch_pages, ceil_div(config.special_chunk_frames * nsp, ps) + 1
        return num_patch_pages, SpecialStream.pages_for_bound(
            ps, nsp, config.scale_frames, config.max_special_frames)

    # -- queries ---------------------------------------------------------------------------
    @property
    def num_pages(self) -> int:
        return self.patch_pool.num_total + self.special_pool.num_total

    @property
    def frames_committed(self) -> int:
        """Committed frames since reset: the time index of the next frame."""
        return self.specials.num_frames

    def special_pages_short(self, num_frames: int) -> int:
        """Special pages a step of ``num_frames`` frames lacks (grow the storage by that)."""
        self._check_can_begin(num_frames)
        return max(0, self.specials.pages_needed(num_frames) - self.special_pool.num_free)

    def add_special_pages(self, num_pages: int) -> None:
        """The storage grew by ``num_pages`` pages at the end; hand them to the special pool."""
        self.special_pool.grow(num_pages)

    def add_special_ids(self, ids) -> None:
        """Hand the special pool these ids of a shared storage (granted by its ledger)."""
        self.special_pool.add_ids(ids)

    def page_ids(self) -> list[int]:
        """Every id the table's pools own (patch, then special)."""
        return self.patch_pool.ids() + self.special_pool.ids()

    def visible(self) -> tuple[list[int], int, int]:
        """(pages, last_page_len, kv tokens) of the current state, a pending step included."""
        special_pages, last_len = self.specials.visible()
        pages = self.patches.visible_pages() + special_pages
        if not special_pages:  # nothing committed or pending
            return [], 0, 0
        return pages, last_len, (len(pages) - 1) * self.config.page_size + last_len

    def forecast(self, pending_commits: bool, num_frames: int = 1,
                 kind: StepKind | str = StepKind.KEYFRAME) -> StepPlan | None:
        """The plan ``begin(num_frames, kind)`` would return once the pending step (if any)
        is committed (``pending_commits``) or rolled back. Computed from the streams as they
        would be after that close, without changing (or copying) the table. None when that
        step could not begin as things stand (it needs more special pages first, or it
        would be refused)."""
        kind = StepKind.parse(kind)
        if not is_positive_int(num_frames):
            return None
        pending = self._pending
        close = None if pending is None else "commit" if pending_commits else "rollback"
        first = self.frames_committed + (pending.num_frames if close == "commit" else 0)
        hide = kind is StepKind.KEYFRAME
        try:
            patch_pages, patch_visible = self.patches.forecast(close, first, num_frames, hide)
            specials = self.specials.forecast(close, num_frames, hide)
        except CacheError:
            return None
        if specials is None:
            return None
        special_slots, special_visible, last_len = specials
        pages = patch_visible + special_visible
        return StepPlan(self.generation, kind, first, num_frames, tuple(patch_pages),
                        tuple(special_slots), tuple(pages), last_len,
                        (len(pages) - 1) * self.config.page_size + last_len)

    # -- transaction -----------------------------------------------------------------------
    def begin(self, num_frames: int, kind: StepKind | str = StepKind.KEYFRAME) -> StepPlan:
        kind = StepKind.parse(kind)
        self._check_can_begin(num_frames)
        if self.specials.pages_needed(num_frames) > self.special_pool.num_free:
            raise CacheError("special pages must be added before this step (internal error)")
        first = self.frames_committed
        hide = kind is StepKind.KEYFRAME
        patch_pages = self.patches.append(first, num_frames, hide_evicted=hide)
        special_slots = self.specials.append(num_frames, hide_released=hide)
        pages, last_len, num_kv = self.visible()
        self.frames_seen += num_frames
        self._pending = StepPlan(self.generation, kind, first, num_frames, tuple(patch_pages),
                                 tuple(special_slots), tuple(pages), last_len, num_kv)
        return self._pending

    def commit(self, generation: int) -> None:
        self._check_pending(generation, "commit")
        self.patches.commit()
        self.specials.commit()
        self._pending = None

    def rollback(self, generation: int) -> None:
        self._check_pending(generation, "roll back")
        self.patches.rollback()
        self.specials.rollback()
        self.frames_rolled_back += self._pending.num_frames
        self._pending = None

    def reset(self) -> None:
        """Forget every frame; a pending step is invalidated. Capacity is kept."""
        self.patches.reset()
        self.specials.reset()
        self.patch_pool.reset()
        self.special_pool.reset()
        self.generation += 1
        self.frames_seen = 0
        self.frames_rolled_back = 0
        self._pending = None

    def stats(self) -> dict[str, int]:
        """Counts of the committed state (a pending step is not counted)."""
        scale, window = self.patches.num_scale, self.patches.num_window
        special_pages, special_tokens = self.specials.committed_usage()
        return {
            "frames_seen": self.frames_seen,
            "frames_committed": self.frames_committed,
            "frames_rolled_back": self.frames_rolled_back,
            "frames_cached": scale + window,
            "scale_frames": scale,
            "window_frames": window,
            "special_frames": ceil_div(special_tokens, self.config.num_special),
            "special_tokens": special_tokens,
            "patch_pages_used": scale + window,
            "patch_pages_total": self.patch_pool.num_total,
            "special_pages_used": special_pages,
            "special_pages_total": self.special_pool.num_total,
            "page_size": self.config.page_size,
            "tokens_visible": (scale + window) * self.config.page_size + special_tokens,
            "step_pending": int(self._pending is not None),
        }

    # -- snapshot --------------------------------------------------------------------------
    def state_dict(self) -> dict:
        """Plain data of the committed state (frames, chunks, counters; no page ids).
        ``TransactionError`` while a step is pending."""
        if self._pending is not None:
            raise TransactionError(f"frame {self._pending.first_frame} is pending: a snapshot "
                                   "is taken between steps")
        return {"patches": self.patches.state_dict(), "specials": self.specials.state_dict(),
                "special_pages_total": self.special_pool.num_total,
                "frames_seen": self.frames_seen, "frames_rolled_back": self.frames_rolled_back}

    def load_state_dict(self, state: dict) -> tuple[list[int], list[int]]:
        """Load ``state`` into this table, reset first (the special pool must already hold
        ``state["special_pages_total"]`` pages: ``add_special_pages``). Returns the pages
        taken, logical order: (patch pages: scale then window, special pages: pinned then
        live), for the storage to be filled in that order."""
        self.reset()
        try:
            patch = self.patches.load_state_dict(state["patches"])
            special = self.specials.load_state_dict(state["specials"])
            self.frames_seen = int(state["frames_seen"])
            self.frames_rolled_back = int(state["frames_rolled_back"])
            self.check_invariants()
        except Exception:
            self.reset()
            raise
        return patch, special

    # -- checks ----------------------------------------------------------------------------
    def _check_can_begin(self, num_frames: int) -> None:
        if not is_positive_int(num_frames):
            raise CacheError(f"a step needs at least one frame, got {num_frames!r}")
        if self._pending is not None:
            raise TransactionError(
                f"frame {self._pending.first_frame} is still pending: commit() or rollback() it "
                "before beginning the next step")
        self.patches.check_append(num_frames)
        self.specials.pages_needed(num_frames)

    def _check_pending(self, generation: int, verb: str) -> None:
        if generation != self.generation:
            raise TransactionError(f"cannot {verb}: the cache was reset after this step began")
        if self._pending is None:
            raise TransactionError(f"cannot {verb}: no step is pending (already committed or "
                                   "rolled back?)")

    def check_invariants(self) -> None:
        """No page in two places; free + used = total per pool; 1 <= last_page_len <= size."""
        for pool, owned in ((self.patch_pool, self.patches.all_pages()),
                            (self.special_pool, self.specials.all_pages())):
            used, free = pool.used_ids(), pool.free_ids()
            if len(owned) != len(set(owned)):
                raise AssertionError(f"a page is owned twice: {sorted(owned)}")
            if set(owned) != used:
                raise AssertionError(f"owned pages {sorted(owned)} != used {sorted(used)}")
            if len(free) != len(set(free)) or used & set(free):
                raise AssertionError("a page is both free and used, or free twice")
            if len(free) + len(used) != pool.num_total:
                raise AssertionError("free + used != total")
            if not used | set(free) <= set(pool.ids()):
                raise AssertionError("a page id outside its pool's range")
        self.patches.check_invariants()
        self.specials.check_invariants()

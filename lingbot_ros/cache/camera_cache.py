"""CameraKVCache: the camera head's own KV cache (a torch door), with frame transactions.

The camera head refines the pose ``num_iterations`` times; each iteration runs the same
``num_layers`` trunk blocks and keeps its own keys and values, one token per frame:

    data  (iterations, layers, 2, capacity, heads, head_dim)  camera head's dtype (fp32, bf16)

Frames ``[0, num_frames)`` are committed. A step begins ``n`` frames, writes them to slots
``[num_frames, num_frames + n)`` and attends over ``[0, num_frames + n)``: so the scale
frames of phase 1 attend to each other both ways, and later frames see every cached frame
plus themselves. ``commit()`` keeps them; ``rollback()`` only forgets them (slots past
``num_frames`` are scratch), so a non-keyframe leaves the cache exactly as before. Like the
reference, nothing is ever evicted. Capacity grows in chunks of ``chunk_frames`` (one copy per
chunk, never a concatenation per frame).

    cache = CameraKVCache(num_iterations=4, num_layers=4, num_heads=16, head_dim=128)
    txn = cache.begin(1)
    txn.write(it, layer, k, v)          # (n, heads, head_dim) each
    k_all, v_all = txn.visible(it, layer)
    txn.commit()                        # or txn.rollback(): exactly once

``shared=SharedCameraPool(...)``: the stream's frames live in its block of one tensor that
several streams share (``camera_pool.py``); capacity then grows with the pool's chunks.
"""
from __future__ import annotations

import weakref

import torch

from ..config import check_positive_int, is_positive_int

from .camera_pool import SharedCameraPool
from .errors import CacheError, TransactionError


class CameraKVCache:
    def __init__(self, num_iterations: int, num_layers: int, num_heads: int, head_dim: int,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 chunk_frames: int = 256, shared: SharedCameraPool | None = None) -> None:
        for name, value in (("num_iterations", num_iterations), ("num_layers", num_layers),
                            ("num_heads", num_heads), ("head_dim", head_dim),
                            ("chunk_frames", chunk_frames)):
            check_positive_int(name, value)
        self.num_iterations = num_iterations
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.chunk_frames = chunk_frames
        self.device = torch.device(device)
        self.dtype = dtype
        self.num_frames = 0  # committed frames since reset
        self.generation = 0  # reset counter; a reset invalidates a pending step
        self.shared = shared
        self._data: torch.Tensor | None = None
        if shared is None:
            self._data = self._allocate(chunk_frames)
            self._slot = 0
        else:
            dims = dict(num_iterations=num_iterations, num_layers=num_layers,
                        num_heads=num_heads, head_dim=head_dim)
            self._slot = shared.add_stream(dims, self.device, dtype)
            # a dropped cache (a replaced runner: a restore, a new size) gives its block back
            weakref.finalize(self, shared.release_stream, self._slot)
        self._txn: CameraCacheTxn | None = None

    @property
    def data(self) -> torch.Tensor:
        """(iterations, layers, 2, capacity, heads, head_dim): the own tensor, or this
        stream's block of the shared pool (a view)."""
        return self._data if self.shared is None else self.shared.block(self._slot)

    @property
    def slot(self) -> int:
        """The stream's block in a shared pool (0 alone)."""
        return self._slot

    @property
    def capacity(self) -> int:
        """Frames the storage holds before it grows."""
        return self.data.shape[3]

    @property
    def pending(self) -> "CameraCacheTxn | None":
        return self._txn

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def begin(self, num_frames: int = 1) -> "CameraCacheTxn":
        """Start a speculative step of ``num_frames`` frames; grows the storage if needed.

        Raises ``TransactionError`` if a step is pending and ``CacheError`` for a bad count;
        the cache is unchanged in both cases.
        """
        if not is_positive_int(num_frames):
            raise CacheError(f"a step needs at least one frame, got {num_frames!r}")
        if self._txn is not None:
            raise TransactionError("a camera-cache step is still pending: commit() or rollback() "
                                   "it before beginning the next one")
        need = self.num_frames + num_frames
        if need > self.capacity:
            self._grow(-(-need // self.chunk_frames) * self.chunk_frames)
        self._txn = CameraCacheTxn(self, self.num_frames, num_frames, self.generation)
        return self._txn

    def keys_values(self, iteration: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Committed (num_frames, heads, head_dim) K and V views of one iteration and layer."""
        kv = self.data[iteration, layer]
        return kv[0, :self.num_frames], kv[1, :self.num_frames]

    def reset(self) -> None:
        """Forget every frame (a pending step is invalidated); the allocation is kept."""
        self.num_frames = 0
        self.generation += 1
        self._txn = None

    def state_dict(self, to_host: bool = True) -> tuple[dict, torch.Tensor]:
        """(plain data, tensor) of the committed frames between steps: the frame count and
        their keys and values, (iterations, layers, 2, frames, heads, head_dim), copied to
        the host in the cache's dtype (``to_host=False``: a copy on the cache's device).
        ``TransactionError`` while a step is pending."""
        if self._txn is not None:
            raise TransactionError("a camera-cache step is pending: a snapshot is taken "
                                   "between steps")
        frames = self.data[:, :, :, :self.num_frames]
        return {"num_frames": self.num_frames}, frames.cpu() if to_host else frames.clone()

    def load_state_dict(self, state: dict, data: torch.Tensor) -> None:
        """Forget everything, then hold the frames of ``state_dict``'s output (the storage
        grows in whole chunks as needed). ValueError if they do not fit this cache."""
        n = int(state["num_frames"])
        want = (self.num_iterations, self.num_layers, 2, n, self.num_heads, self.head_dim)
        if tuple(data.shape) != want:
            raise ValueError(f"camera-cache state has shape {tuple(data.shape)}, this cache "
                             f"expects {want}")
        if data.dtype != self.dtype:
            raise ValueError(f"camera-cache state is {data.dtype}, this cache holds {self.dtype}")
        self.reset()
        if n > self.capacity:
            if self.shared is None:
                self._data = self._allocate(-(-n // self.chunk_frames) * self.chunk_frames)
            else:
                self.shared.grow(n)
        self.data[:, :, :, :n].copy_(data)
        self.num_frames = n

    def info(self) -> dict:
        return {"frames_cached": self.num_frames, "capacity_frames": self.capacity,
                "bytes_reserved": self.nbytes, "step_pending": int(self._txn is not None)}

    def _allocate(self, frames: int) -> torch.Tensor:
        return torch.zeros((self.num_iterations, self.num_layers, 2, frames, self.num_heads,
                            self.head_dim), dtype=self.dtype, device=self.device)

    def _grow(self, frames: int) -> None:
        if self.shared is not None:
            self.shared.grow(frames)
            return
        data = self._allocate(frames)
        data[:, :, :, :self.num_frames].copy_(self.data[:, :, :, :self.num_frames])
        self._data = data

    def _finish(self, txn: "CameraCacheTxn", commit: bool) -> None:
        if txn.generation != self.generation:
            raise TransactionError("the camera cache was reset after this step began")
        if commit:
            self.num_frames += txn.num_frames
        self._txn = None


class CameraCacheTxn:
    """One speculative step of the camera cache: write, attend, then commit or roll back."""

    def __init__(self, cache: CameraKVCache, first_frame: int, num_frames: int,
                 generation: int) -> None:
        self._cache = cache
        self.first_frame = first_frame  # slot of the step's first frame
        self.num_frames = num_frames
        self.generation = generation
        self.state = "pending"

    def write(self, iteration: int, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the step's K and V, each (num_frames, heads, head_dim), of one block."""
        self._check_pending("write")
        c = self._cache
        shape = (self.num_frames, c.num_heads, c.head_dim)
        for name, t in (("k", k), ("v", v)):
            if tuple(t.shape) != shape:
                raise TransactionError(f"{name} has shape {tuple(t.shape)}, the step expects "
                                       f"{shape}")
        if not (0 <= iteration < c.num_iterations and 0 <= layer < c.num_layers):
            raise TransactionError(f"(iteration {iteration}, layer {layer}) outside "
                                   f"[0, {c.num_iterations}) x [0, {c.num_layers})")
        kv = c.data[iteration, layer]  # (2, capacity, heads, head_dim)
        end = self.first_frame + self.num_frames
        kv[0, self.first_frame:end].copy_(k)
        kv[1, self.first_frame:end].copy_(v)

    def visible(self, iteration: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V the step's queries see: committed frames, then the step's own.

        Returns:
            Two (first_frame + num_frames, heads, head_dim) views (valid until commit/rollback).
        """
        self._check_pending("read")
        kv = self._cache.data[iteration, layer]
        end = self.first_frame + self.num_frames
        return kv[0, :end], kv[1, :end]

    @property
    def visible_mask(self) -> None:
        """Which rows of ``visible`` to attend to: all of them (a graph step's differs)."""
        return None

    def commit(self) -> None:
        """Keep the step's frames."""
        self._check_pending("commit")
        self._cache._finish(self, commit=True)
        self.state = "committed"

    def rollback(self) -> None:
        """Forget the step's frames; committed contents and counters are untouched."""
        self._check_pending("roll back")
        self._cache._finish(self, commit=False)
        self.state = "rolled back"

    def _check_pending(self, verb: str) -> None:
        if self.state != "pending":
            raise TransactionError(f"cannot {verb}: this camera-cache step is already {self.state}")
        if self.generation != self._cache.generation:
            self.state = "invalidated by reset"
            raise TransactionError(f"cannot {verb}: the camera cache was reset after this step "
                                   "began")

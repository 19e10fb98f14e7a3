"""SharedCameraPool: one camera-head KV tensor whose rows several streams' caches share.

    data  (iterations, layers, 2, streams * capacity, heads, head_dim)

Stream ``s`` owns rows ``[s * capacity, (s + 1) * capacity)``: a batched step reaches any
stream's frames through one tensor and a row offset (``row_offset``). A stream's
``CameraKVCache(..., shared=pool)`` sees only its own block (``block``), so its begin, commit,
rollback, reset and restore never touch another stream's rows. Capacity is the same for every
stream and grows in whole chunks for all of them at once (one reallocation, every block's
contents kept; tiny: one token per frame).
"""
from __future__ import annotations

import torch

from ..config import check_positive_int


class SharedCameraPool:
    def __init__(self, num_iterations: int, num_layers: int, num_heads: int, head_dim: int,
                 device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32,
                 chunk_frames: int = 256) -> None:
        for name, value in (("num_iterations", num_iterations), ("num_layers", num_layers),
                            ("num_heads", num_heads), ("head_dim", head_dim),
                            ("chunk_frames", chunk_frames)):
            check_positive_int(name, value)
        self.dims = dict(num_iterations=num_iterations, num_layers=num_layers,
                         num_heads=num_heads, head_dim=head_dim)
        self.device = torch.device(device)
        self.dtype = dtype
        self.chunk_frames = chunk_frames
        self.capacity = chunk_frames  # frames per stream
        self.num_streams = 0  # blocks in the tensor (released ones included)
        self._free: list[int] = []  # released blocks, reused by the next stream first
        self.data = self._allocate(0, self.capacity)

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()

    def add_stream(self, dims: dict, device: torch.device, dtype: torch.dtype) -> int:
        """A new stream's block (zeros); returns its index. ValueError if its dimensions,
        device or dtype differ from the pool's."""
        for name, value in dims.items():
            if self.dims[name] != value:
                raise ValueError(f"a camera cache with {name}={value} cannot share a pool of "
                                 f"{name}={self.dims[name]}")
        if (torch.device(device), dtype) != (self.device, self.dtype):
            raise ValueError(f"a camera cache of {dtype} on {device} cannot share a pool of "
                             f"{self.dtype} on {self.device}")
        if self._free:  # a released block: zeroed, as a new one
            slot = self._free.pop(0)
            self.block(slot).zero_()
            return slot
        self._reallocate(self.num_streams + 1, self.capacity)
        self.num_streams += 1
        return self.num_streams - 1

    @property
    def num_live(self) -> int:
        """Blocks owned by a stream (not released)."""
        return self.num_streams - len(self._free)

    def release_stream(self, slot: int) -> None:
        """Stream ``slot``'s cache is gone: its block goes to the next ``add_stream`` (the
        tensor keeps its size). Called when a stream's ``CameraKVCache`` is dropped."""
        if not 0 <= slot < self.num_streams or slot in self._free:
            raise ValueError(f"camera pool block {slot} is not in use")
        self._free.append(slot)

    def block(self, slot: int) -> torch.Tensor:
        """(iterations, layers, 2, capacity, heads, head_dim) view of stream ``slot``'s rows."""
        start = slot * self.capacity
        return self.data[:, :, :, start:start + self.capacity]

    def row_offset(self, slot: int) -> int:
        """Row of stream ``slot``'s frame 0 in the pool's frame axis."""
        return slot * self.capacity

    def grow(self, frames: int) -> None:
        """Capacity of at least ``frames`` per stream, in whole chunks (contents kept)."""
        if frames > self.capacity:
            chunk = self.chunk_frames
            self._reallocate(self.num_streams, -(-frames // chunk) * chunk)

    def _allocate(self, streams: int, capacity: int) -> torch.Tensor:
        d = self.dims
        return torch.zeros((d["num_iterations"], d["num_layers"], 2, streams * capacity,
                            d["num_heads"], d["head_dim"]), dtype=self.dtype, device=self.device)

    def _reallocate(self, streams: int, capacity: int) -> None:
        data = self._allocate(streams, capacity)
        old = self.capacity
        for s in range(self.num_streams):
            data[:, :, :, s * capacity:s * capacity + old].copy_(self.block(s))
        self.data, self.capacity = data, capacity

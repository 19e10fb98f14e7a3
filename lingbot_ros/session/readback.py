"""HostReadback: a step's outputs to the host with one wait, not one sync per tensor.

``tensor.cpu()`` on a CUDA tensor waits for the whole stream and copies through pageable
memory; a frame's results were six of those. Here the copies go into pinned buffers (kept
from frame to frame) as asynchronous work queued right behind the step, and one CUDA event
says when all of them have landed: the host is free until it needs the numbers, and then
waits once.

    readback = HostReadback()
    readback.start({"pose_enc": pose_enc, "depth": depth})  # queued behind the step
    ...                                                     # the host does other work
    arrays = readback.wait()                                # numpy views, see below

One frame at a time: ``start`` again only after ``wait``. There are two sets of buffers,
used in turn, so the arrays ``wait`` returns stay valid until the second ``start`` after it:
a caller may queue the next frame's readback and only then copy out what it keeps (the
session builds frame t's result after frame t+1's step is queued). On the CPU ``start`` only
keeps references and ``wait`` gives views of the tensors themselves.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch


class HostReadback:
    def __init__(self) -> None:
        self._buffer_sets: tuple[dict, dict] = ({}, {})  # name -> pinned tensor, used in turn
        self._next_set = 0
        self._pending: Optional[dict[str, torch.Tensor]] = None
        self._event: Optional[torch.cuda.Event] = None

    @property
    def pending(self) -> bool:
        """``start`` was called and ``wait`` not yet."""
        return self._pending is not None

    def start(self, tensors: dict[str, torch.Tensor]) -> None:
        """Queue the copies of ``tensors`` (any device; bf16 is read as float32) on the
        current stream. RuntimeError if the previous readback was not waited for."""
        if self._pending is not None:
            raise RuntimeError("HostReadback.start: the previous readback was not waited for")
        buffers = self._buffer_sets[self._next_set]
        pending, cuda = {}, False
        for name, tensor in tensors.items():
            if tensor.dtype == torch.bfloat16:
                tensor = tensor.float()  # numpy has no bfloat16
            if tensor.device.type != "cuda":
                pending[name] = tensor.detach()
                continue
            buf = buffers.get(name)
            if buf is None or buf.shape != tensor.shape or buf.dtype != tensor.dtype:
                buf = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)
                buffers[name] = buf
            buf.copy_(tensor, non_blocking=True)
            pending[name] = buf
            cuda = True
        self._event = None
        if cuda:
            self._event = torch.cuda.Event()
            self._event.record()
            self._next_set ^= 1  # the next frame copies into the other set
        self._pending = pending

    def ready(self) -> bool:
        """Whether ``wait`` would return at once."""
        return self._event is None or self._event.query()

    def wait(self) -> dict[str, np.ndarray]:
        """Block until the copies have landed. Numpy views of the buffers, valid until the
        second ``start`` after this call: copy what outlives that."""
        if self._pending is None:
            raise RuntimeError("HostReadback.wait: nothing was started")
        pending, self._pending = self._pending, None
        if self._event is not None:
            self._event.synchronize()
            self._event = None
        return {name: t.numpy() for name, t in pending.items()}

    def discard(self) -> None:
        """Forget a started readback (a reset); the buffers are kept for the next frame."""
        if self._event is not None:
            self._event.synchronize()  # the copies still target the buffers
        self._pending, self._event = None, None

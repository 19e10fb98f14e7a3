"""BatchGraphs: a batched step of B streams (one frame each) replayed as a CUDA graph.

The batched counterpart of ``graph_step.GraphedStep``: one graph per (B, with_depth), captured
the first time it is needed and again only when a captured address moves (the shared KV
storage or the shared camera pool grew, a stream joined the camera pool, the input size
changed). What changes from tick to tick reaches the graph through static device buffers,
refilled before each replay:

    image        (B, 3, H, W) float32  stream b's preprocessed frame in row b
    time         (B,) int64            each stream's 3D-RoPE time index
    k/v rows     (B*T,) int64 each     where each stream's K/V go in the shared storage
    camera base  (B,) int64            the first row of stream b's block in the camera pool
    camera row   (B,) int64            the row of stream b's step in that block

The attention plan (one request per stream; FlashInfer in CUDA-graph mode with buffers for
B x S requests, one backend per B) runs on the host before each replay. The camera head
reads the whole camera pool with a (B, rows) mask computed in the graph from the camera
buffers: stream b's query sees rows ``[base_b, row_b]``, its own committed frames and its
step. The special tokens are a streaming frame's (every batched frame is one); the rotation
comes from the time buffer.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from ..cache import PagedKVLayout, SharedCameraPool
from ..model import UNFUSED, FusedKernels, StepContext
from ..model.rope import VideoRope
from .graph_step import GraphCaptureError
from .stats import HostLaps
from .step_txn import StepTxn


class _BatchSlots:
    """KV writer of a graphed batched step: the rows come from static buffers."""

    def __init__(self, storage, k_rows: torch.Tensor, v_rows: torch.Tensor) -> None:
        self._storage, self._k_rows, self._v_rows = storage, k_rows, v_rows

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        self._storage.write(layer, self._k_rows, self._v_rows, k, v)

    def destination(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return self._storage.layer_tokens(layer), self._k_rows, self._v_rows


class _StaticBatchCameraTxn:
    """Camera access of a graphed batched step: rows from buffers, masked whole-pool reads."""

    def __init__(self, pool: SharedCameraPool, base: torch.Tensor, row: torch.Tensor) -> None:
        self._pool, self._row = pool, row
        rows = torch.arange(pool.data.shape[3], device=row.device)[None, :]  # (1, rows)
        self.visible_mask = (rows >= base[:, None]) & (rows <= row[:, None])  # (B, rows)

    def write(self, iteration: int, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        kv = self._pool.data[iteration, layer]  # (2, rows, heads, head_dim)
        kv[0].index_copy_(0, self._row, k)
        kv[1].index_copy_(0, self._row, v)

    def visible(self, iteration: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        kv = self._pool.data[iteration, layer]
        return kv[0], kv[1]  # every stream's rows; the mask keeps each query to its own


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    outputs: dict  # static output tensors the replay refreshes
    key: tuple  # the addresses and sizes the graph baked in


@dataclass
class _Buffers:
    image: torch.Tensor  # (B, 3, H, W)
    time: torch.Tensor  # (B,)
    k_rows: torch.Tensor  # (B*T,)
    v_rows: torch.Tensor
    camera_base: torch.Tensor  # (B,)
    camera_row: torch.Tensor  # (B,)


class BatchGraphs:
    """Batched single-frame steps over shared pools, as CUDA-graph replays per batch size."""

    def __init__(self, model, shared, backend_for: Callable[[int, int], object],
                 fused: FusedKernels = UNFUSED, capture: bool = True,
                 laps: Optional[HostLaps] = None) -> None:
        """Args:
            shared: the engine's ``SharedStreams`` (its KV pool and camera pool).
            backend_for: ``(B, S)`` -> the attention backend of batch size B with S
                split-KV parts (flashinfer built for CUDA graphs, ``graph_requests=B``),
                made once per (B, S) when first needed.
            capture: False runs the graph's body directly every step, through the same
                static buffers (no CUDA needed): how the CPU tests check that body.
        """
        device = shared.kv_pool.storage.device
        if capture and device.type != "cuda":
            raise RuntimeError(f"CUDA graphs need the pools on a CUDA device, not {device}")
        self.model = model
        self.shared = shared
        self.backend_for = backend_for
        self.fused = fused
        self.capture = capture
        self.laps = laps if laps is not None else HostLaps()
        self._backends: dict[tuple[int, int], object] = {}
        self._buffers: dict[int, _Buffers] = {}
        self._graphs: dict[tuple[int, int, bool], _Captured] = {}
        self._pool = torch.cuda.graph_pool_handle() if capture else None  # shared by captures
        self.captures: dict[int, int] = {}  # graphs captured per batch size
        self.steps: dict[int, int] = {}  # steps run through the graph (or its body) per B

    def backend(self, batch: int, splits: int):
        """The attention backend of batch size ``batch`` with ``splits`` split-KV parts."""
        if (batch, splits) not in self._backends:
            self._backends[(batch, splits)] = self.backend_for(batch, splits)
        return self._backends[(batch, splits)]

    @torch.no_grad()
    def run(self, images: torch.Tensor, runners: list, txns: list[StepTxn],
            with_depth: bool = True, splits: int = 1) -> dict:
        """The batched step's outputs (the ``StepOutputs`` fields, B rows) for the pending,
        checked single-frame steps ``txns`` of ``runners``; ``splits``: split-KV parts the
        shortest stream's pages allow. The caller closes the transactions."""
        batch = len(txns)
        self.steps[batch] = self.steps.get(batch, 0) + 1
        self._load(images, runners, txns)
        self.laps.lap("load")
        self.backend(batch, splits).plan(
            PagedKVLayout.concat([t.frame_txn.layout for t in txns]))
        self.laps.lap("plan")
        if not self.capture:
            return self._body(batch, splits, with_depth)()
        captured = self._graph_for(batch, splits, with_depth)
        captured.graph.replay()
        self.laps.lap("launch")
        # Copies: the next replay overwrites the static outputs; results outlive it.
        outputs = {k: v.clone() for k, v in captured.outputs.items()}
        self.laps.lap("copy_outputs")
        return outputs

    def _load(self, images: torch.Tensor, runners: list, txns: list[StepTxn]) -> None:
        batch, device = len(txns), images.device
        tokens = txns[0].frame_txn.layout.num_query_tokens
        buffers = self._buffers.get(batch)
        if buffers is None or buffers.image.shape != images.shape:
            zeros = dict(dtype=torch.int64, device=device)
            buffers = _Buffers(torch.zeros(images.shape, dtype=torch.float32, device=device),
                               torch.zeros(batch, **zeros), torch.zeros(batch * tokens, **zeros),
                               torch.zeros(batch * tokens, **zeros), torch.zeros(batch, **zeros),
                               torch.zeros(batch, **zeros))
            self._buffers[batch] = buffers
        pool = self.shared.camera_pool
        base = [pool.row_offset(r.camera_cache.slot) for r in runners]
        host = torch.tensor([[t.first_frame for t in txns], base,
                             [b + t.camera_txn.first_frame for b, t in zip(base, txns)]],
                            dtype=torch.int64)
        buffers.image.copy_(images)
        buffers.time.copy_(host[0])
        buffers.camera_base.copy_(host[1])
        buffers.camera_row.copy_(host[2])
        buffers.k_rows.copy_(torch.cat([t.frame_txn.write_rows[0] for t in txns]))
        buffers.v_rows.copy_(torch.cat([t.frame_txn.write_rows[1] for t in txns]))

    def _key(self, batch: int) -> tuple:
        pool = self.shared.camera_pool
        return (self.shared.kv_pool.storage.data.data_ptr(), pool.data.data_ptr(),
                tuple(pool.data.shape), tuple(self._buffers[batch].image.shape))

    def _graph_for(self, batch: int, splits: int, with_depth: bool) -> _Captured:
        which = (batch, splits, with_depth)
        captured = self._graphs.get(which)
        if captured is not None and captured.key == self._key(batch):
            return captured
        self._graphs.pop(which, None)  # its memory returns to the pool first
        try:
            captured = self.record(batch, splits, with_depth)
        except Exception as exc:
            raise GraphCaptureError(f"CUDA-graph capture failed: {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
        self._graphs[which] = captured
        return captured

    def _body(self, batch: int, splits: int, with_depth: bool):
        """The step as a function of the static buffers only: what the graph captures."""
        model, buffers = self.model, self._buffers[batch]
        height, width = buffers.image.shape[2:]
        grid_hw = model.config.patch_grid((height, width))
        agg = model.config.aggregator
        writer = _BatchSlots(self.shared.kv_pool.storage, buffers.k_rows, buffers.v_rows)
        backend = self.backend(batch, splits)
        streaming = (1,) * batch  # the special-token variants of any streaming frame

        def run() -> dict:
            rope = VideoRope.for_time_indices(buffers.time, grid_hw, agg.num_special_tokens,
                                              agg.video_rope_dims, agg.video_rope_theta)
            camera = _StaticBatchCameraTxn(self.shared.camera_pool, buffers.camera_base,
                                           buffers.camera_row)
            return model(buffers.image, StepContext(1, 1, rope, writer, camera, backend,
                                                    self.fused, with_depth,
                                                    frame_indices=streaming))
        return run

    def record(self, batch: int, splits: int, with_depth: bool) -> _Captured:
        """Capture batch size ``batch``'s graph; an exception is a failed capture."""
        run = self._body(batch, splits, with_depth)
        side = torch.cuda.Stream()  # warm-up on a side stream, as CUDA graphs require
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                run()  # each run writes this step's own K/V again: idempotent
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            outputs = run()
        self.captures[batch] = self.captures.get(batch, 0) + 1
        return _Captured(graph, outputs, self._key(batch))

"""GraphedStep: the streaming (one-frame) step replayed as a CUDA graph. The session's fast path.

Eager, one frame issues ~3,000 kernels from Python and the host, not the GPU, sets the pace.
Here the whole step (DINO, 24 frame + 24 global blocks with their cache writes and paged
attention, camera head with its cache, depth head) is captured once and replayed per frame.
What changes from frame to frame reaches the graph through static device buffers, refilled
before each replay:

    image       (1, 3, H, W) float32   the preprocessed frame
    time        (1,) int64             3D-RoPE time index = committed frames before the step
    k/v rows    (T,) int64 each        where the step's K/V go in the paged storage
    camera slot (1,) int64             the step's row in the camera-head cache

The attention plan (FlashInfer in CUDA-graph mode: index buffers of fixed size) runs on the
host before the replay, once per frame, exactly as in eager mode; the camera-head attention
spans the cache's whole capacity with a mask that the graph computes from the camera slot.
Bookkeeping stays outside: the stream's ``StreamRunner`` opens and closes the step's
transaction exactly as for an eager step and hands it in; this class only loads the buffers,
plans and replays. The attention plan covers any page count up to the graph backend's fixed
index buffers, so a speculative step (which sees one window frame more than a keyframe) needs
no recapture.

A graph is captured per ``with_depth`` the first time it is needed, and again only when a
captured address moves (the KV pool or the camera cache grew, or the input size changed).
Phase-1 steps (several frames) stay eager: they are rare and their size differs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import torch

from ..attention import AttentionBackend
from ..cache import CameraKVCache, PagedKVCache
from ..model import UNFUSED, FusedKernels, StepContext
from ..model.rope import VideoRope
from .stats import HostLaps
from .step_txn import StepTxn


class GraphCaptureError(RuntimeError):
    """Capturing the step failed; the step was rolled back and eager steps still work."""


class _StaticSlots:
    """KV writer of a graphed step: the rows come from static buffers, not the transaction."""

    def __init__(self, cache: PagedKVCache, k_rows: torch.Tensor, v_rows: torch.Tensor) -> None:
        self._cache, self._k_rows, self._v_rows = cache, k_rows, v_rows

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        self._cache.storage.write(layer, self._k_rows, self._v_rows, k, v)

    def destination(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(flat K/V rows of the layer, K rows, V rows): a fused kernel writes K/V itself
        (``KVWriter``)."""
        return self._cache.storage.layer_tokens(layer), self._k_rows, self._v_rows


class _StaticCameraTxn:
    """Camera-cache access of a graphed step: slot from a buffer, masked full-capacity reads."""

    def __init__(self, cache: CameraKVCache, slot: torch.Tensor) -> None:
        self._cache, self._slot = cache, slot
        rows = torch.arange(cache.capacity, device=slot.device)
        self.visible_mask = rows <= slot  # (capacity,) committed frames + the step's frame

    def write(self, iteration: int, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        kv = self._cache.data[iteration, layer]  # (2, capacity, heads, head_dim)
        kv[0].index_copy_(0, self._slot, k)
        kv[1].index_copy_(0, self._slot, v)

    def visible(self, iteration: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        kv = self._cache.data[iteration, layer]
        return kv[0], kv[1]  # (capacity, heads, head_dim); rows past the slot are masked


@dataclass
class _Captured:
    graph: torch.cuda.CUDAGraph
    outputs: dict  # static output tensors the replay refreshes
    key: tuple  # the addresses and sizes the graph baked in


class GraphedStep:
    """Single-frame streaming steps of one stream's caches, as CUDA-graph replays."""

    def __init__(self, model, kv_cache: PagedKVCache, camera_cache: CameraKVCache,
                 backend: AttentionBackend, num_scale_frames: int,
                 fused: FusedKernels = UNFUSED,
                 capture: bool = True, laps: Optional[HostLaps] = None) -> None:
        """Args:
            backend: attention backend the captured step runs (flashinfer built for CUDA
                graphs, ``graph_query_tokens`` = tokens per frame).
            fused: the stream's fused kernels (``StepContext.fused``).
            capture: False runs the graph's body directly every step, through the same
                static buffers (no CUDA needed): how the CPU tests check that body.
            laps: the stream's host-time laps (load, plan, launch, copy_outputs).
        """
        device = kv_cache.storage.device
        if capture and device.type != "cuda":
            raise RuntimeError(f"CUDA graphs need the caches on a CUDA device, not {device}")
        self.model = model
        self.kv_cache = kv_cache
        self.camera_cache = camera_cache
        self.backend = backend
        self.num_scale_frames = num_scale_frames
        self.fused = fused
        self.capture = capture
        tokens = kv_cache.config.tokens_per_frame
        self._time = torch.zeros(1, dtype=torch.int64, device=device)
        self._k_rows = torch.zeros(tokens, dtype=torch.int64, device=device)
        self._v_rows = torch.zeros(tokens, dtype=torch.int64, device=device)
        self._camera_slot = torch.zeros(1, dtype=torch.int64, device=device)
        self._image: Optional[torch.Tensor] = None  # (1, 3, H, W), sized on the first step
        self._pool = torch.cuda.graph_pool_handle() if capture else None  # shared by captures
        self._graphs: dict[bool, _Captured] = {}
        self.captures = 0  # graphs captured so far (a recapture means an address moved)
        self.time_replays = False  # record CUDA events around each replay (benchmarks)
        self._replay_events: list[tuple] = []
        self.laps = laps if laps is not None else HostLaps()

    def accepts_step(self, num_frames: int, first_frame: int) -> bool:
        """One frame on a cache that holds the anchors: the only steps a graph replays."""
        return num_frames == 1 and first_frame >= max(1, self.num_scale_frames)

    @torch.no_grad()
    def run(self, images: torch.Tensor, txn: StepTxn, with_depth: bool = True) -> dict:
        """The step's outputs (the ``StepOutputs`` fields) for an open ``txn``
        that ``accepts``; the caller closes the transaction."""
        laps = self.laps
        self._load(images, txn)
        laps.lap("load")
        if not txn.attention_planned:
            self.backend.plan(txn.frame_txn.layout)
        laps.lap("plan")
        if not self.capture:
            return self._body(with_depth, txn.first_frame)()
        captured = self._graph_for(with_depth, txn.first_frame)
        if self.time_replays:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            captured.graph.replay()
            end.record()
            self._replay_events.append((start, end))
        else:
            captured.graph.replay()
        laps.lap("launch")
        # Copies: the next replay overwrites the static outputs; results outlive it.
        outputs = {k: v.clone() for k, v in captured.outputs.items()}
        laps.lap("copy_outputs")
        return outputs
    def replay_ms(self) -> list[float]:
        """GPU time of each replay timed since the last call (waits for the last one)."""
        events, self._replay_events = self._replay_events, []
        if events:
            events[-1][1].synchronize()
        return [start.elapsed_time(end) for start, end in events]

    def _load(self, images: torch.Tensor, txn: StepTxn) -> None:
        if self._image is None or self._image.shape != images.shape:
            self._image = torch.zeros(images.shape, dtype=torch.float32, device=images.device)
        self._image.copy_(images)
        self._time.fill_(txn.first_frame)
        self._camera_slot.fill_(txn.camera_txn.first_frame)
        k_rows, v_rows = txn.frame_txn.write_rows
        self._k_rows.copy_(k_rows)
        self._v_rows.copy_(v_rows)

    def _key(self) -> tuple:
        return (self.kv_cache.storage.data.data_ptr(), self.camera_cache.data.data_ptr(),
                self.camera_cache.capacity, tuple(self._image.shape))

    def _graph_for(self, with_depth: bool, first_frame: int) -> _Captured:
        captured = self._graphs.get(with_depth)
        if captured is not None and captured.key == self._key():
            return captured
        self._graphs.pop(with_depth, None)  # its memory returns to the pool first
        try:
            captured = self.record(with_depth, first_frame)
        except Exception as exc:
            raise GraphCaptureError(f"CUDA-graph capture failed: {type(exc).__name__}: "
                                    f"{str(exc).splitlines()[0] if str(exc) else ''}") from exc
        self._graphs[with_depth] = captured
        return captured

    def _body(self, with_depth: bool, first_frame: int):
        """The step as a function of the static buffers only: what the graph captures."""
        model = self.model
        height, width = self._image.shape[2:]
        grid_hw = model.config.patch_grid((height, width))
        agg = model.config.aggregator
        writer = _StaticSlots(self.kv_cache, self._k_rows, self._v_rows)

        def run() -> dict:
            # Everything that depends on the frame is read from the static buffers; the
            # special-token variants are the same for every frame past the anchors.
            rope = VideoRope.for_time_indices(self._time, grid_hw, agg.num_special_tokens,
                                              agg.video_rope_dims, agg.video_rope_theta)
            camera = _StaticCameraTxn(self.camera_cache, self._camera_slot)
            return model(self._image, StepContext(first_frame, self.num_scale_frames, rope,
                                                  writer, camera, self.backend, self.fused,
                                                  with_depth))
        return run

    def record(self, with_depth: bool, first_frame: int) -> _Captured:
        """Capture the step's graph (``run`` does, when it needs one); an exception here is a
        failed capture (``GraphCaptureError``)."""
        run = self._body(with_depth, first_frame)
        # Warm up on a side stream (lazy inits, kernel selection), as CUDA graphs require.
        # Each run writes this step's own K/V again: idempotent.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                run()
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        # thread_local: a front end's other threads (the node's executor reading allocator
        # statistics) may touch CUDA while the worker captures.
        with torch.cuda.graph(graph, pool=self._pool, capture_error_mode="thread_local"):
            outputs = run()
        self.captures += 1
        return _Captured(graph, outputs, self._key())

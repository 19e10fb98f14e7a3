"""BatchRunner: one streaming step of B camera streams (one frame each) as one forward.

Several streams of one engine share the model's weights and its GPU memory
(``SharedStreams``: one KV page pool, one camera-head pool); each keeps its own page table,
camera-cache block and transactions, opened by its own ``StreamRunner`` (``shared=``):

    shared = SharedStreams(model, config, image_hw)
    runners = [StreamRunner(model, config_b, image_hw, shared=shared) for config_b in ...]
    batch = BatchRunner(model, config, image_hw, shared)
    txns = [runner.begin(1, kind_b) for runner, kind_b in ...]   # each stream's own kind
    outputs = batch.run(images, runners, txns)  # (B, 3, H, W) -> one StepOutputs per stream
    txns[0].commit(); txns[1].rollback()        # each stream's owner decides, once

The step is the streams' single-frame steps side by side: the frames' tokens are
concatenated (B x T rows), each global layer writes every stream's K/V in one call
(``BatchWriter``: the rows of each stream's ``FrameTxn``) and attends through one plan of
one request per stream (``PagedKVLayout.concat``), so each stream's queries see its own
pages only; the rotation and the special tokens come from each stream's own time index
(``StepContext.frame_indices``); the camera head writes each stream's row of its own block
and attends over every stream's visible rows with a block mask (``CameraBatchTxn``). A
stream's outputs are therefore those of its step run alone (CPU fp32: to ~1e-7).

Only single-frame streaming steps batch: a scale phase or a rollover's anchor step runs
alone (``StreamRunner.run``). On any exception every transaction still pending is rolled
back, once, and the exception propagates; after success each stream's owner commits or
rolls back its own step.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Optional

import torch

from ..attention import make_backend
from ..cache import (CameraCacheTxn, FrameTxn, PagedKVLayout, SharedCameraPool, SharedKVPool,
                     TransactionError)
from ..config import SessionConfig
from ..model import FusedKernels, StepContext, StepOutputs
from .batch_graph import BatchGraphs
from .graph_step import GraphCaptureError
from .stats import HostLaps
from .step_txn import StepTxn
from .stream_runner import cache_config_of, check_runnable, fast_path_of

# SessionConfig fields that fix the shared pools' shapes and the batched kernels
BATCH_FIELDS = ("device", "attention_backend", "flashinfer_variant", "kv_splits",
                "fused_kernels", "fused_kernels_off", "cuda_graphs")
# PreprocessConfig fields that fix the model input size (page size: one pool, one size)
SIZE_FIELDS = ("patch_size", "width", "height", "max_height")


def check_batchable(configs: Sequence[SessionConfig] | Mapping[str, SessionConfig]) -> None:
    """Raise ValueError, naming the field and the streams, unless streams of these configs
    can share one engine: the same device, attention backend and variant, split-KV parts,
    fused kernels, CUDA-graph switch and model input size. Windows, anchors, keyframe and
    rollover policies may differ."""
    items = (list(configs.items()) if isinstance(configs, Mapping)
             else [(f"#{i}", c) for i, c in enumerate(configs)])
    if not items:
        raise ValueError("check_batchable: no stream configs")
    (first_name, first), rest = items[0], items[1:]
    for name, config in rest:
        pairs = [(f, getattr(first, f), getattr(config, f)) for f in BATCH_FIELDS]
        pairs += [(f"preprocess.{f}", getattr(first.preprocess, f), getattr(config.preprocess, f))
                  for f in SIZE_FIELDS]
        for field, mine, theirs in pairs:
            if mine != theirs:
                raise ValueError(
                    f"streams {first_name!r} and {name!r} cannot share one engine: {field} is "
                    f"{mine!r} and {theirs!r}; streams batched together need the same "
                    f"{', '.join(BATCH_FIELDS)} and model input size")


class SharedStreams:
    """The engine's GPU memory that its streams share: one ``SharedKVPool`` (the page
    shape from ``config``, ``model`` and ``image_hw``; its byte budget is
    ``config.max_cache_bytes``, for all streams) and one ``SharedCameraPool``."""

    def __init__(self, model, config: SessionConfig, image_hw: tuple[int, int]) -> None:
        check_runnable(model, config)
        self.model = model
        self.config = config
        self.image_hw = tuple(image_hw)
        self.kv_pool = SharedKVPool(cache_config_of(model, config, self.image_hw))
        self.camera_pool = SharedCameraPool(
            **model.config.camera_cache_dims(), device=config.device,
            dtype=model.camera_head.dtype, chunk_frames=config.camera_chunk_frames())

    def check_stream(self, model, config: SessionConfig, image_hw: tuple[int, int]) -> None:
        """ValueError unless a stream of ``model``, ``config`` and ``image_hw`` fits."""
        if model is not self.model:
            raise ValueError("a stream of another model cannot share these pools (one engine "
                             "runs one model)")
        if tuple(image_hw) != self.image_hw:
            raise ValueError(f"a stream of {tuple(image_hw)} model inputs cannot share pools "
                             f"made for {self.image_hw}")
        check_batchable({"pools": self.config, "stream": config})

    def info(self) -> dict:
        camera = self.camera_pool
        return {"kv_pool": self.kv_pool.info(),
                "camera_pool": {"streams": camera.num_streams,
                                "capacity_frames": camera.capacity,
                                "bytes_reserved": camera.nbytes}}


class BatchWriter:
    """KV writer of a batched step: each layer's K/V of every stream in one storage write,
    to the rows of each stream's ``FrameTxn`` (stream order), while all are pending."""

    def __init__(self, txns: Sequence[FrameTxn], pool: SharedKVPool) -> None:
        self._txns = list(txns)
        self._storage = pool.storage
        config = pool.config
        self._k_rows = torch.cat([t.write_rows[0] for t in self._txns])  # (B*T,)
        self._v_rows = torch.cat([t.write_rows[1] for t in self._txns])
        self._shape = (self._k_rows.numel(), config.num_heads, config.head_dim)

    @property
    def write_rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(K rows, V rows) of the storage's flat layer view, stream then frame order."""
        return self._k_rows, self._v_rows

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store one layer's K/V, ``(B * tokens_per_frame, heads, head_dim)`` each."""
        for i, txn in enumerate(self._txns):
            if txn.state != "pending":
                raise TransactionError(f"cannot write: stream {i}'s step is already "
                                       f"{txn.state}")
        storage = self._storage
        for name, t in (("k", k), ("v", v)):
            if tuple(t.shape) != self._shape:
                raise TransactionError(f"{name} has shape {tuple(t.shape)}, the batched step "
                                       f"expects {self._shape}")
            if t.dtype != storage.dtype or t.device != storage.data.device:
                raise TransactionError(f"{name} is {t.dtype} on {t.device}, the cache stores "
                                       f"{storage.dtype} on {storage.data.device}")
        if not 0 <= layer < storage.config.num_layers:
            raise TransactionError(f"layer {layer} outside [0, {storage.config.num_layers})")
        storage.write(layer, self._k_rows, self._v_rows, k, v)

    def destination(self, layer: int) -> None:
        """None: the writes go through ``write``, which checks them (``KVWriter``)."""
        return None


class CameraBatchTxn:
    """Camera-cache access of a batched step: stream b's one frame goes to its own
    ``CameraCacheTxn``; the queries see every stream's visible rows, stream after stream,
    through a (B, rows) block mask: each stream's query only its own rows."""

    def __init__(self, txns: Sequence[CameraCacheTxn], device: torch.device) -> None:
        self._txns = list(txns)
        sizes = [t.first_frame + t.num_frames for t in self._txns]
        mask = torch.zeros(len(sizes), sum(sizes), dtype=torch.bool)
        start = 0
        for b, size in enumerate(sizes):
            mask[b, start:start + size] = True
            start += size
        self.visible_mask = mask.to(device)  # (B, rows)

    def write(self, iteration: int, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Stream b's K and V are row b of ``k`` and ``v`` (B, heads, head_dim)."""
        if k.shape[0] != len(self._txns):
            raise TransactionError(f"the camera head wrote {k.shape[0]} rows for a batch of "
                                   f"{len(self._txns)} streams")
        for b, txn in enumerate(self._txns):
            txn.write(iteration, layer, k[b:b + 1], v[b:b + 1])

    def visible(self, iteration: int, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Every stream's visible K and V, concatenated: (rows, heads, head_dim) each."""
        keys, values = zip(*(t.visible(iteration, layer) for t in self._txns))
        return torch.cat(keys), torch.cat(values)


def split_outputs(out: dict, batch: int) -> list[StepOutputs]:
    """One ``StepOutputs`` per stream: (1, ...) views of a batched step's outputs."""
    def part(key: str, value, b: int):
        if value is None:
            return None
        return value[:, b:b + 1] if key == "pose_enc_list" else value[b:b + 1]
    return [StepOutputs(**{k: part(k, v, b) for k, v in out.items()}) for b in range(batch)]


def roll_back_pending(txns: Sequence[StepTxn]) -> None:
    """Roll back every transaction still pending, once each, whatever one of them raises."""
    for txn in txns:
        if isinstance(txn, StepTxn) and txn.state == "pending":
            try:
                txn.rollback()
            except Exception:  # its cache was reset meanwhile: nothing left to undo
                pass


class BatchRunner:
    def __init__(self, model, config: SessionConfig, image_hw: tuple[int, int],
                 shared: SharedStreams, laps: Optional[HostLaps] = None) -> None:
        """The engine's batched steps over the streams of ``shared`` (its attention backend,
        and its CUDA graphs per batch size where the fast path applies)."""
        shared.check_stream(model, config, image_hw)
        self.model = model
        self.config = config
        self.image_hw = tuple(image_hw)
        self.shared = shared
        self.laps = laps if laps is not None else HostLaps()
        self.fused = FusedKernels.select(model.resolve_fused_kernels(config.fused_kernels),
                                         config.fused_kernels_off)
        backend_name, self.fast_path = fast_path_of(model, config)
        self.backend = make_backend(backend_name, shared.kv_pool.storage,
                                    variant=config.flashinfer_variant,
                                    kv_splits=config.kv_splits, fused_merge=self.fused.split_merge)
        self.steps: dict[int, int] = {}  # batched steps run, per batch size
        self.graphs: Optional[BatchGraphs] = None  # the fast path: replays per batch size
        self.graph_capture_failures = 0
        if self.fast_path == "cuda_graph":
            self.graphs = BatchGraphs(model, shared, self._graph_backend, self.fused,
                                      laps=self.laps)

    def info(self) -> dict:
        """The batched steps' backend and fast path, graph captures and steps per B."""
        return {"attention": self.backend.name, "fast_path": self.fast_path,
                "graph_captures": {} if self.graphs is None else dict(self.graphs.captures),
                "graph_steps": {} if self.graphs is None else dict(self.graphs.steps),
                "graph_capture_failures": self.graph_capture_failures,
                "steps": dict(self.steps)}

    @torch.no_grad()
    def run(self, images: torch.Tensor, runners: Sequence, txns: Sequence[StepTxn], *,
            with_depth: bool = True) -> list[StepOutputs]:
        """Run the pending single-frame steps ``txns`` (stream b's opened by
        ``runners[b].begin``) on ``images`` (B, 3, H, W), frame b for stream b; one
        ``StepOutputs`` per stream, (1, ...) views. A graph replay where the fast path
        applies (any B; a failed capture turns it off for good and the step runs eagerly),
        else eager; B = 1 eager is ``runners[0].run``. On any exception every txn still
        pending is rolled back once, then it raises."""
        runners, txns = list(runners), list(txns)
        try:
            self._check(images, runners, txns)
            out = self._run_graph(images, runners, txns, with_depth)
            if out is None and len(txns) == 1:
                outputs = [runners[0].run(images, txns[0], with_depth=with_depth)]
            else:
                if out is None:
                    out = self._run_eager(images, txns, with_depth)
                outputs = split_outputs(out, len(txns))
        except BaseException:
            roll_back_pending(txns)
            raise
        self.steps[len(txns)] = self.steps.get(len(txns), 0) + 1
        return outputs

    def _graph_backend(self, batch: int, splits: int):
        tokens = self.shared.kv_pool.config.tokens_per_frame
        return make_backend("flashinfer", self.shared.kv_pool.storage,
                            self.config.flashinfer_variant, graph_query_tokens=batch * tokens,
                            kv_splits=splits, fused_merge=self.fused.split_merge,
                            graph_requests=batch)

    def _run_graph(self, images, runners: list, txns: list[StepTxn],
                   with_depth: bool) -> Optional[dict]:
        """The step as a graph replay; None without graphs (or once a capture failed)."""
        if self.graphs is None:
            return None
        # split-KV parts every stream's pages allow: its anchors, its own page, a special one
        splits = min(self.config.kv_splits,
                     min(max(1, r.config.num_scale_frames) for r in runners) + 2)
        try:
            return self.graphs.run(images, runners, txns, with_depth, splits)
        except GraphCaptureError as exc:  # the steps are still pending: run them eagerly
            self.graphs, self.fast_path = None, f"eager ({exc})"
            self.graph_capture_failures += 1
            return None

    def _run_eager(self, images: torch.Tensor, txns: list[StepTxn], with_depth: bool) -> dict:
        model, batch = self.model, len(txns)
        indices = tuple(t.first_frame for t in txns)
        grid_hw = model.config.patch_grid(self.image_hw)
        rope = model.aggregator.video_rope(0, batch, grid_hw, indices)
        self.backend.plan(PagedKVLayout.concat([t.frame_txn.layout for t in txns]))
        self.laps.lap("plan")
        writer = BatchWriter([t.frame_txn for t in txns], self.shared.kv_pool)
        camera = CameraBatchTxn([t.camera_txn for t in txns], images.device)
        # Every frame is past its stream's anchors (checked): the special tokens of a
        # streaming frame, whatever each stream's num_scale_frames, hence 1 here.
        context = StepContext(indices[0], 1, rope, writer, camera, self.backend, self.fused,
                              with_depth, True, frame_indices=indices)
        out = model(images, context)
        self.laps.lap("model")
        return out

    def _check(self, images: torch.Tensor, runners: list, txns: list) -> None:
        if not runners or len(runners) != len(txns):
            raise ValueError(f"a batched step needs one runner per step, got {len(runners)} "
                             f"runners and {len(txns)} steps")
        if images.dim() != 4 or images.shape[0] != len(txns) or images.shape[1] != 3:
            raise ValueError(f"images must be ({len(txns)}, 3, H, W): one frame per stream, "
                             f"got {tuple(images.shape)}")
        if tuple(images.shape[2:]) != self.image_hw:
            raise ValueError(f"a {images.shape[2]}x{images.shape[3]} batch does not fit the "
                             f"pools, sized for {self.image_hw[0]}x{self.image_hw[1]}")
        if len({id(r) for r in runners}) != len(runners):
            raise ValueError("a stream can have one frame per batched step: a runner is "
                             "given twice")
        pools = self.shared
        for b, (runner, txn) in enumerate(zip(runners, txns)):
            if (runner.kv_cache.shared is not pools.kv_pool
                    or runner.camera_cache.shared is not pools.camera_pool):
                raise ValueError(f"runner {b} does not draw from this engine's shared pools "
                                 f"(StreamRunner(..., shared=))")
            if not isinstance(txn, StepTxn) or txn.state != "pending":
                raise TransactionError(f"step {b} is not a pending step (state "
                                       f"{getattr(txn, 'state', None)!r})")
            if runner.camera_cache.pending is not txn.camera_txn:
                raise ValueError(f"step {b} is not runner {b}'s open step")
            anchors = max(1, runner.config.num_scale_frames)
            if txn.num_frames != 1 or txn.first_frame < anchors:
                raise ValueError(f"step {b} is not a streaming step (one frame after the "
                                 f"{anchors} anchor frames): {txn.num_frames} frame(s) at "
                                 f"time index {txn.first_frame}; run it alone")

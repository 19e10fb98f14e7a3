"""StreamRunner: the one owner of a stream's GPU state (caches, attention backend, graphs).

vLLM v1 splits a KV-cache manager (which pages a request sees) from a model runner (which
runs the kernels over them); this is the model runner of one camera stream. It owns the
paged KV cache of the global layers, the camera head's cache, the attention backend and the
CUDA-graph fast path, and it opens and closes their step transactions. The model it runs is
shared and stateless; the stream logic (scale phase, keyframe policy, rollover, results)
stays in ``StreamingSession``.

    runner = StreamRunner(model, SessionConfig(...), image_hw=(378, 504))
    txn = runner.begin(1, StepKind.SPECULATIVE)   # both caches; checks first, then mutates
    outputs = runner.run(images, txn)             # StepOutputs; on error txn is rolled back
    txn.commit()                                  # or txn.rollback(): exactly once
    runner.prepare_next(True, StepKind.KEYFRAME)  # pipelined: plan the next step while
                                                  # this one runs (kept if begin agrees)
    runner.reset()                                # between sequences; allocations kept
    runner.state_dict()                           # the caches, a snapshot part (and back:
                                                  # load_state_dict(state), a fresh runner)
    runner.info()                                 # cache counters, backend, fast path

Step kinds (``StepKind``): a keyframe known in advance attends to the window its commit
leaves; a speculative step (a non-keyframe, or any frame whose fate is decided from its own
outputs) attends to the un-evicted window and evicts only if committed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Optional

import torch

from ..attention import check_backend, choose_backend, make_backend
from ..cache import CameraKVCache, PagedKVCache, StepForecast, StepKind, TransactionError
from ..config import SessionConfig
from ..model import FusedKernels, Slices, StepContext, StepOutputs
from .graph_step import GraphCaptureError, GraphedStep
from .stats import HostLaps
from .step_txn import StepTxn

if TYPE_CHECKING:  # pragma: no cover
    from .batch_step import SharedStreams

_CACHE_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclass(frozen=True)
class _PreparedStep:
    """The next step as ``prepare_next`` made it: its plan, layout and write rows, and the
    attention plan made on the backend that will run it (the graph's or the eager one)."""

    forecast: StepForecast
    graphed: bool


def fast_path_of(model, config: SessionConfig) -> tuple[str, str]:
    """(attention backend, fast path) that ``config`` gives a stream of ``model``: the fast
    path is ``cuda_graph`` when streaming steps are graph replays, else why they are eager."""
    device = torch.device(config.device)
    backend, why = choose_backend(config.attention_backend, device, model.kv_dtype)
    if not config.cuda_graphs:
        return backend, "eager (cuda_graphs off)"
    if device.type != "cuda":
        return backend, f"eager (device {device.type})"
    if backend != "flashinfer":
        return backend, f"eager (attention backend {backend}; {why})"
    return backend, "cuda_graph"


def cache_config_of(model, config: SessionConfig, image_hw: tuple[int, int]):
    """The paged-cache config of a stream of ``model`` with ``config`` at ``image_hw``."""
    return model.config.cache_config(image_hw, config.num_scale_frames, config.window,
                                     dtype=_CACHE_DTYPES.get(model.kv_dtype, "float32"),
                                     device=config.device, **config.cache_extra())


def check_runnable(model, config: SessionConfig) -> None:
    """Raise, before anything is allocated, unless a stream of ``model`` can run ``config``:
    the attention backend on its device and dtype, and the fused-kernel setting."""
    backend, _ = fast_path_of(model, config)
    check_backend(backend, torch.device(config.device), model.kv_dtype,
                  config.flashinfer_variant)
    model.resolve_fused_kernels(config.fused_kernels)


class StreamRunner:
    def __init__(self, model, config: SessionConfig, image_hw: tuple[int, int],
                 laps: Optional[HostLaps] = None,
                 shared: Optional["SharedStreams"] = None) -> None:
        """Allocate the stream's caches for model inputs of ``image_hw`` (H, W).

        ``laps``: the stream's host-time laps (``StreamingSession.time_host``).

        ``shared``: the engine's pools (``batch_step.SharedStreams``) that this stream's
        KV pages and camera-cache rows are drawn from, beside other streams; its steps
        batched with theirs run in the engine's ``BatchRunner``, which owns the CUDA
        graphs: such a runner has none of its own (a step it runs alone is eager).
        Everything else is as without ``shared``.

        ``model``: a ``GCTModel`` already ``prepare``d on ``config.device``. Raises
        ValueError / RuntimeError for a size or a setting this model and device cannot run
        (an unavailable backend or fused kernel), before anything is allocated on the GPU.
        """
        self.model = model
        self.config = config
        self.image_hw = tuple(image_hw)
        self.laps = laps if laps is not None else HostLaps()
        mcfg = model.config
        mcfg.patch_grid(self.image_hw)  # ValueError for a size off the patch grid
        # Per stream, not a switch on the shared model: another stream may choose otherwise.
        self.fused_kernels = model.resolve_fused_kernels(config.fused_kernels)
        self.fused = FusedKernels.select(self.fused_kernels, config.fused_kernels_off)
        backend_name, self._fast_path = fast_path_of(model, config)
        cache_cfg = cache_config_of(model, config, self.image_hw)
        self.shared = shared
        if shared is not None:
            shared.check_stream(model, config, self.image_hw)
            if self._fast_path == "cuda_graph":
                self._fast_path = "cuda_graph (batched steps; alone eager)"
        self.kv_cache = PagedKVCache(cache_cfg, shared=None if shared is None else shared.kv_pool)
        self.camera_cache = CameraKVCache(**mcfg.camera_cache_dims(), device=config.device,
                                          dtype=model.camera_head.dtype,
                                          chunk_frames=config.camera_chunk_frames(),
                                          shared=None if shared is None else shared.camera_pool)
        self.backend = make_backend(backend_name, self.kv_cache.storage,
                                    variant=config.flashinfer_variant, kv_splits=config.kv_splits,
                                    fused_merge=self.fused.split_merge)
        self._prepared: Optional[_PreparedStep] = None  # the next step, planned ahead
        self.forecasts_used = 0  # steps that began as forecast (their plan was ready)
        self.graph: Optional[GraphedStep] = None
        self.graph_capture_failures = 0
        if self._fast_path == "cuda_graph":
            graph_backend = make_backend(
                "flashinfer", self.kv_cache.storage, config.flashinfer_variant,
                graph_query_tokens=cache_cfg.tokens_per_frame,
                kv_splits=config.graph_kv_splits(), fused_merge=self.fused.split_merge)
            self.graph = GraphedStep(model, self.kv_cache, self.camera_cache, graph_backend,
                                     config.num_scale_frames, fused=self.fused,
                                     laps=self.laps)

    # -- queries ---------------------------------------------------------------------------
    @property
    def frames_committed(self) -> int:
        """Committed frames since reset: the time index of the next step."""
        return self.kv_cache.frames_committed

    @property
    def fast_path(self) -> str:
        return self._fast_path

    def info(self) -> dict:
        """The stream's GPU state for services and diagnostics."""
        return {
            "attention": self.backend.name,
            "fast_path": self._fast_path,
            "fused_kernels": self.fused_kernels,
            "fused_kernel_names": self.fused.names(),
            "graph_captures": self.graph.captures if self.graph is not None else 0,
            "graph_capture_failures": self.graph_capture_failures,
            "steps_planned_ahead": self.forecasts_used,
            "cache": self.kv_cache.info(),
            "camera_cache": self.camera_cache.info(),
        }

    # -- a step ----------------------------------------------------------------------------
    def begin(self, num_frames: int, kind: StepKind | str) -> StepTxn:
        """Open a step of ``num_frames`` frames on both caches (``kind``: ``StepKind``).

        A step of several frames is only allowed on empty caches (the scale phase). Raises
        before anything changes: ``TransactionError`` if a step is open, ``CacheError`` (or
        its ``CacheFullError``) if it cannot fit, ValueError for a bad count or kind.
        """
        kind = StepKind.parse(kind)
        committed = self.frames_committed
        if committed != self.camera_cache.num_frames:  # an invariant of this owner
            raise RuntimeError(f"the KV cache holds {committed} committed frames and the "
                               f"camera cache {self.camera_cache.num_frames}")
        if isinstance(num_frames, int) and num_frames > 1 and committed > 0:
            raise ValueError(f"a step of {num_frames} frames is only allowed on empty caches "
                             f"(phase 1); {committed} frames are committed")
        prepared, self._prepared = self._prepared, None
        frame_txn = self.kv_cache.begin(num_frames, kind,
                                        prepared.forecast if prepared is not None else None)
        # The attention plan made ahead is this step's when the plan is the forecast one and
        # it was made on the backend that runs the step.
        planned = frame_txn.as_forecast and prepared.graphed == self._graphed(
            num_frames, frame_txn.first_frame)
        self.forecasts_used += planned
        try:
            camera_txn = self.camera_cache.begin(num_frames)
        except Exception:
            frame_txn.rollback()
            raise
        return StepTxn(frame_txn, camera_txn, attention_planned=planned)

    def prepare_next(self, pending_commits: bool, kind: StepKind | str) -> None:
        """Prepare the next single-frame step now, as it will be once the pending step is
        committed (``pending_commits``) or rolled back, while that step still runs on the
        GPU: its layout, write rows and attention plan (whose uploads queue behind the
        running step), made once. ``begin`` keeps them if its plan is the forecast one,
        else plans anew (a wrong guess costs only the time spent here)."""
        self._prepared = None
        forecast = self.kv_cache.forecast(pending_commits, 1, StepKind.parse(kind))
        if forecast is None:
            return
        graphed = self._graphed(1, forecast.plan.first_frame)
        (self.graph.backend if graphed else self.backend).plan(forecast.layout)
        self._prepared = _PreparedStep(forecast, graphed)

    @torch.no_grad()
    def run(self, images: torch.Tensor, txn: StepTxn, *, with_depth: bool = True,
            with_points: bool = True) -> StepOutputs:
        """Run the open step ``txn`` on ``images`` ((n, 3, H, W) in [0, 1] on the device).

        A single streaming frame is a CUDA-graph replay when the fast path applies, else
        the step runs eagerly: one attention plan, then the model. On any exception the step
        is rolled back in both caches and the exception propagates; a failed graph capture
        switches this stream to eager steps for good (``info()["fast_path"]`` says why) and
        raises ``GraphCaptureError``.
        """
        if txn.state != "pending":
            raise TransactionError(f"cannot run: this step is already {txn.state}")
        try:
            self._check_images(images, txn)
            if self._graphed(txn.num_frames, txn.first_frame):
                out = self._run_graph(images, txn, with_depth)
            else:
                out = self._run_eager(images, txn, with_depth, with_points)
        except Exception:
            txn.rollback()
            raise
        return StepOutputs(**out)

    def step(self, images: torch.Tensor, kind: StepKind | str, *, with_depth: bool = True
             ) -> tuple[StepOutputs, StepTxn]:
        """``begin`` + ``run``; a failed graph capture is retried once eagerly."""
        txn = self.begin(images.shape[0], kind)
        self.laps.lap("begin")
        try:
            return self.run(images, txn, with_depth=with_depth), txn
        except GraphCaptureError:
            txn = self.begin(images.shape[0], kind)  # the fast path is off now
            return self.run(images, txn, with_depth=with_depth), txn

    def run_slices(self, images: torch.Tensor, txn: StepTxn, *,
                   with_depth: bool = True) -> Slices[StepOutputs]:
        """``run`` for an eager step cut into slices (``GCTModel.forward_slices``): each
        ``next`` queues one block's kernels (no grad, autocast off) and returns; the last
        gives the ``StepOutputs``. Planned when it is created. The step is rolled back if a
        slice raises or the slices are closed unfinished (``close()``)."""
        if txn.state != "pending":
            raise TransactionError(f"cannot run: this step is already {txn.state}")
        try:
            self._check_images(images, txn)
            grid_hw = self.model.config.patch_grid(self.image_hw)
            rope = self.model.aggregator.video_rope(txn.first_frame, txn.num_frames, grid_hw)
            self.backend.plan(txn.frame_txn.layout)
        except Exception:
            txn.rollback()
            raise
        return self._slices(images, txn, rope, with_depth)

    def _slices(self, images, txn: StepTxn, rope, with_depth: bool) -> Slices[StepOutputs]:
        context = StepContext(txn.first_frame, self.config.num_scale_frames, rope,
                              txn.frame_txn, txn.camera_txn, self.backend, self.fused,
                              with_depth, True)
        model_slices = self.model.forward_slices(images, context)
        done = False
        try:
            while True:
                with torch.no_grad(), torch.autocast(images.device.type, enabled=False):
                    try:
                        next(model_slices)
                    except StopIteration as stop:
                        done = True
                        return StepOutputs(**stop.value)
                yield
        finally:
            if not done and txn.state == "pending":
                txn.rollback()

    def adopt(self, other: "StreamRunner") -> None:
        """Hold ``other``'s committed frames instead of this runner's own (a rollover's
        anchors, built beside this stream on a runner of the same model and size): copied
        device to device; this runner's allocations and graphs are kept."""
        self.load_state_dict(other._caches_state(to_host=False))

    def state_dict(self) -> dict:
        """Both caches between steps, as ``{"state": plain data, "tensors": host tensors}``
        (``PagedKVCache`` and ``CameraKVCache.state_dict``; tensors ``kv_patch``,
        ``kv_special``, ``camera``). The device->host copy is the only wait."""
        return self._caches_state(to_host=True)

    def _caches_state(self, to_host: bool) -> dict:
        """``state_dict``'s output; ``to_host=False``: device copies, no wait."""
        kv_state, kv = self.kv_cache.state_dict(to_host)
        camera_state, camera = self.camera_cache.state_dict(to_host)
        return {"state": {"image_hw": list(self.image_hw), "kv_cache": kv_state,
                          "camera_cache": camera_state},
                "tensors": {"kv_patch": kv["patch"], "kv_special": kv["special"],
                            "camera": camera}}

    def load_state_dict(self, state: dict) -> None:
        """Load ``state_dict``'s output (meant for a fresh runner of the same model, config
        and size; page ids are remapped). Raises ValueError / ``CacheError`` if it does not
        fit; both caches are then reset."""
        state, tensors = state["state"], state["tensors"]
        if tuple(state["image_hw"]) != self.image_hw:
            raise ValueError(f"the state is for {state['image_hw']} model inputs, this "
                             f"runner's for {list(self.image_hw)}")
        self._prepared = None
        try:
            self.kv_cache.load_state_dict(state["kv_cache"], {"patch": tensors["kv_patch"],
                                                              "special": tensors["kv_special"]})
            self.camera_cache.load_state_dict(state["camera_cache"], tensors["camera"])
            if self.kv_cache.frames_committed != self.camera_cache.num_frames:
                raise ValueError(f"the state's KV cache holds {self.kv_cache.frames_committed} "
                                 f"frames and its camera cache {self.camera_cache.num_frames}")
        except Exception:
            self.reset()
            raise

    def reset(self) -> None:
        """Forget every frame in both caches (an open step is invalidated); allocations and
        captured graphs are kept."""
        self.kv_cache.reset()
        self.camera_cache.reset()
        self._prepared = None

    # -- internals -------------------------------------------------------------------------
    def _graphed(self, num_frames: int, first_frame: int) -> bool:
        """Whether a step of ``num_frames`` from ``first_frame`` is a graph replay."""
        return self.graph is not None and self.graph.accepts_step(num_frames, first_frame)

    def _check_images(self, images: torch.Tensor, txn: StepTxn) -> None:
        n = self.model.check_images(images, self.config.num_scale_frames)
        if n != txn.num_frames:
            raise ValueError(f"{n} images for a step of {txn.num_frames} frames")
        hw = (images.shape[2], images.shape[3])
        if hw != self.image_hw:
            raise ValueError(f"a {hw[0]}x{hw[1]} image does not fit this stream's caches, "
                             f"sized for {self.image_hw[0]}x{self.image_hw[1]}")

    def _run_eager(self, images, txn: StepTxn, with_depth: bool, with_points: bool) -> dict:
        model = self.model
        grid_hw = model.config.patch_grid(self.image_hw)
        rope = model.aggregator.video_rope(txn.first_frame, txn.num_frames, grid_hw)
        if not txn.attention_planned:  # once per step, for every global layer
            self.backend.plan(txn.frame_txn.layout)
        self.laps.lap("plan")
        out = model(images, StepContext(txn.first_frame, self.config.num_scale_frames, rope,
                                        txn.frame_txn, txn.camera_txn, self.backend,
                                        self.fused, with_depth, with_points))
        self.laps.lap("model")
        return out

    def _run_graph(self, images, txn: StepTxn, with_depth: bool) -> dict:
        try:
            return self.graph.run(images, txn, with_depth)
        except GraphCaptureError as exc:
            self.graph, self._fast_path = None, f"eager ({exc})"
            self.graph_capture_failures += 1
            raise

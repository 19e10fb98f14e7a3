"""StreamingSession: one camera stream through model, caches and keyframe policy.

    session = StreamingSession(model, SessionConfig(...))
    for image, stamp in camera:
        for result in session.push(image, stamp, "rgb8"):   # FrameResult, in input order
            publish(result)
    session.reset()                                         # between sequences

Start-up: the first ``num_scale_frames`` frames are buffered and run together (the
bidirectional anchor phase), so no result exists until that many frames have arrived; then
every push returns its own frame. Each streaming frame is appended speculatively, attended,
and committed (keyframe) or rolled back (non-keyframe) in both caches.

Unbounded streams: after ``rollover_keyframes`` keyframes in a window, a new window starts
whose anchor frames are the last ``num_scale_frames`` keyframes (re-run as its scale phase);
it is aligned to the previous one by Sim(3) (rotation and centre of the latest anchor, scale
from the median depth ratio), so the published trajectory stays continuous while memory,
RoPE time index and per-frame cost stay bounded.
"""
from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..attention import choose_backend, make_backend
from ..cache import CameraKVCache, PagedKVCache
from ..config import SessionConfig
from ..preprocess import CropInfo, preprocess
from .graph_step import GraphCaptureError, GraphedStep
from .keyframes import make_policy
from .sim3 import Sim3, reference_alignment
from .stats import LatencyWindow
from .trajectory import Trajectory
from .types import FrameRejected, FrameResult


@dataclass
class _Keyframe:
    """A committed frame kept for the next window's anchors."""

    image: torch.Tensor  # (3, H, W) model input on the device
    index: int
    c2w: np.ndarray  # (4, 4) float64, world frame (as published)
    depth: Optional[torch.Tensor]  # (H, W) world-scale depth on the device


@dataclass(frozen=True)
class Rollover:
    """A window change, for diagnostics: the Sim(3) and how well the anchor stayed put."""

    window: int  # the new window's number
    frame_index: int  # the anchor frame (latest keyframe of the previous window)
    alignment: Sim3  # new window -> world
    anchor_c2w_published: np.ndarray  # (4, 4) as published in the previous window
    anchor_c2w_aligned: np.ndarray  # (4, 4) the new window's estimate, aligned


@dataclass
class _Pending:
    image: torch.Tensor
    stamp_ns: int
    crop: CropInfo
    index: int


class StreamingSession:
    def __init__(self, model, config: SessionConfig = SessionConfig()) -> None:
        """``model``: a ``GCTModel`` already ``prepare``d on ``config.device``."""
        self.model = model
        self.config = config
        self.device = torch.device(config.device)
        self.trajectory = Trajectory()
        self._policy = make_policy(config.keyframes)
        self._kv: Optional[PagedKVCache] = None  # sized on the first frame (patch grid)
        self._camera: Optional[CameraKVCache] = None
        self._backend = None
        self._graph: Optional[GraphedStep] = None  # the CUDA-graph fast path, when it applies
        self._graph_failure: Optional[str] = None  # why capturing failed (then eager for good)
        self._model_hw: Optional[tuple[int, int]] = None
        self._latency = LatencyWindow()
        # A model-wide switch: the last session built on a shared model decides.
        self.fused_kernels = model.use_fused_kernels(config.fused_kernels)
        self.reset()

    # -- public API ------------------------------------------------------------------------
    def push(self, image: np.ndarray, stamp_ns: int, encoding: str = "rgb8") -> list[FrameResult]:
        """Feed one frame; return the results that became available (possibly none).

        Raises ``FrameRejected`` (a ``ValueError`` with ``.reason``) for a frame that cannot be
        used: bad image, a stamp not after the previous one, or a model size that differs
        from the stream's. The session is unchanged by a rejected frame.
        """
        self._counts["frames_in"] += 1
        try:
            stamp_ns = self._check_stamp(stamp_ns)
            tensor, crop = self._preprocess(image, encoding)
        except FrameRejected as exc:
            self._counts[f"rejected_{exc.reason}"] += 1
            raise
        self._last_stamp = stamp_ns
        frame = _Pending(tensor, stamp_ns, crop, self._next_index)
        self._next_index += 1
        if len(self._anchors_pending) < self.config.num_scale_frames and not self._streaming:
            self._anchors_pending.append(frame)
            if len(self._anchors_pending) < self.config.num_scale_frames:
                return []
            return self._run_scale_phase()
        return [self._run_streaming_frame(frame)]

    def reset(self) -> None:
        """Forget the stream: caches (kept allocated), trajectory, window, policy, counters.

        The next frame may have another model input size (then the caches are reallocated).
        """
        self._size_locked = False
        if self._kv is not None:
            self._kv.reset()
            self._camera.reset()
        self.trajectory.reset()
        self._policy.reset()
        self._anchors_pending: list[_Pending] = []
        self._recent_keyframes: deque[_Keyframe] = deque(maxlen=self.config.num_scale_frames)
        self._streaming = False
        self._align = Sim3.identity()
        self._window = 0
        self._window_keyframes = 0
        self._next_index = 0
        self._last_stamp: Optional[int] = None
        self._counts: Counter = Counter()
        self._latency.clear()
        self.rollovers: deque[Rollover] = deque(maxlen=64)  # the most recent window changes

    def info(self) -> dict:
        """Counters, phase, window, timing and cache state (for services and diagnostics)."""
        c = self._counts
        rejected = {k[len("rejected_"):]: v for k, v in c.items() if k.startswith("rejected_")}
        return {
            "frames_in": c["frames_in"], "frames_processed": c["processed"],
            "keyframes": c["keyframes"], "non_keyframes": c["non_keyframes"],
            "frames_rejected": sum(rejected.values()), "rejected_by_reason": rejected,
            "phase": "streaming" if self._streaming else "scale_frames",
            "scale_frames_buffered": len(self._anchors_pending),
            "startup_latency_frames": self.config.num_scale_frames,
            "window": self._window, "window_keyframes": self._window_keyframes,
            "rollovers": c["rollovers"], "model_hw": self._model_hw,
            "attention": self._backend.name if self._backend is not None else
            self._attention_choice()[0],
            "fast_path": self.fast_path(),
            "fused_kernels": self.fused_kernels,
            "graph_captures": self._graph.captures if self._graph is not None else 0,
            "graph_capture_failures": c["graph_capture_failures"],
            "trajectory_poses": len(self.trajectory),
            "latency_ms": self._latency.summary(),
            "cache": self._kv.info() if self._kv is not None else None,
            "camera_cache": self._camera.info() if self._camera is not None else None,
        }

    # -- input checks ----------------------------------------------------------------------
    def _check_stamp(self, stamp_ns) -> int:
        if not isinstance(stamp_ns, (int, np.integer)) or isinstance(stamp_ns, bool):
            raise FrameRejected("bad_stamp", f"stamp must be integer nanoseconds, got {stamp_ns!r}")
        stamp_ns = int(stamp_ns)
        if self._last_stamp is not None and stamp_ns <= self._last_stamp:
            raise FrameRejected("non_monotonic_stamp", f"stamp {stamp_ns} ns is not after the "
                                f"previous frame's {self._last_stamp} ns; frame skipped")
        return stamp_ns

    def _preprocess(self, image, encoding: str):
        try:
            tensor, crop = preprocess(image, encoding, self.config.preprocess, device=self.device)
        except ValueError as exc:
            raise FrameRejected("bad_image", f"image refused: {exc}") from exc
        hw = crop.output_hw
        if self._model_hw is None or (not self._size_locked and hw != self._model_hw):
            self._allocate(hw)
        elif hw != self._model_hw:
            raise FrameRejected("size_changed", f"model input {hw[0]}x{hw[1]} differs from the "
                                f"stream's {self._model_hw[0]}x{self._model_hw[1]} (the camera "
                                "changed resolution or aspect); reset the session to switch")
        self._size_locked = True
        return tensor, crop

    def _allocate(self, hw: tuple[int, int]) -> None:
        cfg, mcfg = self.config, self.model.config
        dtype = {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(
            self.model.kv_dtype, "float32")
        cache_cfg = mcfg.cache_config(hw, cfg.num_scale_frames, cfg.window, dtype=dtype,
                                      device=cfg.device, **cfg.cache_extra())
        self._kv = PagedKVCache(cache_cfg)
        self._camera = CameraKVCache(**mcfg.camera_cache_dims(), device=cfg.device,
                                     chunk_frames=cfg.camera_chunk_frames())
        self._backend = make_backend(self._attention_choice()[0], self._kv.storage,
                                     variant=cfg.flashinfer_variant, kv_splits=cfg.kv_splits)
        self._graph = None
        if self.fast_path() == "cuda_graph":
            self._graph = GraphedStep(self.model, self._kv, self._camera, cfg.flashinfer_variant,
                                      cfg.num_scale_frames, kv_splits=cfg.graph_kv_splits())
        self._model_hw = hw

    def fast_path(self) -> str:
        """``cuda_graph`` when streaming steps are graph replays, else why they are eager."""
        cfg = self.config
        if self._graph_failure is not None:
            return f"eager ({self._graph_failure})"
        if not cfg.cuda_graphs:
            return "eager (cuda_graphs off)"
        if self.device.type != "cuda":
            return f"eager (device {self.device.type})"
        backend, why = self._attention_choice()
        if backend != "flashinfer":
            return f"eager (attention backend {backend}; {why})"
        return "cuda_graph"

    def _attention_choice(self) -> tuple[str, str]:
        return choose_backend(self.config.attention_backend, self.device, self.model.kv_dtype)

    # -- the two phases --------------------------------------------------------------------
    def _run_scale_phase(self) -> list[FrameResult]:
        frames, self._anchors_pending = self._anchors_pending, []
        t0 = time.perf_counter()
        outputs, txn = self._step(torch.stack([f.image for f in frames]), with_depth=True)
        txn.commit()
        # The world is the first frame's camera exactly: the network's own estimate for
        # frame 0 is only close to the identity (and arbitrary with random weights).
        first = outputs.c2w[0].double().cpu().numpy()
        self._align = Sim3.from_matrix(np.linalg.inv(first))
        self._streaming = True
        self._window_keyframes = len(frames)
        results = [self._result(f, outputs, i, True, t0, len(frames))
                   for i, f in enumerate(frames)]
        for i, f in enumerate(frames):
            self._remember_keyframe(f, outputs, i, results[i].c2w)
        # The policy starts fresh: the first streaming frame is a keyframe (the reference's
        # rule for both the fixed interval and the flow mode).
        return results

    def _run_streaming_frame(self, frame: _Pending) -> FrameResult:
        t0 = time.perf_counter()
        outputs, txn = self._step(frame.image[None], with_depth=self._needs_depth())
        depth = outputs.depth[0, ..., 0] if outputs.depth is not None else None
        keyframe = self._policy.decide(frame.index, depth, outputs.intrinsics[0], outputs.c2w[0])
        if keyframe:
            txn.commit()
            self._policy.on_keyframe(frame.index, depth, outputs.intrinsics[0], outputs.c2w[0])
            self._window_keyframes += 1
        else:
            txn.rollback()
        result = self._result(frame, outputs, 0, keyframe, t0, 1)
        if keyframe:
            self._remember_keyframe(frame, outputs, 0, result.c2w)
            if self._window_keyframes >= (self.config.rollover_keyframes or 1 << 62):
                self._rollover()
        return result

    def _step(self, images: torch.Tensor, with_depth: bool):
        if self._graph is not None and self._graph.accepts(images.shape[0]):
            try:
                return self._graph.step(images, with_depth=with_depth)
            except GraphCaptureError as exc:
                # The step was rolled back; go on eagerly for the rest of the session, and
                # say why in info()["fast_path"] rather than fail every frame.
                self._graph, self._graph_failure = None, str(exc)
                self._counts["graph_capture_failures"] += 1
        return self.model.step(images, self._kv, self._camera, self._backend,
                               self.config.num_scale_frames, with_depth=with_depth)

    def _needs_depth(self) -> bool:
        """Depth is needed for outputs, the flow policy, and the next window's anchors."""
        cfg = self.config
        near_rollover = (cfg.rollover_keyframes is not None and self._window_keyframes
                         >= cfg.rollover_keyframes - cfg.num_scale_frames)
        return cfg.with_depth or cfg.keyframes.policy == "flow" or near_rollover

    # -- window rollover ---------------------------------------------------------------------
    def _remember_keyframe(self, frame: _Pending, outputs, i: int, c2w_world: np.ndarray) -> None:
        depth = None
        if outputs.depth is not None:
            depth = self._align.apply_depth(outputs.depth[i, ..., 0].float())
        self._recent_keyframes.append(_Keyframe(frame.image, frame.index, c2w_world, depth))

    def _rollover(self) -> None:
        """Start a new window on the last anchors and align it to the current one."""
        anchors = list(self._recent_keyframes)
        self._kv.reset()
        self._camera.reset()
        self._policy.reset()
        outputs, txn = self._step(torch.stack([a.image for a in anchors]), with_depth=True)
        txn.commit()
        last = len(anchors) - 1
        prev_depths = [a.depth for a in anchors]
        paired = [i for i, d in enumerate(prev_depths) if d is not None]
        curr_c2w = outputs.c2w.double().cpu().numpy()
        self._align = reference_alignment(
            anchors[last].c2w, curr_c2w[last],
            torch.stack([prev_depths[i] for i in paired]) if paired else None,
            outputs.depth[paired, ..., 0].float() if paired else None)
        self._window += 1
        self._window_keyframes = len(anchors)
        self._counts["rollovers"] += 1
        self.rollovers.append(Rollover(self._window, anchors[last].index, self._align,
                                       anchors[last].c2w, self._align.apply_c2w(curr_c2w[last])))
        # The anchors keep their published poses and depths (they are not emitted again);
        # the policy restarts, so the next frame is the new window's first keyframe.

    # -- results -----------------------------------------------------------------------------
    def _result(self, frame: _Pending, outputs, i: int, keyframe: bool, t0: float,
                num_frames: int) -> FrameResult:
        c2w_window = outputs.c2w[i].double().cpu().numpy()
        c2w = self._align.apply_c2w(c2w_window)
        K_model = outputs.intrinsics[i].double().cpu().numpy()
        depth = conf = rgb = None
        if self.config.return_depth and outputs.depth is not None:
            depth = self._align.apply_depth(outputs.depth[i, ..., 0].float()).cpu().numpy()
            conf = outputs.depth_conf[i].float().cpu().numpy()
            rgb = (frame.image.permute(1, 2, 0) * 255.0).round().byte().cpu().numpy()
        latency_ms = (time.perf_counter() - t0) * 1e3
        if i == num_frames - 1:
            self._latency.add(latency_ms)
        self._counts["processed"] += 1
        self._counts["keyframes" if keyframe else "non_keyframes"] += 1
        self.trajectory.append(frame.stamp_ns, c2w)
        return FrameResult(index=frame.index, stamp_ns=frame.stamp_ns, keyframe=keyframe,
                           window=self._window, c2w=c2w,
                           pose_enc=outputs.pose_enc[i].float().cpu().numpy(),
                           K=frame.crop.K_to_original(K_model), K_model=K_model, crop=frame.crop,
                           latency_ms=latency_ms, depth=depth, depth_conf=conf, rgb=rgb)

"""StreamingSession: one camera stream through model, caches and keyframe policy.

    session = StreamingSession(model, SessionConfig(...))
    for image, stamp in camera:
        for result in session.push(image, stamp, "rgb8"):   # FrameResult, in input order
            publish(result)
    session.reset()                                         # between sequences

Start-up: the first ``num_scale_frames`` frames are buffered and run together (the
bidirectional anchor phase), so no result exists until that many frames have arrived; then
every push returns its own frame. Each streaming frame is one step of the stream's
``StreamRunner`` (which owns the caches, the attention backend and the CUDA graphs): a
keyframe known in advance (policy ``all``, the keyframes of ``every_n``) is begun as a
keyframe step and sees the window its commit leaves; any other frame is begun speculatively,
sees the un-evicted window, and is committed (eviction runs then) or rolled back once the
policy has decided, in both caches.

Unbounded streams: after ``rollover_keyframes`` keyframes in a segment, a new segment starts
whose anchor frames are the last ``num_scale_frames`` keyframes (re-run as its scale phase);
it is aligned to the previous one by Sim(3) (rotation and centre of the latest anchor, scale
from the median depth ratio), so the published trajectory stays continuous while memory,
RoPE time index and per-frame cost stay bounded. ("Window" always means the KV window of
``SessionConfig.window``; a segment is the stretch between two rollovers.)
"""
from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

from ..cache import StepKind
from ..config import SessionConfig
from ..preprocess import CropInfo, preprocess
from .keyframes import make_policy
from .sim3 import Sim3, reference_alignment
from .stats import LatencyWindow
from .stream_runner import StreamRunner, check_runnable, fast_path_of
from .trajectory import Trajectory
from .types import FrameFailed, FrameRejected, FrameResult


@dataclass
class _Keyframe:
    """A committed frame kept for the next segment's anchors."""

    image: torch.Tensor  # (3, H, W) model input on the device
    index: int
    c2w: np.ndarray  # (4, 4) float64, world frame (as published)
    depth: Optional[torch.Tensor]  # (H, W) world-scale depth on the device


@dataclass(frozen=True)
class Rollover:
    """A segment change, for diagnostics: the Sim(3) and how well the anchor stayed put."""

    segment: int  # the new segment's number
    frame_index: int  # the anchor frame (latest keyframe of the previous segment)
    alignment: Sim3  # new segment -> world
    anchor_c2w_published: np.ndarray  # (4, 4) as published in the previous segment
    anchor_c2w_aligned: np.ndarray  # (4, 4) the new segment's estimate, aligned


@dataclass(frozen=True)
class SessionEvent:
    """Something a front end should log once and count: the session restarted itself."""

    kind: str  # restart_stamp_backwards | restart_stamp_gap | restart_size_changed
    message: str  # one line naming what happened (both stamps, both sizes)


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
        # The stream's caches, backend and graphs; sized on the first frame (patch grid).
        self._runner: Optional[StreamRunner] = None
        self._model_hw: Optional[tuple[int, int]] = None
        self._latency = LatencyWindow()
        # Checked now, so a setting this model cannot run fails before the first frame.
        self.fused_kernels = model.resolve_fused_kernels(config.fused_kernels)
        check_runnable(model, config)
        self._events: deque[SessionEvent] = deque(maxlen=100)
        self._restarts: Counter = Counter()  # by kind; survives restarts, cleared by reset()
        self.reset()

    # -- public API ------------------------------------------------------------------------
    def push(self, image: np.ndarray, stamp_ns: int, encoding: str = "rgb8") -> list[FrameResult]:
        """Feed one frame; return the results that became available (possibly none).

        Raises ``FrameRejected`` (a ``ValueError`` with ``.reason``) for a frame that cannot be
        used: a bad image or stamp, a duplicate stamp, a stamp before the previous one (policy
        ``drop``), or a new model size not yet seen ``size_change_frames`` times in a row. The
        session is unchanged by a rejected frame (but for that count).

        The time and size policy (``SessionConfig``) may instead restart the stream on this
        frame: a stamp before the previous one (policy ``reset``), a forward jump over
        ``max_gap_s``, a new size that persisted. The frame then starts the new stream (the
        scale phase again) and ``pop_events()`` says what happened.
        """
        self._counts["frames_in"] += 1
        try:
            stamp_ns, stamp_restart = self._check_stamp(stamp_ns)
            tensor, crop = self._preprocess(image, encoding)
            # a stamp restart unlocks the size: the frame then starts the stream at any size
            size_restart = None if stamp_restart else self._check_size(crop.output_hw)
        except FrameRejected as exc:
            self._counts[f"rejected_{exc.reason}"] += 1
            raise
        restart = stamp_restart or size_restart
        if restart is not None:
            self._restart(*restart)
        if self._model_hw != crop.output_hw:
            self._allocate(crop.output_hw)
        self._size_locked = True
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
        """Forget the stream: caches (kept allocated), trajectory, segment, policy, counters.

        The next frame may have another model input size (then the caches are reallocated).
        """
        self._clear_stream()
        self._counts: Counter = Counter()
        self._restarts.clear()
        self._events.clear()

    def pop_events(self) -> list[SessionEvent]:
        """The restarts since the last call, oldest first (a front end logs and counts them)."""
        events = list(self._events)
        self._events.clear()
        return events

    def _restart(self, kind: str, message: str) -> None:
        """The time/size policy restarts the stream on the current frame; counters go on."""
        self._clear_stream()
        self._restarts[kind] += 1
        self._events.append(SessionEvent(kind, message))

    def _clear_stream(self) -> None:
        self._size_locked = False
        self._new_size: Optional[tuple[int, int]] = None  # a size seen since the last frame
        self._new_size_frames = 0  # ... that many times in a row
        if self._runner is not None:
            self._runner.reset()
        self.trajectory.reset()
        self._policy.reset()
        self._anchors_pending: list[_Pending] = []
        self._recent_keyframes: deque[_Keyframe] = deque(maxlen=self.config.num_scale_frames)
        self._streaming = False
        self._align = Sim3.identity()
        self._segment = 0
        self._segment_keyframes = 0
        self._next_index = 0
        self._last_stamp: Optional[int] = None
        self._latency.clear()
        self.rollovers: deque[Rollover] = deque(maxlen=64)  # the most recent segment changes

    def info(self) -> dict:
        """Counters, phase, segment, timing and cache state (for services and diagnostics)."""
        c = self._counts
        rejected = {k[len("rejected_"):]: v for k, v in c.items() if k.startswith("rejected_")}
        if self._runner is not None:
            stream = self._runner.info()
        else:
            attention, fast_path = fast_path_of(self.model, self.config)
            stream = {"attention": attention, "fast_path": fast_path,
                      "fused_kernels": self.fused_kernels, "graph_captures": 0,
                      "graph_capture_failures": 0, "cache": None, "camera_cache": None}
        return {
            "frames_in": c["frames_in"], "frames_processed": c["processed"],
            "keyframes": c["keyframes"], "non_keyframes": c["non_keyframes"],
            "frames_rejected": sum(rejected.values()), "rejected_by_reason": rejected,
            "frames_failed": c["failed_non_finite"],
            "phase": "streaming" if self._streaming else "scale_frames",
            "scale_frames_buffered": len(self._anchors_pending),
            "startup_latency_frames": self.config.num_scale_frames,
            "segment": self._segment, "segment_keyframes": self._segment_keyframes,
            "rollovers": c["rollovers"], "model_hw": self._model_hw,
            "restarts": sum(self._restarts.values()), "restarts_by_reason": dict(self._restarts),
            "trajectory_poses": len(self.trajectory),
            "latency_ms": self._latency.summary(),
            **stream,
        }

    def fast_path(self) -> str:
        """``cuda_graph`` when streaming steps are graph replays, else why they are eager."""
        if self._runner is not None:
            return self._runner.fast_path
        return fast_path_of(self.model, self.config)[1]

    # -- input checks ----------------------------------------------------------------------
    def _check_stamp(self, stamp_ns) -> tuple[int, Optional[tuple[str, str]]]:
        """The stamp as int ns, and the restart it calls for (kind, message) or None."""
        if not isinstance(stamp_ns, (int, np.integer)) or isinstance(stamp_ns, bool):
            raise FrameRejected("bad_stamp", f"stamp must be integer nanoseconds, got {stamp_ns!r}")
        stamp_ns, last = int(stamp_ns), self._last_stamp
        if last is None or stamp_ns > last:
            gap = self.config.max_gap_s
            if last is not None and gap is not None and stamp_ns - last > gap * 1e9:
                return stamp_ns, ("restart_stamp_gap", (
                    f"stream restarted: stamp {stamp_ns} ns is {(stamp_ns - last) / 1e9:.3f} s "
                    f"after the previous frame's {last} ns (session.max_gap_s {gap:g})"))
            return stamp_ns, None
        if stamp_ns == last:
            raise FrameRejected("duplicate_stamp", f"stamp {stamp_ns} ns repeats the previous "
                                "frame's; frame skipped")
        if self.config.on_stamp_backwards == "drop":
            raise FrameRejected("non_monotonic_stamp", f"stamp {stamp_ns} ns is before the "
                                f"previous frame's {last} ns; frame skipped "
                                "(session.on_stamp_backwards: drop)")
        return stamp_ns, ("restart_stamp_backwards", (
            f"stream restarted: stamp {stamp_ns} ns is before the previous frame's {last} ns "
            "(a looped bag or a restarted player?)"))

    def _preprocess(self, image, encoding: str):
        try:
            return preprocess(image, encoding, self.config.preprocess, device=self.device)
        except ValueError as exc:
            raise FrameRejected("bad_image", f"image refused: {exc}") from exc

    def _check_size(self, hw: tuple[int, int]) -> Optional[tuple[str, str]]:
        """The restart a model input size calls for, or None; FrameRejected while a new size
        has not yet persisted for ``size_change_frames`` frames."""
        old = self._model_hw
        if not self._size_locked or hw == old:
            self._new_size, self._new_size_frames = None, 0
            return None
        need = self.config.size_change_frames
        self._new_size_frames = self._new_size_frames + 1 if hw == self._new_size else 1
        self._new_size = hw
        if self._new_size_frames >= need:
            return ("restart_size_changed", (
                f"stream restarted: the model input changed from {old[0]}x{old[1]} to "
                f"{hw[0]}x{hw[1]} for {need} frame(s) in a row (the camera changed resolution "
                "or aspect)"))
        raise FrameRejected("size_changed", f"model input {hw[0]}x{hw[1]} differs from the "
                            f"stream's {old[0]}x{old[1]} ({self._new_size_frames} of "
                            f"{need} frame(s): the stream restarts on the new size if it "
                            "persists)")

    def _allocate(self, hw: tuple[int, int]) -> None:
        self._runner = None  # free the old size's GPU memory before allocating the new one
        self._runner = StreamRunner(self.model, self.config, hw)
        self._model_hw = hw

    # -- the two phases --------------------------------------------------------------------
    def _run_scale_phase(self) -> list[FrameResult]:
        frames, self._anchors_pending = self._anchors_pending, []
        t0 = time.perf_counter()
        outputs, txn = self._runner.step(torch.stack([f.image for f in frames]),
                                         StepKind.KEYFRAME)
        # Anchors that gave no usable pose are dropped: the next frames collect new ones.
        self._check_finite(outputs, txn, f"anchor frames {frames[0].index}-{frames[-1].index}")
        txn.commit()
        # The world is the first frame's camera exactly: the network's own estimate for
        # frame 0 is only close to the identity (and arbitrary with random weights).
        first = outputs.c2w[0].double().cpu().numpy()
        self._align = Sim3.from_matrix(np.linalg.inv(first))
        self._streaming = True
        self._segment_keyframes = len(frames)
        results = [self._result(f, outputs, i, True, t0, len(frames))
                   for i, f in enumerate(frames)]
        for i, f in enumerate(frames):
            self._remember_keyframe(f, outputs, i, results[i].c2w)
        # The policy starts fresh: the first streaming frame is a keyframe (the reference's
        # rule for both the fixed interval and the flow mode).
        return results

    def _run_streaming_frame(self, frame: _Pending) -> FrameResult:
        t0 = time.perf_counter()
        # A keyframe known before the forward evicts first; any other frame is speculative
        # and sees the un-evicted window (the reference's deferred eviction).
        known = self._policy.known_before_forward(frame.index)
        kind = StepKind.KEYFRAME if known else StepKind.SPECULATIVE
        outputs, txn = self._runner.step(frame.image[None], kind,
                                         with_depth=self._needs_depth())
        self._check_finite(outputs, txn, f"frame {frame.index}")
        depth = outputs.depth[0, ..., 0] if outputs.depth is not None else None
        keyframe = known if known is not None else self._policy.decide(
            frame.index, depth, outputs.intrinsics[0], outputs.c2w[0])
        if keyframe:
            txn.commit()
            self._policy.on_keyframe(frame.index, depth, outputs.intrinsics[0], outputs.c2w[0])
            self._segment_keyframes += 1
        else:
            txn.rollback()
        result = self._result(frame, outputs, 0, keyframe, t0, 1)
        if keyframe:
            self._remember_keyframe(frame, outputs, 0, result.c2w)
            if self._segment_keyframes >= (self.config.rollover_keyframes or 1 << 62):
                self._rollover()
        return result

    def _check_finite(self, outputs, txn, what: str) -> None:
        """Roll the step back and raise ``FrameFailed`` if a pose is not finite (diverged
        weights, a bf16 overflow): such a frame must not enter the caches or the trajectory.
        (The pose is read back to the host for the result anyway: no extra wait.)"""
        if bool(torch.isfinite(outputs.pose_enc).all()):
            return
        txn.rollback()
        self._counts["failed_non_finite"] += 1
        raise FrameFailed("non_finite", f"{what}: the model's pose is not finite; the step "
                                        "was rolled back")

    def _needs_depth(self) -> bool:
        """Depth is needed for outputs, the flow policy, and the next segment's anchors."""
        cfg = self.config
        near_rollover = (cfg.rollover_keyframes is not None and self._segment_keyframes
                         >= cfg.rollover_keyframes - cfg.num_scale_frames)
        return cfg.with_depth or cfg.keyframes.policy == "flow" or near_rollover

    # -- segment rollover --------------------------------------------------------------------
    def _remember_keyframe(self, frame: _Pending, outputs, i: int, c2w_world: np.ndarray) -> None:
        depth = None
        if outputs.depth is not None:
            depth = self._align.apply_depth(outputs.depth[i, ..., 0].float())
        self._recent_keyframes.append(_Keyframe(frame.image, frame.index, c2w_world, depth))

    def _rollover(self) -> None:
        """Start a new segment on the last anchors and align it to the current one."""
        anchors = list(self._recent_keyframes)
        self._runner.reset()
        self._policy.reset()
        outputs, txn = self._runner.step(torch.stack([a.image for a in anchors]),
                                         StepKind.KEYFRAME)
        txn.commit()
        last = len(anchors) - 1
        prev_depths = [a.depth for a in anchors]
        paired = [i for i, d in enumerate(prev_depths) if d is not None]
        curr_c2w = outputs.c2w.double().cpu().numpy()
        self._align = reference_alignment(
            anchors[last].c2w, curr_c2w[last],
            torch.stack([prev_depths[i] for i in paired]) if paired else None,
            outputs.depth[paired, ..., 0].float() if paired else None)
        self._segment += 1
        self._segment_keyframes = len(anchors)
        self._counts["rollovers"] += 1
        self.rollovers.append(Rollover(self._segment, anchors[last].index, self._align,
                                       anchors[last].c2w, self._align.apply_c2w(curr_c2w[last])))
        # The anchors keep their published poses and depths (they are not emitted again);
        # the policy restarts, so the next frame is the new segment's first keyframe.

    # -- results -----------------------------------------------------------------------------
    def _result(self, frame: _Pending, outputs, i: int, keyframe: bool, t0: float,
                num_frames: int) -> FrameResult:
        c2w_segment = outputs.c2w[i].double().cpu().numpy()
        c2w = self._align.apply_c2w(c2w_segment)
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
                           segment=self._segment, c2w=c2w,
                           pose_enc=outputs.pose_enc[i].float().cpu().numpy(),
                           K=frame.crop.K_to_original(K_model), K_model=K_model, crop=frame.crop,
                           latency_ms=latency_ms, depth=depth, depth_conf=conf, rgb=rgb)

"""StreamingSession: one camera stream through model, caches and keyframe policy.

    session = StreamingSession(model, SessionConfig(...))
    for image, stamp in camera:
        for result in session.push(image, stamp, "rgb8"):   # FrameResult, in input order
            publish(result)
    session.reset()                                         # between sequences

Pipelined (frames already waiting, e.g. a bag, a benchmark or a node with a backlog): the
host work of frame t+1 (checks, preprocessing uploaded on a side stream) runs while the GPU
replays frame t; once t is finished, only what t+1's step depends on (t's check, keyframe
decision and commit, then t+1's bookkeeping, attention plan and launch) runs before the GPU
has work again, and t's result is built while the GPU replays t+1:

    for image, stamp in camera:
        session.submit(image, stamp, "rgb8")    # frame t+1 queued behind frame t
        for outcome in session.collect(wait=False):   # frame t, if finished
            ...                                 # FrameResult, or FrameFailed (rolled back)
    outcomes = session.collect()                # the last one

``push`` is ``submit`` + ``collect()``: the frame's own result, as before.

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
from typing import Optional, Union

import numpy as np
import torch

from ..cache import StepKind
from ..config import SessionConfig
from ..preprocess import CropInfo, preprocess
from .keyframes import make_policy
from .readback import HostReadback
from .sim3 import Sim3, reference_alignment
from .stats import HostLaps, LatencyWindow
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
    ticket: int  # what ``submit`` returned for it
    t0: float  # perf_counter when the frame was handed in


@dataclass
class _InFlight:
    """A streaming frame whose step is queued on the GPU and not yet finished."""

    frame: _Pending
    outputs: object  # StepOutputs on the device
    txn: object  # the open StepTxn
    known: Optional[bool]  # keyframe decided before the forward, else None


@dataclass
class _Closed:
    """A streaming frame whose step is closed (committed or rolled back), result not built."""

    flight: _InFlight
    host: dict  # its outputs on the host (``HostReadback`` views: valid for one more frame)
    keyframe: bool
    rollover_due: bool  # its commit completes the segment: roll over before the next step


Outcome = Union[FrameResult, FrameFailed]  # what ``collect`` returns per frame, in order


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
        self._readback = HostReadback()
        self._laps = HostLaps()  # host time per phase of a step, when timed (benchmarks)
        self._in_flight: Optional[_InFlight] = None
        self._ready: list[Outcome] = []  # finished frames not yet collected, in order
        self._next_ticket = 0  # never reset: a ticket names one handed-in frame for good
        # Uploads and preprocessing of the next frame run beside the current step's replay.
        self._upload_stream = (torch.cuda.Stream(self.device) if self.device.type == "cuda"
                               else None)
        self.reset()

    # -- public API ------------------------------------------------------------------------
    def push(self, image: np.ndarray, stamp_ns: int, encoding: str = "rgb8") -> list[FrameResult]:
        """Feed one frame; return the results that became available (possibly none).

        Raises ``FrameRejected`` (a ``ValueError`` with ``.reason``) for a frame that cannot be
        used: a bad image or stamp, a duplicate stamp, a stamp before the previous one (policy
        ``drop``), or a new model size not yet seen ``size_change_frames`` times in a row. The
        session is unchanged by a rejected frame (but for that count). Raises ``FrameFailed``
        for a frame whose pose is not finite (rolled back).

        The time and size policy (``SessionConfig``) may instead restart the stream on this
        frame: a stamp before the previous one (policy ``reset``), a forward jump over
        ``max_gap_s``, a new size that persisted. The frame then starts the new stream (the
        scale phase again) and ``pop_events()`` says what happened.

        This is ``submit`` + ``collect()``: the GPU idles while the host prepares the next
        frame. When frames are waiting, pipeline with those two instead.
        """
        self.submit(image, stamp_ns, encoding)
        results = []
        for outcome in self.collect():
            if isinstance(outcome, FrameFailed):
                raise outcome
            results.append(outcome)
        return results

    def submit(self, image: np.ndarray, stamp_ns: int, encoding: str = "rgb8", *,
               with_depth: Optional[bool] = None) -> int:
        """Hand in one frame; return once its step is queued on the GPU, without waiting
        for it (``collect`` gives its outcome). The frame handed in before it is finished
        here, after this frame's checks and preprocessing, which thus overlap its replay.

        ``FrameRejected`` as in ``push`` (nothing else changes). ``with_depth``: False skips
        the depth head for this frame when no output needs it (it still runs for the flow
        policy and the next segment's anchors); None = ``config.with_depth``.

        Returns the frame's ticket: a number unique over the session's life (a reset or a
        restart does not reuse one) that its outcome carries (``FrameResult.ticket``,
        ``FrameFailed.tickets``). A rejected frame gets none: nothing is kept for it.
        """
        self._counts["frames_in"] += 1
        t0 = time.perf_counter()
        self._laps.mark()
        try:
            stamp_ns, stamp_restart = self._check_stamp(stamp_ns)
            tensor, crop = self._preprocess(image, encoding)
            # a stamp restart unlocks the size: the frame then starts the stream at any size
            size_restart = None if stamp_restart else self._check_size(crop.output_hw)
        except FrameRejected as exc:
            self._counts[f"rejected_{exc.reason}"] += 1
            raise
        self._laps.lap("checks_preprocess")
        # The previous frame's step closes before this one opens (its pages and fate decide
        # this one's); its result is built after this frame's step is queued, off the GPU's
        # idle time, unless the stream changes first (a restart, a new size, a rollover).
        closed = self._close_in_flight()
        try:
            restart = stamp_restart or size_restart
            if closed is not None and (restart is not None or closed.rollover_due
                                       or self._model_hw != crop.output_hw):
                closed = self._report(closed)
            if restart is not None:
                self._restart(*restart)
            if self._model_hw != crop.output_hw:
                self._allocate(crop.output_hw)
            self._size_locked = True
            self._last_stamp = stamp_ns
            frame = _Pending(tensor, stamp_ns, crop, self._next_index, self._next_ticket, t0)
            self._next_index += 1
            self._next_ticket += 1
            if len(self._anchors_pending) < self.config.num_scale_frames and not self._streaming:
                closed = self._report(closed)
                self._anchors_pending.append(frame)
                if len(self._anchors_pending) == self.config.num_scale_frames:
                    try:
                        self._ready += self._run_scale_phase()
                    except FrameFailed as exc:  # rolled back; the next frames collect new anchors
                        self._ready.append(exc)
                return frame.ticket
            self._in_flight = self._launch_streaming_frame(frame, with_depth)
        finally:
            self._report(closed)  # (a failed launch still reports the frame before)
        self._plan_ahead(self._in_flight)
        return frame.ticket

    def collect(self, wait: bool = True) -> list[Outcome]:
        """Outcomes of the frames handed in, in input order: a ``FrameResult``, or the
        ``FrameFailed`` of a frame that was rolled back. ``wait``: finish the frame in flight
        first; else only what is finished already (a frame still on the GPU stays)."""
        if self._in_flight is not None and (wait or self._readback.ready()):
            self._laps.mark()
            self._finish_in_flight()
        ready, self._ready = self._ready, []
        return ready

    @property
    def in_flight(self) -> bool:
        """A frame's step is queued and not yet finished."""
        return self._in_flight is not None

    def in_flight_done(self) -> bool:
        """The GPU has finished the frame in flight, if any (``collect`` will not wait)."""
        return self._in_flight is None or self._readback.ready()

    def reset(self) -> None:
        """Forget the stream: caches (kept allocated), trajectory, segment, policy, counters.
        A frame in flight and outcomes not yet collected are dropped.

        The next frame may have another model input size (then the caches are reallocated).
        """
        self._clear_stream()
        self._ready = []
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
        if self._in_flight is not None:  # (only a reset gets here with one)
            self._in_flight = None
            self._readback.discard()
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
                      "graph_capture_failures": 0, "steps_planned_ahead": 0, "cache": None,
                      "camera_cache": None}
        return {
            "frames_in": c["frames_in"], "frames_processed": c["processed"],
            "keyframes": c["keyframes"], "non_keyframes": c["non_keyframes"],
            "frames_rejected": sum(rejected.values()), "rejected_by_reason": rejected,
            "frames_failed": c["failed_non_finite"],
            "plan_ahead_failures": c["plan_ahead_failed"],  # the step was then planned as usual
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

    def time_replays(self, enabled: bool = True) -> None:
        """Record the GPU time of each CUDA-graph replay (``replay_ms``): a benchmark's
        measure of the step's GPU time, to compare with the wall time per frame."""
        if self._runner is not None and self._runner.graph is not None:
            self._runner.graph.time_replays = enabled

    def replay_ms(self) -> list[float]:
        """GPU milliseconds of each replay timed since the last call ([] without graphs)."""
        if self._runner is None or self._runner.graph is None:
            return []
        return self._runner.graph.replay_ms()

    def time_host(self, enabled: bool = True) -> None:
        """Record the host time of each phase of a step (``host_ms``): what the GPU waits
        for between two replays is ``close`` + ``begin`` + ``load`` + ``plan`` + ``launch``
        (after ``wait``; ``plan`` is ~0 when the step was planned ahead); the rest overlaps
        a replay when pipelined."""
        self._laps.enabled = enabled

    def host_ms(self) -> dict[str, list[float]]:
        """Milliseconds per phase (``time_host``) since the last call, one entry per step:
        checks_preprocess, wait (for the frame before), close (its check, decision and
        commit), begin, load, plan, launch, copy_outputs (graphs; eager: plan, model),
        readback_start, report (the frame before's result), plan_ahead (the next step's
        plan, made while this one runs)."""
        return self._laps.take()

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
            if self._upload_stream is None:
                return preprocess(image, encoding, self.config.preprocess, device=self.device)
            # Beside the step in flight: the upload (pinned, asynchronous) and the resize
            # do not wait for its replay; the step's stream waits for them instead.
            main = torch.cuda.current_stream(self.device)
            with torch.cuda.stream(self._upload_stream):
                tensor, crop = preprocess(image, encoding, self.config.preprocess,
                                          device=self.device)
            main.wait_stream(self._upload_stream)
            tensor.record_stream(main)  # made on the side stream, used (and kept) on main
            return tensor, crop
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
        self._runner = StreamRunner(self.model, self.config, hw, laps=self._laps)
        self._model_hw = hw

    # -- the two phases --------------------------------------------------------------------
    def _run_scale_phase(self) -> list[FrameResult]:
        frames, self._anchors_pending = self._anchors_pending, []
        outputs, txn = self._runner.step(torch.stack([f.image for f in frames]),
                                         StepKind.KEYFRAME)
        self._readback.start(self._host_tensors(frames, outputs))
        host = self._readback.wait()
        # Anchors that gave no usable pose are dropped: the next frames collect new ones.
        self._check_finite(host, txn, f"anchor frames {frames[0].index}-{frames[-1].index}",
                           frames)
        txn.commit()
        # The world is the first frame's camera exactly: the network's own estimate for
        # frame 0 is only close to the identity (and arbitrary with random weights).
        self._align = Sim3.from_matrix(np.linalg.inv(host["c2w"][0].astype(np.float64)))
        self._streaming = True
        self._segment_keyframes = len(frames)
        results = [self._result(f, host, i, True, len(frames)) for i, f in enumerate(frames)]
        for i, f in enumerate(frames):
            self._remember_keyframe(f, outputs, i, results[i].c2w)
        # The policy starts fresh: the first streaming frame is a keyframe (the reference's
        # rule for both the fixed interval and the flow mode).
        return results

    def _launch_streaming_frame(self, frame: _Pending, with_depth: Optional[bool]) -> _InFlight:
        # A keyframe known before the forward evicts first; any other frame is speculative
        # and sees the un-evicted window (the reference's deferred eviction).
        known = self._policy.known_before_forward(frame.index)
        kind = StepKind.KEYFRAME if known else StepKind.SPECULATIVE
        outputs, txn = self._runner.step(frame.image[None], kind,
                                         with_depth=self._needs_depth(with_depth))
        try:
            self._readback.start(self._host_tensors([frame], outputs))
        except Exception:
            txn.rollback()
            raise
        self._laps.lap("readback_start")
        return _InFlight(frame, outputs, txn, known)

    def _plan_ahead(self, flight: _InFlight) -> None:
        """While ``flight`` runs on the GPU, plan the next frame's step as it will be if
        ``flight`` closes as expected: a keyframe known in advance is committed, any other
        frame rolled back (a flow frame's fate is a guess; a wrong guess, a failure or a
        rollover only means the next step is planned anew, after the wait)."""
        keyframe = flight.known is True
        index = flight.frame.index
        known = self._policy.known_after(index, keyframe, index + 1)
        try:
            self._runner.forecast_next(keyframe, StepKind.KEYFRAME if known
                                       else StepKind.SPECULATIVE)
        except Exception:  # noqa: BLE001 -- only a head start: the next begin plans anyway
            self._counts["plan_ahead_failed"] += 1
        self._laps.lap("plan_ahead")

    def _finish_in_flight(self) -> None:
        """Wait for the frame in flight (if any), close its step, queue its outcome."""
        self._report(self._close_in_flight())

    def _close_in_flight(self) -> Optional[_Closed]:
        """Wait for the frame in flight (if any), check it, decide its fate and close its
        step: all that the next step depends on. A failed frame's outcome is queued here;
        a finished one's is built by ``_report``."""
        flight, self._in_flight = self._in_flight, None
        if flight is None:
            return None
        try:
            host = self._readback.wait()
        except Exception:  # a CUDA error surfacing at the wait
            flight.txn.rollback()
            raise
        self._laps.lap("wait")
        frame, outputs, txn = flight.frame, flight.outputs, flight.txn
        try:
            self._check_finite(host, txn, f"frame {frame.index}", [frame])
        except FrameFailed as exc:
            self._ready.append(exc)
            return None
        depth = outputs.depth[0, ..., 0] if outputs.depth is not None else None
        keyframe = flight.known if flight.known is not None else self._policy.decide(
            frame.index, depth, outputs.intrinsics[0], outputs.c2w[0])
        if keyframe:
            txn.commit()
            self._policy.on_keyframe(frame.index, depth, outputs.intrinsics[0], outputs.c2w[0])
            self._segment_keyframes += 1
        else:
            txn.rollback()
        rollover_due = keyframe and self._segment_keyframes >= (
            self.config.rollover_keyframes or 1 << 62)
        self._laps.lap("close")
        return _Closed(flight, host, keyframe, rollover_due)

    def _report(self, closed: Optional[_Closed]) -> None:
        """Queue the result of a closed step (host work only, but for a keyframe's depth
        kept for the next segment's anchors), then roll the segment over if it is due."""
        if closed is None:
            return None
        frame, outputs = closed.flight.frame, closed.flight.outputs
        result = self._result(frame, closed.host, 0, closed.keyframe, 1)
        if closed.keyframe:
            self._remember_keyframe(frame, outputs, 0, result.c2w)
        self._ready.append(result)
        if closed.rollover_due:
            self._rollover()
        self._laps.lap("report")
        return None

    def _check_finite(self, host: dict, txn, what: str, frames: list[_Pending]) -> None:
        """Roll the step back and raise ``FrameFailed`` if a pose is not finite (diverged
        weights, a bf16 overflow): such a frame must not enter the caches or the trajectory.
        (Checked on the pose read back for the result: no extra wait.)"""
        if np.isfinite(host["pose_enc"]).all():
            return
        txn.rollback()
        self._counts["failed_non_finite"] += 1
        raise FrameFailed("non_finite", f"{what}: the model's pose is not finite; the step "
                                        "was rolled back", [f.stamp_ns for f in frames],
                          [f.ticket for f in frames])

    def _needs_depth(self, wanted: Optional[bool] = None) -> bool:
        """Depth is needed for outputs (``wanted``, else ``config.with_depth``), the flow
        policy, and the next segment's anchors."""
        cfg = self.config
        near_rollover = (cfg.rollover_keyframes is not None and self._segment_keyframes
                         >= cfg.rollover_keyframes - cfg.num_scale_frames)
        wanted = cfg.with_depth if wanted is None else wanted and cfg.with_depth
        return wanted or cfg.keyframes.policy == "flow" or near_rollover

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
    def _host_tensors(self, frames: list[_Pending], outputs) -> dict[str, torch.Tensor]:
        """What a result needs on the host, still on the device (``HostReadback`` copies it)."""
        out = {"pose_enc": outputs.pose_enc, "c2w": outputs.c2w, "K": outputs.intrinsics}
        if self.config.return_depth and outputs.depth is not None:
            out["depth"] = self._align.apply_depth(outputs.depth[..., 0].float())  # (n, H, W)
            out["depth_conf"] = outputs.depth_conf.float()
            images = torch.stack([f.image for f in frames])  # (n, 3, H, W) in [0, 1]
            out["rgb"] = (images.permute(0, 2, 3, 1) * 255.0).round().byte()  # (n, H, W, 3)
        return out

    def _result(self, frame: _Pending, host: dict, i: int, keyframe: bool,
                num_frames: int) -> FrameResult:
        """Frame ``i`` of a step's outputs read back to the host (``_host_tensors``)."""
        c2w = self._align.apply_c2w(host["c2w"][i].astype(np.float64))
        K_model = host["K"][i].astype(np.float64)
        # copies: ``host`` holds views of the readback buffers, which later frames reuse
        depth = host["depth"][i].copy() if "depth" in host else None
        conf = host["depth_conf"][i].copy() if "depth_conf" in host else None
        rgb = host["rgb"][i].copy() if "rgb" in host else None
        latency_ms = (time.perf_counter() - frame.t0) * 1e3
        if i == num_frames - 1:
            self._latency.add(latency_ms)
        self._counts["processed"] += 1
        self._counts["keyframes" if keyframe else "non_keyframes"] += 1
        self.trajectory.append(frame.stamp_ns, c2w)
        return FrameResult(index=frame.index, ticket=frame.ticket, stamp_ns=frame.stamp_ns,
                           keyframe=keyframe,
                           segment=self._segment, c2w=c2w,
                           pose_enc=host["pose_enc"][i].astype(np.float32, copy=True),
                           K=frame.crop.K_to_original(K_model), K_model=K_model, crop=frame.crop,
                           latency_ms=latency_ms, depth=depth, depth_conf=conf, rgb=rgb)

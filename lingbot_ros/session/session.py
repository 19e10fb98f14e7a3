"""StreamingSession: one camera stream through model, caches and keyframe policy; the
pipeline of its steps.

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
        ticket = session.submit(image, stamp, "rgb8")   # frame t+1 queued behind frame t
        for outcome in session.collect(wait=False):     # frame t, if finished
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

This module is the pipeline: one in-flight step (``flight.Flight``), closed in
``_close_flight`` and reported in ``_report``, whose results change the session in one place
(``_publish``). Each concept around it has its owner: ``InputPolicy`` (stamps and sizes),
``Segments`` (alignment, rollovers), ``results`` (a ``FrameResult``), ``FrameUpload``,
``info`` (``session_info``), ``session.snapshots`` (``SessionSnapshots``), ``session.timing``
(``BenchTiming``), ``session.weights`` (``WeightsIdentity``).
"""
from __future__ import annotations

import time
import weakref
from collections import Counter, deque
from typing import Optional, Union

import numpy as np
import torch

from ..cache import StepKind
from ..config import SessionConfig
from ..geometry import Trajectory
from ..model import StepOutputs
from .fingerprint import InputFingerprint
from .flight import Closed, Flight, Opened, Staged, decide, non_finite, run_alone
from .frame_upload import FrameUpload
from .info import SessionInfo, StreamInfo, session_info
from .input_policy import InputPolicy, SessionEvent
from .keyframes import make_policy
from .next_segment import NextSegment
from .readback import HostReadback
from .results import Frame, frame_result, host_tensors
from .segments import Rollover, Segments
from .session_state import SessionSnapshots
from .stats import LatencyWindow
from .stream_runner import StreamRunner, check_runnable, fast_path_of
from .timing import BenchTiming
from .types import FrameFailed, FrameRejected, FrameResult
from .weights import WeightsIdentity

__all__ = ["StreamingSession", "Outcome", "Rollover", "SessionEvent"]

Outcome = Union[FrameResult, FrameFailed]  # what ``collect`` returns per frame, in order


class StreamingSession:
    def __init__(self, model, config: SessionConfig = SessionConfig(),
                 weights: Optional[WeightsIdentity] = None) -> None:
        """``model``: a ``GCTModel`` already ``prepare``d on ``config.device``; ``weights``:
        its identity for snapshots, when several sessions share the model (hashed once)."""
        self.model = model
        self.weights = weights if weights is not None else WeightsIdentity(model)
        self.config = config
        self.device = torch.device(config.device)
        self.trajectory = Trajectory()
        # Checked now, so a setting this model cannot run fails before the first frame.
        self.fused_kernels = model.resolve_fused_kernels(config.fused_kernels)
        check_runnable(model, config)
        # Owners of the stream's state (each cleared by its own reset on a restart):
        self._input = InputPolicy(config)  # stamps and sizes
        self._policy = make_policy(config.keyframes, config.device)  # keyframes
        self._segments = Segments(config)  # world alignment, rollovers, next anchors
        self._next = NextSegment(model, config)  # a sliced rollover's anchor step, building
        self._runner: Optional[StreamRunner] = None  # caches, graphs: sized on a first frame
        self._runner_factory = StreamRunner  # its signature; a rig's draws from shared pools
        self._model_hw: Optional[tuple[int, int]] = None
        self._anchors: list[Frame] = []  # frames waiting for the scale phase
        self._flight: Optional[Flight] = None  # the step on the GPU (``_take_flight``)
        self._readback = HostReadback()
        self._ready: list[Outcome] = []  # finished frames not yet collected, in order
        self._next_index = 0  # frames taken since the stream (re)started
        self._next_ticket = 0  # never reset: a ticket names one handed-in frame for good
        self._latency = LatencyWindow()
        me = weakref.ref(self)  # no cycle: a dropped session frees its caches at once
        self.timing = BenchTiming(lambda: me()._runner)  # the benchmark's timers
        self._laps = self.timing.laps  # host time per phase of a step, when timed
        self._events: deque[SessionEvent] = deque(maxlen=100)
        self._restarts: Counter = Counter()  # by kind; survives restarts, cleared by reset()
        self._counts: Counter = Counter()
        self._fingerprint = InputFingerprint()  # the input's first frames, for snapshots
        self._upload = FrameUpload(config)  # the next frame's, beside the current replay
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
        staged = self._stage(image, stamp_ns, encoding, with_depth)
        try:
            frame, opened = self._open(staged)
            if opened is not None:
                self._launched(*run_alone(self._runner, opened))  # the step, alone
        finally:
            self._report(staged.closed)  # the one report site (also after a failed launch)
        return frame.ticket

    def collect(self, wait: bool = True) -> list[Outcome]:
        """Outcomes of the frames handed in, in input order: a ``FrameResult``, or the
        ``FrameFailed`` of a frame that was rolled back. ``wait``: finish the frame in flight
        first; else only what is finished already (a frame still on the GPU stays)."""
        if self._flight is not None and (wait or self._readback.ready()):
            self._laps.mark()
            self._report(self._close_flight())
        ready, self._ready = self._ready, []
        return ready

    @property
    def in_flight(self) -> bool:
        """A frame's step is queued and not yet finished."""
        return self._flight is not None

    def in_flight_done(self) -> bool:
        """The GPU has finished the frame in flight, if any (``collect`` will not wait)."""
        return self._flight is None or self._readback.ready()

    def reset(self) -> None:
        """Forget the stream: caches (kept allocated; a next frame of another size
        reallocates them), trajectory, segment, policy, counters. A frame in flight and
        outcomes not yet collected are dropped."""
        self._clear_stream()
        self._ready = []
        self._counts.clear()
        self._fingerprint.clear()
        self._restarts.clear()
        self._events.clear()

    def pop_events(self) -> list[SessionEvent]:
        """The restarts since the last call, oldest first (a front end logs and counts them)."""
        events = list(self._events)
        self._events.clear()
        return events

    @property
    def rollovers(self) -> deque[Rollover]:
        """The most recent segment changes of this stream (read only)."""
        return self._segments.rollovers

    @property
    def snapshots(self) -> SessionSnapshots:
        """The stream's state as plain data, and its snapshots on disk (``SessionSnapshots``:
        ``take``, ``save``, ``restore``, ``state_dict``, ``load_state_dict``)."""
        return SessionSnapshots(self)

    @property
    def runner(self) -> Optional[StreamRunner]:
        """The stream's ``StreamRunner`` (caches, backend, graphs), None before the first
        frame: for inspection (its ``info``, its caches); the session drives it."""
        return self._runner

    def info(self) -> SessionInfo:
        """Counters, phase, segment, timing and cache state (for services and diagnostics)."""
        if self._runner is not None:
            return session_info(self, StreamInfo.from_runner(self._runner.info()))
        return session_info(self, StreamInfo.idle(*fast_path_of(self.model, self.config),
                                                  self.fused_kernels))

    def fast_path(self) -> str:
        """``cuda_graph`` when streaming steps are graph replays, else why they are eager."""
        return self.info().stream.fast_path

    # -- a frame's way in: stage, open, run, launched, then the closed step's report: so in
    # ``submit``; ``MultiStreamSession`` runs several streams' steps as one between the two.
    def _stage(self, image: np.ndarray, stamp_ns: int, encoding: str,
               with_depth: Optional[bool]) -> Staged:
        """Checks and preprocessing (``FrameRejected``: counted, nothing else changes); the
        previous frame's step closes (its pages and fate decide this one's), its outcome
        reported once this frame's step is queued (``Staged.closed``), or here if the stream
        changes first (a restart, a new size, a rollover), which it then does."""
        self._counts["frames_in"] += 1
        self._fingerprint.update(image, stamp_ns, encoding)  # the first few frames only
        t0 = time.perf_counter()
        self._laps.mark()
        try:
            stamp_ns, restart = self._input.check_stamp(stamp_ns)
            tensor, crop = self._upload(image, encoding)
            if restart is None:  # a stamp restart unlocks the size: any size starts the stream
                restart = self._input.check_size(crop.output_hw)
        except FrameRejected as exc:
            self._counts[f"rejected_{exc.reason}"] += 1
            raise
        self._laps.lap("checks_preprocess")
        hw = crop.output_hw
        closed = self._close_flight()
        blocking_rollover = (closed is not None and closed.rollover_due
                             and self.config.rollover_mode == "blocking")
        if not (restart or hw != self._model_hw or blocking_rollover or self._next.built):
            return Staged(tensor, stamp_ns, crop, t0, with_depth, closed)
        self._report(closed)
        if restart is not None:
            self._restart(restart)
        if hw != self._model_hw:
            self._allocate(hw)
        if self._next.built:  # a sliced rollover's anchors are ready: the new segment
            self._next.adopt(self._runner, self._policy, self._segments)
            self._counts["rollovers"] += 1
        return Staged(tensor, stamp_ns, crop, t0, with_depth, None)

    def _open(self, staged: Staged) -> tuple[Frame, Optional[Opened]]:
        """The frame goes in: buffered for the scale phase (run alone once complete), or its
        step begun (``Opened``): a keyframe known before the forward evicts first; any other
        is speculative and sees the un-evicted window (the reference's deferred eviction)."""
        self._input.accept(staged.stamp_ns, staged.crop.output_hw)
        frame = Frame(staged.image, staged.stamp_ns, staged.crop, self._next_index,
                      self._next_ticket, staged.t0)
        self._next_index += 1
        self._next_ticket += 1
        if not self._segments.started:
            self._anchors.append(frame)
            if len(self._anchors) == self.config.num_scale_frames:
                self._run_scale_phase()
            return frame, None
        known = self._policy.known_before_forward(frame.index)
        kind = StepKind.KEYFRAME if known else StepKind.SPECULATIVE
        with_depth = self._needs_depth(staged.with_depth)
        txn = self._runner.begin(1, kind)
        self._laps.lap("begin")
        return frame, Opened(frame, txn, kind, known, with_depth)

    def _launched(self, opened: Opened, outputs: StepOutputs) -> None:
        """The step is queued: its read-back starts, it is the flight, and its successor is
        planned ahead; a sliced rollover's build queues its slices behind it."""
        frame, txn = opened.frame, opened.txn
        try:
            self._readback.start(host_tensors([frame], outputs, self._segments.align,
                                              self.config))
        except Exception:
            txn.rollback()
            raise
        self._laps.lap("readback_start")
        self._flight = Flight(frame, outputs, txn, opened.known)
        self._plan_ahead(self._flight)
        if self._next.pending:  # queued behind this frame's step: the GPU runs it first
            try:
                self._next.advance(self.config.rollover_slices_per_frame)
            except Exception:  # noqa: BLE001 -- dropped; the next keyframe starts it again
                self._counts["rollover_build_failed"] += 1

    def _restart(self, event: SessionEvent) -> None:
        """The input policy restarts the stream on the current frame; counters go on."""
        self._clear_stream()
        self._restarts[event.kind] += 1
        self._events.append(event)

    def _clear_stream(self) -> None:
        if self._take_flight() is not None:  # (only a reset gets here with one)
            self._readback.discard()
        self._next.drop()
        self._anchors = []
        self._next_index = 0
        self._input.reset()
        self._segments.reset()
        self._policy.reset()
        if self._runner is not None:
            self._runner.reset()
        self.trajectory.reset()
        self._latency.clear()

    def _take_flight(self) -> Optional[Flight]:
        """The one place the in-flight step is let go (to close it, or on a reset)."""
        flight, self._flight = self._flight, None
        return flight

    def _allocate(self, hw: tuple[int, int]) -> None:
        self._next.drop()
        self._runner = None  # free the old size's GPU memory before allocating the new one
        self._runner = self._runner_factory(self.model, self.config, hw, laps=self._laps)
        self._model_hw = hw

    # -- the two phases --------------------------------------------------------------------
    def _run_scale_phase(self) -> None:
        frames, self._anchors = self._anchors, []
        outputs, txn = self._runner.step(torch.stack([f.image for f in frames]),
                                         StepKind.KEYFRAME)
        self._readback.start(host_tensors(frames, outputs, self._segments.align,
                                          self.config))
        host = self._readback.wait()
        # Anchors that gave no usable pose are dropped: the next frames collect new ones.
        failed = self._check_finite(host, txn, f"anchor frames {frames[0].index}-"
                                    f"{frames[-1].index}", frames)
        if failed is not None:
            self._ready.append(failed)
            return
        txn.commit()
        segments = self._segments
        segments.start(host["c2w"][0], len(frames))
        results = [frame_result(f, host, i, True, segments.number, segments.align,
                                time.perf_counter()) for i, f in enumerate(frames)]
        for i, f in enumerate(frames):
            segments.remember(f.image, f.index, results[i].c2w,
                              outputs.depth[i, ..., 0] if outputs.depth is not None else None)
        # The policy starts fresh: the first streaming frame is a keyframe (the reference's
        # rule for both the fixed interval and the flow mode).
        self._publish(results)

    def _plan_ahead(self, flight: Flight) -> None:
        """While ``flight`` runs on the GPU, prepare the next frame's step as it will be if
        ``flight`` closes as expected: a keyframe known in advance is committed, any other
        frame rolled back (a flow frame's fate is a guess; a wrong guess, a failure or a
        rollover only means the next step is planned anew, after the wait)."""
        keyframe = flight.known is True
        index = flight.frame.index
        known = self._policy.known_after(index, keyframe, index + 1)
        try:
            self._runner.prepare_next(keyframe, StepKind.KEYFRAME if known
                                      else StepKind.SPECULATIVE)
        except Exception:  # noqa: BLE001 -- only a head start: the next begin plans anyway
            self._counts["plan_ahead_failed"] += 1
        self._laps.lap("plan_ahead")

    def _close_flight(self) -> Optional[Closed]:
        """Wait for the frame in flight (if any), check it, decide its fate and close its
        step: all that the next step depends on. Its outcome is ``_report``'s."""
        flight = self._take_flight()
        if flight is None:
            return None
        try:
            host = self._readback.wait()
        except Exception:  # a CUDA error surfacing at the wait
            flight.txn.rollback()
            raise
        self._laps.lap("wait")
        frame = flight.frame
        failed = self._check_finite(host, flight.txn, f"frame {frame.index}", [frame])
        if failed is not None:
            return Closed(frame, None, None, False, False, failed)
        closed = decide(flight, host, self._policy, self._segments)
        self._laps.lap("close")
        return closed

    def _report(self, closed: Optional[Closed]) -> None:
        """Queue the outcome of a closed step (host work only, but for a keyframe's depth
        kept for the next segment's anchors), then roll the segment over if it is due."""
        if closed is None:
            return
        if closed.failed is not None:
            self._ready.append(closed.failed)
            return
        frame, outputs, segments = closed.frame, closed.outputs, self._segments
        result = frame_result(frame, closed.host, 0, closed.keyframe, segments.number,
                              segments.align, time.perf_counter())
        if closed.keyframe:
            segments.remember(frame.image, frame.index, result.c2w,
                              outputs.depth[0, ..., 0] if outputs.depth is not None else None)
        self._publish([result])
        if closed.rollover_due:
            self._roll_over()
        self._laps.lap("report")

    def _roll_over(self) -> None:
        """The segment is complete: blocking, the next one starts now; sliced, its anchor
        step builds beside the stream (``NextSegment.segment_complete``)."""
        if self.config.rollover_mode == "blocking":
            self._segments.roll_over(self._runner, self._policy)
            self._counts["rollovers"] += 1
        else:
            self._next.segment_complete(self._segments, self._model_hw)

    def _publish(self, results: list[FrameResult]) -> None:
        """The one place results change the session: trajectory, counters, latency, queue."""
        for result in results:
            self.trajectory.append(result.stamp_ns, result.c2w)
            self._counts["processed"] += 1
            self._counts["keyframes" if result.keyframe else "non_keyframes"] += 1
        self._latency.add(results[-1].latency_ms)  # a step's last frame
        self._ready += results

    def _check_finite(self, host: dict, txn, what: str,
                      frames: list[Frame]) -> Optional[FrameFailed]:
        """Roll the step back, count it and return its ``FrameFailed`` if a pose is not
        finite (``non_finite``)."""
        failed = non_finite(host, what, frames)
        if failed is not None:
            txn.rollback()
            self._counts["failed_non_finite"] += 1
        return failed

    def _needs_depth(self, wanted: Optional[bool] = None) -> bool:
        """Depth is needed for outputs (``wanted``, else ``config.with_depth``), the flow
        policy, and the next segment's anchors."""
        cfg = self.config
        wanted = cfg.with_depth if wanted is None else wanted and cfg.with_depth
        return (wanted or cfg.keyframes.policy == "flow"
                or (self._segments.near_rollover() and not self._next.pending))

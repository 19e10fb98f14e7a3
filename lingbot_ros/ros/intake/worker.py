"""FrameWorker: the node's worker thread, from queued images to published outputs.

The image callback only queues (``offer``); this thread converts each image, runs it through
the session and publishes. It is pipelined (``StreamingSession.submit`` / ``collect``): while
the GPU runs frame t, an image that arrives is converted, uploaded and resized on a side
stream; frame t is then finished, frame t+1 queued on the GPU, and only then are frame t's
outputs published (publishing overlaps the next step too). With no image waiting it polls the
GPU every millisecond and publishes frame t as soon as it is done.

Each accepted image's context (message, TF chain, whether ~/depth is due) waits in
``PendingFrames`` under the ticket ``submit`` returned for it, until its outcome (which
carries the ticket) is out. A frame the session refuses (a repeated stamp, say) gets no
ticket and leaves no context, so it can never touch the context of a frame in flight.

State it owns: the queue, the pending contexts and the reset generation. The lock that serialises
its frame with a reset, a load or a save's copy is the stream's (``StreamControl``,
ros/intake/stream_control.py: one procedure each, with or without this thread): a reset waits for
the image being handed in and has the frame in flight published first; while one waits, the worker
takes no next frame, so a plain lock's unfairness cannot starve it under overload. What it learns
goes into the ``NodeTelemetry`` it is given (counters) and, after each turn, one frozen
``NodeFacts`` (the chain, the outputs' facts) into its ``FactsBoard``: the executor reads those,
never ``RobotFrames`` or ``Outputs``. It holds no node: its outputs, status sink and log are
interfaces (``Outputs``/``Status`` and the node's logger in the node; plain objects in tests).
"""
from __future__ import annotations

import math
import threading
import time
from typing import Callable, NamedTuple, Optional, Protocol

from std_msgs.msg import Header

from ...session import FrameFailed, FrameRejected, FrameResult
from ..backend.backend_thread import BackendThread
from ..backend.corrections import frame_correction
from ..outputs.messages import ns_to_stamp, stamp_to_ns
from ..status.node_facts import FactsBoard, NodeFacts
from ..status.telemetry import NodeTelemetry
from ..tf.robot_frames import RobotFrames, extrinsic_summary
from .convert import ImageLimits, ImageRejected, compressed_to_array, image_to_array
from .frame_queue import FrameQueue
from .pending_frames import PendingFrame, PendingFrames
from ...scale import ScaleStream
from .stream_control import StreamControl


class QueuedImage(NamedTuple):
    msg: object
    received: float  # time.monotonic() at the callback
    generation: int  # reset counter at the callback: frames from before a reset are dropped


class Log(Protocol):
    """Where the worker logs: the node's rclpy logger, or a ``logging.Logger``."""

    def info(self, message: str) -> object: ...
    def warning(self, message: str) -> object: ...
    def error(self, message: str) -> object: ...


class StatusSink(Protocol):
    """Per-frame status (``Status`` publishes them on ~/status)."""

    def frame(self, result: FrameResult, header: Header, end_to_end_ms: float,
              message: str = "") -> None: ...
    def initializing(self, header: Header, message: str) -> None: ...
    def failed(self, header: Header, message: str) -> None: ...


class FrameOutputs(Protocol):
    """What the worker publishes through (``Outputs``)."""

    def depth_wanted(self) -> tuple[bool, bool]: ...
    def publish(self, result: FrameResult, chain,
                depth_due: Optional[bool] = None) -> Optional[str]: ...
    def restart(self) -> None: ...
    def clear(self) -> None: ...
    def withholds(self, scale) -> bool: ...
    def facts(self): ...


class FrameWorker:
    def __init__(self, session, outputs: FrameOutputs, status_sink: StatusSink,
                 telemetry: NodeTelemetry, *, robot_frames: RobotFrames, log: Log,
                 queue_size: int, max_image_pixels: int, use_compressed: bool = False,
                 alive: Callable[[], bool] = lambda: True,
                 scale: Optional[ScaleStream] = None, scale_topic=None,
                 facts: Optional[FactsBoard] = None,
                 control: Optional[StreamControl] = None,
                 backend: Optional[BackendThread] = None) -> None:
        """``session``: a ``StreamingSession`` (its public API only); ``robot_frames``: the
        TF chain each image is published in; ``alive``: False once the process is shutting
        down (an error then ends the thread quietly). ``scale``: the stream's metric scale
        (fed each finished frame before its outputs, reset with the stream; None: model
        units, no ``~/scale``); ``scale_topic``: told of every change (``changed``);
        ``facts``: where each turn's ``NodeFacts`` go (the executor's only view of the chain
        and the outputs; None: not published); ``control``: the stream's ``StreamControl``
        (the node's, which outlives the worker; None: one of its own); ``backend``: the
        loop-closure back end's thread (``loop.enable``; None: off): each published keyframe
        is offered to it, and its correction is each frame's map -> odom."""
        self._session = session
        self._outputs = outputs
        self._status = status_sink
        self._telemetry = telemetry
        self._robot_frames = robot_frames
        self._log = log
        self._limits = ImageLimits(max_pixels=max_image_pixels)
        self._use_compressed = use_compressed
        self._alive = alive
        self._scale = scale
        self._scale_topic = scale_topic
        self._facts = facts
        self._backend = backend
        # An anchor frame's depth came with the scale phase: the topic's period decides.
        self._num_scale_frames = session.info().startup_latency_frames
        self._queue = FrameQueue(queue_size)
        self._frames = PendingFrames()  # accepted by the session, outcome not yet published
        # reset, load and save between two frames, with or without this thread running
        self._control = control if control is not None else StreamControl(
            session, telemetry, log, scale)
        self._lock = self._control.lock  # the session: this thread's frame vs a reset
        self._generation = 0
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._last_tf_warning = -math.inf
        self._last_warning: dict[str, float] = {}  # what -> time.monotonic()
        self._restart_note = ""  # the last restart, for the next INITIALIZING status
        self._control.attach(self)  # until stop(): a reset or load goes through this worker
        telemetry.set_session_info(session.info())

    # -- the executor's side -------------------------------------------------------------------
    def offer(self, msg, received: float) -> bool:
        """Queue an image (the callback's only work); True if an older one was dropped."""
        return self._queue.put(QueuedImage(msg, received, self._generation))

    def drop_queued(self) -> int:
        """Drop the images waiting (pause, deactivate); return how many."""
        return self._queue.clear()

    def reset(self) -> int:
        """Clear the stream (``StreamControl.reset``): queue, the frame in flight (published
        first), session, pending contexts, outputs. Waits only for the frame being handed
        in. Returns the number of queued images dropped (counted ``dropped_reset``)."""
        return self._control.reset()

    # -- the stream's side (StreamControl calls these under its lock, between two frames) ----
    def publish_in_flight(self) -> None:
        self._publish_in_flight()

    def drop_queue(self) -> int:
        """A new stream: the images queued before it are dropped (and any a callback queues
        meanwhile: their generation is old)."""
        self._generation += 1
        return self._queue.clear()

    def new_stream(self, *, restart_frames: bool) -> None:
        """The contexts of frames still in the old stream (anchors waiting) are dropped,
        counted; the outputs start empty; ``restart_frames``: a changed extrinsic applies."""
        self._telemetry.count("dropped_reset", self._frames.clear())
        self._outputs.clear()
        if restart_frames:
            applied = self._robot_frames.restart()
            if applied:
                self._log.warning(applied)

    def node_state(self):
        """The outputs' own state for a snapshot (the map, the path)."""
        return self._outputs.node_state()

    def scale_changed(self, estimate) -> None:
        if self._scale_topic is not None:
            self._scale_topic.changed(estimate)

    def publish_facts(self) -> None:
        self._publish_facts()

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._work, name="lingbot_worker", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current image; the frame in flight is published first. The stream
        is detached from this worker (a reset or load then runs without it)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None
        self._control.attach(None)

    # -- the worker thread ---------------------------------------------------------------------
    def run_once(self, timeout: float = 0.1) -> bool:
        """One turn of the thread: take the next image (waiting at most ``timeout`` s; 1 ms
        while a frame is in flight) and hand it in, or publish the frame in flight once the
        GPU is done. False when no image was waiting. (The thread loops on this; a test may
        call it directly.)"""
        in_flight = self._session.in_flight
        item = self._queue.get(timeout=min(timeout, 0.001) if in_flight else timeout)
        self._control.wait_turn()  # a waiting reset goes first (it drops this frame)
        with self._lock:
            if item is None:
                if self._session.in_flight_done():
                    self._publish_outcomes(self._session.collect())
                    self._publish_facts()
            elif item.generation != self._generation:
                self._telemetry.count("dropped_reset")
            else:
                try:
                    self._process(item)
                finally:
                    self._publish_facts()
        return item is not None

    def finish(self) -> None:
        """Finish and publish the frame still on the GPU, if any (not dropped)."""
        with self._lock:
            self._publish_in_flight()
            self._publish_facts()

    def _publish_facts(self) -> None:
        """The turn's ``NodeFacts``, whole: the executor reads nothing else of the worker's."""
        if self._facts is not None:
            self._facts.publish(NodeFacts(
                self._robot_frames.facts(), self._outputs.facts(),
                self._backend.facts() if self._backend is not None else None))

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 -- the thread never dies of one frame
                if not self._alive():
                    return  # Ctrl-C shut the context down under us: main() releases the rest
                self._unexpected(exc)
                self._stop.wait(0.01)  # an error that repeats every turn never spins a core
        try:
            self.finish()
        except Exception:  # noqa: BLE001 -- the context went down meanwhile (Ctrl-C)
            pass

    def _unexpected(self, exc: Exception, header: Optional[Header] = None) -> None:
        """An error that escaped a frame's own handling (the session, a status publisher):
        FAILED with the reason on ~/status, ERROR on /diagnostics until a frame succeeds,
        logged; no counter (each image is counted where its fate is decided). The worker goes
        on with the next frame; nothing here may raise."""
        error = f"worker: {type(exc).__name__}: {exc}"
        self._telemetry.failed(None, error)
        try:
            if self._due("worker", 2.0):
                self._log.error(f"{error}; going on with the next frame")
            self._status.failed(header if header is not None else Header(), error)
        except Exception:  # noqa: BLE001 -- the log or ~/status is what failed: telemetry has it
            pass

    def _publish_in_flight(self) -> None:
        if self._session.in_flight:
            self._publish_outcomes(self._session.collect())

    def _process(self, item: QueuedImage) -> None:
        """One image, counted once: ``dropped_waiting_for_tf``, ``rejected_<reason>`` or
        ``failed_<why>`` here, else when its outcome is published. Each handler below covers
        only what runs before its count, so an error after it (a status publisher, say) goes
        to ``_unexpected`` and is never counted twice."""
        session, msg = self._session, item.msg
        stamp_ns = stamp_to_ns(msg.header.stamp)
        frames = self._robot_frames
        try:
            chain = frames.resolve(msg.header.frame_id, time.monotonic())
        except Exception as exc:  # noqa: BLE001 -- counted as this image's failure
            self._failed(msg.header, "failed_error", exc)
            return
        if chain is None:  # no base -> camera transform yet: nothing to publish in
            self._telemetry.count("dropped_waiting_for_tf")
            self._status.initializing(msg.header, f"waiting for TF {frames.waiting_for}")
            now = time.monotonic()
            if now - self._last_tf_warning >= 5.0:
                self._last_tf_warning = now
                self._log.warning(frames.waiting_message())
            return
        try:
            self._check_chain(chain)
            if self._use_compressed:
                array, encoding = compressed_to_array(msg, self._limits)
            else:
                # cv_bridge when a ROS install registers it, else our exact numpy path
                array, encoding = image_to_array(msg, self._limits, backend="auto"), msg.encoding
            depth_due, with_depth = self._outputs.depth_wanted()
            with_depth = with_depth or self._backend is not None  # every keyframe's, stored
            if self._scale is not None and self._scale.needs_depth:
                with_depth = True  # the depth source samples every frame's depth
                self._scale.on_submit(stamp_ns)
            # finishes the frame before this one, then queues this one on the GPU
            ticket = session.submit(array, stamp_ns, encoding, with_depth=with_depth)
            # Accepted: only now is its context kept (its outcome comes from a collect below
            # or later; the frame before it may be among this collect's outcomes).
            self._frames.add(ticket, PendingFrame(item, chain, depth_due))
        except (ImageRejected, FrameRejected) as exc:
            self._telemetry.count(f"rejected_{exc.reason}")
            # Throttled per reason: a new kind of bad input is always reported.
            if self._due(f"rejected_{exc.reason}", 2.0):
                self._log.warning(f"image at {stamp_ns} ns rejected ({exc.reason}): {exc}")
            self._status.failed(msg.header, f"rejected ({exc.reason}): {exc}")
            return
        except Exception as exc:  # noqa: BLE001 -- CacheFullError, CUDA OOM...: rolled back
            oom = type(exc).__name__ == "OutOfMemoryError"  # never queued on the GPU
            self._failed(msg.header, "failed_out_of_memory" if oom else "failed_error", exc)
            return
        finally:
            self._report_events(msg.header)  # a restart happens in submit, accepted or not
        outcomes = session.collect(wait=False)  # the frame before; on the CPU this one
        info = session.info()
        self._telemetry.set_session_info(info)
        if not outcomes and not session.in_flight and info.phase == "scale_frames":
            note, self._restart_note = self._restart_note, ""
            self._status.initializing(msg.header, (
                f"collecting anchor frames: {info.scale_frames_buffered}/"
                f"{info.startup_latency_frames}" + (f"; {note}" if note else "")))
        self._publish_outcomes(outcomes)

    def _check_chain(self, chain) -> None:
        """Say once that TF was found after waiting; warn when the extrinsic changed."""
        frames = self._robot_frames
        if frames.waiting_since is None and self._last_tf_warning > -math.inf:
            self._last_tf_warning = -math.inf  # found after waiting: say so once
            self._log.info(f"TF found: {extrinsic_summary(chain)}")
        changed = frames.check_extrinsic(time.monotonic())
        if changed:
            self._log.warning(changed)

    def _publish_outcomes(self, outcomes) -> None:
        """Each finished frame's outputs (its own chain, stamp and latency), or its failure.
        Frames handed in before an outcome's and still waiting never get one (anchors a
        stream restart dropped): ``dropped_no_outcome``. A frame whose outputs cannot be
        published is ``failed_publishing``, and the next one goes on."""
        for outcome in outcomes:
            failed = isinstance(outcome, FrameFailed)  # non-finite output: rolled back
            tickets = outcome.tickets if failed else [outcome.ticket]
            if tickets:
                self._telemetry.count("dropped_no_outcome", self._frames.pop_older(min(tickets)))
            if failed:
                frames = [self._frames.pop(ticket) for ticket in outcome.tickets]
                frame = next((f for f in reversed(frames) if f is not None), None)
                header = (frame.item.msg.header if frame is not None else
                          Header(stamp=ns_to_stamp(outcome.stamps[-1] if outcome.stamps else 0)))
                self._failed(header, f"failed_{outcome.reason}", outcome, max(len(tickets), 1))
                continue
            frame = self._frames.pop(outcome.ticket)
            if frame is None:  # its context aged out (the bound of PendingFrames)
                self._telemetry.count("dropped_no_context")
                continue
            # The anchor phase yields several frames at once: each status has its own stamp.
            header = Header(stamp=ns_to_stamp(outcome.stamp_ns),
                            frame_id=frame.item.msg.header.frame_id)
            try:
                note, withheld = self._publish_frame(outcome, frame)
            except Exception as exc:  # noqa: BLE001 -- a publisher refused: this frame only
                if not self._alive():
                    raise
                self._failed(header, "failed_publishing", exc)
                continue
            now = time.monotonic()
            end_to_end_ms = (now - frame.item.received) * 1e3
            self._telemetry.frame_published(now, end_to_end_ms, float(outcome.K[0, 0]),
                                            outcome.crop.input_hw)
            try:
                if withheld:  # no pose before the scale locked: says how far the estimate is
                    self._status.initializing(header, note)
                else:
                    self._status.frame(outcome, header, end_to_end_ms, note or "")
            except Exception as exc:  # noqa: BLE001 -- counted already; the others go on
                if not self._alive():
                    raise
                self._unexpected(exc, header)
        if outcomes:
            self._telemetry.set_session_info(self._session.info())

    def _publish_frame(self, outcome: FrameResult, frame: PendingFrame) -> tuple[str, bool]:
        """One frame's outputs (its scale sample first); returns (what did not go out,
        whether its metric outputs were withheld)."""
        depth_due = frame.depth_due if outcome.index >= self._num_scale_frames else None
        # loop.enable: map -> odom is its correction (withheld while a localization waits)
        kw, waiting = frame_correction(self._backend, frame.chain)
        if self._scale is None:
            note = self._outputs.publish(outcome, frame.chain, depth_due, **kw)
            self._offer_keyframe(outcome, frame, None)
            return note or waiting, False
        # the frame's sample first: its own outputs may be the first in metres
        scale = self._scale.on_frame(outcome, frame.chain.T_base_optical)
        if self._scale_topic is not None:
            self._scale_topic.changed(scale)
        withheld = self._outputs.withholds(scale)
        note = self._outputs.publish(outcome, frame.chain, depth_due, scale, **kw)
        if not self._scale.config.metric:
            self._offer_keyframe(outcome, frame, None)
        elif scale.output_factor is not None:  # a metric source: the back end works in metres
            self._offer_keyframe(outcome, frame, scale.output_factor)
        return note or waiting, withheld

    def _offer_keyframe(self, outcome: FrameResult, frame: PendingFrame,
                        metres_per_unit: Optional[float]) -> None:
        """A published keyframe to the back end (its thread; never waits). With a metric
        scale source only once LOCKED (``metres_per_unit``): the back end's database, gates
        and correction are then in metres, the outputs' units."""
        if self._backend is not None and outcome.keyframe:
            self._backend.offer(outcome, frame.chain, metres_per_unit)

    def _failed(self, header, counter: str, exc: Exception, images: int = 1) -> None:
        """A frame the model could not turn into a pose (or whose outputs could not go
        out): its ``images`` counted, logged, FAILED on ~/status and ERROR on /diagnostics
        until a frame succeeds; the node goes on."""
        error = f"{type(exc).__name__}: {exc}"
        self._telemetry.failed(counter, error, images)
        if self._due(counter, 2.0):
            self._log.error(f"frame at {stamp_to_ns(header.stamp)} ns failed: {error}")
        self._status.failed(header, error)

    def _report_events(self, header) -> None:
        """Log (WARN, never throttled: each is one event) and count the session's restarts."""
        for event in self._session.pop_events():
            self._telemetry.restarted(event.kind, event.message, time.monotonic())
            self._outputs.restart()
            self._reset_scale()
            if self._backend is not None:  # a new stream: its keyframes start anew
                self._backend.reset()
            self._restart_note = event.message  # for the next INITIALIZING status
            self._log.warning(f"{event.message} (image stamp "
                              f"{header.stamp.sec}.{header.stamp.nanosec:09d})")

    def _reset_scale(self) -> None:
        """A new stream (reset, restart): a new scale estimate (a rollover keeps it)."""
        if self._scale is not None:
            estimate = self._scale.reset()
            if self._scale_topic is not None:
                self._scale_topic.changed(estimate)

    def _due(self, what: str, period_s: float) -> bool:
        """Whether ``what`` may be logged now (not logged in the last ``period_s``). The
        caller logs, each severity from its own call site: rclpy refuses a change of
        severity between two calls of one site (and a chosen one killed this thread)."""
        now = time.monotonic()
        if now - self._last_warning.get(what, -math.inf) < period_s:
            return False
        self._last_warning[what] = now
        return True

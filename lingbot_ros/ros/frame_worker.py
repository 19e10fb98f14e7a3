"""FrameWorker: the node's worker thread, from queued images to published outputs.

The image callback only queues (``FrameQueue``); this thread converts each image, runs it
through the session and publishes. It is pipelined (``StreamingSession.submit`` /
``collect``): while the GPU runs frame t, an image that arrives is converted, uploaded and
resized on a side stream; frame t is then finished, frame t+1 queued on the GPU, and only
then are frame t's outputs published (publishing overlaps the next step too). With no image
waiting it polls the GPU every millisecond and publishes frame t as soon as it is done.
Each image's context (message, TF chain, whether ~/depth is due) waits in ``PendingFrames``
until its outcome is out.

It works on the node's public state: the session under ``session_lock`` (a reset waits for
the frame being handed in, and publishes the one in flight first), the queue, the outputs
and ~/status, and the counters and last-frame facts that diagnostics read.
"""
from __future__ import annotations

import math
import threading
import time
from typing import NamedTuple, Optional

from std_msgs.msg import Header

from ..session import FrameFailed, FrameRejected
from .convert import ImageLimits, ImageRejected, compressed_to_array, image_to_array
from .messages import ns_to_stamp, stamp_to_ns
from .pending_frames import PendingFrame, PendingFrames
from .robot_frames import extrinsic_summary


class QueuedImage(NamedTuple):
    msg: object
    received: float  # time.monotonic() at the callback
    generation: int  # reset counter at the callback: frames from before a reset are dropped


class FrameWorker:
    def __init__(self, node) -> None:
        """``node``: the ``LingbotNode`` whose session, queue and outputs this thread serves."""
        self.node = node
        self.frames = PendingFrames()  # handed to the session, outcome not yet published
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._last_tf_warning = -math.inf
        self._last_reject_warning: dict[str, float] = {}  # reason -> time.monotonic()
        self._restart_note = ""  # the last restart, for the next INITIALIZING status

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._work, name="lingbot_worker", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop after the current image (the frame in flight is published first)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None

    def publish_in_flight(self) -> None:
        """Finish and publish the frame on the GPU, if any (caller holds ``session_lock``)."""
        session = self.node.session
        if session is not None and session.in_flight:
            self._publish_outcomes(session.collect())

    def _work(self) -> None:
        """Pipelined: the next image is converted and preprocessed while the GPU runs the
        frame before it, whose outcome is published once the next one is queued behind it
        (or, with no image waiting, as soon as the GPU is done: polled every millisecond)."""
        node = self.node
        while not self._stop.is_set():
            in_flight = node.session is not None and node.session.in_flight
            item = node.queue.get(timeout=0.001 if in_flight else 0.1)
            node.no_reset_waiting.wait()  # a waiting reset goes first (it drops this frame)
            try:
                with node.session_lock:
                    if item is None:
                        if node.session is not None and node.session.in_flight_done():
                            self._publish_outcomes(node.session.collect())
                    elif node.session is None or item.generation != node.generation:
                        node.counters["dropped_reset"] += 1
                    else:
                        self._process(item)
            except Exception as exc:  # publishing failed
                if not node.context.ok():
                    return  # Ctrl-C shut the context down under us: main() releases the rest
                node.counters["failed"] += 1
                node.last_error = f"{type(exc).__name__}: {exc}"
                node.get_logger().error(f"publishing failed: {node.last_error}",
                                        throttle_duration_sec=2.0)
        self._finish_in_flight()

    def _finish_in_flight(self) -> None:
        """Stopping: the frame still on the GPU is finished and published (not dropped)."""
        try:
            with self.node.session_lock:
                self.publish_in_flight()
        except Exception:  # noqa: BLE001 -- the context went down meanwhile (Ctrl-C)
            pass

    def _process(self, item: QueuedImage) -> None:
        node = self.node
        cfg = node.settings.node
        msg = item.msg
        stamp_ns = stamp_to_ns(msg.header.stamp)
        chain = node.robot_frames.resolve(msg.header.frame_id, time.monotonic())
        if chain is None:  # no base -> camera transform yet: nothing to publish in
            node.counters["dropped_waiting_for_tf"] += 1
            node.status.initializing(msg.header,
                                     f"waiting for TF {node.robot_frames.waiting_for}")
            now = time.monotonic()
            if now - self._last_tf_warning >= 5.0:
                self._last_tf_warning = now
                node.get_logger().warning(node.robot_frames.waiting_message())
            return
        if node.robot_frames.waiting_since is None and self._last_tf_warning > -math.inf:
            self._last_tf_warning = -math.inf  # found after waiting: say so once
            node.get_logger().info(f"TF found: {extrinsic_summary(chain)}")
        limits = ImageLimits(max_pixels=cfg.max_image_pixels)
        try:
            if cfg.use_compressed:
                array, encoding = compressed_to_array(msg, limits)
            else:
                # cv_bridge when a ROS install registers it, else our exact numpy path
                array, encoding = image_to_array(msg, limits, backend="auto"), msg.encoding
            depth_due, with_depth = node.outputs.depth_wanted()
            self.frames.add(stamp_ns, PendingFrame(item, chain, depth_due))
            try:
                # finishes the frame before this one, then queues this one on the GPU
                node.session.submit(array, stamp_ns, encoding, with_depth=with_depth)
            finally:
                self._report_events(msg.header)
        except (ImageRejected, FrameRejected) as exc:
            self.frames.pop(stamp_ns)
            node.counters[f"rejected_{exc.reason}"] += 1
            # Throttled per reason: a new kind of bad input is always reported.
            now = time.monotonic()
            if now - self._last_reject_warning.get(exc.reason, -math.inf) >= 2.0:
                self._last_reject_warning[exc.reason] = now
                node.get_logger().warning(
                    f"image at {stamp_ns} ns rejected ({exc.reason}): {exc}")
            return
        except Exception as exc:  # CacheFullError, CUDA OOM...: rolled back; keep running
            self.frames.pop(stamp_ns)  # never queued on the GPU
            oom = type(exc).__name__ == "OutOfMemoryError"
            self._failed(msg.header, "failed_out_of_memory" if oom else "failed_error", exc)
            return
        outcomes = node.session.collect(wait=False)  # the frame before; on the CPU this one
        node.info_snapshot = info = node.session.info()
        if not outcomes and not node.session.in_flight and info["phase"] == "scale_frames":
            note, self._restart_note = self._restart_note, ""
            node.status.initializing(msg.header, (
                f"collecting anchor frames: {info['scale_frames_buffered']}/"
                f"{info['startup_latency_frames']}" + (f"; {note}" if note else "")))
        self._publish_outcomes(outcomes)

    def _publish_outcomes(self, outcomes) -> None:
        """Each finished frame's outputs (its own chain, stamp and latency), or its failure."""
        node = self.node
        for outcome in outcomes:
            if isinstance(outcome, FrameFailed):  # non-finite output: rolled back
                frames = [self.frames.pop(stamp) for stamp in outcome.stamps]
                frame = next((f for f in reversed(frames) if f is not None), None)
                header = (frame.item.msg.header if frame is not None else
                          Header(stamp=ns_to_stamp(outcome.stamps[-1] if outcome.stamps else 0)))
                self._failed(header, f"failed_{outcome.reason}", outcome)
                continue
            frame = self.frames.pop(outcome.stamp_ns)
            if frame is None:  # dropped by a reset meanwhile
                continue
            node.last_error = ""
            node.last_processed_time = time.monotonic()
            # an anchor frame's depth came with the scale phase: the topic's period decides
            node.outputs.publish(outcome, frame.chain, frame.depth_due
                                 if outcome.index >= node.settings.session.num_scale_frames
                                 else None)
            node.counters["processed"] += 1
            node.latency.add((time.monotonic() - frame.item.received) * 1e3)
            node.last_fx = float(outcome.K[0, 0])
            node.last_input_hw = outcome.crop.input_hw
            # The anchor phase yields several frames at once: each status has its own stamp.
            header = Header(stamp=ns_to_stamp(outcome.stamp_ns),
                            frame_id=frame.item.msg.header.frame_id)
            node.status.frame(outcome, header, node.latency.summary()["last"])
        if outcomes:
            node.info_snapshot = node.session.info()

    def _failed(self, header, counter: str, exc: Exception) -> None:
        """A frame the model could not turn into a pose: counted, logged, FAILED on
        ~/status and ERROR on /diagnostics until a frame succeeds; the node goes on."""
        node = self.node
        node.counters[counter] += 1
        node.last_error = f"{type(exc).__name__}: {exc}"
        node.get_logger().error(f"frame at {stamp_to_ns(header.stamp)} ns failed: "
                                f"{node.last_error}", throttle_duration_sec=2.0)
        node.status.failed(header, node.last_error)

    def _report_events(self, header) -> None:
        """Log (WARN, never throttled: each is one event) and count the session's restarts."""
        node = self.node
        for event in node.session.pop_events():
            node.counters[event.kind] += 1
            node.outputs.restart()
            node.last_restart = (time.monotonic(), event.message)
            self._restart_note = event.message  # for the next INITIALIZING status
            node.get_logger().warning(f"{event.message} (image stamp "
                                      f"{header.stamp.sec}.{header.stamp.nanosec:09d})")

"""lingbot_ros_node: the lifecycle node. A thin adapter: ROS in, StreamingSession, ROS out.

Threads: one executor thread runs the callbacks (image intake only enqueues; services and
timers read snapshots), one worker thread runs the session and publishes. ``_session_lock`` serialises
the worker's frame with reset/cleanup, so a reset waits for the frame in flight, and only
for it: while a reset waits, the worker takes no next frame (``_no_reset_waiting``; a plain
lock would let the worker take it back for every queued frame under overload).
"""
from __future__ import annotations

import gc
import math
import signal
import sys
import threading
import time
from collections import Counter
from typing import NamedTuple, Optional

import rclpy
from rcl_interfaces.msg import SetParametersResult
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import qos_profile_sensor_data
from rclpy.task import Future
from sensor_msgs.msg import CameraInfo
from std_msgs.msg import Header

from ..session import (FrameFailed, FrameRejected, LatencyWindow, StreamingSession,
                       load_session_model, warm_up)
from . import params
from .convert import ImageLimits, ImageRejected, compressed_to_array, image_to_array
from .frame_queue import FrameQueue
from .pending_frames import PendingFrame, PendingFrames
from .image_input import ImageInput
from .messages import ns_to_stamp, stamp_to_ns
from .outputs import Outputs
from .robot_frames import RobotFrames, extrinsic_summary, tf_tree_mode
from .services import Services
from .status import Status
from .tf_listener import TfListener
from .tf_tree import TransformTree

NODE_NAME = "lingbot_ros"


class _Queued(NamedTuple):
    msg: object
    received: float  # time.monotonic() at the callback
    generation: int  # reset counter at the callback: frames from before a reset are dropped


class LingbotNode(LifecycleNode):
    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self._param_errors = params.declare(self)
        self._configured = False  # parameters may change only while unconfigured
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.finished = Future()  # done once the lifecycle shutdown ran: main() returns
        self.settings: Optional[params.Settings] = None
        self.session: Optional[StreamingSession] = None
        self._session_lock = threading.Lock()
        self._no_reset_waiting = threading.Event()  # cleared while a reset waits for the lock
        self._no_reset_waiting.set()
        self._generation = 0
        self.counters: Counter = Counter()
        self.latency = LatencyWindow()  # callback -> published, ms
        self.info_snapshot: Optional[dict] = None
        self.last_error = ""
        self.last_image_time: Optional[float] = None
        self.last_processed_time: Optional[float] = None  # a frame went through the session
        self.last_restart: Optional[tuple[float, str]] = None  # (time, why) the stream restarted
        self._restart_note = ""
        self.camera_info: Optional[CameraInfo] = None
        self.last_fx: Optional[float] = None
        self.last_input_hw: Optional[tuple[int, int]] = None  # of the last processed image
        self.paused = False  # ~/pause: images are dropped (counted) while set
        self.robot_frames: Optional[RobotFrames] = None  # the TF chain; while active
        self._tf_listener: Optional[TfListener] = None
        self.image_input: Optional[ImageInput] = None  # the image subscription; while active
        self._last_tf_warning = -math.inf
        self._last_reject_warning: dict[str, float] = {}  # reason -> time.monotonic()
        self._queue = None
        self._frames = PendingFrames()  # handed to the session, outcome not yet published
        self._worker: Optional[threading.Thread] = None
        self._stop = threading.Event()
        self._outputs: Optional[Outputs] = None
        self._service_handles: Optional[Services] = None
        self._status: Optional[Status] = None
        self._subs: list = []

    # -- lifecycle ---------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate parameters, load the model, build the session, warm up, add services."""
        self.get_logger().info("configuring: checking parameters, loading the model, warming up")
        errors = list(self._param_errors)
        try:
            settings = params.build_settings(params.read(self))
        except ValueError as exc:
            errors.append(str(exc))
        if errors:
            for e in errors:
                self.get_logger().error(f"configure failed: {e}")
            return TransitionCallbackReturn.FAILURE
        try:
            model, random_weights = load_session_model(
                settings.session, settings.preset, settings.checkpoint or None,
                settings.precision, camera_head_precision=settings.camera_head_precision)
            session = StreamingSession(model, settings.session)
            if settings.warmup:
                warm_up(session)
        except Exception as exc:  # a bad checkpoint, no CUDA, no flashinfer...
            self.get_logger().error(f"configure failed: {type(exc).__name__}: {exc}")
            return TransitionCallbackReturn.FAILURE
        if random_weights:
            self.get_logger().warning(
                f"NO CHECKPOINT: model.preset '{settings.preset}' with RANDOM weights; poses "
                "are NOT meaningful. Set the 'checkpoint' parameter for real estimates.")
        self.settings, self.session = settings, session
        self.info_snapshot = session.info()
        if not self.context.ok():  # SIGINT/SIGTERM arrived meanwhile: main() exits cleanly
            self._release()
            return TransitionCallbackReturn.FAILURE
        try:
            if self._service_handles is None:  # still there after a cleanup
                self._service_handles = Services(self)
        except Exception as exc:  # e.g. the interface package is not installed
            self.get_logger().error(f"configure failed: cannot create services: {exc}")
            self._release()
            return TransitionCallbackReturn.FAILURE
        self._configured = True
        self.get_logger().info(
            f"configured: {'checkpoint ' + settings.checkpoint if settings.checkpoint else 'random ' + settings.preset} "
            f"on {settings.session.device}, attention {self.info_snapshot['attention']} "
            f"({self.info_snapshot['fast_path']}, fused kernels "
            f"{'on' if self.info_snapshot['fused_kernels'] else 'off'}), "
            f"{settings.session.num_scale_frames} anchor frames, window {settings.session.window}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Publishers, subscriptions, timers and the worker thread."""
        cfg = self.settings.node
        # Our own TF buffer (tf2_ros has no pip wheels): base -> camera, another odom.
        tree = None
        if not cfg.camera_only or (cfg.publish_map_to_odom and not cfg.publish_odom_to_base):
            tree = TransformTree()
            self._tf_listener = TfListener(self, tree)
        self.robot_frames = RobotFrames(cfg, tree)
        self._queue = FrameQueue(cfg.queue_size)
        self._outputs = Outputs(self, cfg, tree)
        self._status = Status(self)
        self.image_input = ImageInput(self, cfg, self._on_image)  # its QoS fits the camera
        self._subs = [self.create_subscription(CameraInfo, cfg.camera_info_topic,
                                               self._on_camera_info, qos_profile_sensor_data)]
        self._stop.clear()
        self._worker = threading.Thread(target=self._work, name="lingbot_worker", daemon=True)
        self._worker.start()
        self.get_logger().info(f"active: listening on {self.image_input.topic}; TF: "
                               f"{tf_tree_mode(cfg)}")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop intake; queued frames are dropped and counted; the session keeps its state."""
        self._stop_io()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        # The services stay: unconfigured, they answer success=false (GetCacheInfo.srv).
        self._release(keep_services=True)
        self._configured = False
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: Optional[LifecycleState]) -> TransitionCallbackReturn:
        """Stop and free everything; the process then exits (``finished``)."""
        self._stop_io()
        self._release()
        self._configured = False
        if not self.finished.done():
            self.finished.set_result(True)
        return TransitionCallbackReturn.SUCCESS

    def _on_set_parameters(self, parameters) -> SetParametersResult:
        """Parameters apply at configure: refuse changes while configured, check the rest."""
        if self._configured:
            return SetParametersResult(successful=False, reason=(
                "parameters apply at configure: deactivate and clean up the node first "
                "(ros2 lifecycle set <node> deactivate, then cleanup), set them, configure"))
        for p in parameters:
            try:
                params.check_update(p.name, p.value)
            except ValueError as exc:
                return SetParametersResult(successful=False, reason=str(exc))
        return SetParametersResult(successful=True)

    def _stop_io(self) -> None:
        if self.image_input is not None:
            self.image_input.destroy()
            self.image_input = None
        for sub in self._subs:
            self.destroy_subscription(sub)
        self._subs = []
        self._stop.set()
        if self._worker is not None:
            self._worker.join(timeout=30)
            self._worker = None
        if self._queue is not None:
            self.counters["dropped_inactive"] += self._queue.clear()
        if self._outputs is not None and self.context.ok():
            try:
                self._outputs.flush_path()
            except Exception:  # noqa: BLE001 -- the context went down meanwhile (Ctrl-C)
                pass
        if self._status is not None:
            self._status.destroy()
            self._status = None
        if self._outputs is not None:
            self._outputs.destroy()
            self._outputs = None
        if self._tf_listener is not None:
            self._tf_listener.destroy()
            self._tf_listener = None

    def _release(self, keep_services: bool = False) -> None:
        """Free the session, caches and model (GPU memory included); remove the services
        unless ``keep_services`` (cleanup keeps them)."""
        if self._service_handles is not None and not keep_services:
            self._service_handles.destroy()
            self._service_handles = None
        with self._session_lock:
            self.session = None
            self.info_snapshot = None
        gc.collect()
        try:
            import torch
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass

    # -- intake --------------------------------------------------------------------------------
    def _on_image(self, msg) -> None:
        """Only enqueue: never touches the model or the GPU."""
        self.counters["received"] += 1
        self.last_image_time = time.monotonic()
        if self.paused:
            self.counters["dropped_paused"] += 1
            status = self._status
            if status is not None:
                status.paused(msg.header, "paused by ~/pause: this image was dropped")
            return
        if self._queue.put(_Queued(msg, self.last_image_time, self._generation)):
            self.counters["dropped_queue_full"] += 1

    def _on_camera_info(self, msg: CameraInfo) -> None:
        self.camera_info = msg

    def _work(self) -> None:
        """Pipelined: the next image is converted and preprocessed while the GPU runs the
        frame before it, whose outcome is published once the next one is queued behind it
        (or, with no image waiting, as soon as the GPU is done: polled every millisecond)."""
        while not self._stop.is_set():
            in_flight = self.session is not None and self.session.in_flight
            item = self._queue.get(timeout=0.001 if in_flight else 0.1)
            self._no_reset_waiting.wait()  # a waiting reset goes first (it drops this frame)
            try:
                with self._session_lock:
                    if item is None:
                        if self.session is not None and self.session.in_flight_done():
                            self._publish_outcomes(self.session.collect())
                    elif self.session is None or item.generation != self._generation:
                        self.counters["dropped_reset"] += 1
                    else:
                        self._process(item)
            except Exception as exc:  # publishing failed
                if not self.context.ok():
                    return  # Ctrl-C shut the context down under us: main() releases the rest
                self.counters["failed"] += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                self.get_logger().error(f"publishing failed: {self.last_error}",
                                        throttle_duration_sec=2.0)
        self._finish_in_flight()

    def _finish_in_flight(self) -> None:
        """Stopping: the frame still on the GPU is finished and published (not dropped)."""
        try:
            with self._session_lock:
                if self.session is not None and self.session.in_flight:
                    self._publish_outcomes(self.session.collect())
        except Exception:  # noqa: BLE001 -- the context went down meanwhile (Ctrl-C)
            pass

    def _process(self, item: _Queued) -> None:
        cfg = self.settings.node
        msg = item.msg
        stamp_ns = stamp_to_ns(msg.header.stamp)
        chain = self.robot_frames.resolve(msg.header.frame_id, time.monotonic())
        if chain is None:  # no base -> camera transform yet: nothing to publish in
            self.counters["dropped_waiting_for_tf"] += 1
            self._status.initializing(msg.header, f"waiting for TF {self.robot_frames.waiting_for}")
            now = time.monotonic()
            if now - self._last_tf_warning >= 5.0:
                self._last_tf_warning = now
                self.get_logger().warning(self.robot_frames.waiting_message())
            return
        if self.robot_frames.waiting_since is None and self._last_tf_warning > -math.inf:
            self._last_tf_warning = -math.inf  # found after waiting: say so once
            self.get_logger().info(f"TF found: {extrinsic_summary(chain)}")
        limits = ImageLimits(max_pixels=cfg.max_image_pixels)
        try:
            if cfg.use_compressed:
                array, encoding = compressed_to_array(msg, limits)
            else:
                # cv_bridge when a ROS install registers it, else our exact numpy path
                array, encoding = image_to_array(msg, limits, backend="auto"), msg.encoding
            depth_due, with_depth = self._outputs.depth_wanted()
            self._frames.add(stamp_ns, PendingFrame(item, chain, depth_due))
            try:
                # finishes the frame before this one, then queues this one on the GPU
                self.session.submit(array, stamp_ns, encoding, with_depth=with_depth)
            finally:
                self._report_events(msg.header)
        except (ImageRejected, FrameRejected) as exc:
            self._frames.pop(stamp_ns)
            self.counters[f"rejected_{exc.reason}"] += 1
            # Throttled per reason: a new kind of bad input is always reported.
            now = time.monotonic()
            if now - self._last_reject_warning.get(exc.reason, -math.inf) >= 2.0:
                self._last_reject_warning[exc.reason] = now
                self.get_logger().warning(
                    f"image at {stamp_ns} ns rejected ({exc.reason}): {exc}")
            return
        except Exception as exc:  # CacheFullError, CUDA OOM...: rolled back; keep running
            self._frames.pop(stamp_ns)  # never queued on the GPU
            oom = type(exc).__name__ == "OutOfMemoryError"
            self._failed(msg.header, "failed_out_of_memory" if oom else "failed_error", exc)
            return
        outcomes = self.session.collect(wait=False)  # the frame before; on the CPU this one
        self.info_snapshot = info = self.session.info()
        if not outcomes and not self.session.in_flight and info["phase"] == "scale_frames":
            note, self._restart_note = self._restart_note, ""
            self._status.initializing(msg.header, (
                f"collecting anchor frames: {info['scale_frames_buffered']}/"
                f"{info['startup_latency_frames']}" + (f"; {note}" if note else "")))
        self._publish_outcomes(outcomes)

    def _publish_outcomes(self, outcomes) -> None:
        """Each finished frame's outputs (its own chain, stamp and latency), or its failure."""
        for outcome in outcomes:
            if isinstance(outcome, FrameFailed):  # non-finite output: rolled back
                frames = [self._frames.pop(stamp) for stamp in outcome.stamps]
                frame = next((f for f in reversed(frames) if f is not None), None)
                header = (frame.item.msg.header if frame is not None else
                          Header(stamp=ns_to_stamp(outcome.stamps[-1] if outcome.stamps else 0)))
                self._failed(header, f"failed_{outcome.reason}", outcome)
                continue
            frame = self._frames.pop(outcome.stamp_ns)
            if frame is None:  # dropped by a reset meanwhile
                continue
            self.last_error = ""
            self.last_processed_time = time.monotonic()
            # an anchor frame's depth came with the scale phase: the topic's period decides
            self._outputs.publish(outcome, frame.chain, frame.depth_due
                                  if outcome.index >= self.settings.session.num_scale_frames
                                  else None)
            self.counters["processed"] += 1
            self.latency.add((time.monotonic() - frame.item.received) * 1e3)
            self.last_fx = float(outcome.K[0, 0])
            self.last_input_hw = outcome.crop.input_hw
            # The anchor phase yields several frames at once: each status has its own stamp.
            header = Header(stamp=ns_to_stamp(outcome.stamp_ns),
                            frame_id=frame.item.msg.header.frame_id)
            self._status.frame(outcome, header, self.latency.summary()["last"])
        if outcomes:
            self.info_snapshot = self.session.info()

    def _failed(self, header, counter: str, exc: Exception) -> None:
        """A frame the model could not turn into a pose: counted, logged, FAILED on
        ~/status and ERROR on /diagnostics until a frame succeeds; the node goes on."""
        self.counters[counter] += 1
        self.last_error = f"{type(exc).__name__}: {exc}"
        self.get_logger().error(f"frame at {stamp_to_ns(header.stamp)} ns failed: "
                                f"{self.last_error}", throttle_duration_sec=2.0)
        self._status.failed(header, self.last_error)

    def _report_events(self, header) -> None:
        """Log (WARN, never throttled: each is one event) and count the session's restarts."""
        for event in self.session.pop_events():
            self.counters[event.kind] += 1
            self._outputs.restart()
            self.last_restart = (time.monotonic(), event.message)
            self._restart_note = event.message  # for the next INITIALIZING status
            self.get_logger().warning(f"{event.message} (image stamp "
                                      f"{header.stamp.sec}.{header.stamp.nanosec:09d})")

    # -- services' side ----------------------------------------------------------------------
    def outputs_info(self) -> dict:
        """The outputs' counters for diagnostics (map size, TF failures); {} when inactive."""
        outputs = self._outputs
        return outputs.info() if outputs is not None else {}

    def save_map(self, path) -> Optional[int]:
        """Write ~/map_points as PLY; the number of points, or None without a map."""
        outputs = self._outputs
        if outputs is None or outputs.map is None:
            return None
        return outputs.map.save(path)

    def set_paused(self, paused: bool) -> str:
        """~/pause: while paused, images are dropped (counted as dropped_paused) and ~/status
        says PAUSED; the stream keeps its state (a long pause may restart it on max_gap_s)."""
        if paused == self.paused:
            return "already paused" if paused else "not paused"
        self.paused = paused
        if paused:
            dropped = self._queue.clear() if self._queue is not None else 0
            self.counters["dropped_paused"] += dropped
            if self._status is not None:
                self._status.paused(Header(stamp=self.get_clock().now().to_msg()),
                                    "paused by ~/pause")
            return f"paused: images are dropped until ~/pause false ({dropped} queued dropped)"
        return "resumed"

    def reset_stream(self) -> Optional[str]:
        """Clear session, queue and path; waits for the frame in flight (if any).

        Returns what was done, or None when there is no session (unconfigured)."""
        t0 = time.monotonic()
        self._no_reset_waiting.clear()
        try:
            message = self._reset_locked()
        finally:
            self._no_reset_waiting.set()
        if message is None:
            return None
        return f"{message} in {(time.monotonic() - t0) * 1e3:.1f} ms"

    def _reset_locked(self) -> Optional[str]:
        with self._session_lock:
            if self.session is None:  # checked under the lock: a cleanup may be running
                return None
            self._generation += 1
            dropped = self._queue.clear() if self._queue is not None else 0
            self.counters["dropped_reset"] += dropped
            if self.session.in_flight:  # the frame in flight is published first, as before
                self._publish_outcomes(self.session.collect())
            self.session.reset()
            self._frames.clear()
            self.latency.clear()
            self.info_snapshot = self.session.info()
            if self._outputs is not None:
                self._outputs.clear()
            self.counters["resets"] += 1
        return f"reset: caches and trajectory cleared, {dropped} queued frame(s) dropped"


def main(args=None) -> int:
    try:
        rclpy.init(args=args)
        node = LingbotNode()
    except Exception as exc:  # noqa: BLE001 -- a malformed --params-file or --ros-args
        print(f"lingbot_ros: cannot start: {type(exc).__name__}: {exc}".rstrip(),
              file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    # One executor thread. rclpy's MultiThreadedExecutor re-yields a subscription whose
    # message a pool thread has not taken yet, rebuilding its wait set in Python each time: at
    # 60 Hz input it held a core and the GIL, and the worker got 2-5 frames/s where it
    # computes 25-30. Every callback here is short; a reset waits at most for the frame in
    # flight, and intake waits in DDS meanwhile.
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    interrupted = False
    try:
        if node.get_parameter("autostart").value:
            if node.trigger_configure() != TransitionCallbackReturn.SUCCESS:
                if not node.context.ok():  # SIGINT/SIGTERM arrived while configuring
                    interrupted = True
                    print("lingbot_ros: interrupted while configuring; exiting", file=sys.stderr)
                    return 0
                node.get_logger().fatal("configure failed (see above); exiting")
                return 1
            node.trigger_activate()
        # Until a signal, or a lifecycle shutdown transition (which completes ``finished``).
        executor.spin_until_future_complete(node.finished)
    except (KeyboardInterrupt, ExternalShutdownException):
        interrupted = True  # SIGINT/SIGTERM: rclpy's handler shuts the context down
    except Exception:
        if rclpy.ok():
            raise
        # Shut down between the executor's checks: rclpy raises RCLError ("failed to
        # initialize wait set: the given context is not valid") instead.
        interrupted = True
    finally:
        # A second Ctrl-C (or SIGTERM) while we clean up must not abort the cleanup with a
        # KeyboardInterrupt traceback: we are exiting already.
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, signal.SIG_IGN)
        if not interrupted and rclpy.ok() and not node.finished.done():
            try:
                node.trigger_shutdown()
            except Exception as exc:  # noqa: BLE001 -- shutting down anyway
                print(f"lingbot_ros: shutdown transition failed: {exc}", file=sys.stderr)
        # On SIGINT/SIGTERM rclpy's handler shuts the context down (from its own thread): no
        # transition can run then (its event cannot be published), so do the shutdown work
        # directly: stop the worker before the node's entities are destroyed under it (that
        # aborted the process), free the session. A no-op after the shutdown transition.
        node.on_shutdown(None)
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

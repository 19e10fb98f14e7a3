"""lingbot_ros_node: the lifecycle node. A thin adapter: ROS in, StreamingSession, ROS out.

Threads: one executor thread runs the callbacks (image intake only enqueues; services and
timers read snapshots), one worker thread (``FrameWorker``) runs the session and publishes.
``session_lock`` serialises the worker's frame with reset/cleanup, so a reset waits for the
image being handed in (and publishes the frame on the GPU first), and only for it: while a
reset waits, the worker takes no next frame (``no_reset_waiting``; a plain lock would let
the worker take it back for every queued frame under overload).
"""
from __future__ import annotations

import gc
import signal
import sys
import threading
import time
from collections import Counter
from typing import Optional

import rclpy
from rcl_interfaces.msg import SetParametersResult
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import qos_profile_sensor_data
from rclpy.task import Future
from sensor_msgs.msg import CameraInfo
from std_msgs.msg import Header

from ..session import LatencyWindow, StreamingSession, load_session_model, warm_up
from . import params
from .frame_queue import FrameQueue
from .frame_worker import FrameWorker, QueuedImage
from .image_input import ImageInput
from .outputs import Outputs
from .robot_frames import RobotFrames, tf_tree_mode
from .services import Services
from .status import Status
from .tf_listener import TfListener
from .tf_tree import TransformTree

NODE_NAME = "lingbot_ros"


class LingbotNode(LifecycleNode):
    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self._param_errors = params.declare(self)
        self._configured = False  # parameters may change only while unconfigured
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.finished = Future()  # done once the lifecycle shutdown ran: main() returns
        self.settings: Optional[params.Settings] = None
        self.session: Optional[StreamingSession] = None
        self.session_lock = threading.Lock()
        self.no_reset_waiting = threading.Event()  # cleared while a reset waits for the lock
        self.no_reset_waiting.set()
        self.generation = 0
        self.counters: Counter = Counter()
        self.latency = LatencyWindow()  # callback -> published, ms
        self.info_snapshot: Optional[dict] = None
        self.last_error = ""
        self.last_image_time: Optional[float] = None
        self.last_processed_time: Optional[float] = None  # a frame went through the session
        self.last_restart: Optional[tuple[float, str]] = None  # (time, why) the stream restarted
        self.camera_info: Optional[CameraInfo] = None
        self.last_fx: Optional[float] = None
        self.last_input_hw: Optional[tuple[int, int]] = None  # of the last processed image
        self.paused = False  # ~/pause: images are dropped (counted) while set
        self.robot_frames: Optional[RobotFrames] = None  # the TF chain; while active
        self._tf_listener: Optional[TfListener] = None
        self.image_input: Optional[ImageInput] = None  # the image subscription; while active
        self.queue = None
        self.worker = FrameWorker(self)  # the thread from the queue to the outputs
        self.outputs: Optional[Outputs] = None
        self._service_handles: Optional[Services] = None
        self.status: Optional[Status] = None
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
        self.queue = FrameQueue(cfg.queue_size)
        self.outputs = Outputs(self, cfg, tree)
        self.status = Status(self)
        self.image_input = ImageInput(self, cfg, self._on_image)  # its QoS fits the camera
        self._subs = [self.create_subscription(CameraInfo, cfg.camera_info_topic,
                                               self._on_camera_info, qos_profile_sensor_data)]
        self.worker.start()
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
        self.worker.stop()
        if self.queue is not None:
            self.counters["dropped_inactive"] += self.queue.clear()
        if self.outputs is not None and self.context.ok():
            try:
                self.outputs.flush_path()
            except Exception:  # noqa: BLE001 -- the context went down meanwhile (Ctrl-C)
                pass
        if self.status is not None:
            self.status.destroy()
            self.status = None
        if self.outputs is not None:
            self.outputs.destroy()
            self.outputs = None
        if self._tf_listener is not None:
            self._tf_listener.destroy()
            self._tf_listener = None

    def _release(self, keep_services: bool = False) -> None:
        """Free the session, caches and model (GPU memory included); remove the services
        unless ``keep_services`` (cleanup keeps them)."""
        if self._service_handles is not None and not keep_services:
            self._service_handles.destroy()
            self._service_handles = None
        with self.session_lock:
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
            status = self.status
            if status is not None:
                status.paused(msg.header, "paused by ~/pause: this image was dropped")
            return
        if self.queue.put(QueuedImage(msg, self.last_image_time, self.generation)):
            self.counters["dropped_queue_full"] += 1

    def _on_camera_info(self, msg: CameraInfo) -> None:
        self.camera_info = msg

    # -- services' side ----------------------------------------------------------------------
    def outputs_info(self) -> dict:
        """The outputs' counters for diagnostics (map size, TF failures); {} when inactive."""
        outputs = self.outputs
        return outputs.info() if outputs is not None else {}

    def save_map(self, path) -> Optional[int]:
        """Write ~/map_points as PLY; the number of points, or None without a map."""
        outputs = self.outputs
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
            dropped = self.queue.clear() if self.queue is not None else 0
            self.counters["dropped_paused"] += dropped
            if self.status is not None:
                self.status.paused(Header(stamp=self.get_clock().now().to_msg()),
                                    "paused by ~/pause")
            return f"paused: images are dropped until ~/pause false ({dropped} queued dropped)"
        return "resumed"

    def reset_stream(self) -> Optional[str]:
        """Clear session, queue and path; waits for the frame in flight (if any).

        Returns what was done, or None when there is no session (unconfigured)."""
        t0 = time.monotonic()
        self.no_reset_waiting.clear()
        try:
            message = self._reset_locked()
        finally:
            self.no_reset_waiting.set()
        if message is None:
            return None
        return f"{message} in {(time.monotonic() - t0) * 1e3:.1f} ms"

    def _reset_locked(self) -> Optional[str]:
        with self.session_lock:
            if self.session is None:  # checked under the lock: a cleanup may be running
                return None
            self.generation += 1
            dropped = self.queue.clear() if self.queue is not None else 0
            self.counters["dropped_reset"] += dropped
            self.worker.publish_in_flight()  # the frame on the GPU is published first
            self.session.reset()
            self.worker.frames.clear()
            self.latency.clear()
            self.info_snapshot = self.session.info()
            if self.outputs is not None:
                self.outputs.clear()
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

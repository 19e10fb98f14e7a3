"""lingbot_ros_node: the lifecycle node. A thin adapter: ROS in, StreamingSession, ROS out.

Threads: one executor thread runs the callbacks (image intake only queues; services and
timers read snapshots), one worker thread (``FrameWorker``, while active) runs the session
and publishes. State owners (docs/architecture.md): the node owns the lifecycle, the settings,
the session object's lifetime and the pause switch (all changed on the executor thread only);
the worker owns the queue, the frames in flight and the lock that serialises its frame with a
reset; ``NodeTelemetry`` owns the counters and last-frame facts (locked; ~/status, the services
and /diagnostics read its snapshots). ``main()`` lives in ``ros/main.py``.

Failures: configure's heavy part (model, session, warm-up) runs on a ``BackgroundJob`` so a
signal abandons it at once (``ConfigureInterrupted``); an exception in activate is logged
at ERROR and ``on_error`` leaves the node unconfigured (configurable again). Parameters are
checked when set (``params.check_update``: as configure would) and refused while
configured; ROS's own (``use_sim_time``) always pass.
"""
from __future__ import annotations

import gc
import time
from typing import Optional

from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.qos import qos_profile_sensor_data
from rclpy.task import Future
from sensor_msgs.msg import CameraInfo
from std_msgs.msg import Header

from ..session import StreamingSession, load_session_model, warm_up
from . import params
from .background_job import BackgroundJob
from .frame_worker import FrameWorker
from .image_input import ImageInput
from .outputs import Outputs
from .robot_frames import RobotFrames, tf_tree_mode
from .services import Services
from .status import Status
from .telemetry import NodeTelemetry
from .tf_listener import TfListener
from .tf_tree import TransformTree

NODE_NAME = "lingbot_ros"
CONFIGURE_POLL_S = 0.05  # how often a configure checks for SIGINT/SIGTERM


class ConfigureInterrupted(BaseException):
    """SIGINT/SIGTERM during a configure: raised through rclpy's transition code (as a
    KeyboardInterrupt is) to ``main()``, which exits 0 without waiting for the model load."""


def _build_session(settings: params.Settings) -> tuple[StreamingSession, bool]:
    """Configure's heavy part: the model (checkpoint or random), the session, the warm-up."""
    model, random_weights = load_session_model(
        settings.session, settings.preset, settings.checkpoint or None, settings.precision,
        camera_head_precision=settings.camera_head_precision,
        trust_pickle=settings.trust_pickle)
    session = StreamingSession(model, settings.session)
    if settings.warmup:
        warm_up(session)
    return session, random_weights


class LingbotNode(LifecycleNode):
    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self._param_errors = params.declare(self)
        self._configured = False  # parameters may change only while unconfigured
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.finished = Future()  # done once the lifecycle shutdown ran: main() returns
        self.settings: Optional[params.Settings] = None
        self.session: Optional[StreamingSession] = None
        self.telemetry = NodeTelemetry()  # counters since the node started (written by the worker)
        self.camera_info: Optional[CameraInfo] = None
        self.paused = False  # ~/pause: images are dropped (counted) while set
        self.robot_frames: Optional[RobotFrames] = None  # the TF chain; while active
        self._tf_listener: Optional[TfListener] = None
        self.image_input: Optional[ImageInput] = None  # the image subscription; while active
        self.worker: Optional[FrameWorker] = None  # the thread from the queue to the outputs
        self.outputs: Optional[Outputs] = None
        self._service_handles: Optional[Services] = None
        self.status: Optional[Status] = None
        self._subs: list = []
        self.configure_job: Optional[BackgroundJob] = None  # the heavy part of a configure

    # -- lifecycle ---------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate parameters, load the model, build the session, warm up, add services.

        The heavy part (model load, session, warm-up) runs on a thread of its own while this
        one watches the context: a SIGINT/SIGTERM (rclpy shuts the context down) abandons the
        configure within ``CONFIGURE_POLL_S``; ``main()`` then exits without waiting for that
        thread (``configure_job``), which writes nothing."""
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
        if settings.trust_pickle and settings.checkpoint:
            self.get_logger().warning(
                f"model.trust_pickle: true: {settings.checkpoint} may be unpickled in full "
                "(runs code from the file); convert it once: lingbot-ros-convert-checkpoint "
                f"{settings.checkpoint} {settings.checkpoint}.safetensors")
        job = BackgroundJob(lambda: _build_session(settings), name="lingbot_configure")
        self.configure_job = job
        if not job.wait(self.context.ok, CONFIGURE_POLL_S):
            # SIGINT/SIGTERM: no transition can complete on a shut-down context; main() exits
            # at once, the job is abandoned (it writes nothing)
            raise ConfigureInterrupted()
        self.configure_job = None
        try:
            session, random_weights = job.result()
        except Exception as exc:  # a bad checkpoint, no CUDA, no flashinfer...
            self.get_logger().error(f"configure failed: {type(exc).__name__}: {exc}")
            return TransitionCallbackReturn.FAILURE
        if random_weights:
            self.get_logger().warning(
                f"NO CHECKPOINT: model.preset '{settings.preset}' with RANDOM weights; poses "
                "are NOT meaningful. Set the 'checkpoint' parameter for real estimates.")
        self.settings, self.session = settings, session
        info = session.info()
        self.telemetry.set_session_info(info)
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
            f"on {settings.session.device}, attention {info['attention']} "
            f"({info['fast_path']}, fused kernels {'on' if info['fused_kernels'] else 'off'}), "
            f"{settings.session.num_scale_frames} anchor frames, window {settings.session.window}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Publishers, subscriptions, timers and the worker thread. Anything that fails here
        (a topic already used with another type, ...) is logged at ERROR and the transition
        returns ERROR: ``on_error`` then frees everything and leaves the node unconfigured."""
        try:
            self._start_io()
        except Exception as exc:  # noqa: BLE001 -- reported, then on_error cleans up
            self.get_logger().error(f"activate failed: {type(exc).__name__}: {exc}")
            return TransitionCallbackReturn.ERROR
        self.get_logger().info(f"active: listening on {self.image_input.topic}; TF: "
                               f"{tf_tree_mode(self.settings.node)}")
        return super().on_activate(state)

    def _start_io(self) -> None:
        cfg = self.settings.node
        # Our own TF buffer (tf2_ros has no pip wheels): base -> camera, another odom.
        tree = None
        if not cfg.camera_only or (cfg.publish_map_to_odom and not cfg.publish_odom_to_base):
            tree = TransformTree()
            self._tf_listener = TfListener(self, tree)
        self.robot_frames = RobotFrames(cfg, tree)
        self.outputs = Outputs(self, cfg, tree)
        self.status = Status(self)
        self.worker = FrameWorker(
            self.session, self.outputs, self.status, self.telemetry,
            robot_frames=self.robot_frames, log=self.get_logger(), queue_size=cfg.queue_size,
            max_image_pixels=cfg.max_image_pixels, use_compressed=cfg.use_compressed,
            alive=self.context.ok)
        self.image_input = ImageInput(self, cfg, self._on_image)  # its QoS fits the camera
        self._subs = [self.create_subscription(CameraInfo, cfg.camera_info_topic,
                                               self._on_camera_info, qos_profile_sensor_data)]
        self.worker.start()

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop intake; queued frames are dropped and counted; the session keeps its state."""
        self._stop_io()
        return super().on_deactivate(state)

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        # The services stay: unconfigured, they answer success=false (GetCacheInfo.srv).
        self._release(keep_services=True)
        self._configured = False
        self.paused = False  # a new configure starts unpaused
        return TransitionCallbackReturn.SUCCESS

    def on_error(self, state: LifecycleState) -> TransitionCallbackReturn:
        """A transition failed with an error (activate, or an exception anywhere): free
        everything and become unconfigured, so the parameters can be fixed and the node
        configured again (``main()`` exits 1 instead under autostart)."""
        self.get_logger().error(
            f"transition from '{state.label}' failed: the node is unconfigured again "
            "(session released); fix the cause, then configure")
        try:
            self._stop_io()
        except Exception as exc:  # noqa: BLE001 -- half-built: release what can be
            self.get_logger().error(f"stopping after the error: {type(exc).__name__}: {exc}")
        self._stop_io_refs()
        self._release(keep_services=True)
        self._configured = False
        self.paused = False
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
        """Our parameters apply at configure: refused while configured; while unconfigured
        each change is checked as configure would check it (the reason is returned). ROS's
        own parameters (``use_sim_time``...) are left to ROS, in any state."""
        ours = {p.name: p.value for p in parameters if p.name in params.PARAM_NAMES}
        if not ours:
            return SetParametersResult(successful=True)
        if self._configured:
            return SetParametersResult(successful=False, reason=(
                "parameters apply at configure: deactivate and clean up the node first "
                "(ros2 lifecycle set <node> deactivate, then cleanup), set them, configure"))
        try:
            params.check_update(params.read(self), ours)
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
        if self.worker is not None:
            self.worker.stop()  # the frame in flight is published first
            self.telemetry.count("dropped_inactive", self.worker.drop_queued())
            self.worker = None
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

    def _stop_io_refs(self) -> None:
        """Forget whatever ``_stop_io`` could not take down (after a failed activate)."""
        self.image_input = self.worker = self.outputs = self.status = None
        self._tf_listener = None
        self._subs = []

    def _release(self, keep_services: bool = False) -> None:
        """Free the session, caches and model (GPU memory included); remove the services
        unless ``keep_services`` (cleanup keeps them). The worker is stopped by then."""
        if self._service_handles is not None and not keep_services:
            self._service_handles.destroy()
            self._service_handles = None
        self.session = None
        self.telemetry.set_session_info(None)
        gc.collect()
        try:
            import torch
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        except ImportError:  # pragma: no cover
            pass

    # -- intake --------------------------------------------------------------------------------
    def _on_image(self, msg) -> None:
        """Only queue: never touches the model or the GPU."""
        now = time.monotonic()
        self.telemetry.image_received(now)
        worker = self.worker
        if self.paused or worker is None:
            self.telemetry.count("dropped_paused" if self.paused else "dropped_inactive")
            status = self.status
            if self.paused and status is not None:
                status.paused(msg.header, "paused by ~/pause: this image was dropped")
            return
        if worker.offer(msg, now):
            self.telemetry.count("dropped_queue_full")

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
            dropped = self.worker.drop_queued() if self.worker is not None else 0
            self.telemetry.count("dropped_paused", dropped)
            if self.status is not None:
                self.status.paused(Header(stamp=self.get_clock().now().to_msg()),
                                    "paused by ~/pause")
            return f"paused: images are dropped until ~/pause false ({dropped} queued dropped)"
        return "resumed"

    def reset_stream(self) -> Optional[str]:
        """Clear session, queue and path; waits for the frame in flight (if any).

        Returns what was done, or None when there is no session (unconfigured)."""
        t0 = time.monotonic()
        if self.session is None:
            return None
        if self.worker is not None:  # active: the worker resets between two of its frames
            dropped = self.worker.reset()
        else:  # inactive: no worker thread, nothing in flight (it published it on stopping)
            self.session.reset()
            self.telemetry.stream_reset(self.session.info())
            dropped = 0
        return (f"reset: caches and trajectory cleared, {dropped} queued frame(s) dropped "
                f"in {(time.monotonic() - t0) * 1e3:.1f} ms")


if __name__ == "__main__":  # python -m lingbot_ros.ros.node: the entry point, ros/main.py
    import runpy
    runpy.run_module("lingbot_ros.ros.main", run_name="__main__", alter_sys=True)

"""lingbot_ros_node: the lifecycle node. A thin adapter: ROS in, StreamingSession, ROS out.

Threads: the executor thread runs the callbacks (image intake only queues; services and timers
read snapshots); the worker thread (``FrameWorker``, while active) runs the session and publishes.
The node owns the lifecycle, the settings, the session object's lifetime and the pause switch
(executor thread only); everything else has its owner in a room of ros/ (docs/architecture.md,
"Who owns which state"): the readers get narrow read functions (``StatusReads``,
``ServiceCalls``), never the node; ``StreamControl`` runs reset, load and save. ``main()`` lives
in ``ros/main.py``.

Failures: configure's heavy part (model, session, warm-up) runs on a ``BackgroundJob`` so a
signal abandons it at once (``ConfigureInterrupted``); an exception in activate is logged
at ERROR and ``on_error`` leaves the node unconfigured (configurable again). Parameters are
checked when set (``params.check_update``: as configure would) and refused while
configured; ROS's own (``use_sim_time``) always pass.
"""
from __future__ import annotations

import time
from typing import Optional

from rcl_interfaces.msg import SetParametersResult
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.task import Future
from sensor_msgs.msg import CameraInfo
from std_msgs.msg import Header

from ..geometry import FileRoot
from ..session import StreamingSession
from .backend.factory import NodeBackend
from ..scale import ScaleStream
from .intake.stream_control import StreamControl
from .intake.image_input import ImageInput
from .intake.rig import RigIO
from .intake.worker import FrameWorker
from .lifecycle.background_job import BackgroundJob
from .lifecycle.file_policy import check_snapshot_paths, open_files_root, unconfined_warning
from .lifecycle.session_build import build_session
from .lifecycle.snapshot_handlers import NodeSnapshots
from .outputs.frame_outputs import Outputs
from .outputs.scale_topic import ScalePublisher
from .params import declare as params
from .services import ServiceCalls, Services, StreamView
from .status.gc_pauses import GcPauses
from .status.node_facts import FactsBoard
from .status.reports import Status, StatusReads
from .status.telemetry import NodeTelemetry
from .tf.listener import TfListener
from .tf.robot_frames import RobotFrames, tf_tree_mode
from .node_io import forget_io, start_io, stop_io

NODE_NAME = "lingbot_ros"
CONFIGURE_POLL_S = 0.05  # how often a configure checks for SIGINT/SIGTERM


class ConfigureInterrupted(BaseException):
    """SIGINT/SIGTERM during a configure: raised through rclpy's transition code (as a
    KeyboardInterrupt is) to ``main()``, which exits 0 without waiting for the model load."""


class LingbotNode(LifecycleNode):
    def __init__(self, **kwargs) -> None:
        super().__init__(NODE_NAME, **kwargs)
        self._param_errors = params.declare(self)
        self._configured = False  # parameters may change only while unconfigured
        self.add_on_set_parameters_callback(self._on_set_parameters)
        self.finished = Future()  # done once the lifecycle shutdown ran: main() returns
        self.settings: Optional[params.Settings] = None
        self.files: Optional[FileRoot] = None  # files.root: every caller's path (file_policy.py)
        self.session: Optional[StreamingSession] = None
        self.telemetry = NodeTelemetry()  # counters since the node started (written by the worker)
        self.facts = FactsBoard()  # the worker's NodeFacts (the chain, the outputs' facts)
        self.stream: Optional[StreamControl] = None  # reset, load, save; configure to cleanup
        self.gc_pauses = GcPauses()  # the collector's full collections, timed (/diagnostics)
        self.gc_pauses.install()
        self.camera_info: Optional[CameraInfo] = None
        self.paused = False  # ~/pause: images are dropped (counted) while set
        self.robot_frames: Optional[RobotFrames] = None  # the TF chain; while active
        self._tf_listener: Optional[TfListener] = None
        self.image_input: Optional[ImageInput] = None  # the image subscription; while active
        self.worker: Optional[FrameWorker] = None  # the thread from the queue to the outputs
        self.rig: Optional[RigIO] = None  # a camera rig's pieces (cameras.names); while active
        self._rig_services: list = []  # ~/<camera>/reset; while active
        self.outputs: Optional[Outputs] = None
        # the stream's metric scale (scale.*): from configure to cleanup, like the session;
        # fed by the worker, reset with the stream (docs/node.md "Scale")
        self.scale: Optional[ScaleStream] = None
        self.scale_topic: Optional[ScalePublisher] = None  # ~/scale; while active
        self._service_handles: Optional[Services] = None
        self.status: Optional[Status] = None
        self._subs: list = []
        self.configure_job: Optional[BackgroundJob] = None  # the heavy part of a configure
        # resume_from, ~/save_session, ~/load_session, save_on_shutdown; holds a restored
        # snapshot's map and path until activate
        self.snapshots = NodeSnapshots(self.get_logger())
        self.backend = NodeBackend()  # loop.enable: the back end's thread and its outputs

    def destroy_node(self) -> None:
        """Destroy the node's entities and the node itself, including the lifecycle state
        machine: rclpy's ``LifecycleNode`` leaves that one (which holds the rcl node, so the
        DDS participant and its threads) to the garbage collector, i.e. to the interpreter's
        finalization, where tearing DDS down beside exiting threads aborted the process now
        and then (``terminate called without an active exception``). Idempotent."""
        self.gc_pauses.uninstall()
        super().destroy_node()
        machine = getattr(self, "_state_machine", None)  # rclpy's; absent in other versions
        if machine is not None:
            machine.destroy_when_not_in_use()

    # -- lifecycle ---------------------------------------------------------------------------
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Validate parameters, load the model, build the session, warm up, add services.

        The heavy part (model load, session, warm-up) runs on a thread of its own while this
        one watches the context: a SIGINT/SIGTERM (rclpy shuts the context down) abandons the
        configure within ``CONFIGURE_POLL_S``; ``main()`` then exits without waiting for that
        thread (``configure_job``), which writes nothing."""
        self.get_logger().info("configuring: checking parameters, loading the model, warming up")
        errors = list(self._param_errors) + params.declare_cameras(self)  # a rig's new names
        try:
            settings = params.build_settings(params.read(self))
        except ValueError as exc:
            errors.append(str(exc))
        if not errors:  # files.root created; resume_from and save_on_shutdown resolved in it
            try:
                files = open_files_root(settings.files_root)
                settings, notes = check_snapshot_paths(settings, files)
            except (OSError, ValueError) as exc:
                errors.append(str(exc))
        if errors:
            for e in errors:
                self.get_logger().error(f"configure failed: {e}")
            return TransitionCallbackReturn.FAILURE
        if unconfined_warning(files):
            self.get_logger().warning(unconfined_warning(files))
        for note in notes:
            self.get_logger().info(note)
        if settings.trust_pickle and settings.checkpoint:
            self.get_logger().warning(
                f"model.trust_pickle: true: {settings.checkpoint} may be unpickled in full "
                "(runs code from the file); convert it once: lingbot-ros-convert-checkpoint "
                f"{settings.checkpoint} {settings.checkpoint}.safetensors")
        job = BackgroundJob(lambda: build_session(settings), name="lingbot_configure")
        self.configure_job = job
        if not job.wait(self.context.ok, CONFIGURE_POLL_S):
            # SIGINT/SIGTERM: no transition can complete on a shut-down context; main() exits
            # at once, the job is abandoned (it writes nothing)
            raise ConfigureInterrupted()
        self.configure_job = None
        try:
            session, random_weights, resumed = job.result()
        except Exception as exc:  # a bad checkpoint, no CUDA, no flashinfer...
            self.get_logger().error(f"configure failed: {type(exc).__name__}: {exc}")
            return TransitionCallbackReturn.FAILURE
        if random_weights:
            self.get_logger().warning(
                f"NO CHECKPOINT: model.preset '{settings.preset}' with RANDOM weights; poses "
                "are NOT meaningful. Set the 'checkpoint' parameter for real estimates.")
        rig = settings.node.rig  # a rig's scale: one per camera, in its RigIO
        scale = None if rig.enabled else ScaleStream(settings.scale, log=self.get_logger())
        # the snapshot's scale estimate continues (or is refused: the configure fails)
        if resumed is not None and not self.snapshots.continue_scale(
                resumed, scale, settings.resume_from):
            return TransitionCallbackReturn.FAILURE
        error = self.backend.configure(settings, session, self.get_logger(), files)
        if error:
            self.get_logger().error(f"configure failed: {error}")
            return TransitionCallbackReturn.FAILURE
        self.settings, self.session, self.files = settings, session, files
        self.scale = scale
        self.stream = None if rig.enabled else StreamControl(
            session, self.telemetry, self.get_logger(), scale, backend=self.backend.thread)
        if resumed is not None:  # its map and path wait for activate; the back end goes on
            self.snapshots.resumed(resumed, settings.resume_from)
            self.stream.restore_backend(resumed)
        info = session.info()[rig.primary] if rig.enabled else session.info()
        self.telemetry.set_session_info(info)
        if not self.context.ok():  # SIGINT/SIGTERM arrived meanwhile: main() exits cleanly
            self._release()
            return TransitionCallbackReturn.FAILURE
        try:
            if self._service_handles is None:  # still there after a cleanup
                self._service_handles = Services(self, self._service_calls())
        except Exception as exc:  # e.g. the interface package is not installed
            self.get_logger().error(f"configure failed: cannot create services: {exc}")
            self._release()
            return TransitionCallbackReturn.FAILURE
        self._configured = True
        if settings.gc_freeze:  # the model, session and warm-up garbage: never swept again
            self.gc_pauses.freeze()
        weights = (f"checkpoint {settings.checkpoint}" if settings.checkpoint
                   else f"random {settings.preset}")
        stream = info.stream
        self.get_logger().info(
            f"configured: {weights} on {settings.session.device}, attention {stream.attention} "
            f"({stream.fast_path}, fused kernels {'on' if stream.fused_kernels else 'off'}), "
            f"{settings.session.num_scale_frames} anchor frames, window {settings.session.window}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Publishers, subscriptions, timers and the worker thread. Anything that fails here
        (a topic already used with another type, ...) is logged at ERROR and the transition
        returns ERROR: ``on_error`` then frees everything and leaves the node unconfigured."""
        try:
            start_io(self)
        except Exception as exc:  # noqa: BLE001 -- reported, then on_error cleans up
            self.get_logger().error(f"activate failed: {type(exc).__name__}: {exc}")
            return TransitionCallbackReturn.ERROR
        inputs = self.rig.inputs if self.rig is not None else [self.image_input]
        self.get_logger().info(f"active: listening on {', '.join(i.topic for i in inputs)}; "
                               f"TF: {tf_tree_mode(self.settings.node)}")
        return super().on_activate(state)

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop intake; queued frames are dropped and counted; the session keeps its state."""
        stop_io(self)
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
            stop_io(self)
        except Exception as exc:  # noqa: BLE001 -- half-built: release what can be
            self.get_logger().error(f"stopping after the error: {type(exc).__name__}: {exc}")
        forget_io(self)
        self._release(keep_services=True)
        self._configured = False
        self.paused = False
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: Optional[LifecycleState]) -> TransitionCallbackReturn:
        """Stop and free everything (with ``session.save_on_shutdown``, the stream is saved
        first); the process then exits (``finished``)."""
        self.snapshots.save_on_shutdown(self.settings, self.stream, self.worker, self.outputs)
        stop_io(self)
        self._release()
        self._configured = False
        if not self.finished.done():
            self.finished.set_result(True)
        return TransitionCallbackReturn.SUCCESS

    def _on_set_parameters(self, parameters) -> SetParametersResult:
        """Our parameters apply at configure: refused while configured; while unconfigured
        each change is checked as configure would check it (the reason is returned). ROS's
        own parameters (``use_sim_time``...) are left to ROS, in any state."""
        ours = {p.name: p.value for p in parameters if params.is_ours(p.name)}
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

    def _release(self, keep_services: bool = False) -> None:
        """Free the session, caches and model (GPU memory included); remove the services
        unless ``keep_services`` (cleanup keeps them). The worker is stopped by then."""
        if self._service_handles is not None and not keep_services:
            self._service_handles.destroy()
            self._service_handles = None
        self.backend.release()
        self.session = self.scale = self.stream = None
        self.snapshots.discard_pending()
        self.telemetry.set_session_info(None)
        self.gc_pauses.unfreeze()  # what gc_freeze kept out of the sweeps can be freed again
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

    def _on_malformed_image(self, exc) -> None:
        """``topics.image_raw_take``: bytes that are no Image (``ImageRejected``): received,
        rejected and counted like an image the worker cannot convert."""
        self.telemetry.image_received(time.monotonic())
        self.telemetry.count(f"rejected_{exc.reason}")
        self.get_logger().warning(f"image rejected ({exc.reason}): {exc.detail}",
                                  throttle_duration_sec=2.0)

    def _on_camera_info(self, msg: CameraInfo) -> None:
        self.camera_info = msg

    # -- what the executor's readers get (never the node) -------------------------------------
    def _status_reads(self) -> StatusReads:
        outputs, scale = self.outputs, self.scale

        def image_qos():  # the image input is created after the status
            image_input = self.image_input
            return image_input.describe() if image_input is not None else None
        return StatusReads(
            telemetry=self.telemetry, device=self.settings.session.device,
            facts=self.facts.read, paused=lambda: self.paused, scale=lambda: scale,
            map_info=outputs.map.info if outputs.map is not None else dict,
            gc=self.gc_pauses.describe, camera_info=lambda: self.camera_info,
            image_qos=image_qos)

    def _service_calls(self) -> ServiceCalls:
        return ServiceCalls(
            stream=self._stream_view, reset=self.reset_stream, pause=self.set_paused,
            save_map=self.save_map, save_session=self.save_session,
            load_session=self.load_session, session_info=self.telemetry.session_info,
            facts=self.facts.read, maps=self.backend.map_access)

    def _stream_view(self) -> Optional[StreamView]:
        """The configured stream as the services see it (None: unconfigured)."""
        settings, session, files, scale = self.settings, self.session, self.files, self.scale
        if session is None:
            return None
        if settings.node.rig.enabled:  # a rig: the primary camera's stream and scale
            primary, rig = settings.node.rig.primary, self.rig
            session = session.stream(primary)
            scale = rig.unit(primary).scale if rig is not None else None
        return StreamView(session.trajectory, settings.node.map_frame, files,
                          scale.estimate if scale is not None else None)

    # -- services' side ----------------------------------------------------------------------
    def save_session(self, path):
        """~/save_session: the ``SnapshotJob`` writing it (ros/intake/stream_control.py)."""
        self._no_rig()
        return self.stream.save(path)

    def load_session(self, path) -> tuple[bool, str, int]:
        """~/load_session: (success, message, frames)."""
        self._no_rig()
        return self.snapshots.load(self.stream, path, self.outputs)

    def save_map(self, path):
        """Write ~/map_points as PLY: (points, their scale snapshot), or None without a map."""
        outputs = self.rig if self.rig is not None else self.outputs
        return outputs.save_map(path) if outputs is not None else None

    def set_paused(self, paused: bool) -> str:
        """~/pause: while paused, images are dropped (counted as dropped_paused) and ~/status
        says PAUSED; the stream keeps its state (a long pause may restart it on max_gap_s)."""
        if paused == self.paused:
            return "already paused" if paused else "not paused"
        self.paused = paused
        if paused:
            worker = self.worker if self.worker is not None else self.rig
            dropped = worker.drop_queued() if worker is not None else 0
            self.telemetry.count("dropped_paused", dropped)
            if self.status is not None:
                self.status.paused(Header(stamp=self.get_clock().now().to_msg()),
                                    "paused by ~/pause")
            return f"paused: images are dropped until ~/pause false ({dropped} queued dropped)"
        return "resumed"

    def _no_rig(self) -> None:
        if self.stream is None and self.session is not None:
            raise ValueError("session snapshots are not supported with a camera rig yet")

    def reset_stream(self) -> Optional[str]:
        """Clear session, queue and path (``StreamControl.reset``, active or not); waits for
        the frame in flight (if any). Returns what was done, or None when unconfigured."""
        t0 = time.monotonic()
        stream, rig, session = self.stream, self.rig, self.session
        if rig is not None:  # every camera of the rig, the fused pose and the map
            dropped = rig.reset()
        elif stream is None and session is not None:  # a rig, inactive: its streams
            for name in session.names:
                session.reset(name)
            dropped = 0
        elif stream is None:
            return None
        else:
            dropped = stream.reset()
        return (f"reset: caches and trajectory cleared, {dropped} queued frame(s) dropped "
                f"in {(time.monotonic() - t0) * 1e3:.1f} ms")


if __name__ == "__main__":  # python -m lingbot_ros.ros.node: the entry point, ros/main.py
    import runpy
    runpy.run_module("lingbot_ros.ros.main", run_name="__main__", alter_sys=True)

"""The node's intake and outputs from activate to deactivate: ``start_io`` builds them on the
node (publishers, subscriptions, timers, the worker thread), ``stop_io`` takes them down,
``forget_io`` drops whatever a failed activate left half-built.

One camera (``cameras.names`` empty): today's pieces, each kept on the node's attributes
(``image_input``, ``worker``, ``outputs``, ``status``, ...). The node keeps its callbacks
(``_on_image``, ``_on_camera_info``, ...) and its lifecycle; this module only wires.

A camera rig: the node's TF tree and listener, its ``RigIO`` (``node.rig``: per camera its
subscriptions, chain, outputs under ``~/<camera>/``, status and scale; the fused pose; the
worker), the scale sources' inputs per camera (``rig_scale_inputs``), a ``~/<camera>/reset``
(std_srvs/Trigger, as ~/reset) per camera, and ``Status`` (~/status, ~/cache_info,
/diagnostics) over the primary camera's counters with the rig's check (``RigIO.check``:
source, failovers, disagreement) in /diagnostics.
"""
from __future__ import annotations

import time

from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo
from std_srvs.srv import Trigger

from .intake.rig import RigIO

from .intake.image_input import ImageInput
from .intake.scale_inputs import rig_scale_inputs, scale_inputs
from .intake.worker import FrameWorker
from .outputs.frame_outputs import Outputs
from .outputs.scale_topic import ScalePublisher
from .params.node_config import scale_reads_tf
from .status.node_facts import NodeFacts
from .status.reports import Status, StatusReads
from .tf.listener import TfListener
from .tf.robot_frames import RobotFrames
from .tf.tree import TransformTree

__all__ = ["forget_io", "start_io", "stop_io"]


def start_io(node) -> None:
    """Publishers, subscriptions, timers and the worker thread of ``node`` (activate)."""
    cfg = node.settings.node
    if cfg.rig.enabled:
        _start_rig(node)
        return
    # Our own TF buffer (tf2_ros has no pip wheels): base -> camera, another odom.
    tree = None
    if (not cfg.camera_only or (cfg.publish_map_to_odom and not cfg.publish_odom_to_base)
            or scale_reads_tf(cfg, node.settings.scale)):
        tree = TransformTree()
        node._tf_listener = TfListener(node, tree)
    node.robot_frames = RobotFrames(cfg, tree)
    node.outputs = Outputs(node, cfg, tree, node.settings.scale)
    scale = node.scale
    node.scale_topic = ScalePublisher(node, cfg.map_frame, lambda: scale.estimate)
    node.snapshots.load_pending(node.outputs)  # a restored snapshot's map and path
    node.backend.activate(node, cfg, node.outputs)  # ~/loop_closures
    node.facts.publish(NodeFacts(node.robot_frames.facts(), node.outputs.facts()))
    node.status = Status(node, cfg, node._status_reads())
    node.worker = FrameWorker(
        node.session, node.outputs, node.status, node.telemetry,
        robot_frames=node.robot_frames, log=node.get_logger(), queue_size=cfg.queue_size,
        max_image_pixels=cfg.max_image_pixels, use_compressed=cfg.use_compressed,
        alive=node.context.ok, scale=node.scale, scale_topic=node.scale_topic,
        facts=node.facts, control=node.stream, backend=node.backend.thread)
    node.image_input = ImageInput(  # its QoS fits the camera
        node, cfg, node._on_image,
        on_malformed=node._on_malformed_image if cfg.image_raw_take else None)
    node._subs = [node.create_subscription(CameraInfo, cfg.camera_info_topic,
                                           node._on_camera_info, qos_profile_sensor_data)]
    node._subs += scale_inputs(node)
    node.worker.start()


def stop_io(node) -> None:
    """Take down what ``start_io`` built (deactivate, error, shutdown); idempotent."""
    for srv in node._rig_services:
        node.destroy_service(srv)
    node._rig_services = []
    if node.rig is not None:  # its worker stops after its turn, then its entities go
        node.rig.destroy()
        node.rig = None
    if node.image_input is not None:
        node.image_input.destroy()
        node.image_input = None
    for sub in node._subs:
        if isinstance(sub, ImageInput):  # the aligned depth input: its own timer
            sub.destroy()
        else:
            node.destroy_subscription(sub)
    node._subs = []
    if node.worker is not None:
        node.worker.stop()  # the frame in flight is published first
        node.telemetry.count("dropped_inactive", node.worker.drop_queued())
        node.worker = None
    if node.outputs is not None and node.context.ok():
        try:
            node.outputs.flush_path()
        except Exception:  # noqa: BLE001 -- the context went down meanwhile (Ctrl-C)
            pass
    node.backend.deactivate()
    for name in ("status", "scale_topic", "outputs", "_tf_listener"):  # in this order
        if getattr(node, name) is not None:
            getattr(node, name).destroy()
            setattr(node, name, None)
    if node.scale is not None:  # the worker is stopped: its TF lookups go with the tree
        node.scale.attach_tf()


def forget_io(node) -> None:
    """Forget whatever ``stop_io`` could not take down (after a failed activate)."""
    node.image_input = node.worker = node.outputs = node.status = None
    node.scale_topic = None
    node._tf_listener = None
    node.rig = None
    node._rig_services = []
    node._subs = []


def _start_rig(node) -> None:
    settings = node.settings
    cfg = settings.node
    tree = TransformTree()  # base -> each camera
    node._tf_listener = TfListener(node, tree)
    rig = RigIO(node, settings, node.session, tree, log=node.get_logger(),
                alive=node.context.ok, paused=lambda: node.paused)
    node.rig = rig
    primary = rig.unit(cfg.rig.primary)
    node.status = Status(node, cfg, StatusReads(
        telemetry=primary.telemetry, device=settings.session.device,
        paused=lambda: node.paused, map_info=rig.map.info if rig.map is not None else dict,
        gc=node.gc_pauses.describe, rig=rig.check))
    node._subs = rig_scale_inputs(node, rig)
    node._rig_services = [node.create_service(Trigger, f"~/{u.name}/reset",
                                              _camera_reset(node, rig, u.name))
                          for u in rig.units]
    rig.start()


def _camera_reset(node, rig: RigIO, camera: str):
    """~/<camera>/reset: that camera's stream, slot, outputs and scale (the others go on);
    a reset primary hands the fused pose to the next tracking camera at once."""
    def reset(request, response):
        t0 = time.monotonic()
        try:
            dropped = rig.reset(camera)
        except Exception as exc:  # noqa: BLE001 -- answered, the node stays up
            response.success, response.message = False, f"failed: {type(exc).__name__}: {exc}"
            return response
        response.success = True
        response.message = (f"{camera} reset: its caches and trajectory cleared, {dropped} "
                            f"queued frame(s) dropped in {(time.monotonic() - t0) * 1e3:.1f} ms")
        node.get_logger().info(f"~/{camera}/reset: {response.message}")
        return response
    return reset

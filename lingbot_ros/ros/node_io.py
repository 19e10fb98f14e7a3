"""The node's intake and outputs from activate to deactivate: ``start_io`` builds them on the
node (publishers, subscriptions, timers, the worker thread), ``stop_io`` takes them down,
``forget_io`` drops whatever a failed activate left half-built.

One camera (``cameras.names`` empty): today's pieces, each kept on the node's attributes
(``image_input``, ``worker``, ``outputs``, ``status``, ...). The node keeps its callbacks
(``_on_image``, ``_on_camera_info``, ...) and its lifecycle; this module only wires.
"""
from __future__ import annotations

from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo

from .intake.image_input import ImageInput
from .intake.scale_inputs import scale_inputs
from .intake.worker import FrameWorker
from .outputs.frame_outputs import Outputs
from .outputs.scale_topic import ScalePublisher
from .params.node_config import scale_reads_tf
from .status.node_facts import NodeFacts
from .status.reports import Status
from .tf.listener import TfListener
from .tf.robot_frames import RobotFrames
from .tf.tree import TransformTree

__all__ = ["forget_io", "start_io", "stop_io"]


def start_io(node) -> None:
    """Publishers, subscriptions, timers and the worker thread of ``node`` (activate)."""
    cfg = node.settings.node
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
    node._subs = []

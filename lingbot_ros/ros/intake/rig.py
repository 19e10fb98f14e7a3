"""RigIO: a camera rig's pieces on the node, from activate to deactivate (the rig's
counterpart of the single-camera node's ``_start_io``).

Built from the settings (``cameras.*``, ``NodeConfig.rig``) and the rig's multi-stream
session: per camera (``camera_config``: the node's settings with its topic and frame) its
``RobotFrames`` (base -> its camera, from the node's TF tree), its ``Outputs`` under
``~/<camera>/`` without TF and into the rig's one map, its ``CameraStatus``, its own
``NodeTelemetry`` and ``ScaleStream``, its image subscription (``ImageInput``: its QoS fits
its camera); for the rig the ``RigGather`` (``cameras.max_wait_ms``), the ``RigFusion``
(``cameras.primary``, ``failback_frames``, ``stall_timeout_s``, ``max_disagreement_m``),
the ``FusedOutputs`` and the ``RigWorker`` that runs them; per camera its camera_info
subscription (``cameras.<camera>.camera_info_topic``, checked on /diagnostics). ``paused``
(~/pause) drops each image on arrival (counted ``dropped_paused``). The scale sources' own
inputs (aligned depth per camera, the shared odometry) are ``rig_scale_inputs``
(scale_inputs.py). Not yet: snapshots.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from rclpy.qos import qos_profile_sensor_data
from sensor_msgs.msg import CameraInfo

from ...scale import ScaleStream, units_header
from ..outputs.frame_outputs import Outputs
from ..outputs.map_points import MapPoints
from ..outputs.rig_outputs import FusedOutputs
from ..params.node_config import camera_config
from ..params.rig import RigConfig
from ..status import diagnostics
from ..status.camera_status import CameraStatus
from ..status.telemetry import NodeTelemetry
from ..tf.rig_fusion import RigFusion, RigFusionConfig
from ..tf.robot_frames import RobotFrames
from .image_input import ImageInput
from .rig_gather import RigGather
from .rig_worker import CameraUnit, RigWorker

__all__ = ["RigIO", "fusion_config"]


def fusion_config(rig: RigConfig) -> RigFusionConfig:
    """The fusion's settings from the ``cameras.*`` parameters."""
    return RigFusionConfig(names=rig.camera_names, primary=rig.primary_camera,
                           failback_frames=rig.failback_frames,
                           stall_timeout_s=rig.camera_stall_timeout_s,
                           max_disagreement_m=rig.max_disagreement_m)


class RigIO:
    def __init__(self, node, settings, session, tf_tree, *, log,
                 alive: Callable[[], bool] = lambda: True,
                 clock: Callable[[], float] = time.monotonic,
                 subscribe: bool = True, paused: Callable[[], bool] = bool) -> None:
        """``settings``: the node's (``Settings``) with a rig; ``session``: the rig's
        multi-stream session; ``tf_tree``: the node's ``TransformTree`` (base -> cameras);
        ``subscribe`` False: no image subscriptions (``offer`` feeds the rig)."""
        cfg = settings.node
        rig = cfg.rig
        if not rig.enabled:
            raise ValueError("RigIO needs a rig (cameras.names is empty)")
        self._node = node
        self._paused = paused
        self.camera_info: dict[str, Any] = {}  # each camera's last CameraInfo
        self.map = (MapPoints(node, cfg.map_frame, cfg.map_voxel_size, cfg.map_max_points,
                              cfg.map_rate_hz) if cfg.map_points else None)
        self.fused = FusedOutputs(node, cfg)
        self.fusion = RigFusion(fusion_config(rig))
        self.gather = RigGather(rig.camera_names, rig.max_wait_ms, clock=clock)
        units = []
        for camera in rig.cameras:
            own = camera_config(cfg, camera.name)
            telemetry = NodeTelemetry()
            units.append(CameraUnit(
                camera.name,
                Outputs(node, own, tf_tree, settings.scale, camera=camera.name,
                        publish_tf=False, shared_map=self.map),
                CameraStatus(node, camera.name, telemetry), telemetry,
                RobotFrames(own, tf_tree), ScaleStream(settings.scale, log=log),
                camera.use_compressed))
        self.units = tuple(units)
        self.worker = RigWorker(session, self.units, self.fusion, self.fused, self.gather,
                                log=log, max_image_pixels=cfg.max_image_pixels,
                                alive=alive)
        self.inputs: list[ImageInput] = []
        if subscribe:
            for camera in rig.cameras:
                self.inputs.append(ImageInput(
                    node, camera_config(cfg, camera.name),
                    lambda msg, name=camera.name: self.offer(name, msg),
                    label=f"{camera.name} image input"))
        self._subs = []
        if subscribe:
            for camera in rig.cameras:
                if camera.camera_info_topic:
                    self._subs.append(node.create_subscription(
                        CameraInfo, camera.camera_info_topic,
                        lambda msg, name=camera.name: self.camera_info.__setitem__(name, msg),
                        qos_profile_sensor_data))

    def offer(self, camera: str, msg, received: Optional[float] = None) -> bool:
        """An image of ``camera`` (its callback): counted received, queued for the rig."""
        now = time.monotonic() if received is None else received
        unit = self.unit(camera)
        unit.telemetry.image_received(now)
        if self._paused():
            unit.telemetry.count("dropped_paused")
            return False
        return self.worker.offer(camera, msg, now)

    def reset(self, camera: Optional[str] = None) -> int:
        """Reset one camera (``RigWorker.reset``), or the whole rig (None: every camera,
        the fused pose and the rig's map); returns the queued images dropped."""
        dropped = self.worker.reset(camera)
        if camera is None and self.map is not None:
            self.map.clear()
        return dropped

    def save_map(self, path):
        """~/save_map: the rig's one map as PLY (as ``Outputs.save_map``); None without."""
        return self.map.save(path, units_header) if self.map is not None else None

    def drop_queued(self) -> int:
        """Drop every camera's waiting image (~/pause on), counted ``dropped_paused``."""
        dropped = 0
        for u in self.units:
            n = self.gather.clear(u.name)
            u.telemetry.count("dropped_paused", n)
            dropped += n
        return dropped

    def check(self) -> tuple[int, str, dict]:
        """The rig's part of /diagnostics (``rig_check``), with per camera the frames
        taken by the worker and its camera_info against its images (keys ``<camera>_*``)."""
        counts = self.gather.counts()
        level, message, values = diagnostics.rig_check(self.worker.rig_facts, counts)
        for u in self.units:
            values[f"{u.name}_taken"] = counts[u.name].taken  # frames handed to the worker
            t = u.telemetry.snapshot()
            info = diagnostics.camera_info_check(self.camera_info.get(u.name),
                                                 t.last_input_hw, t.last_fx)
            values.update({f"{u.name}_{k}": v for k, v in info.items()})
        return level, message, values

    def unit(self, camera: str) -> CameraUnit:
        for u in self.units:
            if u.name == camera:
                return u
        raise ValueError(f"no camera {camera!r} in the rig {[u.name for u in self.units]}")

    def start(self) -> None:
        self.worker.start()

    def destroy(self) -> None:
        """Stop the worker (after its turn), then remove every subscription and publisher."""
        self.worker.stop()
        for image_input in self.inputs:
            image_input.destroy()
        self.inputs = []
        for sub in self._subs:
            self._node.destroy_subscription(sub)
        self._subs = []
        for u in self.units:
            u.outputs.destroy()
            u.status.destroy()
        self.fused.destroy()
        if self.map is not None:
            self.map.destroy()

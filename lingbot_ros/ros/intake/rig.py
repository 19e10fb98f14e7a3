"""RigIO: a camera rig's pieces on the node, from activate to deactivate (the rig's
counterpart of the single-camera node's ``_start_io``).

Built from the settings (``cameras.*``, ``NodeConfig.rig``) and the rig's multi-stream
session: per camera (``camera_config``: the node's settings with its topic and frame) its
``RobotFrames`` (base -> its camera, from the node's TF tree), its ``Outputs`` under
``~/<camera>/`` without TF and into the rig's one map, its ``CameraStatus``, its own
``NodeTelemetry`` and ``ScaleStream``, its image subscription (``ImageInput``: its QoS fits
its camera); for the rig the ``RigGather`` (``cameras.max_wait_ms``), the ``RigFusion``
(``cameras.primary``, ``failback_frames``, ``stall_timeout_s``, ``max_disagreement_m``),
the ``FusedOutputs`` and the ``RigWorker`` that runs them. Not yet: the scale sources'
own inputs per camera (aligned depth, odometry: ``scale_inputs``), ~/pause, snapshots.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Optional

from ...scale import ScaleStream
from ..outputs.frame_outputs import Outputs
from ..outputs.map_points import MapPoints
from ..outputs.rig_outputs import FusedOutputs
from ..params.node_config import camera_config
from ..params.rig import RigConfig
from ..status.camera_status import CameraStatus
from ..status.telemetry import NodeTelemetry
from ..tf.rig_fusion import RigFusion, RigFusionConfig
from ..tf.robot_frames import RobotFrames
from .image_input import ImageInput
from .rig_gather import RigGather
from .rig_worker import CameraUnit, RigFrame, RigWorker

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
                 make_frame: Callable[..., Any] = RigFrame,
                 clock: Callable[[], float] = time.monotonic,
                 subscribe: bool = True) -> None:
        """``settings``: the node's (``Settings``) with a rig; ``session``: the rig's
        multi-stream session; ``tf_tree``: the node's ``TransformTree`` (base -> cameras);
        ``subscribe`` False: no image subscriptions (``offer`` feeds the rig)."""
        cfg = settings.node
        rig = cfg.rig
        if not rig.enabled:
            raise ValueError("RigIO needs a rig (cameras.names is empty)")
        self._node = node
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
                                make_frame=make_frame, alive=alive)
        self.inputs: list[ImageInput] = []
        if subscribe:
            for camera in rig.cameras:
                self.inputs.append(ImageInput(
                    node, camera_config(cfg, camera.name),
                    lambda msg, name=camera.name: self.offer(name, msg),
                    label=f"{camera.name} image input"))

    def offer(self, camera: str, msg, received: Optional[float] = None) -> bool:
        """An image of ``camera`` (its callback): counted received, queued for the rig."""
        now = time.monotonic() if received is None else received
        self.unit(camera).telemetry.image_received(now)
        return self.worker.offer(camera, msg, now)

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
        for u in self.units:
            u.outputs.destroy()
            u.status.destroy()
        self.fused.destroy()
        if self.map is not None:
            self.map.destroy()

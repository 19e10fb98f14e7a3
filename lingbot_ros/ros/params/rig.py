"""A camera rig's parameters: the global ``cameras.*`` rows and one set of template rows per
camera (``cameras.<camera>.image_topic`` ...), and the typed ``RigConfig`` they build.

ROS 2 has no list of dicts, so a rig is ``cameras.names`` (comma separated) plus, for each
name, the ``CAMERA_ROWS`` with ``{camera}`` replaced by it. ``cameras.names`` "" is today's
single-camera node, unchanged (``RigConfig().enabled`` is false). The template rows are
declared for the names in ``cameras.names`` (``declare.declare_cameras``): at construction
(a params file's values apply at declaration) and again at configure.

Rules checked here (ValueError naming the parameter): names of ``CAMERA_NAME_RE``, unique,
none of the global rows' own words (``cameras.primary.image_topic`` would clash with
``cameras.primary``); the primary among the names; every camera's image topic set. The
rules against other parameters (a robot base frame, one model input size) are
``NodeConfig``'s and ``declare.build_settings``'s. Stdlib only.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from .row import Param, check_value

__all__ = ["CAMERA_NAME_RE", "CAMERA_ROWS", "RESERVED_CAMERA_NAMES", "RIG_PARAMS",
           "CameraConfig", "RigConfig", "build_rig", "camera_param", "camera_row", "check_names",
           "parse_names"]

CAMERA_NAME_RE = re.compile(r"[a-z0-9_]+")  # a camera's name (also ros/tf/rig_fusion.py's)


def parse_names(value: str) -> tuple[str, ...]:
    """``cameras.names`` -> the names, in order (spaces around a name ignored; an empty item
    stays, so ``RigConfig`` refuses it). "" -> ()."""
    return tuple(n.strip() for n in value.split(",")) if value.strip() else ()


RIG_PARAMS: tuple[Param, ...] = (
    Param("cameras.names", str, "", "rig.camera_names",
          "a camera rig: its cameras' names, comma separated ([a-z0-9_]+, unique), each "
          "with its cameras.<camera>.* parameters; outputs under ~/<camera>/, one fused "
          "odom -> base; \"\" = one camera (topics.image, today's node)",
          to_config=parse_names),
    Param("cameras.primary", str, "", "rig.primary_camera",
          "the camera whose stream gives the fused base pose while it tracks; \"\" = the first "
          "of cameras.names"),
    Param("cameras.max_wait_ms", float, 30.0, "rig.max_wait_ms",
          "a step waits for every camera's frame at most this long after the oldest waiting "
          "one, then runs with the frames that are there", range=(0.0, 1000.0)),
    Param("cameras.failback_frames", int, 30, "rig.failback_frames",
          "after a failover, the primary's frames tracked in a row before it takes back over",
          range=(0, 10_000)),
    Param("cameras.stall_timeout_s", float, 1.0, "rig.camera_stall_timeout_s",
          "a camera whose newest frame is this far behind the rig's newest stamp is stalled "
          "(the fused pose fails over)", range=(0.001, 60.0)),
    Param("cameras.max_disagreement_m", float, 0.5, "rig.max_disagreement_m",
          "diagnostics WARN when a camera's base pose is this far from the fused one",
          range=(1e-6, 100.0)),
)
RESERVED_CAMERA_NAMES = tuple(p.name.split(".")[1] for p in RIG_PARAMS)

CAMERA_ROWS: tuple[Param, ...] = (
    Param("cameras.{camera}.image_topic", str, "", "camera.image_topic",
          "the camera's image topic; required for every name in cameras.names"),
    Param("cameras.{camera}.camera_info_topic", str, "", "camera.camera_info_topic",
          "its camera info topic; \"\" = none"),
    Param("cameras.{camera}.depth_topic", str, "", "camera.depth_topic",
          "its aligned depth topic (scale.source depth); \"\" = none"),
    Param("cameras.{camera}.frame", str, "", "camera.frame",
          "its camera frame; \"\" = its images' header frame_id"),
    Param("cameras.{camera}.frame_is_optical", bool, True, "camera.frame_is_optical",
          "its camera frame has optical axes"),
    Param("cameras.{camera}.use_compressed", bool, False, "camera.use_compressed",
          "subscribe <image_topic>/compressed instead"),
)
_ROW_BY_SUFFIX = {p.name.split(".", 2)[2]: p for p in CAMERA_ROWS}


def camera_param(camera: str, row: Param) -> str:
    """The ROS name of ``row`` for ``camera`` (``cameras.front.image_topic``)."""
    return row.name.format(camera=camera)


def camera_row(name: str) -> Optional[tuple[str, Param]]:
    """``cameras.<camera>.<row>`` -> (camera, its template row); None for any other name."""
    parts = name.split(".", 2)
    if len(parts) != 3 or parts[0] != "cameras" or parts[2] not in _ROW_BY_SUFFIX:
        return None
    return parts[1], _ROW_BY_SUFFIX[parts[2]]


def check_names(names: tuple[str, ...]) -> None:
    """ValueError naming ``cameras.names`` unless every name is a camera name, none of the
    rig's own words, and none twice."""
    bad = [n for n in names if not isinstance(n, str) or not CAMERA_NAME_RE.fullmatch(n)]
    if bad:
        raise ValueError(f"parameter 'cameras.names': {bad} are not names of [a-z0-9_]+ "
                         f"(comma separated, no empty item)")
    reserved = [n for n in names if n in RESERVED_CAMERA_NAMES]
    if reserved:
        raise ValueError(f"parameter 'cameras.names': {reserved} clash with the parameters "
                         f"cameras.{reserved[0]}: not a camera name")
    if len(set(names)) != len(names):
        raise ValueError(f"parameter 'cameras.names': {list(names)} has a name twice")


@dataclass(frozen=True, slots=True)
class CameraConfig:
    """One camera of the rig (its ``cameras.<name>.*`` values)."""

    name: str
    image_topic: str
    camera_info_topic: str = ""
    depth_topic: str = ""
    frame: str = ""
    frame_is_optical: bool = True
    use_compressed: bool = False

    def __post_init__(self) -> None:
        for row in CAMERA_ROWS:
            check_value(row, getattr(self, row.attribute),
                        label=f"parameter {camera_param(self.name, row)!r}")
        if not self.image_topic:
            raise ValueError(f"parameter {camera_param(self.name, CAMERA_ROWS[0])!r} is "
                             f"required for every camera in cameras.names (got '')")

    def param(self, attribute: str) -> str:
        """The ROS name of this camera's ``attribute`` row (``cameras.front.frame``)."""
        return "cameras." + self.name + "." + attribute


@dataclass(frozen=True, slots=True)
class RigConfig:
    """The rig: ``camera_names`` () = one camera, today's node. ``cameras`` in name order."""

    camera_names: tuple[str, ...] = ()
    primary_camera: str = ""  # "" = camera_names[0]
    max_wait_ms: float = 30.0
    failback_frames: int = 30
    camera_stall_timeout_s: float = 1.0
    max_disagreement_m: float = 0.5
    cameras: tuple[CameraConfig, ...] = ()

    def __post_init__(self) -> None:
        names = tuple(self.camera_names)
        object.__setattr__(self, "camera_names", names)
        object.__setattr__(self, "cameras", tuple(self.cameras))
        for row in RIG_PARAMS[2:]:  # names and primary: the rules below
            check_value(row, getattr(self, row.attribute), label=f"parameter {row.name!r}")
        check_names(names)
        if self.primary_camera and self.primary_camera not in names:
            raise ValueError(f"parameter 'cameras.primary': {self.primary_camera!r} is not in "
                             f"cameras.names {list(names)}")
        if tuple(c.name for c in self.cameras) != names:
            raise ValueError(f"the rig's cameras {[c.name for c in self.cameras]} are not "
                             f"cameras.names {list(names)}")

    @property
    def enabled(self) -> bool:
        """A rig (``cameras.names`` set): else today's single-camera node."""
        return bool(self.camera_names)

    @property
    def primary(self) -> str:
        """The primary camera's name ("" without a rig)."""
        return self.primary_camera or (self.camera_names[0] if self.camera_names else "")

    def camera(self, name: str) -> CameraConfig:
        for c in self.cameras:
            if c.name == name:
                return c
        raise ValueError(f"no camera {name!r} in cameras.names {list(self.camera_names)}")


def build_rig(values: dict, undeclared_ok: bool = False) -> RigConfig:
    """Parameter values (name -> value; missing: the row's default) -> the rig.

    ``undeclared_ok`` (set-time checks only, whose result is not used): a camera none of whose
    rows is in ``values`` (not declared yet: its name was just added to ``cameras.names``)
    passes with a placeholder image topic, so ``ros2 param set cameras.names`` is accepted
    while unconfigured; configure declares its rows first and then asks for its topic."""
    v = {p.name: values.get(p.name, p.default) for p in RIG_PARAMS}
    for p in RIG_PARAMS:
        check_value(p, v[p.name])
    fields = {p.attribute: p.config_value(v[p.name]) for p in RIG_PARAMS}
    names = fields["camera_names"]
    check_names(names)  # before their rows
    cameras = []
    for name in names:
        keys = [camera_param(name, row) for row in CAMERA_ROWS]
        row_values = {row.attribute: values.get(key, row.default)
                      for row, key in zip(CAMERA_ROWS, keys)}
        if undeclared_ok and not any(key in values for key in keys):
            row_values["image_topic"] = UNDECLARED_TOPIC
        cameras.append(CameraConfig(name=name, **row_values))
    return RigConfig(**fields, cameras=tuple(cameras))


UNDECLARED_TOPIC = "undeclared"  # build_rig(undeclared_ok=True)'s placeholder

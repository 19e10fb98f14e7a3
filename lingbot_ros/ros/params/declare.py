"""The node's parameters, driven by the table (``table.PARAMS``): declared with
descriptors, checked while unconfigured, and turned into typed configs at configure.

``build_settings`` raises ValueError naming the parameter for anything invalid: the row's
type, range and choices first, then the configs' own rules (a multiple of the patch size,
one value against another), whose messages start with the field the row sets.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ...config import KeyframeConfig, PreprocessConfig, SessionConfig
from ...loop.config import LoopConfig
from ...scale import ScaleConfig
from .node_config import NodeConfig, check_rig, check_scale_inputs, outputs_read_depth
from .rig import CAMERA_ROWS, build_rig, camera_param, camera_row, parse_names
from .table import (PARAM_NAMES, PARAMS, PARAMS_BY_ATTRIBUTE, PARAMS_BY_NAME, Param,
                          check_value, rows)

__all__ = ["PARAMS", "PARAM_NAMES", "Param", "Settings", "TOPIC_PARAMS", "build_settings",
           "check_update", "check_value", "declare", "declare_cameras", "is_ours", "read"]


@dataclass(frozen=True)
class Settings:
    """Everything the node needs, validated."""

    session: SessionConfig
    node: NodeConfig
    scale: ScaleConfig  # the stream's metric scale (docs/scale.md)
    checkpoint: str
    trust_pickle: bool
    preset: str
    precision: str
    camera_head_precision: str
    depth_head_precision: str
    mlp_precision: str
    autostart: bool
    warmup: bool
    gc_freeze: bool
    resume_from: str = ""  # a snapshot to continue at configure (docs/node.md)
    save_on_shutdown: str = ""  # where to write one on a clean shutdown
    resume_if_present: bool = False  # nothing at resume_from: a new stream, not a failure
    files_root: str = ""  # files.root: "" = $ROS_HOME/lingbot_ros, "/" = anywhere
    loop: LoopConfig = LoopConfig()  # the back end (loop.*; docs/node.md "Loop closure")
    map_load_on_start: str = ""  # a place map loaded at configure ("" none)
    map_localize_on_start: bool = False  # relocalize in it from the first keyframes


def build_settings(values: dict, undeclared_ok: bool = False) -> Settings:
    """Parameter values (name -> value; missing: the default) -> validated settings.
    ``undeclared_ok``: set-time checks (``check_update``), see ``rig.build_rig``."""
    v = {p.name: values.get(p.name, p.default) for p in PARAMS}
    for p in PARAMS:
        check_value(p, v[p.name])

    def fields_of(config: str) -> dict:
        return {p.attribute: p.config_value(v[p.name]) for p in rows(config)}

    try:
        scale = ScaleConfig(**fields_of("scale"))
    except ValueError as exc:  # its messages name the field: scale.<name>, the parameter's
        name = re.match(r"scale\.\w+", str(exc))
        raise ValueError(f"parameter {name.group(0)!r}: {exc}" if name
                         and name.group(0) in PARAMS_BY_NAME else
                         f"invalid parameters: {exc}") from exc
    loop = _config_named("loop", LoopConfig, fields_of("loop"))
    rig = build_rig(values, undeclared_ok)  # its messages name the parameter
    try:
        node = NodeConfig(**fields_of("node"), rig=rig)
        session = SessionConfig(
            **fields_of("session"), keyframes=KeyframeConfig(**fields_of("session.keyframes")),
            preprocess=PreprocessConfig(**fields_of("session.preprocess")),
            return_depth=(outputs_read_depth(node) or scale.reads_predicted_depth
                          or loop.enable))  # the back end stores each keyframe's depth
        check_scale_inputs(node, scale)
        check_rig(node, session, scale, loop.enable)
        if loop.enable:  # the back end's place descriptors pool the frames' patch features
            session = with_features(session)
    except ValueError as exc:
        if str(exc).startswith("parameter '"):  # already names it (check_rig)
            raise
        p = PARAMS_BY_ATTRIBUTE.get(re.match(r"\w*", str(exc)).group(0))
        raise ValueError(f"parameter {p.name!r}: {exc}" if p else f"invalid parameters: {exc}") \
            from exc
    for name in TOPIC_PARAMS:
        _check_topic_name(name, v[name])
    for camera in rig.cameras:
        for row in CAMERA_ROWS[:3]:  # image, camera info, depth: "" = none (the image: required)
            if getattr(camera, row.attribute):
                _check_topic_name(camera_param(camera.name, row), getattr(camera, row.attribute))
    return Settings(session=session, node=node, scale=scale, loop=loop,
                    **fields_of("settings"))


def with_features(session: SessionConfig) -> SessionConfig:
    """The session's settings with ``return_features`` on (``FrameResult.features``, what
    the back end pools into a place descriptor). A session without that field (an older
    build) is returned as it is: the back end then refuses its keyframes, counted."""
    if "return_features" not in {f.name for f in dataclasses.fields(SessionConfig)}:
        return session
    return dataclasses.replace(session, return_features=True)


def _config_named(prefix: str, cls, values: dict):
    """``cls(**values)``, its ValueError (which starts with ``<prefix>.<field>``, the
    parameter's name) re-raised as the parameter's."""
    try:
        return cls(**values)
    except ValueError as exc:
        name = re.match(prefix + r"\.\w+", str(exc))
        raise ValueError(f"parameter {name.group(0)!r}: {exc}" if name
                         and name.group(0) in PARAMS_BY_NAME else
                         f"invalid parameters: {exc}") from exc


TOPIC_PARAMS = ("topics.image", "topics.camera_info")


def _check_topic_name(name: str, topic: str) -> None:
    """ValueError unless ``topic`` is a valid ROS topic name (relative, ``~/``, or absolute),
    so a malformed one is refused when set, not when the subscription is made."""
    from rclpy.expand_topic_name import expand_topic_name
    from rclpy.validate_full_topic_name import validate_full_topic_name
    from rclpy.validate_topic_name import validate_topic_name
    try:
        validate_topic_name(topic)
        validate_full_topic_name(expand_topic_name(topic, "lingbot_ros", "/"))
    except Exception as exc:  # noqa: BLE001 -- rclpy's Invalid*NameException, RCLError
        reason = " ".join(str(exc).split())
        raise ValueError(f"parameter {name!r}: not a valid topic name: {reason}") from None


def declare(node) -> list[str]:
    """Declare every parameter with a descriptor, and the template rows of the cameras
    named in ``cameras.names``; return the errors of bad overrides.

    A value from a params file or the command line that ROS refuses (wrong type, out of
    range) is reported instead of crashing the constructor; configure then fails with it.
    """
    from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
    from rclpy.exceptions import ParameterException

    errors = []
    for p in PARAMS:
        # Writable, but only while the node is unconfigured (the node's set-parameters
        # callback refuses changes otherwise): set them, then configure.
        desc = ParameterDescriptor(name=p.name, description=p.description, read_only=False)
        if p.choices:
            desc.additional_constraints = "one of: " + ", ".join(map(str, p.choices))
        if p.range is not None and p.type is int:
            desc.integer_range = [IntegerRange(from_value=int(p.range[0]),
                                               to_value=int(p.range[1]), step=p.step)]
        elif p.range is not None and p.type is float:
            desc.floating_point_range = [FloatingPointRange(from_value=float(p.range[0]),
                                                            to_value=float(p.range[1]))]
        try:
            node.declare_parameter(p.name, p.default, desc)
        except (ParameterException, TypeError, ValueError) as exc:
            errors.append(f"parameter {p.name!r}: {exc}")
            node.declare_parameter(p.name, p.default, desc, ignore_override=True)
    return errors + declare_cameras(node)  # the rig's cameras named now (a params file)


def declare_cameras(node) -> list[str]:
    """Declare the template rows (``cameras.<camera>.*``) of every camera in the node's
    ``cameras.names`` not declared yet (a params file's values apply now); return the errors
    of bad overrides. Called at construction (after ``declare``) and at configure; names that
    are not valid camera names are left to configure's error."""
    from rcl_interfaces.msg import ParameterDescriptor
    from rclpy.exceptions import ParameterException

    from .rig import CAMERA_NAME_RE, RESERVED_CAMERA_NAMES
    errors = []
    names = parse_names(node.get_parameter("cameras.names").value)
    for camera in names:
        if not CAMERA_NAME_RE.fullmatch(camera) or camera in RESERVED_CAMERA_NAMES:
            continue
        for row in CAMERA_ROWS:
            name = camera_param(camera, row)
            if node.has_parameter(name):
                continue
            desc = ParameterDescriptor(name=name, description=row.description,
                                       read_only=False)
            try:
                node.declare_parameter(name, row.default, desc)
            except (ParameterException, TypeError, ValueError) as exc:
                errors.append(f"parameter {name!r}: {exc}")
                node.declare_parameter(name, row.default, desc, ignore_override=True)
    return errors


def is_ours(name: str) -> bool:
    """A parameter of the table, or a camera's template row (``cameras.front.frame``)."""
    return name in PARAMS_BY_NAME or camera_row(name) is not None


def check_update(current: dict, changes: dict) -> None:
    """ValueError (with the reason) unless the parameters ``current`` (name -> value) with
    ``changes`` applied build valid settings: everything configure checks (types, ranges,
    multiples, choices, topic names, one value against another) is checked when a value is
    set. ``changes`` may hold names not in the table (ROS's own, e.g. ``use_sim_time``):
    they are not ours to check."""
    ours = {name: value for name, value in changes.items() if is_ours(name)}
    for name, value in ours.items():
        row = PARAMS_BY_NAME.get(name) or camera_row(name)[1]
        check_value(row, value, label=f"parameter {name!r}")
    if ours:
        build_settings({**current, **ours}, undeclared_ok=True)


def read(node) -> dict:
    """The table's values and the declared template rows of the cameras in cameras.names."""
    values = {p.name: node.get_parameter(p.name).value for p in PARAMS}
    for camera in parse_names(values["cameras.names"]):
        for row in CAMERA_ROWS:
            name = camera_param(camera, row)
            if node.has_parameter(name):
                values[name] = node.get_parameter(name).value
    return values

"""The node's parameter table: validation that names the parameter, the configs built from
its rows, and config/lingbot_ros.yaml and docs/node.md in step with it (names, defaults and
their types), the rig's per-camera template rows (``cameras.{camera}.*``) included: in the
yaml as comments, in node.md as rows with ``{camera}`` literally."""
from __future__ import annotations

import math
import re

import pytest
import yaml

from lingbot_ros.config import SessionConfig
from lingbot_ros.ros.params.declare import PARAM_NAMES, PARAMS, build_settings, check_value
from lingbot_ros.ros.params.node_config import NodeConfig
from lingbot_ros.ros.params.rig import CAMERA_ROWS
from tests.ros.ros_helpers import REPO, ros_env  # noqa: F401 -- the fixture

YAML = REPO / "config" / "lingbot_ros.yaml"
NODE_MD = REPO / "docs" / "node.md"
DEFAULTS = {p.name: p.default for p in PARAMS}


def yaml_params() -> dict:
    data = yaml.safe_load(YAML.read_text())
    # '/**': the values apply to the node under any name and namespace (launch namespace:=,
    # -r __ns:=); tests/ros/dds/test_params_namespace.py checks that over DDS.
    assert list(data) == ["/**"], "the file is keyed '/**', for any node name and namespace"
    assert list(data["/**"]) == ["ros__parameters"]
    return data["/**"]["ros__parameters"]


def test_yaml_lists_exactly_the_declared_parameters_with_their_defaults():
    values = yaml_params()
    assert len(PARAM_NAMES) == len(set(PARAM_NAMES))
    assert sorted(set(PARAM_NAMES) - set(values)) == [], "declared, not in the yaml"
    assert sorted(set(values) - set(PARAM_NAMES)) == [], "in the yaml, not declared"
    for p in PARAMS:
        # Exact types: ROS refuses an int in a params file for a double parameter.
        assert type(values[p.name]) is p.type, (p.name, values[p.name], p.default)
        assert values[p.name] == p.default, (p.name, values[p.name], p.default)


def test_yaml_lists_the_camera_template_rows_as_comments_with_their_defaults():
    """A template row is not a parameter until a camera is named: the yaml lists each once,
    commented out, with ``{camera}`` in its name."""
    listed = {}
    for line in YAML.read_text().splitlines():
        m = re.match(r"\s*# (cameras\.\{camera\}\.\w+): (\S+)", line)
        if m:
            listed[m.group(1)] = yaml.safe_load(m.group(2))
    assert list(listed) == [p.name for p in CAMERA_ROWS]
    for p in CAMERA_ROWS:
        assert type(listed[p.name]) is p.type and listed[p.name] == p.default, p.name


def docs_table() -> dict[str, tuple[str, str]]:
    """docs/node.md's parameter table: name -> (type, default as written)."""
    out = {}
    for line in NODE_MD.read_text().splitlines():
        m = re.match(r"\| `([\w.{}]+)` \| (\w+) \| `(.*?)` \|", line)
        if m:
            out[m.group(1)] = (m.group(2), m.group(3))
    return out


def test_docs_list_exactly_the_table_with_its_defaults():
    documented = docs_table()
    assert list(documented) == [*PARAM_NAMES, *(p.name for p in CAMERA_ROWS)], \
        "docs/node.md: the table's names, in order, then the camera template rows"
    for p in (*PARAMS, *CAMERA_ROWS):
        kind, default = documented[p.name]
        assert kind == p.type.__name__, p.name
        value = yaml.safe_load(default)
        assert type(value) is p.type and value == p.default, (p.name, default, p.default)


def test_the_tables_defaults_are_the_configs_defaults():
    """One set of defaults: the configs built from an empty parameter set are the configs'
    own defaults (keyframes.n: 2, every_n's useful interval; 1 would equal "all")."""
    s = build_settings({})
    assert s.session == SessionConfig() and s.node == NodeConfig()
    assert s.session.keyframes.n == 2


def test_every_config_field_is_set_by_one_row():
    from dataclasses import fields
    for config, skip in ((NodeConfig, {"rig"}), (SessionConfig, {
            "keyframes", "preprocess", "return_depth", "return_features",
            "fused_kernels_off"})):
        prefix = "node" if config is NodeConfig else "session"
        set_by = sorted(p.attribute for p in PARAMS if p.field.rsplit(".", 1)[0] == prefix)
        assert set_by == sorted(f.name for f in fields(config) if f.name not in skip)
    # a config's error names its field: the field names one parameter
    attributes = [p.attribute for p in PARAMS]
    assert len(attributes) == len(set(attributes))


def test_every_parameter_has_a_description_and_consistent_bounds():
    for p in PARAMS:
        assert p.description, p.name
        if p.choices:
            assert p.default in p.choices, p.name
        if p.range is not None:
            assert p.type in (int, float) and p.range[0] <= p.default <= p.range[1], p.name
        check_value(p, p.default)


def test_choices_and_limits_come_from_config():
    """One list of allowed values per setting: the table reuses config.py's tuples."""
    from lingbot_ros import config
    from lingbot_ros.ros.params import table as param_table
    table = {p.name: p for p in PARAMS}
    assert table["precision"].choices is config.PRECISIONS
    from lingbot_ros.session import PRESETS
    assert table["model.preset"].choices is config.MODEL_PRESETS and PRESETS == config.MODEL_PRESETS
    assert table["attention.backend"].choices is config.ATTENTION_BACKENDS
    assert table["attention.flashinfer_variant"].choices is config.FLASHINFER_VARIANTS
    assert table["attention.fused_kernels"].choices is config.FUSED_KERNEL_MODES
    assert table["keyframes.policy"].choices is config.KEYFRAME_POLICIES
    assert table["qos.image"].choices is param_table.IMAGE_QOS
    splits = table["attention.kv_splits"]
    assert splits.range == (1, config.MAX_KV_SPLITS)
    build_settings({"attention.kv_splits": config.MAX_KV_SPLITS})
    with pytest.raises(ValueError, match="attention.kv_splits"):
        build_settings({"attention.kv_splits": config.MAX_KV_SPLITS + 1})


def test_defaults_build():
    s = build_settings({})
    assert s.preset == "tiny" and s.checkpoint == "" and s.autostart and s.warmup
    assert s.session.num_scale_frames == 8 and s.session.window == 64
    assert s.session.max_special_frames is None and s.session.max_cache_bytes is None
    assert s.session.preprocess.width == 518 and s.session.preprocess.height is None
    assert s.session.rollover_keyframes == 320
    assert s.node.queue_size == 2 and s.node.image_qos == "auto"
    assert s.node.base_frame == "base_link" and s.node.path_max_poses == 10_000
    assert s.node.publish_map_to_odom and s.node.publish_odom_to_base
    assert s.session.return_depth  # ~/depth is on by default: results carry the depth map
    assert not build_settings({"publish.depth_rate_hz": 0.0}).session.return_depth


def test_values_reach_the_configs():
    s = build_settings({"input.width": 56, "input.height": 42, "session.num_scale_frames": 2,
                        "cache.window": 4, "cache.max_special_frames": 100,
                        "cache.max_cache_bytes": 2**20, "session.rollover_keyframes": 0,
                        "keyframes.policy": "every_n", "keyframes.n": 3,
                        "keyframes.flow_threshold": 5, "queue_size": 7, "qos.image": "reliable",
                        "publish.points": True, "frames.camera": "cam", "warmup": False})
    assert (s.session.preprocess.width, s.session.preprocess.height) == (56, 42)
    assert (s.session.num_scale_frames, s.session.window) == (2, 4)
    assert (s.session.max_special_frames, s.session.max_cache_bytes) == (100, 2**20)
    assert s.session.rollover_keyframes is None  # 0 = never
    assert (s.session.keyframes.policy, s.session.keyframes.n) == ("every_n", 3)
    assert s.session.keyframes.flow_threshold == 5.0  # an int is fine for a double
    assert s.session.return_depth and s.node.publish_points
    assert (s.node.queue_size, s.node.image_qos, s.node.camera_frame) == (7, "reliable", "cam")
    assert not s.warmup


@pytest.mark.parametrize("name, value, says", [
    # type (ROS enforces it for declared parameters; build_settings checks it too)
    ("queue_size", "2", "must be int"),
    ("queue_size", 2.0, "must be int"),
    ("autostart", 1, "must be bool"),
    ("input.width", True, "must be int"),
    ("checkpoint", None, "must be str"),
    # choice lists (ROS has no such constraint)
    ("keyframes.policy", "bogus", "must be one of"),
    ("model.preset", "huge", "must be one of"),
    ("precision", "fp16", "must be one of"),
    ("attention.backend", "flash", "must be one of"),
    ("attention.flashinfer_variant", "fa4", "must be one of"),
    ("qos.image", "best_effort", "must be one of"),
    ("frames.odom", "map", "must differ"),
    ("frames.base", "odom", "must differ"),
    ("map.voxel_size", 0.0, "must be in"),
    ("tf.wait_for_extrinsic_s", 0.0, "must be in"),
    # ranges
    ("cache.window", 0, "must be in"),
    ("queue_size", 0, "must be in"),
    ("session.num_scale_frames", 0, "must be in"),
    ("input.width", 13, "must be in"),
    ("cache.max_special_frames", -2, "must be in"),
    ("keyframes.flow_threshold", -1.0, "must be in"),
    ("publish.diagnostics_rate_hz", 0.0, "must be in"),
    ("max_image_pixels", 0, "must be in"),
    # rules of the configs: a multiple of the patch, one value against another, non-empty
    ("input.width", 100, "must be a multiple of 14"),  # the row's step
    ("input.height", 50, "must be a multiple of 14"),
    ("map.max_points", 4, "must be in [8, "),  # the voxel map's minimum
    ("topics.camera_info", "camera info", "not a valid topic name"),
    ("topics.image", "1image", "not a valid topic name"),
    ("cache.max_special_frames", 0, "positive"),
    ("cache.max_special_frames", 4, "at least num_scale_frames"),
    ("cache.max_cache_bytes", 0, "positive"),
    ("session.rollover_keyframes", 8, "must exceed num_scale_frames"),
    ("topics.image", "", "non-empty"),
    ("frames.map", "", "non-empty"),
    ("device", "", "device"),
])
def test_bad_values_are_refused_with_the_parameter_name(name, value, says):
    with pytest.raises(ValueError) as exc:
        build_settings({name: value})
    assert f"'{name}'" in str(exc.value) and says in str(exc.value), str(exc.value)


def test_declared_in_a_real_node_from_the_params_file(ros_env):
    """rclpy loads the yaml, declares every parameter with a read-only descriptor; bad
    overrides are reported by name instead of crashing the constructor."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from lingbot_ros.ros.params import declare as params

    def make(extra_args):
        context = rclpy.Context()
        rclpy.init(args=["--ros-args", "--params-file", str(YAML), *extra_args],
                   context=context, signal_handler_options=SignalHandlerOptions.NO)
        node = rclpy.create_node("lingbot_ros", context=context,
                                 start_parameter_services=False)
        return context, node, params.declare(node)

    context, node, errors = make([])
    try:
        assert errors == []
        assert params.read(node) == DEFAULTS
        desc = node.describe_parameter("cache.window")
        assert not desc.read_only and desc.description  # set while unconfigured (the node checks)
        assert (desc.integer_range[0].from_value, desc.integer_range[0].to_value) == (1, 1024)
        desc = node.describe_parameter("keyframes.flow_threshold")
        assert math.isclose(desc.floating_point_range[0].to_value, 1e4)
        assert "every_n" in node.describe_parameter("keyframes.policy").additional_constraints
    finally:
        node.destroy_node()
        context.try_shutdown()

    # Out-of-range overrides. (A -p value of another type than the file's, e.g.
    # queue_size:=abc, never reaches the node: rcl keeps the file's value when both are
    # under the same '/**' key. docs/node.md says so.)
    context, node, errors = make(["-p", "cache.window:=0", "-p", "queue_size:=0",
                                  "-p", "input.width:=112"])
    try:
        assert len(errors) == 2, errors
        assert "'cache.window'" in errors[0] and "'queue_size'" in errors[1], errors
        values = params.read(node)
        assert values["cache.window"] == 64 and values["queue_size"] == 2  # defaults kept
        assert values["input.width"] == 112  # the good override applies
    finally:
        node.destroy_node()
        context.try_shutdown()


def test_every_loop_config_field_is_set_by_a_row_and_loop_enable_feeds_the_back_end():
    """The back end's settings are the loop.* rows (docs/node.md "Loop closure"); with
    loop.enable the session returns what the back end stores (depth, features)."""
    from dataclasses import fields

    from lingbot_ros.loop.config import LoopConfig
    set_by = {p.attribute for p in PARAMS if p.field.startswith("loop.")}
    assert {f.name for f in fields(LoopConfig)} <= set_by
    assert build_settings({}).loop == LoopConfig() and not LoopConfig().enable
    s = build_settings({"loop.enable": True, "loop.top_k": 3, "publish.depth_rate_hz": 0.0})
    assert s.loop.enable and s.loop.top_k == 3 and s.session.return_depth
    if "return_features" in {f.name for f in fields(SessionConfig)}:
        assert s.session.return_features
    with pytest.raises(ValueError, match="loop.min_inlier_fraction"):
        build_settings({"loop.min_inlier_fraction": 0.0})

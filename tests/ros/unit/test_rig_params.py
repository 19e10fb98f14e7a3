"""A camera rig's parameters (ros/params/rig.py): ``cameras.names`` "" is today's node; the
rig's rules are refused naming the parameter; the template rows are declared per camera in a
real node from a params file (config/rig_front_rear.yaml) and checked when set."""
from __future__ import annotations

import dataclasses

import pytest
import yaml

from lingbot_ros.ros.params.declare import (PARAMS, build_settings, check_update, is_ours,
                                            read)
from lingbot_ros.ros.params.node_config import NodeConfig
from lingbot_ros.ros.params.rig import (CAMERA_NAME_RE, CAMERA_ROWS, RIG_PARAMS, CameraConfig,
                                        RigConfig, camera_row)
from lingbot_ros.ros.tf import rig_fusion
from tests.ros.ros_helpers import REPO, ros_env  # noqa: F401 -- the fixture

RIG_YAML = REPO / "config" / "rig_front_rear.yaml"
FULL_YAML = REPO / "config" / "lingbot_ros.yaml"
RIG = {"frames.base": "base_link", "input.width": 56, "input.height": 42,
       "scale.source": "fixed",
       "cameras.names": "front,rear", "cameras.front.image_topic": "/front/image_raw",
       "cameras.rear.image_topic": "/rear/image_raw"}


def test_no_camera_names_is_todays_node():
    s = build_settings({})
    assert s.node.rig == RigConfig() and not s.node.rig.enabled and s.node.rig.primary == ""
    assert s.node == NodeConfig()
    # the rig's rows set only the rig: everything else is as without them
    with_rows = build_settings({p.name: p.default for p in RIG_PARAMS})
    assert with_rows == s


def test_a_rig_builds_its_cameras_in_name_order():
    s = build_settings({**RIG, "cameras.rear.frame": "rear_optical", "cameras.max_wait_ms": 5,
                        "cameras.rear.use_compressed": True, "cameras.primary": "rear",
                        "cameras.front.depth_topic": "/front/depth"})
    rig = s.node.rig
    assert rig.enabled and rig.camera_names == ("front", "rear") and rig.primary == "rear"
    assert rig.max_wait_ms == 5.0 and type(rig.max_wait_ms) is float
    front, rear = rig.cameras
    assert front == CameraConfig("front", "/front/image_raw", depth_topic="/front/depth")
    assert rear == CameraConfig("rear", "/rear/image_raw", frame="rear_optical",
                                use_compressed=True)
    assert rig.camera("rear") is rear
    assert build_settings({**RIG, "cameras.names": " front , rear "}).node.rig.camera_names \
        == ("front", "rear")
    one = build_settings({"cameras.names": "cam", "cameras.cam.image_topic": "image"}).node
    assert one.rig.primary == "cam" and one.rig.camera_names == ("cam",)  # no rig rules


def test_the_fields_are_set_by_the_rows():
    fields = {f.name for f in dataclasses.fields(RigConfig)} - {"cameras"}
    assert fields == {p.attribute for p in RIG_PARAMS}
    assert {f.name for f in dataclasses.fields(CameraConfig)} - {"name"} == \
        {p.attribute for p in CAMERA_ROWS}
    defaults = RigConfig()
    for p in RIG_PARAMS[2:]:
        assert getattr(defaults, p.attribute) == p.default, p.name
    assert all("{camera}" in p.name for p in CAMERA_ROWS)
    assert camera_row("cameras.front.frame") == ("front", CAMERA_ROWS[3])
    assert camera_row("cameras.front") is None and camera_row("cameras.max_wait_ms") is None
    assert camera_row("cameras.front.bogus") is None
    assert is_ours("cameras.rear.image_topic") and is_ours("cameras.names")
    assert not is_ours("use_sim_time")


def test_one_name_rule_for_the_node_and_the_fusion():
    assert rig_fusion.CAMERA_NAME_RE is CAMERA_NAME_RE
    assert not hasattr(rig_fusion, "NAME_RE")


@pytest.mark.parametrize("changes, name, says", [
    ({"cameras.names": "front,Rear"}, "cameras.names", "not names of [a-z0-9_]+"),
    ({"cameras.names": "front,,rear"}, "cameras.names", "no empty item"),
    ({"cameras.names": "front,front"}, "cameras.names", "a name twice"),
    ({"cameras.names": "front,primary"}, "cameras.names", "clash with the parameters"),
    ({"cameras.primary": "left"}, "cameras.primary", "not in cameras.names"),
    ({"cameras.rear.image_topic": ""}, "cameras.rear.image_topic", "required"),
    ({"cameras.rear.image_topic": "1rear"}, "cameras.rear.image_topic", "not a valid topic"),
    ({"cameras.front.camera_info_topic": "a b"}, "cameras.front.camera_info_topic",
     "not a valid topic"),
    ({"cameras.rear.frame_is_optical": 1}, "cameras.rear.frame_is_optical", "must be bool"),
    ({"cameras.max_wait_ms": -1.0}, "cameras.max_wait_ms", "must be in"),
    ({"cameras.failback_frames": 1.5}, "cameras.failback_frames", "must be int"),
    ({"cameras.stall_timeout_s": 0.0}, "cameras.stall_timeout_s", "must be in"),
    ({"cameras.max_disagreement_m": 0.0}, "cameras.max_disagreement_m", "must be in"),
    ({"frames.base": ""}, "frames.base", "needs a base frame"),
    ({"cameras.front.frame": "base_link"}, "cameras.front.frame", "the map, odom or base"),
    ({"input.height": 0}, "input.height", "one model input size"),
    ({"loop.enable": True}, "loop.enable", "not supported with a rig"),
    ({"scale.source": "none"}, "scale.source", "needs a metric scale source"),
    ({"scale.source": "depth", "cameras.front.depth_topic": "/front/depth"},
     "cameras.rear.depth_topic", "reads every camera's aligned depth"),
])
def test_a_bad_rig_is_refused_with_the_parameter_name(changes, name, says):
    with pytest.raises(ValueError) as exc:
        build_settings({**RIG, **changes})
    assert str(exc.value).startswith(f"parameter '{name}'"), str(exc.value)
    assert says in str(exc.value), str(exc.value)


def test_a_cameras_own_node_config():
    from lingbot_ros.ros.params.node_config import camera_config
    s = build_settings({**RIG, "cameras.rear.frame": "rear_optical",
                        "cameras.rear.frame_is_optical": False,
                        "cameras.rear.use_compressed": True})
    rear = camera_config(s.node, "rear")
    assert (rear.image_topic, rear.use_compressed) == ("/rear/image_raw", True)
    assert (rear.camera_frame, rear.camera_is_optical) == ("rear_optical", False)
    assert not rear.rig.enabled and rear.base_frame == "base_link"
    assert dataclasses.replace(rear, image_topic="image", use_compressed=False,
                               camera_frame="", camera_is_optical=True,
                               rig=s.node.rig) == s.node
    with pytest.raises(ValueError, match="no camera 'left'"):
        camera_config(s.node, "left")


def test_one_camera_needs_no_base_and_takes_its_aspect():
    s = build_settings({"cameras.names": "cam", "cameras.cam.image_topic": "image",
                        "frames.base": "", "loop.enable": True})
    assert s.node.camera_only and s.node.rig.camera_names == ("cam",)


def test_set_time_checks_accept_a_new_name_before_its_rows_exist():
    """``ros2 param set cameras.names`` while unconfigured: the new camera's rows are not
    declared yet (configure declares them, then asks for its image topic)."""
    current = {**{p.name: p.default for p in PARAMS}, "input.height": 42,
               "scale.source": "fixed"}
    check_update(current, {"cameras.names": "front,rear"})
    with pytest.raises(ValueError, match="'input.height'"):  # two cameras: one input size
        check_update(current, {"cameras.names": "front,rear", "input.height": 0})
    with pytest.raises(ValueError, match="'cameras.names'"):
        check_update(current, {"cameras.names": "front,names"})
    declared = {**current, "cameras.names": "front", "cameras.front.image_topic": ""}
    with pytest.raises(ValueError, match="'cameras.front.image_topic'.*required"):
        check_update(declared, {"input.width": 56})  # a declared camera without its topic
    check_update(declared, {"cameras.front.image_topic": "/front/image_raw"})
    with pytest.raises(ValueError, match="'cameras.front.use_compressed' must be bool"):
        check_update(declared, {"cameras.front.use_compressed": "yes"})
    with pytest.raises(ValueError):  # configure: every camera's rows are read, none missing
        build_settings({**current, "cameras.names": "front"})


def test_the_example_rig_file_builds_with_the_full_file():
    values = yaml.safe_load(FULL_YAML.read_text())["/**"]["ros__parameters"]
    rig = yaml.safe_load(RIG_YAML.read_text())["/**"]["ros__parameters"]
    s = build_settings({**values, **rig})
    assert s.node.rig.camera_names == ("front", "rear") and s.node.rig.primary == "front"
    assert s.node.rig.camera("rear").frame == "rear_camera_optical_frame"


def test_the_template_rows_are_declared_per_camera_from_a_params_file(ros_env):
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    from lingbot_ros.ros.params import declare as params
    context = rclpy.Context()
    rclpy.init(args=["--ros-args", "--params-file", str(FULL_YAML), "--params-file",
                     str(RIG_YAML), "-p", "cameras.rear.frame_is_optical:=false"],
               context=context, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("lingbot_ros", context=context, start_parameter_services=False)
    try:
        assert params.declare(node) == []
        values = read(node)
        assert values["cameras.front.image_topic"] == "/front/image_raw"
        assert values["cameras.rear.frame_is_optical"] is False
        assert values["cameras.rear.depth_topic"] == ""  # declared with its default
        rig = build_settings(values).node.rig
        assert rig.camera("rear").frame == "rear_camera_optical_frame"
        assert not node.has_parameter("cameras.left.image_topic")
        # a name added while unconfigured: its rows come at the next declare (configure)
        node.set_parameters([rclpy.parameter.Parameter("cameras.names",
                                                       value="front,rear,left")])
        assert params.declare_cameras(node) == []
        assert node.get_parameter("cameras.left.image_topic").value == ""
        assert params.declare_cameras(node) == []  # idempotent
        with pytest.raises(ValueError, match="'cameras.left.image_topic'"):
            build_settings(read(node))
    finally:
        node.destroy_node()
        context.try_shutdown()


def test_a_rig_builds_one_multi_stream_session_of_its_cameras():
    from lingbot_ros.ros.lifecycle.session_build import build_session
    from lingbot_ros.session import MultiStreamSession
    settings = build_settings({**RIG, "model.preset": "tiny", "warmup": False})
    session, random_weights, resumed = build_session(settings)
    assert isinstance(session, MultiStreamSession) and random_weights and resumed is None
    assert session.names == ("front", "rear")
    assert session.stream("rear").config == settings.session


def test_a_rig_warms_up_every_stream_then_resets_them():
    from lingbot_ros.ros.lifecycle.session_build import build_session
    session, _, _ = build_session(build_settings({**RIG, "model.preset": "tiny",
                                                  "warmup": True}))
    assert session.ticks == session.stream("front").config.num_scale_frames + 3
    for name in ("front", "rear"):
        assert session.info()[name].frames_processed == 0


@pytest.mark.parametrize("name, value", [("session.resume_from", "snap"),
                                         ("session.save_on_shutdown", "snap")])
def test_what_a_rig_cannot_do_yet_fails_the_configure_before_the_model(name, value):
    from lingbot_ros.ros.lifecycle.session_build import build_session
    with pytest.raises(ValueError, match=f"parameter '{name}': not supported with a camera"):
        build_session(build_settings({**RIG, name: value}))

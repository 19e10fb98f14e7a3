"""diagnostics.build: the key/values of a tick; KeyValues reuses unchanged ones."""
from __future__ import annotations

from lingbot_ros.ros.status import diagnostics


def tick(key_values, received: int, topic: str = "/camera/image_raw"):
    from builtin_interfaces.msg import Time
    return diagnostics.build(Time(), "/lingbot_ros: tracking", "cpu", 0, "tracking",
                             {"received": received, "processed": received},
                             {"input": 1.0, "processed": 1.0}, {}, {}, None, None, topic,
                             {"rate": 0.5}, key_values)


def values_of(array) -> dict[str, str]:
    return {kv.key: kv.value for kv in array.status[0].values}


def test_reused_key_values_carry_the_same_text_as_new_ones():
    reuse = diagnostics.KeyValues()
    for received in (1, 1, 2, 2, 3):
        assert values_of(tick(reuse, received)) == values_of(tick(None, received))
    assert values_of(tick(reuse, 3, "/other"))["image_topic"] == "/other"


def test_an_unchanged_value_keeps_its_key_value_and_a_changed_one_is_new():
    reuse = diagnostics.KeyValues()
    first = {kv.key: kv for kv in tick(reuse, 1).status[0].values}
    second = {kv.key: kv for kv in tick(reuse, 2).status[0].values}
    assert second["image_topic"] is first["image_topic"]
    assert second["rate"] is first["rate"]
    assert second["received"] is not first["received"]
    assert (first["received"].value, second["received"].value) == ("1", "2")


def test_the_extrinsics_text_is_made_once_per_value():
    """RobotFrames.facts() runs at every frame: the extrinsic's text (~50 us of numpy) is
    made once per matrix and reads as before."""
    import numpy as np

    from lingbot_ros.ros.params.node_config import NodeConfig
    from lingbot_ros.ros.tf.robot_frames import RobotFrames
    from lingbot_ros.ros.tf.tree import TransformTree
    tree = TransformTree()
    T = np.eye(4)
    T[:3, 3] = [0.3, 0.0, 1.0]
    tree.set_transform("base_link", "camera_optical_frame", T, 0, static=True)
    frames = RobotFrames(NodeConfig(), tree)
    assert frames.resolve("camera_optical_frame", now=0.0) is not None
    first = frames.facts().describe()["extrinsic_base_optical"]
    assert first == "t 0.3000 0.0000 1.0000, q xyzw 0.0000 0.0000 0.0000 1.0000"
    assert frames.facts().describe()["extrinsic_base_optical"] is first  # not made again
    other = T.copy()
    other[0, 3] = 0.5
    assert frames._tq_text(other).startswith("t 0.5000 0.0000 1.0000")

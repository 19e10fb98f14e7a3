"""topics.image_raw_take over real DDS: the node takes the images as serialized bytes and
gives the poses the message path gives, bit for bit; bytes that are no Image (a truncated
serialization, published as bytes by another process) are refused with a warning, counted
as rejected_decode_failed, and the images after them are processed."""
from __future__ import annotations

import numpy as np
from rclpy.serialization import serialize_message

from tests.ros.node_harness import NodeProcess, Probe, good_images, stamp_ns
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

PARAMS = {"qos.image": "reliable", "qos.image_depth": 50, "queue_size": 50,
          "publish.diagnostics_rate_hz": 5.0}
GOOD = good_images(8)


def stream(tmp_path, env, raw: bool, malformed: bool = False):
    """Poses by stamp ((x, y, z, qx, qy, qz, qw)), the last diagnostics and the node's log."""
    with NodeProcess(env, tmp_path, {**PARAMS, "topics.image_raw_take": raw},
                     name=f"raw_{raw}") as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        for i, msg in enumerate(GOOD):
            if malformed and i == 3:
                probe.image_pub.publish(serialize_message(GOOD[0])[:-100])  # bytes, as is
            probe.publish_image(msg)
        probe.wait_until(lambda: len(probe.poses) >= len(GOOD), 60, f"{len(GOOD)} poses")

        def settled():
            d = probe.last_diag()
            received = int(d.get("received", 0))
            fates = sum(int(v) for k, v in d.items()
                        if k == "processed" or k.startswith(("dropped_", "rejected_")))
            return d if received == len(GOOD) + malformed and fates == received else None
        diag = probe.wait_until(settled, 60, lambda: f"every image's fate ({probe.last_diag()})")
        poses = {stamp_ns(g.msg.header.stamp): np.array(
            [g.msg.pose.position.x, g.msg.pose.position.y, g.msg.pose.position.z,
             g.msg.pose.orientation.x, g.msg.pose.orientation.y, g.msg.pose.orientation.z,
             g.msg.pose.orientation.w]) for g in probe.snapshot("poses")}
    return poses, diag, node.log()


def test_raw_take_gives_the_poses_of_the_message_path(tmp_path, ros_env):
    reference, _, _ = stream(tmp_path, ros_env, raw=False)
    poses, diag, log = stream(tmp_path, ros_env, raw=True, malformed=True)
    assert "(taken as serialized bytes)" in log, log[-3000:]
    assert sorted(poses) == sorted(reference) == [stamp_ns(m.header.stamp) for m in GOOD]
    for stamp, pose in poses.items():
        np.testing.assert_array_equal(pose, reference[stamp])
    assert int(diag.get("rejected_decode_failed", 0)) == 1, diag
    assert "image rejected (decode_failed): serialized Image: data" in log, \
        log[-3000:]
    assert "Traceback" not in log, log[-3000:]

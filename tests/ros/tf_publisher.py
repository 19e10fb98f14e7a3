"""A TF publisher for test_tf_listener, run in a child process:

    python -m tests.ros.tf_publisher READY_FILE [--tf]

Publishes /tf_static once (reliable, transient local, depth 100; as robot_state_publisher):
the chain base_link -> camera_link -> camera_optical_frame, with two malformed transforms
first (a zero quaternion, an empty child frame id). With ``--tf`` it then re-sends /tf
odom -> base_link at the stamps ODOM_STAMPS_NS every 0.2 s (volatile: a message sent before
the listener matched is lost, so they are repeated). It writes READY_FILE after the first
/tf_static publish and stays up until killed.

The transforms are module constants: the test imports them to compute the expected matrices.
"""
from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

# (parent, child, translation, quaternion xyzw)
STATIC_CHAIN = [
    ("base_link", "camera_link", (0.20, -0.05, 0.31),
     (0.0, math.sin(math.radians(10) / 2), 0.0, math.cos(math.radians(10) / 2))),  # 10 deg pitch
    ("camera_link", "camera_optical_frame", (0.0, 0.015, 0.0), (-0.5, 0.5, -0.5, 0.5)),
]
MALFORMED = [
    ("base_link", "bad_quaternion", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 0.0)),
    ("base_link", "", (0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
]
STATIC_STAMP_NS = 5 * 10**9
ODOM_STAMPS_NS = [100 * 10**9, 101 * 10**9]
ODOM_POSES = [  # odom -> base_link at ODOM_STAMPS_NS: 1 m forward and a 90 deg left turn
    ((0.0, 0.0, 0.0), (0.0, 0.0, 0.0, 1.0)),
    ((1.0, 0.0, 0.0), (0.0, 0.0, math.sqrt(0.5), math.sqrt(0.5))),
]
RESEND_S = 0.2


def transform_stamped(parent: str, child: str, t, q, stamp_ns: int):
    from geometry_msgs.msg import TransformStamped

    msg = TransformStamped()
    msg.header.frame_id = parent
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(stamp_ns, 10**9)
    msg.child_frame_id = child
    tr, rot = msg.transform.translation, msg.transform.rotation
    tr.x, tr.y, tr.z = t
    rot.x, rot.y, rot.z, rot.w = q
    return msg


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("ready_file", type=Path)
    parser.add_argument("--tf", action="store_true", help="also send /tf odom -> base_link")
    args = parser.parse_args()

    import rclpy
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from tf2_msgs.msg import TFMessage

    rclpy.init()
    node = rclpy.create_node("test_tf_publisher", start_parameter_services=False)
    static_pub = node.create_publisher(TFMessage, "/tf_static", QoSProfile(
        depth=100, reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.TRANSIENT_LOCAL))
    tf_pub = node.create_publisher(TFMessage, "/tf", QoSProfile(
        depth=100, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE))
    static_pub.publish(TFMessage(transforms=[
        transform_stamped(*edge, STATIC_STAMP_NS) for edge in MALFORMED + STATIC_CHAIN]))
    args.ready_file.write_text("static sent\n")
    odom = TFMessage(transforms=[
        transform_stamped("odom", "base_link", t, q, stamp)
        for stamp, (t, q) in zip(ODOM_STAMPS_NS, ODOM_POSES)])
    try:
        while True:  # until killed: the transient-local sample lives as long as the writer
            if args.tf:
                tf_pub.publish(odom)
            time.sleep(RESEND_S)
    finally:
        node.destroy_node()
        rclpy.try_shutdown()


if __name__ == "__main__":
    main()

"""A stand-in node serving our interfaces from a separate process, for the round-trip test.

``python -m tests.ros.interface_server`` serves /lingbot/get_cache_info (a fixed CacheInfo) and
/lingbot/save_trajectory (writes a 3-pose TUM file), latches one TrackingStatus on
/lingbot/status and one TFMessage on /tf_static, prints "ready", and exits on SIGINT/SIGTERM or
after 60 s, whichever comes first.
"""
import signal
import threading

import rclpy
from geometry_msgs.msg import TransformStamped
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, QoSProfile
from rclpy.signals import SignalHandlerOptions
from tf2_msgs.msg import TFMessage

from lingbot_ros_interfaces.msg import CacheInfo, TrackingStatus
from lingbot_ros_interfaces.srv import GetCacheInfo, SaveTrajectory

CACHE_INFO = dict(frames_seen=12, frames_committed=9, frames_rolled_back=3, frames_cached=7,
                  scale_frames=2, window_frames=5, special_frames=9, special_tokens=54,
                  patch_pages_used=7, patch_pages_total=8, special_pages_used=1,
                  special_pages_total=4, page_size=972, tokens_visible=6858,
                  bytes_used=2**33 + 5, bytes_reserved=2**34, max_special_frames=-1)
LATCHED = QoSProfile(depth=1, durability=DurabilityPolicy.TRANSIENT_LOCAL)


def get_cache_info(request, response):
    response.info = CacheInfo(**CACHE_INFO)
    response.info.stamp.sec = 42
    response.success, response.message = True, "9 committed frames"
    return response


def save_trajectory(request, response):
    try:
        with open(request.path, "w") as f:
            for i in range(3):
                f.write(f"{i}.0 {i} 0 0 0 0 0 1\n")
    except OSError as err:
        response.success, response.message = False, str(err)
        return response
    response.success, response.message, response.num_poses = True, request.path, 3
    return response


def main() -> None:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("lingbot", namespace="/")
    node.create_service(GetCacheInfo, "~/get_cache_info", get_cache_info)
    node.create_service(SaveTrajectory, "~/save_trajectory", save_trajectory)
    status = TrackingStatus(state=TrackingStatus.STATE_TRACKING, keyframe=True, frame_index=8,
                            frames_received=10, frames_processed=9, frames_dropped=1,
                            message="ok")
    status.header.frame_id = "cam"
    node.create_publisher(TrackingStatus, "~/status", LATCHED).publish(status)
    tf = TransformStamped(child_frame_id="cam")
    tf.header.frame_id, tf.transform.rotation.w = "base_link", 1.0
    node.create_publisher(TFMessage, "/tf_static", LATCHED).publish(TFMessage(transforms=[tf]))
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    print("ready", flush=True)
    deadline = 600  # 0.1 s spins: 60 s at most, so a lost test never leaves us running
    while not stop.is_set() and deadline > 0:
        executor.spin_once(timeout_sec=0.1)
        deadline -= 1
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    main()

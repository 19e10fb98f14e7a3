"""Compressed input over DDS: with ``topics.use_compressed`` the node started with the
documented ``-r image:=/camera/image_raw`` subscribes to ``/camera/image_raw/compressed``
(the remap applies to the base topic before ``/compressed`` is appended), processes the
CompressedImage messages published there by another process, and its diagnostics name that
topic. The names image_subscription gives under namespaces and other remaps are checked with
a real rclpy node (name resolution only). The compressed decompression-bomb test is in
test_node_bad_input.py."""
from __future__ import annotations

import time

import pytest

from tests.ros.node_data import IMAGE_TOPIC
from tests.ros.node_harness import NodeProcess, Probe, good_images, is_node_status, stamp_ns
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

COMPRESSED_TOPIC = IMAGE_TOPIC + "/compressed"  # /camera/image_raw/compressed
PARAMS = {"qos.image": "reliable", "qos.image_depth": 50, "queue_size": 50,
          "publish.diagnostics_rate_hz": 5.0, "topics.use_compressed": True}


class CompressedProbe(Probe):
    """The harness's probe plus a reliable CompressedImage publisher on ``compressed_topic``."""

    def __init__(self, compressed_topic: str = COMPRESSED_TOPIC, **kwargs) -> None:
        super().__init__(**kwargs)
        self._compressed_topic = compressed_topic

    def setup(self, node) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import CompressedImage
        super().setup(node)
        self.compressed_pub = node.create_publisher(
            CompressedImage, self._compressed_topic,
            QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE))

    def wait_for_compressed_subscriber(self, timeout: float = 30.0) -> None:
        self.wait_until(lambda: self.compressed_pub.get_subscription_count() > 0, timeout,
                        f"a subscription to {self._compressed_topic}")

    def publish_compressed(self, msg) -> None:
        self.compressed_pub.publish(msg)

    def diag_messages(self) -> list[str]:
        """The message of every /diagnostics status of the node received so far."""
        return [status.message for got in self.snapshot("diagnostics")
                for status in got.msg.status if is_node_status(status)]


def compressed_frames(count: int, start: int = 0) -> list:
    """``count`` CompressedImages of the synthetic scene (PNG, JPEG and WebP in turn), stamps
    as good_images'."""
    import cv2
    from sensor_msgs.msg import CompressedImage

    from lingbot_ros.ros.intake.convert import array_to_compressed, image_to_array
    out = []
    for i, image in enumerate(good_images(start + count)[start:]):
        rgb = image_to_array(image)
        kind = ("png", "jpeg", "webp")[i % 3]
        if kind == "webp":
            ok, buf = cv2.imencode(".webp", rgb[..., ::-1], [cv2.IMWRITE_WEBP_QUALITY, 90])
            assert ok
            msg = CompressedImage(header=image.header, format="rgb8; webp compressed bgr8")
            msg.data = buf.tobytes()
        else:
            msg = array_to_compressed(rgb, "rgb8", kind, header=image.header)
        out.append(msg)
    return out


def test_compressed_input_follows_the_image_remap(tmp_path, ros_env):
    frames = compressed_frames(6)
    stamps = [stamp_ns(m.header.stamp) for m in frames]
    with NodeProcess(ros_env, tmp_path, PARAMS, remaps={"image": IMAGE_TOPIC}) as node, \
            CompressedProbe() as probe:
        probe.wait_active(node)
        probe.wait_for_compressed_subscriber()
        # Before any image: the diagnostics say which topic is awaited -- the remapped one.
        probe.wait_until(lambda: any(COMPRESSED_TOPIC in m for m in probe.diag_messages()),
                         15, lambda: f"/diagnostics naming {COMPRESSED_TOPIC} (got "
                                     f"{probe.diag_messages()[-3:]})")
        # Nothing listens where the unremapped relative name used to point, nor on the raw topic.
        assert probe.node.count_subscribers("/image/compressed") == 0
        assert probe.node.count_subscribers(IMAGE_TOPIC) == 0
        for msg in frames:
            probe.publish_compressed(msg)
            time.sleep(0.02)
        # frames[-1], published last, is the sentinel: every frame (PNG, JPEG, WebP), nothing
        # else
        assert probe.wait_for_pose_of(stamps[-1]) == stamps

        def counted():
            values = probe.last_diag()
            return values if values.get("processed") == str(len(frames)) else None
        values = probe.wait_until(counted, 15, lambda: f"/diagnostics counting "
                                  f"{len(frames)} processed (last: {probe.last_diag()})")
        assert values["received"] == str(len(frames))
        assert not any(k.startswith("rejected_") for k in values), values
        if "image_topic" in values:  # the diagnostics' topic key, where they have one
            assert values["image_topic"] == COMPRESSED_TOPIC
        assert node.poll() is None, node.log()[-3000:]
    log = node.log()
    assert f"listening on {COMPRESSED_TOPIC}" in log, log[-3000:]
    assert "Traceback" not in log, log[-3000:]


class _Cfg:
    def __init__(self, image_topic: str, use_compressed: bool) -> None:
        self.image_topic, self.use_compressed = image_topic, use_compressed


@pytest.mark.parametrize("remaps, namespace, image_topic, expected", [
    ([], "", "image", "/image/compressed"),
    (["image:=/camera/image_raw"], "", "image", "/camera/image_raw/compressed"),
    (["image:=/camera/image_raw"], "/cam0", "image", "/camera/image_raw/compressed"),
    (["image:=camera/image_raw"], "/cam0", "image", "/cam0/camera/image_raw/compressed"),
    ([], "/cam0", "image", "/cam0/image/compressed"),
    ([], "", "/cam/left", "/cam/left/compressed"),
    (["/cam/left:=/cam/right"], "", "/cam/left", "/cam/right/compressed"),
    (["lingbot_ros:image:=/only/this/node"], "", "image", "/only/this/node/compressed"),
    (["other_node:image:=/not/us"], "", "image", "/image/compressed"),
    # a remap of the compressed name itself still wins
    (["image:=/camera/image_raw", "image/compressed:=/cam/jpeg"], "", "image", "/cam/jpeg"),
])
def test_image_subscription_names(ros_env, remaps, namespace, image_topic, expected):
    """The names the node would subscribe to, resolved by a real rclpy node with these
    command-line remaps (no traffic: name resolution only)."""
    import rclpy
    from sensor_msgs.msg import CompressedImage, Image

    from lingbot_ros.ros.params.topics import image_subscription
    args = ["--ros-args"] + [arg for rule in remaps for arg in ("-r", rule)]
    context = rclpy.Context()
    rclpy.init(args=args, context=context)
    try:
        node = rclpy.create_node("lingbot_ros", namespace=namespace, context=context)
        try:
            assert image_subscription(node, _Cfg(image_topic, True)) == (expected,
                                                                          CompressedImage)
            raw = image_subscription(node, _Cfg(image_topic, False))
            assert raw == (node.resolve_topic_name(image_topic), Image)
            if "image/compressed:=" not in " ".join(remaps):
                assert expected == raw[0] + "/compressed"
        finally:
            node.destroy_node()
    finally:
        context.try_shutdown()

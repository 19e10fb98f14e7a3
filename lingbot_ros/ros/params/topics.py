"""The image topic the node subscribes to: one place for the name and the message type.

``topics.image`` (default ``image``) is resolved first, remaps applied, so the documented
``-r image:=/camera/image_raw`` (or the launch file's ``image_topic``) moves the compressed
input too: with ``topics.use_compressed`` the node subscribes to
``/camera/image_raw/compressed``, image_transport's naming. (Appending ``/compressed`` to the
relative name instead gives ``image/compressed``, which the rule ``image:=...`` does not
match.) A remap of the compressed name itself (``-r image/compressed:=/cam/jpeg``) still wins.
The node subscribes to the returned name and /diagnostics reports it.
"""
from __future__ import annotations

from sensor_msgs.msg import CompressedImage, Image

__all__ = ["image_subscription"]


def image_subscription(node, cfg) -> tuple[str, type]:
    """(fully qualified topic, message type) of the image input.

    Args:
        node: the rclpy node (its remap rules and namespace resolve the names).
        cfg: a NodeConfig (``image_topic``, ``use_compressed``).
    Returns:
        ``(topic, Image)``, or ``(topic + '/compressed', CompressedImage)`` where ``topic`` is
        ``cfg.image_topic`` resolved with remaps.
    """
    base = node.resolve_topic_name(cfg.image_topic)
    if not cfg.use_compressed:
        return base, Image
    relative = cfg.image_topic.rstrip("/") + "/compressed"
    explicit = node.resolve_topic_name(relative)
    if explicit != node.resolve_topic_name(relative, only_expand=True):
        return explicit, CompressedImage  # the compressed topic itself was remapped
    return node.resolve_topic_name(base.rstrip("/") + "/compressed"), CompressedImage

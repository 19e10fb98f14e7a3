"""Image streams with repeated and backward stamps, and what the node must publish for them.

Each case is a list of frame numbers (frame k: the k-th image of the synthetic scene, stamped
``BAG_START_NS + k / 30 s``), fed in order to a node with two anchor frames. A repeated number
is a repeated stamp (refused as ``duplicate_stamp``), also while the frame with that stamp is
still in the session (an anchor waits for the other one); a smaller number is a stamp going
backwards (``session.on_stamp_backwards``: ``reset`` restarts the stream on it, ``drop``
refuses it as ``non_monotonic_stamp``). ``published``: the frames whose pose must come out,
each exactly once, in this order.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class StampCase:
    on_stamp_backwards: str
    fed: tuple[int, ...]
    published: tuple[int, ...]
    counters: dict = field(default_factory=dict)  # the node's counters this case must end with


CASES = {
    "reset": StampCase(
        "reset",
        # 0 is repeated while it waits for the 2nd anchor; 3 right after it; the loop back to 1
        # restarts the stream, whose first anchor (1) is repeated while it waits again.
        fed=(0, 0, 1, 1, 2, 3, 3, 1, 1, 2, 3, 4),
        published=(0, 1, 2, 3, 1, 2, 3, 4),
        counters={"received": 12, "processed": 8, "rejected_duplicate_stamp": 4,
                  "restart_stamp_backwards": 1}),
    "drop": StampCase(
        "drop",
        fed=(0, 0, 1, 1, 2, 3, 3, 1, 2, 4, 4, 5),
        published=(0, 1, 2, 3, 4, 5),
        counters={"received": 12, "processed": 6, "rejected_duplicate_stamp": 4,
                  "rejected_non_monotonic_stamp": 2}),
}


def case_images(case: StampCase) -> list:
    """The image messages of ``case.fed``, in order (a repeated frame is the same message)."""
    from tests.ros.node_data import good_images
    images = good_images(max(case.fed) + 1)
    return [images[k] for k in case.fed]

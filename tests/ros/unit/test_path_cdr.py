"""PathCdr: the Path bytes we publish are the ones rclpy would, read back by rclpy itself."""
import numpy as np
import pytest
from geometry_msgs.msg import PoseStamped
from nav_msgs.msg import Path
from rclpy.serialization import deserialize_message, serialize_message

from lingbot_ros.ros.outputs.path_cdr import PathCdr


def poses(n, seed=0):
    rng = np.random.default_rng(seed)
    for i in range(n):
        q = rng.normal(size=4)
        yield (1_700_000_000 + i, int(rng.integers(0, 10**9)), rng.normal(size=3) * 100,
               q / np.linalg.norm(q))


def expected(frame_id, stamp, items):
    path = Path()
    path.header.frame_id = frame_id
    path.header.stamp.sec, path.header.stamp.nanosec = stamp
    for sec, nanosec, p, q in items:
        ps = PoseStamped()
        ps.header.frame_id = frame_id
        ps.header.stamp.sec, ps.header.stamp.nanosec = sec, nanosec
        ps.pose.position.x, ps.pose.position.y, ps.pose.position.z = map(float, p)
        o = ps.pose.orientation
        o.x, o.y, o.z, o.w = map(float, q)
        path.poses.append(ps)
    return path


# frame ids of every length mod 8 (the alignment of the first pose and the records changes)
@pytest.mark.parametrize("frame_id", ["", "m", "ma", "map", "odom", "world", "map_123",
                                      "map_1234", "wörld/map"])
@pytest.mark.parametrize("count", [0, 1, 2, 5])
def test_the_bytes_are_the_path_rclpy_reads(frame_id, count):
    items = list(poses(count, seed=count))
    cdr = PathCdr(frame_id)
    for item in items:
        cdr.append(*item)
    data = cdr.serialize(12, 34)
    want = expected(frame_id, (12, 34), items)
    assert len(data) == len(serialize_message(want))
    assert deserialize_message(data, Path) == want


def test_a_bounded_path_keeps_the_newest_poses_through_the_ring():
    items = list(poses(23, seed=1))
    cdr = PathCdr("map", max_poses=10)
    for i, item in enumerate(items):
        cdr.append(*item)
        if i in (3, 9, 10, 17, 22):  # before, at and after the ring wraps
            kept = items[max(0, i + 1 - 10):i + 1]
            assert len(cdr) == len(kept)
            assert deserialize_message(cdr.serialize(1, 2), Path) == expected("map", (1, 2), kept)
    assert cdr.last_stamp() == items[-1][:2]


def test_an_unbounded_path_grows_and_clear_empties_it():
    items = list(poses(2_100, seed=2))
    cdr = PathCdr("map")
    for item in items:
        cdr.append(*item)
    assert deserialize_message(cdr.serialize(5, 6), Path) == expected("map", (5, 6), items)
    cdr.clear()
    assert len(cdr) == 0 and cdr.last_stamp() is None
    assert deserialize_message(cdr.serialize(7, 8), Path) == expected("map", (7, 8), [])
    cdr.append(*items[0])
    assert deserialize_message(cdr.serialize(7, 8), Path) == expected("map", (7, 8), items[:1])


def test_a_large_bound_is_not_allocated_up_front():
    cdr = PathCdr("map", max_poses=10_000_000)
    assert cdr.nbytes < 200_000  # grows with the path, not with the bound
    items = list(poses(3_000, seed=3))
    for item in items:
        cdr.append(*item)
    assert deserialize_message(cdr.serialize(1, 1), Path) == expected("map", (1, 1), items)
    small = PathCdr("map", max_poses=1_500)  # grows to exactly its bound, then rings
    for item in items:
        small.append(*item)
    assert len(small) == 1_500 and small.capacity == 1_500
    assert deserialize_message(small.serialize(1, 1), Path) == expected("map", (1, 1),
                                                                          items[-1_500:])

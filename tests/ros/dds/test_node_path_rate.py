"""~/path costs O(1) per frame: the worker only appends a pose to the history, and the whole
Path goes out from the node's executor at most ``publish.path_rate_hz`` times a second. Over
real DDS, with a reliable (and transient-local) ~/path subscriber, the node in a child process:

- a few hundred frames replayed from a bag: a pose for every frame, in order; Path messages at
  least a period apart, so no more than (time the test watched) x rate + 1 of them; every Path
  a prefix of the stream, in order; the last one holds every pose once the stream pauses; a
  reset publishes an empty Path at once;
- at a very low rate (one Path per 100 s): the first poses go out at once, and deactivating
  the node publishes the poses held back (the last Path of a stream holds every pose) long
  before the period ends.
"""
from __future__ import annotations

import time

from tests.ros.node_harness import (DEACTIVATE, INACTIVE, IMAGE_TOPIC, NodeProcess, Probe,
                                    good_images, image_stamps_in_bag, make_bag, stamp_ns)
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture
from tests.ros.ros_helpers import finish, start_replay

FRAMES, REPLAY_RATE = 240, 0.5  # a 30 Hz bag played at 15 Hz: 16 s
RATE_HZ = 1.0  # publish.path_rate_hz: one Path a second at most (the old code sent up to 5)
# Nothing is dropped: a deep reliable subscription and a queue of 100 frames (the node may fall
# behind the 15 Hz input by 100 frames, e.g. 16 s at 10 frames/s, on a loaded machine).
PARAMS = {"qos.image": "reliable", "qos.image_depth": 100, "queue_size": 100,
          "publish.path_rate_hz": RATE_HZ}


def path_stamps(got) -> list[int]:
    return [stamp_ns(p.header.stamp) for p in got.msg.poses]


def wait_for_path_of(probe, stamp: int) -> None:
    """Until a Path ends with the pose of ``stamp`` (the sentinel frame, published last)."""
    probe.wait_until(lambda: any(path_stamps(g)[-1:] == [stamp]
                                 for g in probe.snapshot("paths")), 30,
                     f"a Path ending with the sentinel frame {stamp}")


def test_path_is_published_at_most_at_its_rate_and_ends_complete(tmp_path, ros_env):
    bag = tmp_path / "bag"
    make_bag(bag, FRAMES, "mcap")
    stamps = image_stamps_in_bag(bag)
    assert len(stamps) == FRAMES
    with NodeProcess(ros_env, tmp_path, PARAMS) as node, Probe() as probe:
        probe.wait_active(node)
        assert probe.snapshot("paths") == []  # no Path before the first pose
        t_start = time.monotonic()  # every Path counted below was published after this
        rc, _, err = finish(start_replay([str(bag), "--topics", IMAGE_TOPIC,
                                          "--rate", str(REPLAY_RATE),
                                          "--wait-for-subscribers", "1", "--wait-timeout", "30",
                                          "--wait-for-all-acked", "15"], ros_env), timeout=150)
        assert rc == 0, err

        # A pose on ~/pose for every frame, in order.
        probe.wait_until(lambda: len(probe.poses) >= FRAMES, 120, f"{FRAMES} poses")
        # The stream paused: within a period the last Path holds every pose, in order.
        probe.wait_until(lambda: (probe.snapshot("paths") and
                                  len(probe.snapshot("paths")[-1].msg.poses) == FRAMES), 30,
                         lambda: f"a Path of {FRAMES} poses (got lengths "
                         f"{[len(g.msg.poses) for g in probe.snapshot('paths')]})")
        t_end = time.monotonic()  # every Path counted below was published before this
        assert probe.pose_stamps() == stamps
        paths = probe.snapshot("paths")
        assert path_stamps(paths[-1]) == stamps
        # Each Path is the stream so far: a prefix of the image stamps, growing.
        for got in paths:
            assert path_stamps(got) == stamps[:len(got.msg.poses)]
            assert stamp_ns(got.msg.header.stamp) == stamps[len(got.msg.poses) - 1]
        lengths = [len(g.msg.poses) for g in paths]
        assert lengths == sorted(lengths) and len(set(lengths)) == len(lengths), lengths
        # The design: Paths at least 1 / RATE_HZ apart (node's steady clock), all published
        # between t_start and t_end; the +1 is the one at the start of that interval.
        watched = t_end - t_start
        assert len(paths) <= watched * RATE_HZ + 1, (len(paths), watched, lengths)
        assert len(paths) >= 2, lengths  # the first poses went out before the stream ended
        # Nothing more: no poses held back, so no Path after the complete one. The sentinel:
        # one more frame, whose Path (every pose and its own) is the next one.
        one, *new = good_images(1 + ANCHORS, start_ns=stamps[-1] + 10**9)
        probe.wait_for_image_subscriber()
        probe.publish_image(one)
        wait_for_path_of(probe, stamp_ns(one.header.stamp))
        after = probe.snapshot("paths")[len(paths):]
        assert [path_stamps(g) for g in after] == [stamps + [stamp_ns(one.header.stamp)]]

        # A reset publishes an empty Path at once (not throttled), and it stays the last: no
        # Path of the old stream after it, up to the Path of the next frame (the sentinel).
        reply = probe.call("reset")
        assert reply.success, reply.message
        probe.wait_until(lambda: not probe.snapshot("paths")[-1].msg.poses, 30,
                         "an empty Path after the reset")
        for msg in new:  # the new stream's anchor frames: their poses come together
            probe.publish_image(msg)
        new_stamps = [stamp_ns(m.header.stamp) for m in new]
        wait_for_path_of(probe, new_stamps[-1])
        after = [path_stamps(g) for g in probe.snapshot("paths")[len(paths) + 1:]]
        assert after[0] == [] and after[-1] == new_stamps, after
        assert all(p and p == new_stamps[:len(p)] for p in after[1:]), after

        node.interrupt()
        assert node.wait(30) == 0, node.log()[-3000:]
    assert "Traceback" not in node.log()
    assert "[ERROR]" not in node.log()


IMAGES = 6
ANCHORS = 2  # node_harness.TINY_PARAMS' session.num_scale_frames: their poses come together
SLOW = {"publish.path_rate_hz": 0.01, "qos.image": "reliable", "queue_size": 10}  # 100 s


def test_deactivate_publishes_the_poses_held_back(tmp_path, ros_env):
    images = good_images(IMAGES)
    stamps = [stamp_ns(m.header.stamp) for m in images]
    with NodeProcess(ros_env, tmp_path, SLOW) as node, Probe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()
        time.sleep(0.5)  # let the node's side of discovery finish (volatile QoS)

        def send(msgs, total):
            for msg in msgs:
                probe.publish_image(msg)
            probe.wait_until(lambda: len(probe.poses) >= total, 60, f"{total} poses")

        # The first pose of a stream goes out at once (no Path was sent in the last period),
        # with those appended before the executor took the history.
        send(images[:ANCHORS], ANCHORS)
        first = probe.wait_until(lambda: probe.snapshot("paths"), 30, "the first Path")[0]
        assert 1 <= len(first.msg.poses) <= ANCHORS
        assert path_stamps(first) == stamps[:len(first.msg.poses)]
        # The next ones are held back: the next Path is due a period (100 s) after the first.
        send(images[ANCHORS:], IMAGES)
        assert probe.pose_stamps() == stamps
        assert len(probe.snapshot("paths")) == 1
        # Deactivating ends the stream: the poses held back go out now, not in 100 s.
        assert probe.change_state(DEACTIVATE)
        assert probe.get_state()[0] == INACTIVE
        probe.wait_until(lambda: len(probe.snapshot("paths")) >= 2, 30, "the final Path")
        paths = probe.snapshot("paths")
        assert len(paths) == 2 and path_stamps(paths[-1]) == stamps, \
            [len(g.msg.poses) for g in paths]
        assert node.poll() is None, node.log()[-3000:]
    assert "Traceback" not in node.log()

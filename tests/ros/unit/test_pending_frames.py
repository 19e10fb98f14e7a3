"""The worker's contexts of frames handed to the pipelined session: found by ticket, bounded."""
from lingbot_ros.ros.intake.pending_frames import PendingFrame, PendingFrames


def frame(i):
    return PendingFrame(item=f"msg{i}", chain=None, depth_due=i % 2 == 0)


def test_contexts_are_found_once_by_ticket_and_cleared_by_a_reset():
    pending = PendingFrames()
    for i in range(3):
        pending.add(100 + i, frame(i))
    assert pending.pop(101).item == "msg1" and pending.pop(101) is None
    assert len(pending) == 2 and pending.clear() == 2 and len(pending) == 0


def test_contexts_that_never_get_an_outcome_age_out_oldest_first():
    pending = PendingFrames(limit=4)
    for i in range(10):
        pending.add(i, frame(i))
    assert len(pending) == 4
    assert [pending.pop(i) is None for i in range(10)] == [True] * 6 + [False] * 4

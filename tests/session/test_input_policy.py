"""InputPolicy: a handed-in frame's stamp and size -> accept, reject or restart. Pure: no
model, no torch tensors; the session applies its decisions (tests/session/test_streaming_session.py
checks them end to end)."""
import numpy as np
import pytest

from lingbot_ros.config import SessionConfig
from lingbot_ros.session import FrameRejected, InputPolicy

HW, OTHER = (84, 112), (112, 112)


def take(policy, stamp, hw=HW):
    stamp, restart = policy.check_stamp(stamp)
    if restart is None:
        restart = policy.check_size(hw)
    policy.accept(stamp, hw)
    return restart


def test_stamps_must_increase_and_be_integers():
    policy = InputPolicy(SessionConfig(on_stamp_backwards="drop"))
    assert take(policy, np.int64(1_000)) is None
    for stamp, reason in ((1_000, "duplicate_stamp"), (999, "non_monotonic_stamp"),
                          (1.5e3, "bad_stamp"), (True, "bad_stamp"), ("2000", "bad_stamp")):
        with pytest.raises(FrameRejected) as err:
            policy.check_stamp(stamp)
        assert err.value.reason == reason
    assert policy.last_stamp == 1_000  # a rejected frame changes nothing
    assert take(policy, 1_001) is None


def test_a_stamp_going_back_or_jumping_restarts_under_the_reset_policy():
    policy = InputPolicy(SessionConfig(on_stamp_backwards="reset", max_gap_s=1.0))
    take(policy, 5_000_000_000)
    stamp, restart = policy.check_stamp(4_000_000_000)
    assert stamp == 4_000_000_000 and restart.kind == "restart_stamp_backwards"
    assert "4000000000" in restart.message and "5000000000" in restart.message
    _, restart = policy.check_stamp(6_000_000_001)  # 1.000000001 s later
    assert restart.kind == "restart_stamp_gap"
    with pytest.raises(FrameRejected, match="repeats"):  # a repeat never restarts
        policy.check_stamp(5_000_000_000)


def test_a_new_size_is_rejected_until_it_persists_then_restarts():
    policy = InputPolicy(SessionConfig(size_change_frames=3))
    take(policy, 1)
    for i in (1, 2):
        with pytest.raises(FrameRejected, match=f"{i} of 3") as err:
            policy.check_size(OTHER)
        assert err.value.reason == "size_changed"
    assert policy.check_size(OTHER).kind == "restart_size_changed"
    # the count is of frames in a row: the stream's own size in between starts it again
    policy.reset()
    take(policy, 1)
    with pytest.raises(FrameRejected, match="1 of 3"):
        policy.check_size(OTHER)
    assert policy.check_size(HW) is None
    with pytest.raises(FrameRejected, match="1 of 3"):
        policy.check_size(OTHER)


def test_after_a_reset_any_stamp_and_size_are_taken():
    policy = InputPolicy(SessionConfig(on_stamp_backwards="drop"))
    take(policy, 10)
    policy.reset()
    assert take(policy, 5, OTHER) is None
    assert policy.stream_hw == OTHER and policy.last_stamp == 5

"""HealthMonitor: the /diagnostics level and message from the node's counters (no ROS)."""
from lingbot_ros.ros.status.health import ERROR, OK, WARN, HealthMonitor


def feed(monitor, t, counters, since_image=0.1, since_processed=0.1, **kw):
    return monitor.evaluate(t, counters, since_image, since_processed, **kw)


def test_ok_while_frames_flow():
    m = HealthMonitor(warn_drop_share=0.5, stall_timeout_s=5.0)
    assert feed(m, 0.0, {"received": 0}) == (OK, "tracking")
    assert feed(m, 1.0, {"received": 30, "processed": 29, "dropped_queue_full": 1}) == \
        (OK, "tracking")


def test_warn_when_most_recent_frames_are_lost_with_the_reasons():
    m = HealthMonitor(warn_drop_share=0.5, stall_timeout_s=5.0)
    feed(m, 0.0, {"received": 100, "processed": 100})
    level, message = feed(m, 1.0, {"received": 130, "processed": 105,
                                   "rejected_size_changed": 25})
    assert level == WARN and "83 % of the last 30 frames" in message
    assert "rejected_size_changed 25" in message
    # the window moves on: old losses stop counting
    for t in range(2, 14):
        level, _ = feed(m, float(t), {"received": 130 + 30 * t, "processed": 105 + 30 * t,
                                      "rejected_size_changed": 25})
    assert level == OK


def test_error_when_images_arrive_and_nothing_is_processed():
    m = HealthMonitor(warn_drop_share=0.5, stall_timeout_s=2.0)
    level, message = feed(m, 0.0, {"received": 5, "rejected_unknown_encoding": 5},
                          since_processed=None)
    assert level == ERROR and "no frame was processed yet" in message
    assert "rejected_unknown_encoding 5" in message
    level, message = feed(m, 1.0, {"received": 40, "processed": 10}, since_processed=3.0)
    assert level == ERROR and "for 3 s" in message and "stuck" in message
    # no input at all is starvation (WARN), not a stall
    assert feed(m, 2.0, {"received": 40, "processed": 10}, since_image=9.0,
                since_processed=9.0, topic="/cam")[0] == WARN


def test_failures_restarts_and_starvation_in_order_of_severity():
    m = HealthMonitor(warn_drop_share=0.5, stall_timeout_s=5.0)
    assert feed(m, 0.0, {}, last_error="CacheFullError: x") == (ERROR,
                                                                 "last frame failed: CacheFullError: x")
    assert feed(m, 1.0, {}, last_restart=(0.5, "stream restarted: why")) == \
        (WARN, "stream restarted: why")
    assert feed(m, 20.0, {}, last_restart=(0.5, "old"))[0] == OK  # out of the window
    assert feed(m, 21.0, {}, since_image=None, since_processed=None, topic="/cam") == \
        (WARN, "no image received yet on /cam")
    assert feed(m, 22.0, {}, since_image=7.0, since_processed=7.0, topic="/cam") == \
        (WARN, "no image on /cam for 7 s")
    assert feed(m, 23.0, {}, idle_message="initialising: 1/8 anchor frames") == \
        (OK, "initialising: 1/8 anchor frames")


def test_a_state_the_node_chose_or_waits_for_overrides_the_loss_and_stall_rules():
    """Paused (OK) or waiting for the base -> camera transform: nothing is processed by
    design, so neither the loss share nor the stall rule may speak; the override does."""
    m = HealthMonitor(warn_drop_share=0.5, stall_timeout_s=1.0)
    feed(m, 0.0, {"received": 0})
    paused = (OK, "paused (~/pause)")
    assert feed(m, 5.0, {"received": 150, "dropped_paused": 150}, since_processed=5.0,
                override=paused) == paused
    waiting = (ERROR, "no transform base_link -> cam for 12 s")
    assert feed(m, 6.0, {"received": 180, "dropped_waiting_for_tf": 180}, since_processed=None,
                last_error="old", override=waiting) == waiting
    # Without the override the same counters are a stall.
    assert feed(m, 7.0, {"received": 210, "dropped_paused": 210}, since_processed=7.0)[0] == ERROR

"""HealthMonitor: the level and message of /diagnostics from what the node counted recently.

Pure Python (no ROS): the Status timer feeds it the node's cumulative counters and clocks,
and gets back ``(level, message)`` with level 0 = OK, 1 = WARN, 2 = ERROR. A state the node
chose or waits for (paused; waiting for the base -> camera transform) is passed as
``override`` and wins: nothing is processed then by design. Otherwise, worst first:

    ERROR  the last frame failed (its error)
    ERROR  images arrive but none was processed for ``stall_timeout_s`` (and what they were
           lost to: every frame rejected, a stalled worker, ...)
    ERROR  map -> odom not published for ``stall_timeout_s`` (the other odometry's
           odom -> base is missing at the images' stamps; WARN before that)
    WARN   more than ``warn_drop_share`` of the frames received in the last ``window_s``
           seconds were dropped or rejected (by reason)
    WARN   the stream restarted itself in the last ``window_s`` seconds (why)
    WARN   the ROS clock (sim time) has not advanced for ``stall_timeout_s`` (a paused
           /clock), or no /clock yet
    WARN   no image for ``starved_after_s`` seconds, or none yet
    OK     tracking / initialising
"""
from __future__ import annotations

from collections import deque
from typing import Optional

OK, WARN, ERROR = 0, 1, 2


def lost_by_reason(counters: dict) -> dict[str, int]:
    """The counters of frames that reached the node but gave no pose."""
    return {k: v for k, v in counters.items()
            if v and k.startswith(("dropped_", "rejected_"))}


class HealthMonitor:
    def __init__(self, warn_drop_share: float, stall_timeout_s: float, window_s: float = 10.0,
                 starved_after_s: float = 5.0) -> None:
        self.warn_drop_share = warn_drop_share
        self.stall_timeout_s = stall_timeout_s
        self.window_s = window_s
        self.starved_after_s = starved_after_s
        self._samples: deque[tuple[float, dict]] = deque()  # (time, counters), oldest first

    def evaluate(self, now: float, counters: dict, since_last_image_s: Optional[float],
                 since_last_processed_s: Optional[float], last_error: str = "",
                 last_restart: Optional[tuple[float, str]] = None,
                 idle_message: str = "tracking", topic: str = "",
                 override: Optional[tuple[int, str]] = None,
                 map_to_odom_failing: Optional[tuple[float, int, str]] = None,
                 clock_stalled: Optional[tuple[float, str]] = None) -> tuple[int, str]:
        """``since_last_processed_s``: since the last frame went through the model (None:
        never); ``last_restart``: (time, message) of the last self-restart of the stream;
        ``map_to_odom_failing``: (seconds failing, frames failed, last error) while the
        last frame's map -> odom could not be published, else None; ``clock_stalled``:
        (seconds, why) while the ROS clock is sim time and does not advance, else None."""
        self._samples.append((now, dict(counters)))
        while len(self._samples) > 2 and now - self._samples[1][0] >= self.window_s:
            self._samples.popleft()
        if override is not None:
            return override
        if last_error:
            return ERROR, f"last frame failed: {last_error}"
        images_arriving = (since_last_image_s is not None
                           and since_last_image_s < self.stall_timeout_s)
        waited = since_last_processed_s
        if images_arriving and (waited is None or waited >= self.stall_timeout_s):
            lost = lost_by_reason(counters)
            why = (", ".join(f"{k} {v}" for k, v in sorted(lost.items())) if lost
                   else "none lost: the worker is stuck")
            when = "yet" if waited is None else f"for {waited:.0f} s"
            return ERROR, f"images arrive but no frame was processed {when} ({why})"
        if map_to_odom_failing is not None:
            failing_s, failures, error = map_to_odom_failing
            level = ERROR if failing_s >= self.stall_timeout_s else WARN
            return level, (f"map -> odom not published for {failing_s:.0f} s ({failures} "
                           f"frames): the odometry's odom -> base is missing at the image "
                           f"stamps (tf.publish_odom_to_base is false): {error}")
        share, received, lost = self._recent_loss()
        if received and share > self.warn_drop_share:
            reasons = ", ".join(f"{k} {v}" for k, v in sorted(lost.items()))
            return WARN, (f"{100 * share:.0f} % of the last {received} frames were lost "
                          f"({reasons})")
        if last_restart is not None and now - last_restart[0] < self.window_s:
            return WARN, last_restart[1]
        if clock_stalled is not None and clock_stalled[0] >= self.stall_timeout_s:
            return WARN, clock_stalled[1]
        if since_last_image_s is None:
            return WARN, f"no image received yet on {topic}"
        if since_last_image_s > self.starved_after_s:
            return WARN, f"no image on {topic} for {since_last_image_s:.0f} s"
        return OK, idle_message

    def _recent_loss(self) -> tuple[float, int, dict]:
        """(lost share, frames received, lost by reason) over the sample window."""
        (_, old), (_, new) = self._samples[0], self._samples[-1]
        received = new.get("received", 0) - old.get("received", 0)
        if received <= 0:
            return 0.0, 0, {}
        lost = {k: v - old.get(k, 0) for k, v in lost_by_reason(new).items()
                if v - old.get(k, 0) > 0}
        return min(1.0, sum(lost.values()) / received), received, lost


def extrinsic_wait(frames, now: float) -> Optional[tuple[int, str]]:
    """(level, message) while the robot's frames wait for the extrinsic (``FramesFacts``):
    OK at first (start-up), ERROR after ``tf.wait_for_extrinsic_s``; None when not waiting."""
    if frames.waiting_since is None:
        return None
    waited = now - frames.waiting_since
    level = ERROR if waited >= frames.wait_for_extrinsic_s else OK
    return level, f"no transform {frames.waiting_for} for {waited:.0f} s: " + frames.waiting_message

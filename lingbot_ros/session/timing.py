"""A stream's benchmark timers (``lingbot-ros-bench``), off by default:

    timing = session.timing
    timing.time_replays()          # GPU time of each CUDA-graph replay (the stream's runner's
    timing.replay_ms()             # graph records CUDA events around it)
    timing.time_host()             # host time of each phase of a step: ``timing.laps``,
    timing.host_ms()               # which the session, its runner and graph lap into

``StreamingSession`` owns one (``session.timing``). Speed is shown by the
benchmark's medians over these, never by a timed test.
"""
from __future__ import annotations

from typing import Callable, Optional

from .stats import HostLaps
from .stream_runner import StreamRunner

__all__ = ["BenchTiming"]


class BenchTiming:
    """The host laps of a stream's steps and the switch of its graph's replay timing."""

    def __init__(self, runner: Callable[[], Optional[StreamRunner]]) -> None:
        """``runner``: the stream's current runner (None before the first frame)."""
        self.laps = HostLaps()  # handed to each runner the stream allocates
        self._runner = runner

    def time_replays(self, enabled: bool = True) -> None:
        """Record the GPU time of each CUDA-graph replay (``replay_ms``): a benchmark's
        measure of the step's GPU time, to compare with the wall time per frame (no-op
        without graphs, or before the first frame)."""
        runner = self._runner()
        if runner is not None and runner.graph is not None:
            runner.graph.time_replays = enabled

    def replay_ms(self) -> list[float]:
        """GPU milliseconds of each replay timed since the last call ([] without graphs)."""
        runner = self._runner()
        if runner is None or runner.graph is None:
            return []
        return runner.graph.replay_ms()

    def time_host(self, enabled: bool = True) -> None:
        """Record the host time of each phase of a step into ``laps``: what the GPU waits
        for between two replays is ``close`` + ``begin`` + ``load`` + ``plan`` + ``launch``
        (after ``wait``; ``plan`` is ~0 when the step was planned ahead); the rest overlaps
        a replay when pipelined."""
        self.laps.enabled = enabled

    def host_ms(self) -> dict[str, list[float]]:
        """Milliseconds per phase (``time_host``) since the last call, one entry per step:
        checks_preprocess, wait (for the frame before), close (its check, decision and
        commit), begin, load, plan, launch, copy_outputs (graphs; eager: plan, model),
        readback_start, report (the frame before's result), plan_ahead (the next step's
        plan, made while this one runs)."""
        return self.laps.take()

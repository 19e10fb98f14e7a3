"""NodeFacts: what the worker knows of its frames' chain and outputs, one frozen object a frame.

The worker thread owns ``RobotFrames`` (the camera chain, a pending extrinsic, the wait for
TF) and ``Outputs`` (map -> odom failures, frames withheld before the scale locked); the map
owns its units. After each turn that handled an image (and after a reset, a load, the last
frame on stopping) the worker publishes one ``NodeFacts`` built from them into the node's
``FactsBoard``: one reference swap. The executor (~/status, /diagnostics, the services)
reads the board's latest object only, never the worker's objects, so it never sees a chain
from one frame beside the failures of another, and needs no lock. Beside ``NodeTelemetry``
(the counters): telemetry counts what happened to images; the facts say how the stream is
published now.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ...scale import ScaleEstimate
from ..tf.frame_chain import FrameChain
from .health import ERROR, OK


@dataclass(frozen=True)
class FramesFacts:
    """``RobotFrames``' part: the chain in use and the wait for the robot's TF."""

    tf_tree: str = ""  # which transforms this node publishes (tf_tree_mode)
    wait_for_extrinsic_s: float = 0.0  # tf.wait_for_extrinsic_s: waiting becomes an ERROR
    chain: Optional[FrameChain] = None  # the stream's chain, once known
    extrinsic: str = ""  # base -> optical in use, as text ("" camera-only or no chain yet)
    pending_extrinsic: str = ""  # a different base -> camera seen on TF: on ~/reset ("": none)
    waiting_since: Optional[float] = None  # time.monotonic() of the first miss, while waiting
    waiting_for: str = ""  # "base_link -> camera_optical_frame", while waiting
    waiting_message: str = ""  # what is missing and how to provide it, while waiting

    def health(self, now: float) -> Optional[tuple[int, str]]:
        """(level, message) while waiting for the extrinsic: OK at first (start-up), ERROR
        after ``tf.wait_for_extrinsic_s``; None when not waiting."""
        if self.waiting_since is None:
            return None
        waited = now - self.waiting_since
        level = ERROR if waited >= self.wait_for_extrinsic_s else OK
        return level, (f"no transform {self.waiting_for} for {waited:.0f} s: "
                       + self.waiting_message)

    def describe(self) -> dict:
        """Diagnostics key/values: the tree, the tracked frame, the extrinsic in use."""
        out = {"tf_tree": self.tf_tree}
        if self.chain is not None:
            out["tracked_frame"] = self.chain.tracked_frame
            out["camera_frame"] = self.chain.camera_frame
            if self.extrinsic:
                out["extrinsic_base_optical"] = self.extrinsic
                if self.pending_extrinsic:
                    out["extrinsic_pending"] = (f"{self.pending_extrinsic} (base -> "
                                                f"{self.chain.camera_frame}; on ~/reset)")
        return out


@dataclass(frozen=True)
class OutputFacts:
    """``Outputs``' part: map -> odom failures, withheld frames, the map's units."""

    tf_failures: int = 0  # map -> odom not published: no odom -> base at the stamp
    last_tf_failure: str = ""
    # (time.monotonic() of the first failure, failures since) while the last frame's
    # map -> odom failed; None once one is published again
    tf_failing: Optional[tuple[float, int]] = None
    withheld: int = 0  # frames whose metric outputs were withheld (before the lock)
    map_units: Optional[ScaleEstimate] = None  # the scale of the map's last points

    def map_to_odom_failing(self, now: float) -> Optional[tuple[float, int, str]]:
        """(seconds since map -> odom last went out, frames failed, last error) while the
        last frame's failed; None otherwise (or when this node owns odom -> base)."""
        if self.tf_failing is None:
            return None
        return now - self.tf_failing[0], self.tf_failing[1], self.last_tf_failure

    def info(self) -> dict:
        """Diagnostics key/values."""
        return {"tf_failures": self.tf_failures, "scale_withheld_frames": self.withheld}


@dataclass(frozen=True)
class NodeFacts:
    """The worker's facts after one frame (immutable: safe to read from any thread)."""

    frames: FramesFacts = field(default_factory=FramesFacts)
    outputs: Optional[OutputFacts] = None  # None: no outputs (inactive)


class FactsBoard:
    """The latest ``NodeFacts``: the worker publishes (one writer), any thread reads. A
    reference swap is atomic in Python, so neither side takes a lock."""

    def __init__(self, facts: NodeFacts = NodeFacts()) -> None:
        self._facts = facts
        self.num_published = 0  # how many the worker published (a test's handle)

    def publish(self, facts: NodeFacts) -> None:
        self._facts = facts
        self.num_published += 1

    def read(self) -> NodeFacts:
        return self._facts

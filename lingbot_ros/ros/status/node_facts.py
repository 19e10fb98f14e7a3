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

from ..backend.backend_thread import BackendFacts
from ..outputs.frame_outputs import OutputFacts
from ..tf.robot_frames import FramesFacts


@dataclass(frozen=True)
class NodeFacts:
    """The worker's facts after one frame (immutable: safe to read from any thread)."""

    frames: FramesFacts = field(default_factory=FramesFacts)
    outputs: Optional[OutputFacts] = None  # None: no outputs (inactive)
    backend: Optional[BackendFacts] = None  # the loop-closure back end's (None: loop.enable off)


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

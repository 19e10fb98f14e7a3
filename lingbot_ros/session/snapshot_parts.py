"""The parts of a stream snapshot: one registry (:data:`PARTS`) of every piece of persistent
state a snapshot holds, its key and owner, and the one protocol its owner implements
(:class:`SnapshotPart`: ``state_dict()`` and ``load_state_dict(state)``, one argument).

Two sides share a snapshot directory. The stream's parts (``side == STREAM``) are the
session's owners, gathered into the stream's state tree by ``session_state.py``; the front
ends' parts (``side == FRONT_END``) are a front end's own accumulators, kept in the manifest's
``front_end_state``:

    state = front_end_state({SCALE: scale, VOXEL_MAP: points})   # each part's state_dict()
    session.snapshots.save(path, front_end_state=state)
    saved = saved_part(manifest["front_end_state"], SCALE)        # None: saved without it

A stream part also names the session's attribute that holds its owner (``attr``) and how a
restore builds a fresh one (``build(LoadContext)``: whatever the owner needs beyond its
state -- model, configuration, model input size, device, host laps -- it gets here, so its
``load_state_dict`` takes the state alone). ``session_state.py`` loops over these; it names
no owner.

A key not in :data:`PARTS` is refused (``KeyError``): a new part is added here, with its
owner, before a front end can save it. Which object provides a front end's part is the front
end's (the node's scale part is its stream's scale owner, the offline runner's its run's);
the registry knows its key and what it holds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping, Optional, Protocol, runtime_checkable

import torch

from ..config import SessionConfig
from ..scale import SNAPSHOT_KEY
from .fingerprint import InputFingerprint
from .input_policy import InputPolicy
from .keyframes import make_policy
from .next_segment import NextSegment
from .segments import Segments
from .snapshot_folder import SnapshotError
from .stats import HostLaps, LatencyWindow
from .stream_runner import StreamRunner

__all__ = ["SnapshotPart", "LoadContext", "Part", "PARTS", "STREAM", "FRONT_END", "RUNNER",
           "SCALE", "VOXEL_MAP", "PATH_RECORDS", "LOOP_BACKEND", "part", "stream_parts",
           "check_stream_state", "front_end_state", "saved_part"]

STREAM, FRONT_END = "stream", "front_end"
RUNNER = "runner"  # the stream's caches (its tensors go to their own file: snapshot_codec.py)
SCALE = SNAPSHOT_KEY  # the scale part's key is its owner's (scale/stream.py, ScaleStream)
VOXEL_MAP, PATH_RECORDS = "voxel_map", "path_records"
LOOP_BACKEND = "loop_backend"  # the back end's state (loop/backend.py), with loop.enable


@runtime_checkable
class SnapshotPart(Protocol):
    """An owner of persistent state: its part of a snapshot as plain data (JSON-able values,
    numpy arrays, host tensors) and back. ``load_state_dict`` takes that state alone (what
    else it needs, the owner was built with) and raises ``ValueError`` (or
    ``KeyError``/``TypeError``) for a state it cannot continue."""

    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> Any: ...


@dataclass(frozen=True)
class LoadContext:
    """What a restore builds a stream's fresh owners with (``Part.build``): the session's
    model and configuration, the saved stream's model input size (None: it had no frame),
    the device (``config.device``), the session's host laps (its runner records there) and
    what makes its runner (``StreamRunner``'s signature; a rig's draws from shared pools)."""
    model: Any
    config: SessionConfig
    model_hw: Optional[tuple[int, int]]
    device: torch.device
    laps: HostLaps
    make_runner: Callable[..., StreamRunner] = StreamRunner


@dataclass(frozen=True)
class Part:
    """One registered part: its key in the snapshot, its side, who owns it, and whether a
    snapshot may lack it (one saved by an older build, or by a front end without it). A
    stream part also has ``attr``, the ``StreamingSession`` attribute holding its owner, and
    ``build``, a fresh owner for a restore; ``nullable``: the stream may have no owner (None,
    saved as None: the runner before the first frame)."""
    key: str
    side: str
    owner: str
    optional: bool = False
    attr: Optional[str] = None
    build: Optional[Callable[[LoadContext], SnapshotPart]] = None
    nullable: bool = False


def _runner(ctx: LoadContext) -> StreamRunner:
    if ctx.model_hw is None:
        raise SnapshotError("the state has caches but no model input size")
    return ctx.make_runner(ctx.model, ctx.config, ctx.model_hw, laps=ctx.laps)


# The stream parts in the order of the stream's state tree (a manifest's bytes keep it).
PARTS: tuple[Part, ...] = (
    Part("latency", STREAM, "LatencyWindow (session/stats.py)", attr="_latency",
         build=lambda ctx: LatencyWindow()),
    Part("input", STREAM, "InputPolicy (session/input_policy.py): last stamp, locked size",
         attr="_input", build=lambda ctx: InputPolicy(ctx.config)),
    Part("policy", STREAM, "the keyframe policy (session/keyframes.py)", attr="_policy",
         build=lambda ctx: make_policy(ctx.config.keyframes, ctx.device)),
    Part("segments", STREAM, "Segments (session/segments.py): alignment, next anchors",
         attr="_segments", build=lambda ctx: Segments(ctx.config)),
    Part(RUNNER, STREAM, "StreamRunner (session/stream_runner.py): the caches' pages",
         attr="_runner", build=_runner, nullable=True),
    Part("next_segment", STREAM, "NextSegment (session/next_segment.py): a sliced "
         "rollover's build", optional=True, attr="_next",
         build=lambda ctx: NextSegment(ctx.model, ctx.config, ctx.model_hw)),
    Part("input_fingerprint", STREAM, "InputFingerprint (session/fingerprint.py)",
         optional=True, attr="_fingerprint", build=lambda ctx: InputFingerprint()),
    Part(SCALE, FRONT_END, "the stream's metres per model unit (the node's and the offline "
         "runner's scale owner)", optional=True),
    Part(VOXEL_MAP, FRONT_END, "VoxelMap (geometry/voxel_map.py): the node's ~/map_points, "
         "the offline runner's points.ply", optional=True),
    Part(PATH_RECORDS, FRONT_END, "the node's ~/path history (ros/outputs/path_publisher.py)",
         optional=True),
    Part(LOOP_BACKEND, FRONT_END, "the loop-closure back end (loop/): place database, pose "
         "graph, correction; the node's BackendThread (ros/backend/backend_thread.py)",
         optional=True),
)
_BY_KEY = {p.key: p for p in PARTS}


def part(key: str, side: Optional[str] = None) -> Part:
    """The registered part ``key`` (of ``side``, when given); ``KeyError`` otherwise."""
    found = _BY_KEY.get(key)
    if found is None or (side is not None and found.side != side):
        what = "snapshot part" if side is None else f"{side} snapshot part"
        raise KeyError(f"{key!r} is not a registered {what} (session/snapshot_parts.py)")
    return found


def stream_parts() -> tuple[Part, ...]:
    return tuple(p for p in PARTS if p.side == STREAM)


def check_stream_state(state: Mapping) -> None:
    """``KeyError`` naming the stream parts a state tree lacks (the optional ones may be
    absent: snapshots of older builds)."""
    missing = [p.key for p in stream_parts() if not p.optional and p.key not in state]
    if missing:
        raise KeyError(f"the state has no {', '.join(missing)}")


def front_end_state(parts: Mapping[str, Optional[SnapshotPart]]) -> dict:
    """A front end's parts as ``front_end_state``: each one's ``state_dict()`` by its key (a
    part given as None is saved as None: the front end has none). ``KeyError`` for a key
    not registered as a front end's part."""
    return {key: None if owner is None else owner.state_dict()
            for key, owner in ((part(k, FRONT_END).key, v) for k, v in parts.items())}


def saved_part(front_end: Optional[Mapping], key: str) -> Any:
    """Part ``key``'s saved state in a manifest's ``front_end_state`` (None when the snapshot
    has none: saved without it, or by an older build)."""
    part(key, FRONT_END)
    return front_end.get(key) if isinstance(front_end, Mapping) else None

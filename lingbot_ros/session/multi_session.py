"""MultiStreamSession: several camera streams of one model, whose single-frame streaming
steps of a tick run together.

    rig = MultiStreamSession(model, {"front": config, "rear": config})
    tickets = rig.submit_many({"front": FrameIn(img_f, stamp_f), "rear": FrameIn(img_r, stamp_r)})
    for outcome in rig.collect("front"):    # FrameResult / FrameFailed, as StreamingSession
        ...
    rig.stream("rear").info(); rig.reset("rear"); rig.info()["front"].keyframes

Each stream is a whole ``StreamingSession`` (input policy, keyframe policy, segments and
rollovers, scale phase, trajectory, counters, snapshots, its caches): its outcomes are those
of that session fed the same frames alone. A tick (``submit_many``) hands each named stream
its frame in the pieces of ``StreamingSession.submit``: every stream ``_stage``s (checks,
preprocessing, its previous step closed by its own policy; a restart, a new size or a
blocking rollover runs then, alone); ``_open`` buffers a scale-phase frame (the anchor step
runs alone when complete) or begins the stream's single-frame step; the begun steps run as
one call of the tick's step runner (``steps``); each stream then takes its step back
(``_launched``: read-back, plan-ahead, a sliced rollover's slices) and reports the step it
closed. A stream absent from a tick is untouched (its step in flight stays open).

The step runner is ``SequentialSteps`` (each stream's own ``StreamRunner`` in turn) until the
batched one (``batch_step.BatchRunner``: one forward over all the streams' frames) is wired
in ``MultiStreamSession.__init__``; both take ``run(images, runners, txns, with_depth)``.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Mapping, Optional, Sequence, Union

import numpy as np
import torch

from ..config import SessionConfig
from ..model import StepOutputs
from .flight import Opened, Staged
from .graph_step import GraphCaptureError
from .info import SessionInfo
from .session import Outcome, StreamingSession
from .step_txn import StepTxn
from .stream_runner import StreamRunner
from .types import FrameRejected
from .weights import WeightsIdentity

__all__ = ["FrameIn", "MultiStreamSession", "SequentialSteps", "STREAM_NAME_RE",
           "BATCH_FIELDS"]

STREAM_NAME_RE = re.compile(r"[a-z0-9_]+")
#: settings that fix a stream's cache shape or kernels: equal in every stream of one engine
BATCH_FIELDS = ("device", "preprocess", "attention_backend", "flashinfer_variant", "kv_splits",
                "fused_kernels", "fused_kernels_off", "cuda_graphs")


@dataclass(frozen=True)
class FrameIn:
    """One stream's frame of a tick (``StreamingSession.submit``'s arguments)."""

    image: np.ndarray
    stamp_ns: int
    encoding: str = "rgb8"
    with_depth: Optional[bool] = None


class SequentialSteps:
    """The tick's step runner, one stream after another: each runner runs its own frame
    (``images[i:i+1]``). On an exception every step still pending is rolled back, exactly
    once, and it propagates (as ``BatchRunner.run``)."""

    def run(self, images: torch.Tensor, runners: Sequence[StreamRunner],
            txns: Sequence[StepTxn], *, with_depth: bool = True) -> list[StepOutputs]:
        try:
            return [runner.run(images[i:i + 1], txn, with_depth=with_depth)
                    for i, (runner, txn) in enumerate(zip(runners, txns, strict=True))]
        except Exception:
            for txn in txns:
                if txn.state == "pending":
                    txn.rollback()
            raise


def check_streams(configs: Mapping[str, SessionConfig]) -> None:
    """ValueError unless ``configs`` names at least one stream, each ``[a-z0-9_]+`` with a
    ``SessionConfig``, all equal in ``BATCH_FIELDS``."""
    if not isinstance(configs, Mapping) or not configs:
        raise ValueError("configs must map at least one stream name to its SessionConfig")
    for name, config in configs.items():
        if not isinstance(name, str) or not STREAM_NAME_RE.fullmatch(name):
            raise ValueError(f"stream name {name!r}: use lower-case letters, digits and _")
        if not isinstance(config, SessionConfig):
            raise ValueError(f"stream {name!r}: its config must be a SessionConfig")
    first, *others = configs.items()
    for name, config in others:
        for field in BATCH_FIELDS:
            if getattr(config, field) != getattr(first[1], field):
                raise ValueError(
                    f"streams {first[0]!r} and {name!r} differ in {field} "
                    f"({getattr(first[1], field)!r} vs {getattr(config, field)!r}): the "
                    "streams of one engine share its cache shape and kernels")


class MultiStreamSession:
    def __init__(self, model, configs: Mapping[str, SessionConfig],
                 weights: Optional[WeightsIdentity] = None) -> None:
        """``model``: a ``GCTModel`` already ``prepare``d on the streams' device, shared by
        every stream; ``configs``: each stream's ``SessionConfig`` by name (``[a-z0-9_]+``;
        keyframes, rollover, window, stamp policy may differ; ``BATCH_FIELDS`` may not)."""
        check_streams(configs)
        self.model = model
        self.weights = weights if weights is not None else WeightsIdentity(model)
        self.names: tuple[str, ...] = tuple(configs)
        self._streams = {name: StreamingSession(model, config, self.weights)
                         for name, config in configs.items()}
        self.steps = SequentialSteps()  # the tick's step runner (BatchRunner: see the doc)
        self.ticks = 0

    def stream(self, name: str) -> StreamingSession:
        """The read side of one stream: ``info``, ``pop_events``, ``rollovers``,
        ``snapshots`` (between its frames: ``collect(name)`` first), ``trajectory``,
        ``fast_path``. Frames go in through ``submit_many`` only."""
        try:
            return self._streams[name]
        except KeyError:
            raise ValueError(f"no stream {name!r}; the streams are {list(self.names)}") from None

    def submit_many(self, frames: Mapping[str, FrameIn]) -> dict[str, Union[int, FrameRejected]]:
        """One tick: each named stream takes its frame; returns its ticket, or the
        ``FrameRejected`` it raised (counted by that stream, nothing else changes). A stream
        absent from ``frames`` is untouched. The streams' single-frame steps run as one call
        of ``steps``; a scale phase, a blocking rollover or a restart runs alone.

        Any other exception of a stream (a full cache, a failed step) is raised once the
        tick is over for every stream, naming the stream (``add_note``); a failed call of
        ``steps`` fails the frame of each stream in it (each step rolled back once)."""
        for name, frame in frames.items():
            self.stream(name)  # ValueError for an unknown name, before anything changes
            if not isinstance(frame, FrameIn):
                raise ValueError(f"stream {name!r}: a frame must be a FrameIn, got "
                                 f"{type(frame).__name__}")
        self.ticks += 1
        out: dict[str, Union[int, FrameRejected]] = {}
        errors: list[BaseException] = []
        staged: dict[str, Staged] = {}
        for name in self.names:
            if name in frames:
                f = frames[name]
                try:
                    staged[name] = self._streams[name]._stage(f.image, f.stamp_ns, f.encoding,
                                                              f.with_depth)
                except FrameRejected as exc:
                    out[name] = exc
                except Exception as exc:  # noqa: BLE001 -- raised after the tick
                    errors.append(_named(exc, name))
        opened: dict[str, Opened] = {}
        for name, st in staged.items():
            try:
                frame, op = self._streams[name]._open(st)
                out[name] = frame.ticket
                if op is not None:
                    opened[name] = op
            except Exception as exc:  # noqa: BLE001
                errors.append(_named(exc, name))
        try:
            self._run_steps(opened, errors)
        finally:
            for name, st in staged.items():
                try:
                    self._streams[name]._report(st.closed)
                except Exception as exc:  # noqa: BLE001
                    errors.append(_named(exc, name))
        if errors:
            raise errors[0]
        return out

    def collect(self, name: str, wait: bool = True) -> list[Outcome]:
        """That stream's outcomes, in its input order (``StreamingSession.collect``)."""
        return self.stream(name).collect(wait)

    def reset(self, name: str) -> None:
        """Forget that stream (``StreamingSession.reset``); the others are untouched."""
        self.stream(name).reset()

    def info(self) -> dict[str, SessionInfo]:
        """Each stream's ``SessionInfo``, by name."""
        return {name: s.info() for name, s in self._streams.items()}

    # -- the tick's steps ------------------------------------------------------------------
    def _run_steps(self, opened: dict[str, Opened], errors: list) -> None:
        """Run the begun single-frame steps as one ``steps`` call per model input size (one
        in a rig), then hand each stream its outputs (``_launched``)."""
        groups: dict[tuple, list[str]] = {}
        for name, op in opened.items():
            groups.setdefault(tuple(op.frame.image.shape), []).append(name)
        for names in groups.values():
            ops = [opened[n] for n in names]
            try:
                ops, outputs = self._run_group(names, ops)
            except Exception as exc:  # noqa: BLE001 -- every step of the call rolled back
                errors.append(_named(exc, ", ".join(names)))
                continue
            for name, op, outs in zip(names, ops, outputs):
                try:
                    self._streams[name]._launched(op, outs)
                except Exception as exc:  # noqa: BLE001
                    errors.append(_named(exc, name))

    def _run_group(self, names: list[str], ops: list[Opened]
                   ) -> tuple[list[Opened], list[StepOutputs]]:
        """One ``steps`` call; a failed graph capture is retried once on steps begun anew
        (as ``StreamingSession``). A stream that wants no depth gets none (as alone)."""
        runners = [self._streams[n].runner for n in names]
        images = torch.stack([op.frame.image for op in ops])
        with_depth = any(op.with_depth for op in ops)
        try:
            outputs = self.steps.run(images, runners, [op.txn for op in ops],
                                     with_depth=with_depth)
        except GraphCaptureError:
            ops = [dataclasses.replace(op, txn=r.begin(1, op.kind))
                   for op, r in zip(ops, runners)]
            outputs = self.steps.run(images, runners, [op.txn for op in ops],
                                     with_depth=with_depth)
        outputs = [o if op.with_depth or o.depth is None
                   else dataclasses.replace(o, depth=None, depth_conf=None)
                   for op, o in zip(ops, outputs)]
        return ops, outputs


def _named(exc: BaseException, name: str) -> BaseException:
    exc.add_note(f"stream(s): {name}")
    return exc

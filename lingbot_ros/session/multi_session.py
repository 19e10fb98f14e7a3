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

The streams share one engine per model input size (one in a rig): ``SharedStreams`` (one KV
page pool, one camera-head pool; a stream's runner draws its page table and camera block from
them, ``StreamRunners``) and one ``BatchRunner`` (one forward over every stream's frame, one
attention request per stream, CUDA graphs per batch size): ``BatchedSteps``.
``SequentialSteps`` (each stream's own runner in turn) takes the same
``run(images, runners, txns, with_depth)``; the tests hold both to a stream run alone.
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
from .batch_step import BatchRunner, SharedStreams, check_batchable
from .flight import Opened, Staged
from .graph_step import GraphCaptureError
from .info import SessionInfo
from .session import Outcome, StreamingSession
from .step_txn import StepTxn
from .stream_runner import StreamRunner
from .types import FrameRejected
from .weights import WeightsIdentity

__all__ = ["FrameIn", "MultiStreamSession", "SequentialSteps", "BatchedSteps", "StreamRunners",
           "STREAM_NAME_RE"]

STREAM_NAME_RE = re.compile(r"[a-z0-9_]+")


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


class StreamRunners:
    """What makes the rig's streams' runners (``StreamingSession._runner_factory``, also on
    a restore): ``StreamRunner``'s signature, each runner drawing its page table and camera
    block from the engine's ``SharedStreams`` of its model input size (made on first use).
    A replaced runner's pages and block go back to the pools when it is dropped. Holds no
    stream (no reference cycle)."""

    def __init__(self, model, config: SessionConfig) -> None:
        self.model = model
        self.config = config  # the engine's: the fields every stream shares (check_batchable)
        self.shared: dict[tuple[int, int], SharedStreams] = {}  # by model input size
        self.made = 0  # runners made (a first frame, a new size, a restore)

    def shared_for(self, image_hw: tuple[int, int]) -> SharedStreams:
        hw = tuple(image_hw)
        if hw not in self.shared:
            self.shared[hw] = SharedStreams(self.model, self.config, hw)
        return self.shared[hw]

    def __call__(self, model, config: SessionConfig, image_hw: tuple[int, int],
                 laps=None) -> StreamRunner:
        self.made += 1
        return StreamRunner(model, config, image_hw, laps=laps,
                            shared=self.shared_for(image_hw))


class BatchedSteps:
    """The tick's step runner: one ``BatchRunner`` per model input size (its engine's
    ``SharedStreams``), so the streams' frames of a tick run as one forward."""

    def __init__(self, runners: StreamRunners) -> None:
        self._runners = runners
        self.batch: dict[tuple[int, int], BatchRunner] = {}

    def run(self, images: torch.Tensor, runners: Sequence[StreamRunner],
            txns: Sequence[StepTxn], *, with_depth: bool = True) -> list[StepOutputs]:
        hw = (int(images.shape[-2]), int(images.shape[-1]))
        if hw not in self.batch:
            factory = self._runners
            self.batch[hw] = BatchRunner(factory.model, factory.config, hw,
                                         factory.shared_for(hw))
        return self.batch[hw].run(images, runners, txns, with_depth=with_depth)


def check_streams(configs: Mapping[str, SessionConfig]) -> None:
    """ValueError unless ``configs`` names at least one stream, each ``[a-z0-9_]+`` with a
    ``SessionConfig``, and the streams can share one engine (``check_batchable``)."""
    if not isinstance(configs, Mapping) or not configs:
        raise ValueError("configs must map at least one stream name to its SessionConfig")
    for name, config in configs.items():
        if not isinstance(name, str) or not STREAM_NAME_RE.fullmatch(name):
            raise ValueError(f"stream name {name!r}: use lower-case letters, digits and _")
        if not isinstance(config, SessionConfig):
            raise ValueError(f"stream {name!r}: its config must be a SessionConfig")
    check_batchable(configs)


class MultiStreamSession:
    def __init__(self, model, configs: Mapping[str, SessionConfig],
                 weights: Optional[WeightsIdentity] = None) -> None:
        """``model``: a ``GCTModel`` already ``prepare``d on the streams' device, shared by
        every stream; ``configs``: each stream's ``SessionConfig`` by name (``[a-z0-9_]+``;
        keyframes, rollover, window, stamp policy may differ; ``check_batchable``'s may not)."""
        check_streams(configs)
        self.model = model
        self.weights = weights if weights is not None else WeightsIdentity(model)
        self.names: tuple[str, ...] = tuple(configs)
        self.runners = StreamRunners(model, next(iter(configs.values())))
        self._streams = {name: StreamingSession(model, config, self.weights)
                         for name, config in configs.items()}
        for session in self._streams.values():
            session._runner_factory = self.runners
        self.steps = BatchedSteps(self.runners)  # the tick's step runner
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
        tick is over for every stream (the first, if several), naming the stream
        (``add_note``; the others' frames of the tick went on as usual); a failed call of
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

    def pool_info(self) -> dict[tuple[int, int], dict]:
        """The engine's shared pools by model input size (``SharedStreams.info``: the KV
        pool's pages and bytes, the camera-head pool's), and its batched steps'
        (``BatchRunner.info``: steps and graph captures per batch size)."""
        out = {}
        batch = getattr(self.steps, "batch", {})  # (a test may put another step runner)
        for hw, shared in self.runners.shared.items():
            out[hw] = dict(shared.info())
            if hw in batch:
                out[hw]["batch"] = batch[hw].info()
        return out

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

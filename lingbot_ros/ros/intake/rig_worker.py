"""RigWorker: a camera rig's worker thread, from gathered frames to each camera's outputs
and the one fused robot pose.

One thread, one multi-stream session (``MultiStreamSession``, session/multi_session.py; its
``submit_many``, ``collect(name)``, ``reset(name)``, ``stream(name)`` only). Each turn:

1. a tick from the ``RigGather`` (each camera's latest frame; a late camera holds the
   others back at most ``cameras.max_wait_ms``);
2. per camera of the tick: its TF chain (its ``RobotFrames``: base -> its camera), its
   image converted, whether its depth is wanted; a frame from before its reset is dropped;
3. one ``submit_many`` (the tick's single-frame steps run as one batch); a refused frame is
   counted and FAILED on its ``~/<camera>/status``, the others go on;
4. per camera, its outcomes (``collect(name)``): its scale sample, the fusion
   (``RigFusion.update``: its base in its own map in metres; ``tracking`` once its scale
   locked, or always without a metric source), its outputs through its alignment into the
   fused frame (``Outputs(camera=...)``), its status; each new fused pose to the
   ``FusedOutputs`` (odom -> base, ~/odometry, ~/pose, ~/path).

Not pipelined (v1): a tick's outcomes are collected before the next tick is taken.
``reset(camera)``: its slot cleared, its queued frames dropped (generation), its stream
reset (``session.reset(name)``), its contexts, outputs and scale cleared, and
``RigFusion.reset(name)`` (a reset source fails over at once; a Switch is logged).
``rig_facts`` is the fusion's frozen ``RigFacts`` after the last turn (for /diagnostics).
No rclpy here beyond the message types the converters read.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

from ...session import FrameFailed, FrameIn, FrameRejected
from ..outputs.messages import stamp_to_ns
from ..status.telemetry import NodeTelemetry
from ..tf.rig_fusion import RigFusion, Switch
from ..tf.robot_frames import RobotFrames
from .convert import ImageLimits, ImageRejected, compressed_to_array, image_to_array
from .pending_frames import PendingFrame, PendingFrames
from .rig_gather import RigGather, Tick
from .worker import FrameOutputs, Log, QueuedImage, StatusSink

__all__ = ["CameraUnit", "RigWorker"]


@dataclass(frozen=True)
class CameraUnit:
    """A camera's own pieces (its outputs publish under ``~/<name>/``, without TF)."""

    name: str
    outputs: FrameOutputs
    status: StatusSink
    telemetry: NodeTelemetry
    robot_frames: RobotFrames
    scale: Optional[Any] = None  # its ScaleStream (None: model units)
    use_compressed: bool = False


class RigWorker:
    def __init__(self, session, units: Sequence[CameraUnit], fusion: RigFusion, fused,
                 gather: RigGather, *, log: Log, max_image_pixels: int,
                 alive: Callable[[], bool] = lambda: True) -> None:
        """``session``: the rig's multi-stream session; ``units``: one per camera, in
        ``cameras.names`` order (the session's, the gather's and the fusion's names);
        ``fused``: where each fused pose goes (``FusedOutputs``: ``publish(FusedPose)``)."""
        names = tuple(u.name for u in units)
        for what, other in (("the session", tuple(session.names)), ("the gather", gather.names),
                            ("the fusion", tuple(fusion.config.names))):
            if other != names:
                raise ValueError(f"the rig's cameras {list(names)} differ from {what}'s "
                                 f"{list(other)}")
        self.names = names
        self._session = session
        self._units = {u.name: u for u in units}
        self._fusion = fusion
        self._fused = fused
        self._gather = gather
        self._log = log
        self._limits = ImageLimits(max_pixels=max_image_pixels)
        self._alive = alive
        self._pending = {n: PendingFrames() for n in names}
        self._generation = {n: 0 for n in names}
        self._lock = threading.Lock()  # a turn vs a reset
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self.switches: list[Switch] = []  # every change of the fused pose's source, in order
        self.rig_facts = fusion.facts()
        for u in units:
            u.telemetry.set_session_info(session.stream(u.name).info())

    # -- the executor's side -----------------------------------------------------------------
    def offer(self, camera: str, msg, received: float) -> bool:
        """Queue ``camera``'s image (its callback's only work); True if its older waiting
        one was dropped (counted ``dropped`` by the gather)."""
        return self._gather.put(camera, QueuedImage(msg, received, self._generation[camera]))

    def reset(self, camera: Optional[str] = None) -> int:
        """Reset ``camera``'s stream (None: every camera's); between two turns. Returns the
        queued images dropped (counted ``dropped_reset``)."""
        names = self.names if camera is None else (camera,)
        if camera is not None and camera not in self._units:
            raise ValueError(f"no camera {camera!r} in the rig {list(self.names)}")
        with self._lock:
            dropped = 0
            for name in names:
                unit = self._units[name]
                self._generation[name] += 1
                n = self._gather.clear(name)
                dropped += n
                unit.telemetry.count("dropped_reset", n + self._pending[name].clear())
                self._session.reset(name)
                unit.outputs.clear()
                if unit.scale is not None:
                    unit.scale.reset()
                self._switched(self._fusion.reset(name))
            if camera is None:
                self._fusion.reset_all()
                self._fused.clear()
            self.rig_facts = self._fusion.facts()
            return dropped

    # -- the worker thread -------------------------------------------------------------------
    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._work, name="lingbot_rig_worker",
                                        daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=timeout)
            self._thread = None

    def run_once(self, timeout: float = 0.1) -> bool:
        """One turn: wait at most ``timeout`` s for a tick, run it, publish its outcomes.
        False when no tick was ready."""
        tick = self._gather.wait(timeout)
        if tick is None:
            return False
        with self._lock:
            self._run(tick)
            self.rig_facts = self._fusion.facts()
        return True

    def _work(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception as exc:  # noqa: BLE001 -- the thread never dies of one tick
                if not self._alive():
                    return
                self._log.error(f"rig worker: {type(exc).__name__}: {exc}; going on")
                self._stop.wait(0.01)

    def _run(self, tick: Tick) -> None:
        frames, contexts = {}, {}
        for name, item in tick.frames.items():
            unit = self._units[name]
            if item.generation != self._generation[name]:  # queued before its reset
                unit.telemetry.count("dropped_reset")
                continue
            prepared = self._prepare(unit, item)
            if prepared is not None:
                frames[name], contexts[name] = prepared
        if not frames:
            return
        results = self._session.submit_many(frames)
        for name in frames:
            unit, result = self._units[name], results.get(name)
            self._report_events(unit)
            if isinstance(result, FrameRejected):
                header = contexts[name].item.msg.header
                unit.telemetry.count(f"rejected_{result.reason}")
                unit.status.failed(header, f"rejected ({result.reason}): {result}")
            elif result is not None:
                self._pending[name].add(result, contexts[name])
        for name in frames:
            unit = self._units[name]
            self._publish_outcomes(unit, self._session.collect(name, wait=True))
            unit.telemetry.set_session_info(self._session.stream(name).info())  # ~/cache_info

    def _prepare(self, unit: CameraUnit, item: QueuedImage):
        """(the frame for submit_many, its context), or None (counted, status said why)."""
        msg = item.msg
        stamp_ns = stamp_to_ns(msg.header.stamp)
        try:
            chain = unit.robot_frames.resolve(msg.header.frame_id, time.monotonic())
        except Exception as exc:  # noqa: BLE001 -- counted as this image's failure
            self._failed(unit, msg.header, "failed_error", exc)
            return None
        if chain is None:  # no base -> camera transform yet
            unit.telemetry.count("dropped_waiting_for_tf")
            unit.status.initializing(msg.header,
                                     f"waiting for TF {unit.robot_frames.waiting_for}")
            return None
        try:
            if unit.use_compressed:
                array, encoding = compressed_to_array(msg, self._limits)
            else:
                array, encoding = image_to_array(msg, self._limits, backend="auto"), msg.encoding
        except ImageRejected as exc:
            unit.telemetry.count(f"rejected_{exc.reason}")
            unit.status.failed(msg.header, f"rejected ({exc.reason}): {exc}")
            return None
        depth_due, with_depth = unit.outputs.depth_wanted()
        if unit.scale is not None and unit.scale.needs_depth:
            with_depth = True  # the depth source samples every frame's depth
            unit.scale.on_submit(stamp_ns)
        frame = FrameIn(image=array, stamp_ns=stamp_ns, encoding=encoding,
                                 with_depth=with_depth)
        return frame, PendingFrame(item, chain, depth_due)

    def _publish_outcomes(self, unit: CameraUnit, outcomes) -> None:
        pending = self._pending[unit.name]
        for outcome in outcomes:
            failed = isinstance(outcome, FrameFailed)
            tickets = outcome.tickets if failed else [outcome.ticket]
            if tickets:
                unit.telemetry.count("dropped_no_outcome", pending.pop_older(min(tickets)))
            if failed:
                frames = [f for f in (pending.pop(t) for t in outcome.tickets) if f]
                if outcome.stamps:
                    self._update_fusion(unit.name, outcome.stamps[-1], None, False)
                header = frames[-1].item.msg.header if frames else None
                self._failed(unit, header, f"failed_{outcome.reason}", outcome,
                             max(len(tickets), 1))
                continue
            frame = pending.pop(outcome.ticket)
            if frame is None:
                unit.telemetry.count("dropped_no_context")
                continue
            self._publish_frame(unit, outcome, frame)

    def _publish_frame(self, unit: CameraUnit, outcome, frame: PendingFrame) -> None:
        scale = (unit.scale.on_frame(outcome, frame.chain.T_base_optical)
                 if unit.scale is not None else None)
        k = scale.output_factor if scale is not None else None
        metric = unit.scale is not None and unit.scale.config.metric
        tracking = k is not None or not metric  # metres locked (or no metric source at all)
        pose = frame.chain.tracked_in_map(outcome.c2w, k) if tracking else None
        self._update_fusion(unit.name, outcome.stamp_ns, pose, tracking)
        note = unit.outputs.publish(outcome, frame.chain, frame.depth_due, scale,
                                    map_to_odom=self._fusion.alignment(unit.name))
        header = frame.item.msg.header
        now = time.monotonic()
        end_to_end_ms = (now - frame.item.received) * 1e3
        unit.telemetry.frame_published(now, end_to_end_ms, float(outcome.K[0, 0]),
                                       outcome.crop.input_hw)
        if unit.outputs.withholds(scale):
            unit.status.initializing(header, note)
        else:
            unit.status.frame(outcome, header, end_to_end_ms, note or "")

    def _update_fusion(self, name: str, stamp_ns: int, pose, tracking: bool) -> None:
        step = self._fusion.update(name, stamp_ns, pose, tracking)
        self._switched(step.switch)
        if step.fused is not None:
            self._fused.publish(step.fused)

    def _switched(self, switch: Optional[Switch]) -> None:
        if switch is None:
            return
        self.switches.append(switch)
        self._log.warning(f"rig: the fused pose's source {switch.from_camera or '(none)'} -> "
                          f"{switch.to_camera or '(none)'} ({switch.reason})")

    def _report_events(self, unit: CameraUnit) -> None:
        """A camera's stream restarted itself in submit: its map restarts (fusion reset)."""
        for event in self._session.stream(unit.name).pop_events():
            unit.telemetry.restarted(event.kind, event.message, time.monotonic())
            unit.outputs.restart()
            if unit.scale is not None:
                unit.scale.reset()
            self._switched(self._fusion.reset(unit.name))
            self._log.warning(f"{unit.name}: {event.message}")

    def _failed(self, unit: CameraUnit, header, counter: str, exc: Exception,
                images: int = 1) -> None:
        error = f"{type(exc).__name__}: {exc}"
        unit.telemetry.failed(counter, error, images)
        if header is not None:
            unit.status.failed(header, error)


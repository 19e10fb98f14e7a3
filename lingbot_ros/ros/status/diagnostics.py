"""/diagnostics: one DiagnosticStatus summarising input, processing, drops, latency, memory."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Optional

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

if TYPE_CHECKING:
    from ...session import SessionInfo

LEVELS = (DiagnosticStatus.OK, DiagnosticStatus.WARN, DiagnosticStatus.ERROR)  # by health level


class KeyValues:
    """Makes the KeyValues of successive ticks, reusing the previous tick's KeyValue of a key
    whose text did not change (most do not: topics, modes, totals while idle). Building a
    KeyValue costs ~1 us (rosidl checks each field); a tick has ~50. Publishing serialises the
    message at once, so a KeyValue can go out again in the next one. One per publisher."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[str, KeyValue]] = {}  # key -> (text, its KeyValue)

    def __call__(self, key: str, value) -> KeyValue:
        text = f"{value:.3f}" if isinstance(value, float) else str(value)
        last = self._last.get(key)
        if last is not None and last[0] == text:
            return last[1]
        kv = KeyValue(key=key, value=text)
        self._last[key] = (text, kv)
        return kv


def _new_kv(key: str, value) -> KeyValue:
    if isinstance(value, float):
        value = f"{value:.3f}"
    return KeyValue(key=key, value=str(value))


def build(stamp, name: str, hardware_id: str, level: int, message: str, counters: dict,
          rates: dict, end_to_end_ms: dict, compute_ms: dict, session_info: Optional[SessionInfo],
          gpu: Optional[dict], topic: str, extra: dict,
          key_values: Optional[KeyValues] = None) -> DiagnosticArray:
    """The status and its key/values; ``level`` (0 OK, 1 WARN, 2 ERROR) and ``message`` come
    from ``health.HealthMonitor``; ``extra``: more key/values (frames, map, camera_info).
    ``end_to_end_ms``: the node's image callback -> outputs published (``latency_*_ms``);
    ``compute_ms``: the session's hand-in -> result (``compute_*_ms``); ``key_values``: the
    publisher's ``KeyValues`` (reuses unchanged ones; default: all new)."""
    kv = key_values if key_values is not None else _new_kv
    values = [kv("input_rate_hz", rates["input"]), kv("processed_rate_hz", rates["processed"])]
    values += [kv(f"latency_{k}_ms", v) for k, v in end_to_end_ms.items()
               if k in ("p50", "p99", "max") and v is not None]
    values += [kv(f"compute_{k}_ms", v) for k, v in compute_ms.items()
               if k in ("p50", "p99") and v is not None]
    values += [kv(k, v) for k, v in sorted(counters.items())]
    values.append(kv("image_topic", topic))
    if session_info is not None:
        stream = session_info.stream
        values += [kv("phase", session_info.phase), kv("segment", session_info.segment),
                   kv("rollovers", session_info.rollovers),
                   kv("keyframes", session_info.keyframes),
                   kv("attention", stream.attention),
                   kv("fast_path", stream.fast_path),
                   kv("fused_kernels", stream.fused_kernels),
                   kv("graph_captures", stream.graph_captures)]
        cache = stream.cache
        if cache:
            values += [kv("cache_" + k, getattr(cache, k)) for k in (
                "frames_cached", "special_frames", "tokens_visible", "bytes_used",
                "bytes_reserved")]
            values.append(kv("cache_occupancy", cache.occupancy))
    if gpu:
        values += [kv(k, v) for k, v in gpu.items()]
    values += [kv(k, v) for k, v in extra.items()]
    status = DiagnosticStatus(level=LEVELS[level], name=name, message=message,
                              hardware_id=hardware_id, values=values)
    return _array(stamp, status)


def camera_info_check(camera_info, image_hw: Optional[tuple[int, int]],
                      predicted_fx: Optional[float]) -> dict:
    """An incoming sensor_msgs/CameraInfo against the images and the model's prediction:
    its size must be the images' (else it belongs to another stream or resolution), and its
    focal length is shown beside the predicted one (their ratio: ~1 when both agree)."""
    out: dict = {}
    if predicted_fx is not None:
        out["predicted_fx"] = predicted_fx
    if camera_info is None:
        return out
    fx = float(camera_info.k[0])
    out["camera_info_fx"] = fx
    if predicted_fx is not None and fx > 0:
        out["predicted_fx_over_camera_info_fx"] = predicted_fx / fx
    if image_hw is not None:
        h, w = image_hw
        same = (camera_info.width, camera_info.height) == (w, h)
        out["camera_info_size"] = ("matches the images" if same else
                                   f"MISMATCH: camera_info is {camera_info.width}x"
                                   f"{camera_info.height}, the images {w}x{h}")
    return out


def _array(stamp, status: DiagnosticStatus) -> DiagnosticArray:
    msg = DiagnosticArray(status=[status])
    msg.header.stamp = stamp
    return msg


def rig_check(facts, gather: Optional[Mapping[str, Any]] = None) -> tuple[int, str, dict]:
    """A rig's part of /diagnostics from ``RigFusion``'s frozen ``RigFacts`` (and the
    gather's counts per camera, ``RigGather.counts()``): (level, message, key values).

    ERROR: no camera tracks (no fused pose) after one did; WARN: the pose comes from another
    camera than the primary (a failover, with its reason), or a camera disagrees with the
    fused pose by more than ``cameras.max_disagreement_m``; OK otherwise."""
    values: dict = {"rig_source": facts.source or "(none)", "rig_primary": facts.primary,
                    "rig_failovers": facts.failovers, "rig_failbacks": facts.failbacks}
    switch = facts.last_switch
    if switch is not None:
        values["rig_last_switch"] = (f"{switch.from_camera or '(none)'} -> "
                                     f"{switch.to_camera or '(none)'} ({switch.reason}) at "
                                     f"{switch.stamp_ns} ns")
        if switch.jump_m is not None:
            values["rig_last_switch_jump_m"] = float(switch.jump_m)
    over = []
    for c in facts.cameras:
        values[f"{c.name}_tracking"] = c.tracking
        if c.disagreement_m is not None:
            values[f"{c.name}_disagreement_m"] = float(c.disagreement_m)
            if c.over_limit:
                over.append(f"{c.name} {c.disagreement_m:.2f} m")
        counts = (gather or {}).get(c.name)
        if counts is not None:
            values[f"{c.name}_dropped"] = counts.dropped
            values[f"{c.name}_missed"] = counts.missed
    if not facts.source:
        if switch is None:
            return 0, "rig: no fused pose yet (no camera tracks yet)", values
        return 2, f"rig: no camera tracks: no fused pose since {switch.reason}", values
    if facts.source != facts.primary:
        why = f" ({switch.reason})" if switch is not None else ""
        return 1, (f"rig: failed over to {facts.source}: primary {facts.primary} not "
                   f"tracking{why}"), values
    if over:
        return 1, "rig: cameras disagree with the fused pose: " + ", ".join(over), values
    return 0, f"rig: fused pose from {facts.source}", values

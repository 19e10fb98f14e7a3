"""/diagnostics: one DiagnosticStatus summarising input, processing, drops, latency, memory."""
from __future__ import annotations

from typing import Optional

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue

STARVED_AFTER_S = 5.0  # no image for this long while active: WARN (like rtabmap's sync check)


def _kv(key: str, value) -> KeyValue:
    if isinstance(value, float):
        value = f"{value:.3f}"
    return KeyValue(key=key, value=str(value))


def build(stamp, name: str, hardware_id: str, counters: dict, rates: dict,
          latency_ms: dict, compute_ms: dict, session_info: Optional[dict],
          gpu: Optional[dict], since_last_image_s: Optional[float], topic: str,
          last_error: str, calibrated_fx: Optional[float],
          predicted_fx: Optional[float]) -> DiagnosticArray:
    """The status and its key/values; level from starvation and the last error."""
    level, message = DiagnosticStatus.OK, "tracking"
    if session_info is None:
        level, message = DiagnosticStatus.WARN, "not configured"
    elif session_info["phase"] == "scale_frames":
        message = (f"initialising: {session_info['scale_frames_buffered']}/"
                   f"{session_info['startup_latency_frames']} anchor frames")
    if since_last_image_s is None or since_last_image_s > STARVED_AFTER_S:
        level = max(level, DiagnosticStatus.WARN)
        message = (f"no image on {topic} for {since_last_image_s:.0f} s"
                   if since_last_image_s is not None else f"no image received yet on {topic}")
    if last_error:
        level, message = DiagnosticStatus.ERROR, f"last frame failed: {last_error}"
    values = [_kv("input_rate_hz", rates["input"]), _kv("processed_rate_hz", rates["processed"])]
    values += [_kv(f"latency_{k}_ms", v) for k, v in latency_ms.items()
               if k in ("p50", "p99", "max") and v is not None]
    values += [_kv(f"compute_{k}_ms", v) for k, v in compute_ms.items()
               if k in ("p50", "p99") and v is not None]
    values += [_kv(k, v) for k, v in sorted(counters.items())]
    if session_info is not None:
        values += [_kv("phase", session_info["phase"]), _kv("segment", session_info["segment"]),
                   _kv("rollovers", session_info["rollovers"]),
                   _kv("keyframes", session_info["keyframes"]),
                   _kv("attention", session_info["attention"]),
                   _kv("fast_path", session_info["fast_path"]),
                   _kv("fused_kernels", session_info["fused_kernels"]),
                   _kv("graph_captures", session_info["graph_captures"])]
        cache = session_info.get("cache")
        if cache:
            values += [_kv("cache_" + k, cache[k]) for k in (
                "frames_cached", "special_frames", "tokens_visible", "bytes_used",
                "bytes_reserved")]
            used = cache["patch_pages_used"] + cache["special_pages_used"]
            total = cache["patch_pages_total"] + cache["special_pages_total"]
            values.append(_kv("cache_occupancy", used / total if total else 0.0))
    if gpu:
        values += [_kv(k, v) for k, v in gpu.items()]
    if calibrated_fx is not None:
        values.append(_kv("camera_info_fx", calibrated_fx))
    if predicted_fx is not None:
        values.append(_kv("predicted_fx", predicted_fx))
    status = DiagnosticStatus(level=level, name=name, message=message, hardware_id=hardware_id,
                              values=values)
    return _array(stamp, status)


def _array(stamp, status: DiagnosticStatus) -> DiagnosticArray:
    msg = DiagnosticArray(status=[status])
    msg.header.stamp = stamp
    return msg

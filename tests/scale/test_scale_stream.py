"""ScaleStream: the one owner of a stream's scale, for the node and the offline runner alike
(issue 33): one registry of sources (no ``source == "..."`` branch outside it), one rejection
vocabulary, one snapshot schema (the node's and the offline runner's older snapshots still
load), one units header (the offline files' lines exactly), integer-ns stamps."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from lingbot_ros.scale import (REASONS, SOURCES, Reason, ScaleConfig, ScaleEstimator,
                               ScaleSample, ScaleState, ScaleStream, units_header)

from .synth import as_version_1

PKG = Path(__file__).resolve().parents[2] / "lingbot_ros"


def crop(h: int, w: int):
    return SimpleNamespace(input_hw=(h, w), resized_hw=(h, w), crop_xy=(0, 0), output_hw=(h, w))


def frame(t_ns: int, depth, index: int = 1):
    h, w = (8, 8) if depth is None else depth.shape
    return SimpleNamespace(index=index, stamp_ns=t_ns, depth=depth, depth_conf=None,
                           crop=crop(h, w), c2w=np.eye(4), K_model=np.eye(3))


def test_no_source_is_told_apart_by_name_outside_the_registry():
    """The Done-when line: ``grep -rn 'source == "' lingbot_ros`` finds nothing outside
    scale/sources.py."""
    hits = [f"{p.relative_to(PKG)}:{i}" for p in sorted(PKG.rglob("*.py"))
            if p.name != "sources.py" or p.parent.name != "scale"
            for i, line in enumerate(p.read_text().splitlines(), 1)
            if re.search(r'source == "', line)]
    assert not hits, hits


def test_the_registry_names_every_source_and_its_needs():
    assert tuple(SOURCES) == ("none", "fixed", "depth", "odometry", "camera_height")
    assert [n for n, k in SOURCES.items() if k.needs_depth] == ["depth", "camera_height"]
    assert [n for n, k in SOURCES.items() if not k.offline] == ["odometry"]
    assert all(k.no_input_reason in REASONS for k in SOURCES.values() if k.no_input_reason)
    with pytest.raises(ValueError, match="scale.source must be one of"):
        ScaleConfig(source="metres")


def test_a_frame_without_predicted_depth_is_no_depth_for_every_depth_reading_source():
    """One vocabulary: the node said ``no_depth`` and the offline runner ``no_floor`` for a
    camera_height frame without predicted depth; both say ``no_depth`` now (the floor was
    never looked for)."""
    from lingbot_ros.tools.offline.scale_args import OfflineScale
    offline = OfflineScale(ScaleConfig(source="camera_height", camera_height_m=1.5))
    assert offline.feed(frame(1_000, None)).reason == Reason.NO_DEPTH
    node = ScaleStream(ScaleConfig(source="camera_height", camera_height_m=1.5))
    assert node.on_frame(frame(1_000, None), np.eye(4)).reason == Reason.NO_DEPTH
    depth = ScaleStream(ScaleConfig(source="depth"))
    assert depth.on_frame(frame(1_000, None), np.eye(4)).reason == Reason.NO_DEPTH


def locked_depth_stream() -> ScaleStream:
    stream = ScaleStream(ScaleConfig(source="depth", min_samples=3, min_pixels=10,
                                     depth_min_m=0.0, depth_max_m=100.0))
    rng = np.random.default_rng(3)
    for i in range(4):
        t = 1_700_000_000_123_456_789 + i * 33_333_333
        pred = rng.uniform(1.0, 3.0, size=(30, 40)).astype(np.float32)
        stream.push_depth(t, pred * np.float32(0.5), "32FC1")
        stream.on_frame(frame(t, pred), np.eye(4))
    return stream


def test_stamps_are_integer_ns_throughout():
    """The estimate, the estimator's state and the samples hold the frames' integer ns: no
    float seconds to map back (at an epoch stamp a float second is ~0.24 us coarse)."""
    stream = locked_depth_stream()
    e = stream.estimate
    assert e.locked and e.stamp_ns == 1_700_000_000_123_456_789 + 3 * 33_333_333
    assert not hasattr(e, "stamp_s")
    state = stream.state_dict()["estimator"]
    assert state["version"] == 2
    stamps = {k: v for k, v in state.items() if k.endswith("_ns")}
    assert stamps["stamp_ns"] == e.stamp_ns == stamps["last_sample_ns"]
    assert stamps["since_ns"] == 1_700_000_000_123_456_789
    assert all(v is None or type(v) is int for v in stamps.values())
    assert not [k for k in state if k.endswith("_s")]


def test_the_rate_bound_counts_exact_ns_at_epoch_stamps():
    """LOCKED, the applied value moves max_change_per_s x (the stamps' difference): exact
    integer ns, also 1.7e9 s after the epoch, where float seconds would be off by ~1e-7 s."""
    cfg = ScaleConfig(source="depth", min_samples=3, max_samples=3, max_change_per_s=0.01)
    est = ScaleEstimator(cfg)
    t0 = 1_700_000_000_123_456_789
    for i in range(3):
        est.add(ScaleSample(t0 + i, 2.0, "depth"))
    assert est.estimate.locked
    for i in range(1, 7):  # the window's median is 4.0 from the second one on: 5 steps
        est.add(ScaleSample(t0 + 2 + i * 100_000_001, 4.0, "depth"))
    moved = math.log(est.estimate.metres_per_unit / 2.0)
    assert moved == pytest.approx(0.01 * 5 * 100_000_001 / 1e9, rel=1e-12, abs=0)


def test_a_version_1_state_in_float_seconds_loads_in_ns():
    """An older build's estimator state (stamps in float seconds) continues: the stamps are
    rounded to the ns; its stamp_ns (the frame's) is kept as it was."""
    stream = locked_depth_stream()
    v2 = stream.state_dict()["estimator"]
    fresh = ScaleEstimator(stream.config)
    e = fresh.load_state_dict(as_version_1(v2))
    assert e.stamp_ns == stream.estimate.stamp_ns and e.locked
    assert e.metres_per_unit == stream.estimate.metres_per_unit
    again = fresh.state_dict()
    assert again["since_ns"] != v2["since_ns"]  # at an epoch stamp, float s are coarse ...
    assert abs(again["since_ns"] - v2["since_ns"]) < 1_000  # ... but within a microsecond
    assert again["last_rejection_ns"] is None


def test_one_snapshot_schema_and_both_older_kinds_load():
    stream = locked_depth_stream()
    state = json.loads(json.dumps(stream.state_dict(), allow_nan=False))
    assert state["schema"] == 2 and set(state) == {"schema", "estimator", "source", "frames",
                                                   "restarts"}
    fresh = ScaleStream(stream.config)
    assert fresh.load_state_dict(state) == stream.estimate and fresh.frames == 4
    # the node's older snapshot: the estimator's state itself (odometry window beside it)
    node_old = state["estimator"]
    assert ScaleStream(stream.config).load_state_dict(node_old) == stream.estimate
    # the offline runner's older snapshot: estimator, frames, restarts
    offline_old = {"estimator": state["estimator"], "frames": 9, "restarts": 1}
    old = ScaleStream(stream.config)
    assert old.load_state_dict(offline_old) == stream.estimate
    assert (old.frames, old.restarts) == (9, 1)
    with pytest.raises(ValueError, match="schema"):
        ScaleStream(stream.config).load_state_dict(dict(state, schema=7))
    with pytest.raises(ValueError, match="malformed"):
        ScaleStream(stream.config).load_state_dict([1, 2])


def test_an_estimator_state_without_stamp_ns_still_loads():
    """Snapshots saved before the estimate carried ``stamp_ns`` (version 1, float seconds):
    the estimate's stamp comes from their ``stamp_s``."""
    est = ScaleEstimator(ScaleConfig(source="depth", min_samples=2))
    for i in range(3):
        est.add(ScaleSample(i * 100_000_000, 2.0, "depth"))
    state = as_version_1(est.state_dict())
    del state["stamp_ns"]
    again = ScaleEstimator(ScaleConfig(source="depth", min_samples=2))
    assert again.load_state_dict(state).stamp_ns == 200_000_000 and again.estimate.locked


def test_one_units_header_gives_the_offline_files_lines():
    """The offline runner's header lines, byte for byte as before (final estimate, --scale);
    the node's files take the same lines with ``scale.source`` and "has not locked yet"."""
    stream = locked_depth_stream()
    e = stream.estimate
    assert units_header(e, final=True, setting="--scale") == [
        "units: m", f"scale: depth, {e.output_factor!r} m per model unit (LOCKED, sigma_log "
        f"{e.sigma_log:.3g}, 4 samples)"]
    none = ScaleStream(ScaleConfig()).estimate
    assert units_header(none, final=True, setting="--scale") == [
        "units: model units (no metric scale: --scale none)", "scale: none"]
    waiting = ScaleStream(ScaleConfig(source="depth")).estimate
    assert units_header(waiting, final=True, setting="--scale") == [
        "units: model units (the depth scale never locked: 0/10 samples)",
        "scale: depth, not locked (UNKNOWN, last value nan m per model unit, not applied)"]
    assert units_header(waiting)[0] == \
        "units: model units (the depth scale has not locked yet: 0/10 samples)"
    assert units_header(ScaleStream(ScaleConfig(source="fixed", factor=0.5)).estimate) == [
        "units: m", "scale: fixed, 0.5 m per model unit (LOCKED, sigma_log 0, 0 samples)"]
    assert e.state is ScaleState.LOCKED

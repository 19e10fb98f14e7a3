"""Stream snapshots: a restored stream continues bit-identically; bad snapshots are refused
and leave the running stream as it was."""
import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lingbot_ros.config import KeyframeConfig, PreprocessConfig, SessionConfig
from lingbot_ros.session import SnapshotError, StreamingSession, read_manifest
from tests.session.micro_model import SIZE_42x56, micro_model
from tests.session.snapshot_edits import reseal
from tests.session.test_streaming_session import frames

STAMP0, DT = 1_700_000_000_000_000_000, 33_333_333
N = 14
POLICIES = {"all": KeyframeConfig(policy="all"),
            "every_n": KeyframeConfig(policy="every_n", n=2),
            "flow": KeyframeConfig(policy="flow", flow_threshold=0.5, max_gap=3)}
FIELDS = ("index", "ticket", "stamp_ns", "keyframe", "segment", "c2w", "pose_enc", "K",
          "K_model", "crop", "depth", "depth_conf", "rgb")  # all but latency_ms


def config(policy="all", **kw):
    kw.setdefault("num_scale_frames", 2)
    kw.setdefault("window", 3)
    kw.setdefault("rollover_keyframes", 7)
    return SessionConfig(preprocess=SIZE_42x56, keyframes=POLICIES[policy],
                         attention_backend="torch_ref", **kw)


def push_all(session, images, first):
    out = []
    for i, image in enumerate(images):
        out += session.push(image, STAMP0 + (first + i) * DT)
    return out


def assert_same(got, want):
    assert [r.index for r in got] == [r.index for r in want]
    for a, b in zip(got, want):
        for name in FIELDS:
            x, y = getattr(a, name), getattr(b, name)
            if isinstance(x, np.ndarray) or isinstance(y, np.ndarray):
                assert np.array_equal(x, y), (a.index, name)
            else:
                assert x == y, (a.index, name)


IMAGES = frames(N, seed=7)


def snapshot_points(reference, cfg):
    """Frames after which to save: during the scale phase, right after the window fills,
    right before the first rollover (the frame whose commit completes the segment is next)."""
    nsf = cfg.num_scale_frames
    points = {"scale_phase": 1, "window_full": nsf + cfg.window}
    changes = [r.index for r in reference[1:] if r.segment != reference[r.index - 1].segment]
    if changes:
        points["before_rollover"] = changes[0] - 1
    return points


@pytest.mark.parametrize("policy, bounded", [("all", False), ("every_n", False),
                                             ("flow", False), ("all", True)])
def test_a_restored_stream_continues_bit_identically(tmp_path, policy, bounded):
    cfg = config(policy, **({"max_special_frames": 3, "rollover_keyframes": None}
                            if bounded else {}))
    reference = push_all(StreamingSession(micro_model(), cfg), IMAGES, 0)
    assert len(reference) == N
    points = snapshot_points(reference, cfg)
    if not bounded:
        assert "before_rollover" in points  # the stream rolls over within N frames
    # One stream, saved at each point (saving changes nothing: it stays the reference's).
    saver, got, saved = StreamingSession(micro_model(), cfg), [], {}
    for k in range(N):
        for name, at in points.items():
            if at == k:
                saved[name] = saver.snapshots.save(tmp_path / name)[0]
        got += saver.push(IMAGES[k], STAMP0 + k * DT)
    assert_same(got, reference)
    for name, at in points.items():
        fresh = StreamingSession(micro_model(), cfg)  # a new session object
        manifest = fresh.snapshots.restore(saved[name])
        assert manifest["extra"] == {} and fresh.info().frames_in == at
        before = [r for r in reference if r.index < at and at >= cfg.num_scale_frames]
        assert manifest["frames_processed"] == len(before)
        assert_same(push_all(fresh, IMAGES[at:], at), reference[len(before):])


def test_a_snapshot_continues_in_another_process(tmp_path):
    cfg = config("every_n")
    reference = push_all(StreamingSession(micro_model(), cfg), IMAGES, 0)
    k = 6
    saver = StreamingSession(micro_model(), cfg)
    head = push_all(saver, IMAGES[:k], 0)
    saver.snapshots.save(tmp_path / "snap")
    np.save(tmp_path / "images.npy", np.stack(IMAGES[k:]))
    script = f"""
import numpy as np
from tests.session.test_snapshot import config, push_all
from tests.session.micro_model import micro_model
from lingbot_ros.session import StreamingSession
s = StreamingSession(micro_model(), config("every_n"))
s.snapshots.restore({str(tmp_path / 'snap')!r})
images = list(np.load({str(tmp_path / 'images.npy')!r}))
out = push_all(s, images, {k})
np.savez({str(tmp_path / 'out.npz')!r}, c2w=np.stack([r.c2w for r in out]),
         pose_enc=np.stack([r.pose_enc for r in out]), K=np.stack([r.K for r in out]),
         depth=np.stack([r.depth for r in out]), index=np.array([r.index for r in out]),
         keyframe=np.array([r.keyframe for r in out]), ticket=np.array([r.ticket for r in out]))
"""
    root = Path(__file__).resolve().parents[2]
    env = dict(os.environ, PYTHONPATH=str(root))
    subprocess.run([sys.executable, "-c", script], check=True, cwd=root, env=env, timeout=600)
    out = np.load(tmp_path / "out.npz", allow_pickle=False)
    tail = reference[len(head):]
    for name in ("c2w", "pose_enc", "K", "depth"):
        assert np.array_equal(out[name], np.stack([getattr(r, name) for r in tail])), name
    assert out["index"].tolist() == [r.index for r in tail]
    assert out["ticket"].tolist() == [r.ticket for r in tail]
    assert out["keyframe"].tolist() == [r.keyframe for r in tail]


def _edit_manifest(path, edit):
    """Edit the manifest and reseal its marker (the checks after the checksum's)."""
    manifest = json.loads((path / "manifest.json").read_text())
    edit(manifest)
    reseal(path, json.dumps(manifest).encode())


def _edit_digit(path):  # one digit edited, the marker left as it was: corrupted
    text = (path / "manifest.json").read_text()
    i = text.index('"frames_processed": ') + len('"frames_processed": ')
    (path / "manifest.json").write_text(text[:i] + str((int(text[i]) + 1) % 10) + text[i + 1:])


def _flip_byte(path):
    f = path / "kv_cache.safetensors"
    data = bytearray(f.read_bytes())
    data[-5] ^= 0x01
    f.write_bytes(bytes(data))


def _truncate(path):
    f = path / "stream.safetensors"
    f.write_bytes(f.read_bytes()[:-100])


def _other_version(m):
    m["version"] = 99


def _other_dtype(m):
    m["model"]["kv_dtype"] = "bfloat16"


def _fp8_mlps(m):  # saved by a model whose MLPs ran in FP8 (other keys and values)
    m["model"]["mlp_precision"] = "fp8"


REFUSALS = {  # name: (model seed, config changes, corruption of the snapshot, message)
    "checkpoint": (1, {}, None, "other weights"),
    "configuration": (0, {"window": 4}, None, "window: saved 4, here 3"),
    "input size": (0, {"preprocess": PreprocessConfig(width=56, height=28)}, None,
                   "input size differs"),
    "version": (0, {}, lambda p: _edit_manifest(p, _other_version), "version 99 is unknown"),
    "digest": (0, {}, _flip_byte, "SHA-256 digest mismatch"),
    "truncated": (0, {}, _truncate, "truncated"),
    "missing file": (0, {}, lambda p: (p / "kv_cache.safetensors").unlink(), "is missing"),
    "missing manifest": (0, {}, lambda p: (p / "manifest.json").unlink(),
                         "manifest.json is missing"),
    "truncated manifest": (0, {}, lambda p: reseal(p, b'{"form'), "not valid JSON"),
    "edited manifest": (0, {}, _edit_digit, "does not match the checksum .* corrupted"),
    "no marker": (0, {}, lambda p: (p / "lingbot_ros_snapshot").unlink(),
                  "no lingbot_ros_snapshot marker"),
    "dtype": (0, {}, lambda p: _edit_manifest(p, _other_dtype), "same precision"),
    "mlp precision": (0, {}, lambda p: _edit_manifest(p, _fp8_mlps),
                      "MLP precision is fp8 .* this model's is aggregator"),
}


def test_every_bad_snapshot_is_refused_and_the_stream_goes_on_untouched(tmp_path):
    cfg = config("flow")
    reference = push_all(StreamingSession(micro_model(), cfg), IMAGES, 0)
    k = 6
    saver = StreamingSession(micro_model(), cfg)
    push_all(saver, IMAGES[:k], 0)
    good = saver.snapshots.save(tmp_path / "good")[0]
    snaps = {}
    for name, (seed, changes, corrupt, _) in REFUSALS.items():
        path = tmp_path / name.replace(" ", "_")
        if seed or changes:  # a snapshot of another model or configuration
            other_cfg = dataclasses.replace(cfg, **changes)
            other = StreamingSession(micro_model(seed), other_cfg)
            push_all(other, IMAGES[:k], 0)
            other.snapshots.save(path)
        else:
            saver.snapshots.save(path)
            corrupt(path)
        snaps[name] = path
    # A live stream at frame 3 (another point than the snapshots'): every refusal leaves it.
    live = StreamingSession(micro_model(), cfg)
    head = push_all(live, IMAGES[:3], 0)
    for name, (_, _, _, message) in REFUSALS.items():
        with pytest.raises(SnapshotError, match=message):
            live.snapshots.restore(snaps[name])
    assert_same(head + push_all(live, IMAGES[3:], 3), reference)
    # ... and the good snapshot still restores after all that.
    fresh = StreamingSession(micro_model(), cfg)
    fresh.snapshots.restore(good)
    assert_same(push_all(fresh, IMAGES[k:], k), reference[k:])


def test_a_snapshot_is_refused_with_a_frame_in_flight(tmp_path):
    s = StreamingSession(micro_model(), config("all"))
    push_all(s, IMAGES[:3], 0)
    s.submit(IMAGES[3], STAMP0 + 3 * DT)
    with pytest.raises(SnapshotError, match="in flight"):
        s.snapshots.save(tmp_path / "snap")
    s.submit(IMAGES[4], STAMP0 + 4 * DT)
    assert not (tmp_path / "snap").exists()
    s.collect(wait=False)
    s.collect()
    path, nbytes = s.snapshots.save(tmp_path / "snap")
    assert nbytes == sum(f.stat().st_size for f in path.iterdir())


def test_the_manifest_describes_the_snapshot_and_a_save_replaces_only_a_snapshot(tmp_path):
    s = StreamingSession(micro_model(), config("every_n"))
    push_all(s, IMAGES[:6], 0)
    path, _ = s.snapshots.save(tmp_path / "snap", extra={"offline": {"next_frame": 6}})
    m = read_manifest(path)
    assert m["version"] == 2 and m["model"]["origin"].startswith("weights sha256:")
    assert m["input"]["model_hw"] == [42, 56] and m["model"]["kv_dtype"] == "float32"
    assert m["cache"]["page_size"] > 0 and m["cache"]["frames_committed"] > 0
    assert m["extra"] == {"offline": {"next_frame": 6}}
    assert set(m["files"]) == {"kv_cache.safetensors", "stream.safetensors"}
    assert all(len(f["sha256"]) == 64 for f in m["files"].values())
    # nothing in the folder can be unpickled: JSON and safetensors only
    assert sorted(p.name for p in path.iterdir()) == ["kv_cache.safetensors",
                                                     "lingbot_ros_snapshot", "manifest.json",
                                                     "stream.safetensors"]
    push_all(s, IMAGES[6:8], 6)
    s.snapshots.save(path)  # replaces the older snapshot
    assert read_manifest(path)["frames_processed"] == 8
    assert sorted(p.name for p in tmp_path.iterdir()) == ["snap"]  # no temporary left
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "keep").write_text("x")
    for target in ("file", "folder"):
        with pytest.raises(FileExistsError, match="not a snapshot"):
            s.snapshots.save(tmp_path / target)
    assert (tmp_path / "folder" / "keep").read_text() == "x"


def test_the_first_frame_after_a_restore_may_follow_any_gap(tmp_path):
    cfg = config("all", rollover_keyframes=None)  # max_gap_s: 10 s
    s = StreamingSession(micro_model(), cfg)
    push_all(s, IMAGES[:4], 0)
    s.snapshots.save(tmp_path / "snap")
    fresh = StreamingSession(micro_model(), cfg)
    fresh.snapshots.restore(tmp_path / "snap")
    later = STAMP0 + 3 * DT + 3600 * 10**9  # an hour of downtime
    assert fresh.push(IMAGES[4], later)[0].index == 4  # the stream goes on
    assert fresh.pop_events() == [] and fresh.info().restarts == 0
    fresh.push(IMAGES[5], later + 60 * 10**9)  # a gap after that restarts, as always
    assert [e.kind for e in fresh.pop_events()] == ["restart_stamp_gap"]

"""A snapshot folder on disk: recognised by our marker and digest (never by a file name),
read without following a link, blocking on a FIFO or reading before the size is checked,
replaced in one step; a save killed by SIGKILL leaves the old snapshot whole, and the next
save removes what it left."""
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from lingbot_ros.session import SnapshotError, StreamingSession, read_manifest
from lingbot_ros.session.snapshot_codec import read_snapshot
from lingbot_ros.session.snapshot_folder import exchange_supported, sweep_stale
from tests.session.micro_model import micro_model
from tests.session.test_snapshot import IMAGES, config, push_all

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def saver():
    s = StreamingSession(micro_model(), config("all"))
    push_all(s, IMAGES[:5], 0)
    return s


def _tree(path: Path) -> dict:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


def test_a_save_replaces_only_our_own_snapshot(tmp_path, saver):
    """A foreign folder holding a manifest.json (the probe's case), our snapshot with a file
    added, an edited snapshot and a symlink are never replaced; nothing, an empty folder and
    our own complete snapshot are."""
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "manifest.json").write_text('{"format": "something else"}')
    (foreign / "data.bin").write_bytes(b"precious")
    extra = saver.snapshots.save(tmp_path / "extra")[0]
    (extra / "notes.txt").write_text("mine")
    edited = saver.snapshots.save(tmp_path / "edited")[0]
    text = (edited / "manifest.json").read_text()
    (edited / "manifest.json").write_text(text.replace('"frames_processed": 5',
                                                       '"frames_processed": 6'))
    (tmp_path / "link").symlink_to(foreign)
    cases = {"foreign": "no lingbot_ros_snapshot marker",
             "extra": "also holds files not of the snapshot \\('notes.txt'\\)",
             "edited": "does not match the checksum", "link": "is a symlink"}
    before = {name: _tree(tmp_path / name) for name in ("foreign", "extra", "edited")}
    for name, reason in cases.items():
        with pytest.raises(FileExistsError, match=f"{reason}.*not replaced"):
            saver.snapshots.save(tmp_path / name)
    for name, tree in before.items():
        assert _tree(tmp_path / name) == tree, name
    assert (tmp_path / "link").is_symlink()
    (tmp_path / "empty").mkdir()
    for name in ("new", "empty", "new"):  # nothing, an empty folder, our own snapshot
        path, _ = saver.snapshots.save(tmp_path / name)
        assert read_manifest(path)["frames_processed"] == 5
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporary left


def _refused_within(path, seconds=10.0) -> str:
    """The SnapshotError reading ``path`` gives, within ``seconds`` (a freeze fails)."""
    box = {}

    def read():
        try:
            read_snapshot(path)
            box["error"] = None
        except BaseException as exc:  # noqa: BLE001 -- the test inspects it
            box["error"] = exc

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(seconds)
    if t.is_alive():  # frozen on a FIFO: unblock it, then fail
        for fifo in path.iterdir():
            if fifo.is_fifo():
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
        t.join(5)
        pytest.fail(f"reading {path} froze")
    error = box["error"]
    assert isinstance(error, SnapshotError), repr(error)
    return str(error)


def test_reading_a_hostile_snapshot_is_refused_with_the_reason(tmp_path, saver):
    """manifest.json as a folder, a FIFO or a symlink loop; a tensor file that is a symlink
    to a 2 GiB file, a FIFO or larger than the manifest says: each a SnapshotError naming
    the reason, at once, without reading the file or telling its size."""
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.truncate(2 << 30)  # sparse: 2 GiB, no disk used
    cases = {}

    def case(name, edit):
        path = saver.snapshots.save(tmp_path / name)[0]
        edit(path)
        cases[name] = path

    def swap(path, name, make):
        (path / name).unlink()
        make(path / name)

    case("manifest_folder", lambda p: swap(p, "manifest.json", lambda q: q.mkdir()))
    case("manifest_fifo", lambda p: swap(p, "manifest.json", os.mkfifo))
    case("manifest_loop", lambda p: swap(p, "manifest.json", lambda q: q.symlink_to(q)))
    case("tensor_link", lambda p: swap(p, "kv_cache.safetensors",
                                       lambda q: q.symlink_to(big)))
    case("tensor_fifo", lambda p: swap(p, "stream.safetensors", os.mkfifo))
    case("tensor_grown", lambda p: open(p / "kv_cache.safetensors", "ab").truncate(1 << 30))
    reasons = {"manifest_folder": "manifest.json is a folder, not a regular file",
               "manifest_fifo": "manifest.json is a FIFO, not a regular file",
               "manifest_loop": "manifest.json is a symlink, not a regular file",
               "tensor_link": "kv_cache.safetensors is a symlink, not a regular file",
               "tensor_fifo": "stream.safetensors is a FIFO, not a regular file",
               "tensor_grown": "kv_cache.safetensors is larger than the .* bytes allowed"}
    for name, path in cases.items():
        t0 = time.monotonic()
        message = _refused_within(path)
        assert time.monotonic() - t0 < 5, name
        assert __import__("re").search(reasons[name], message), (name, message)
        assert str(2 << 30) not in message and str((1 << 30)) not in message, message


def test_the_replace_is_one_exchange_here(tmp_path):
    """The atomic replace this machine gives (docs/session.md: the fallback elsewhere)."""
    assert exchange_supported(tmp_path)


_WRITER = """
import sys
import numpy as np
from lingbot_ros.session import StreamingSession
from tests.session.micro_model import micro_model
from tests.session.test_snapshot import IMAGES, config, push_all
s = StreamingSession(micro_model(), config("all"))
push_all(s, IMAGES[:7], 0)
print("ready", flush=True)
sys.stdin.readline()
big = np.random.default_rng(0).random(48 << 20).astype(np.float32)  # 192 MB to write
while True:
    s.snapshots.save(sys.argv[1], front_end_state={"big": big})
"""


def test_a_save_killed_midway_leaves_the_old_snapshot_and_the_next_save_cleans_up(
        tmp_path, saver):
    """A real process saving a large snapshot over ours is SIGKILLed once its temporary
    folder appears: the old snapshot is whole and loads; the next save removes the
    temporary (ours: our name and marker) and nothing else beside it."""
    target = saver.snapshots.save(tmp_path / "run.snap")[0]
    old = _tree(target)
    decoy = tmp_path / ".run.snap.0123456789ab.tmp"  # our name, not our marker: kept
    decoy.mkdir()
    (decoy / "keep").write_text("x")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(target)], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        deadline = time.monotonic() + 300
        temps = []
        while not temps:
            assert time.monotonic() < deadline, "no temporary folder appeared"
            assert proc.poll() is None, "the writer ended"
            temps = [p for p in tmp_path.glob(".run.snap.*.tmp")
                     if p != decoy and (p / "lingbot_ros_snapshot").exists()]
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(60)
    assert [p for p in tmp_path.glob(".run.snap.*") if p != decoy], "nothing left behind"
    manifest, _ = read_snapshot(target)  # the old snapshot, whole
    assert _tree(target) == old and manifest["frames_processed"] == 5
    fresh = StreamingSession(micro_model(), config("all"))
    fresh.snapshots.restore(target)
    push_all(saver, IMAGES[5:6], 5)
    saver.snapshots.save(target)  # the next save: the leftovers go, the decoy stays
    assert read_manifest(target)["frames_processed"] == 6
    assert sorted(p.name for p in tmp_path.iterdir()) == [decoy.name, "run.snap"]
    assert sweep_stale(target) == []


def test_an_unfinished_snapshot_is_refused(tmp_path, saver):
    """A folder whose marker says the save did not finish (a kill before the seal) reads as
    that, never as a snapshot."""
    path = saver.snapshots.save(tmp_path / "snap")[0]
    (path / "lingbot_ros_snapshot").write_text("lingbot_ros.stream_snapshot 2\nwriting\n")
    with pytest.raises(SnapshotError, match="unfinished snapshot"):
        read_manifest(path)

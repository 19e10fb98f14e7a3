"""lingbot-ros-offline as a user meets it when things go wrong: the real CLI in its own
process on a truncated bag (sqlite3 and mcap, cut as a killed recorder leaves them), an
``--out`` it cannot use, and Ctrl-C. Each ends on one line (no traceback) and its exit status
(docs/evaluation.md): 2 nothing run, 3 the input ended early, 130 interrupted."""
import json
import signal
import subprocess
import sys

import pytest

from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_bag, write_image_folder

FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--no-progress"]
CLI = [sys.executable, "-m", "lingbot_ros.tools.offline.cli"]


@pytest.fixture(scope="module")
def seq():
    return render_sequence(16, 80, 60)


def run_cli(*args, timeout=300):
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True,
                          timeout=timeout)


def errors(proc) -> list[str]:
    assert "Traceback" not in proc.stderr, proc.stderr
    return [line for line in proc.stderr.splitlines() if line.startswith("ERROR")]


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_a_truncated_bag_runs_the_frames_before_the_cut_and_exits_3(tmp_path, seq, storage):
    bag = write_bag(seq, tmp_path / "bag", storage=storage).path
    storage_file = next(p for p in bag.iterdir() if p.suffix in (".db3", ".mcap"))
    data = storage_file.read_bytes()
    storage_file.write_bytes(data[:len(data) * 6 // 10])  # a recorder killed mid-write
    out = tmp_path / "out"
    proc = run_cli(bag, "--out", out, *FAST)
    lines = errors(proc)
    assert proc.returncode == 3, proc.stderr
    assert len(lines) == 1 and "ended early" in lines[0] and "truncated" in lines[0], lines
    summary = json.loads((out / "summary.json").read_text())
    assert "truncated" in summary["input_ended_early"]
    # the frames before the cut were run, and their trajectory written
    assert 0 < summary["frames_read"] < len(seq)
    assert summary["frames_processed"] == summary["frames_read"]
    poses = [x for x in (out / "trajectory.tum").read_text().splitlines()
             if not x.startswith("#")]
    assert len(poses) == summary["frames_read"]


def test_a_bag_cut_before_any_message_is_one_error_line(tmp_path, seq):
    bag = write_bag(seq, tmp_path / "bag", storage="mcap").path
    storage_file = bag / "bag.mcap"
    storage_file.write_bytes(storage_file.read_bytes()[:30])
    proc = run_cli(bag, "--out", tmp_path / "out", *FAST)
    lines = errors(proc)
    assert proc.returncode == 2 and len(lines) == 1 and "cannot be read" in lines[0], lines
    assert not (tmp_path / "out").exists()


@pytest.fixture
def frames(tmp_path, seq):
    return write_image_folder(seq, tmp_path / "frames").path


def test_an_out_under_a_regular_file_is_refused_before_the_run(tmp_path, frames):
    (tmp_path / "a_file").write_text("x")
    proc = run_cli(frames, "--out", tmp_path / "a_file" / "run", *FAST)
    lines = errors(proc)
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "cannot be created" in lines[0] and "a_file is a regular file" in lines[0]
    assert "RANDOM weights" not in proc.stderr  # refused before the model was built


def test_an_out_that_is_a_file_is_refused(tmp_path, frames):
    (tmp_path / "a_file").write_text("x")
    proc = run_cli(frames, "--out", tmp_path / "a_file", *FAST)
    lines = errors(proc)
    assert proc.returncode == 2 and "is a regular file, not a folder" in lines[0], lines
    assert (tmp_path / "a_file").read_text() == "x"


def test_an_out_where_nothing_can_be_written_is_refused_for_root_too(tmp_path, frames):
    proc = run_cli(frames, "--out", "/proc/lingbot_ros_out", *FAST)
    lines = errors(proc)
    assert proc.returncode == 2 and len(lines) == 1 and "cannot write in /proc" in lines[0]


@pytest.mark.parametrize("name,flag", [("trajectory.tum", None), ("summary.json", None),
                                       ("points.ply", "--ply"), ("groundtruth.tum", None)])
def test_a_file_we_did_not_write_is_never_replaced(tmp_path, frames, name, flag):
    out = tmp_path / "out"
    out.mkdir()
    (out / name).write_text("somebody's notes\n")
    proc = run_cli(frames, "--out", out, *([flag] if flag else []), *FAST)
    lines = errors(proc)
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"{name}: it exists and was not written by lingbot_ros" in lines[0]
    assert (out / name).read_text() == "somebody's notes\n"
    assert sorted(p.name for p in out.iterdir()) == [name]  # found BEFORE the run


def test_a_symlink_or_fifo_output_is_refused(tmp_path, frames):
    import os
    out = tmp_path / "out"
    out.mkdir()
    os.symlink(tmp_path / "elsewhere.tum", out / "trajectory.tum")
    proc = run_cli(frames, "--out", out, *FAST)
    assert proc.returncode == 2
    assert "trajectory.tum: it exists and is a symlink" in errors(proc)[0]
    (out / "trajectory.tum").unlink()
    os.mkfifo(out / "summary.json")
    proc = run_cli(frames, "--out", out, *FAST, timeout=120)
    assert proc.returncode == 2 and "summary.json: it exists and is a FIFO" in errors(proc)[0]


def test_a_second_run_replaces_the_files_of_the_first(tmp_path, frames):
    out = tmp_path / "out"
    for _ in range(2):
        proc = run_cli(frames, "--out", out, "--ply", "--plot", *FAST)
        assert proc.returncode == 0, proc.stderr
    assert {"trajectory.tum", "summary.json", "points.ply", "trajectory.png"} <= \
        {p.name for p in out.iterdir()}


def test_ctrl_c_stops_on_one_line_saying_where_and_what_was_written(tmp_path):
    bag = write_bag(render_sequence(600, 80, 60), tmp_path / "long", storage="mcap",
                    depth_topic=None).path
    out, snap = tmp_path / "out", tmp_path / "snap"
    proc = subprocess.Popen(
        [*CLI, str(bag), "--out", str(out), *FAST, "--save-session", str(snap),
         "--snapshot-every", "2"], stderr=subprocess.PIPE, text=True,
        # as from a terminal: SIGINT not ignored even if this test runs in the background
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = []
    try:
        for line in proc.stderr:  # the run is in its frame loop once a snapshot is saved
            seen.append(line)
            if "snapshot after 2 input frames" in line:
                proc.send_signal(signal.SIGINT)
                break
        seen.append(proc.stderr.read())
        assert proc.wait(timeout=120) == 130, "".join(seen)
    finally:
        proc.kill()
        proc.stderr.close()
    text = "".join(seen)
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    lines = [x for x in text.splitlines() if x.startswith("ERROR")]
    assert len(lines) == 1, text
    assert "interrupted (SIGINT) at input frame" in lines[0] and "of 600" in lines[0]
    assert "nothing written in" in lines[0]
    assert f"--save-session {snap} holds the snapshot after input frame" in lines[0]
    assert not out.exists()  # nothing half-written, no stale folder


def test_an_output_that_cannot_be_written_after_the_run_says_which_were(tmp_path):
    """The check passed, then (the run stopped meanwhile) a folder took summary.json's name:
    one line, exit 2, naming what was written before it."""
    bag = write_bag(render_sequence(40, 80, 60), tmp_path / "bag", storage="mcap",
                    depth_topic=None).path
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [*CLI, str(bag), "--out", str(out), *FAST, "--save-session", str(tmp_path / "snap"),
         "--snapshot-every", "2"], stderr=subprocess.PIPE, text=True)
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "snapshot after 2 input frames" in line:
                proc.send_signal(signal.SIGSTOP)  # held in its frame loop
                (out / "summary.json").mkdir(parents=True)
                proc.send_signal(signal.SIGCONT)
                break
        seen.append(proc.stderr.read())
        assert proc.wait(timeout=300) == 2, "".join(seen)
    finally:
        proc.kill()
        proc.stderr.close()
    text = "".join(seen)
    lines = [x for x in text.splitlines() if x.startswith("ERROR")]
    assert "Traceback" not in text and len(lines) == 1, text
    assert "summary.json" in lines[0] and "not a regular file" in lines[0]
    assert "after input frame 40" in lines[0] and "trajectory.tum" in lines[0]
    assert (out / "trajectory.tum").is_file() and (out / "summary.json").is_dir()

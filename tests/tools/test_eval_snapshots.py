"""lingbot-ros-eval never continues a stream or reports results of another recording: unit
snapshots are keyed by the fingerprint of the input's first frames (not its folder name), a
fresh run drops the ones an earlier run left, and --resume resolves paths absolutely and
checks each input's fingerprint. Image folders take their stamps from --fps, so two
recordings of one length have the same stamps: only their pixels tell them apart."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_image_folder

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--rollover", "8",
        "--no-progress", "--fps", "30"]
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    """Two recordings named ``seq`` in two folders: same length and rate, other pixels."""
    root = tmp_path_factory.mktemp("recordings")
    return {name: write_image_folder(render_sequence(12, 80, 60, seed=seed),
                                     root / name / "seq").path
            for name, seed in (("a", 0), ("b", 5))}


def evaluate(*args, cwd=ROOT):
    proc = subprocess.run([sys.executable, "-m", "lingbot_ros.tools.eval.table",
                           *map(str, args)], env=ENV, cwd=cwd, capture_output=True, text=True,
                          timeout=300)
    return proc.returncode, proc.stdout + proc.stderr


def results(out: Path) -> list[dict]:
    return json.loads((out / "results.json").read_text())


def test_the_snapshot_key_is_the_input_not_its_name(recordings, tmp_path):
    """The fleet's keying function: the same folder name with other pixels is another key;
    the same recording copied elsewhere is the same key; an unreadable input has none."""
    import shutil

    from lingbot_ros.tools.eval.fleet import OutputTree, plan_units, run_settings
    from lingbot_ros.tools.eval.fleet import unit_snapshot_folder
    from lingbot_ros.tools.eval.table import parse_args
    settings = run_settings(parse_args([str(recordings["a"]), "--out", str(tmp_path), *FAST]))
    copy = tmp_path / "copy" / "seq"
    shutil.copytree(recordings["a"], copy)
    tree = OutputTree(tmp_path / "out")
    units = plan_units([recordings["a"], recordings["b"], copy, tmp_path / "none" / "seq"],
                       ["seq"] * 4, ["all"], 3)
    folders = [unit_snapshot_folder(u, tree, settings) for u in units]
    assert folders[0] != folders[1] and folders[0] == folders[2] and folders[3] is None
    assert all(f.name.startswith("seq__all.") for f in folders[:3])


def test_a_fresh_run_never_continues_a_stale_snapshot(recordings, tmp_path):
    """An earlier run on a/seq left its unit snapshot (6 frames in); a fresh run on b/seq (the
    same folder name, no --resume) starts at frame 0 and gives b's own trajectory."""
    from lingbot_ros.tools.eval.fleet import OutputTree, plan_units, run_settings
    from lingbot_ros.tools.eval.fleet import unit_snapshot_folder
    from lingbot_ros.tools.eval.table import parse_args
    from lingbot_ros.tools.offline.cli import main as offline_main
    out, clean = tmp_path / "eval", tmp_path / "clean"
    assert evaluate(recordings["b"], "--policies", "all", "--out", clean, *FAST)[0] == 0
    settings = run_settings(parse_args([str(recordings["a"]), "--out", str(out), *FAST]))
    unit = plan_units([recordings["a"]], ["seq"], ["all"], 3)[0]
    stale = [out / ".fleet" / "snapshots" / "seq__all",  # where it was keyed before
             unit_snapshot_folder(unit, OutputTree(out), settings)]
    for folder in stale:
        folder.parent.mkdir(parents=True, exist_ok=True)
        assert offline_main([str(recordings["a"]), "--out", str(tmp_path / "half"),
                             "--max-frames", "6", "--save-session", str(folder),
                             "--keyframes", "all", *FAST]) == 0
    rc, log = evaluate(recordings["b"], "--policies", "all", "--out", out, *FAST,
                       "--snapshot-every", "3")
    assert rc == 0, log
    summary = results(out)[0]["summary"]
    assert summary["snapshot"]["frames_skipped"] == 0 and summary["frames_read"] == 12, log
    assert (out / "seq" / "all" / "trajectory.tum").read_bytes() == \
        (clean / "seq" / "all" / "trajectory.tum").read_bytes()
    assert not any(folder.exists() for folder in stale)


def test_resume_from_another_directory_reruns_another_recording(recordings, tmp_path):
    """``lingbot-ros-eval seq --resume`` run from b/ after a run from a/ (a relative path,
    the same OUT): b's sequence is another recording, so its unit is rerun (it skipped every
    unit and reported a's results before); rerun from a/ it is skipped."""
    out = tmp_path / "eval"
    a_dir, b_dir = recordings["a"].parent, recordings["b"].parent
    rc, log = evaluate("seq", "--policies", "all", "--out", out, *FAST, cwd=a_dir)
    assert rc == 0, log
    a_traj = (out / "seq" / "all" / "trajectory.tum").read_bytes()
    rc, log = evaluate("seq", "--policies", "all", "--out", out, *FAST, "--resume", cwd=b_dir)
    assert rc == 0, log
    assert "resume: 0 of 1 units finished and intact, 1 to run" in log, log
    assert results(out)[0]["summary"]["input"] == str(recordings["b"])
    b_traj = (out / "seq" / "all" / "trajectory.tum").read_bytes()
    assert b_traj != a_traj
    rc, log = evaluate("seq", "--policies", "all", "--out", out, *FAST, "--resume", cwd=b_dir)
    assert "resume: 1 of 1 units finished and intact, 0 to run" in log, log

"""The pre-run --out check every tool shares (tools/out_folder.py), and the tools besides
lingbot-ros-offline that use it: lingbot-ros-eval, the benches and the offline demo, each run
as a real process. A refusal is one ERROR line, exit 2, before any work, and the files found
are left as they were."""
import json
import os
import subprocess
import sys

import pytest

from lingbot_ros.geometry import TUM_HEADER, write_ply, write_tum
from lingbot_ros.tools.offline.outputs import OFFLINE_FILES
from lingbot_ros.tools.out_folder import (OurFile, OutRefused, check_out_file,
                                          check_out_folder, check_our_folder,
                                          json_report_begins, write_json_report)
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_image_folder

TUM = OurFile("trajectory.tum", (TUM_HEADER + "\n").encode())
FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--no-progress"]


def test_an_absent_folder_below_a_writable_one_passes_and_nothing_is_created(tmp_path):
    assert check_out_folder(tmp_path / "a" / "b", [TUM]) == tmp_path / "a" / "b"
    assert list(tmp_path.iterdir()) == []


def test_files_we_wrote_pass_and_others_are_refused(tmp_path):
    import numpy as np
    write_tum(tmp_path / "trajectory.tum", [1], np.eye(4)[None])
    write_ply(tmp_path / "points.ply", np.zeros((1, 3)), np.zeros((1, 3), np.uint8))
    check_out_folder(tmp_path, [TUM, OFFLINE_FILES["points.ply"]])
    (tmp_path / "points.ply").write_bytes(b"ply\nformat ascii 1.0\n")  # someone else's PLY
    with pytest.raises(OutRefused, match="points.ply: it exists and was not written"):
        check_out_folder(tmp_path, [TUM, OFFLINE_FILES["points.ply"]])


def test_a_dangling_link_a_fifo_or_a_folder_in_the_way_is_refused(tmp_path):
    os.symlink(tmp_path / "nowhere", tmp_path / "trajectory.tum")
    with pytest.raises(OutRefused, match="trajectory.tum: it exists and is a symlink"):
        check_out_folder(tmp_path, [TUM])
    os.mkfifo(tmp_path / "summary.json")
    with pytest.raises(OutRefused, match="summary.json: it exists and is a FIFO"):  # no block
        check_out_folder(tmp_path, [OFFLINE_FILES["summary.json"]])
    (tmp_path / "points.ply").mkdir()
    with pytest.raises(OutRefused, match="points.ply: it exists and is a folder"):
        check_out_folder(tmp_path, [OFFLINE_FILES["points.ply"]])
    with pytest.raises(OutRefused, match="is a FIFO, not a folder"):
        check_out_folder(tmp_path / "summary.json", [])


def test_a_unit_folder_holding_a_file_we_did_not_write_is_refused(tmp_path):
    unit = tmp_path / "seq" / "all"
    unit.mkdir(parents=True)
    (unit / "notes.txt").write_text("mine")
    with pytest.raises(OutRefused, match="seq/all/notes.txt was not written"):
        check_our_folder(tmp_path, "seq/all", OFFLINE_FILES)
    (tmp_path / "x").write_text("a file")
    with pytest.raises(OutRefused, match="a folder above it is a file"):
        check_our_folder(tmp_path, "x/all", OFFLINE_FILES)


def test_a_json_report_replaces_only_a_report_of_its_tool(tmp_path):
    path = tmp_path / "bench.json"
    begins = json_report_begins("lingbot-ros-bench")
    check_out_file(path, begins)  # absent
    write_json_report(path, "lingbot-ros-bench", {"runs": []})
    check_out_file(path, begins)
    assert json.loads(path.read_text()) == {"written_by": "lingbot-ros-bench", "runs": []}
    with pytest.raises(OutRefused, match="was not written by lingbot_ros"):
        check_out_file(path, json_report_begins("lingbot-ros-bench-cache"))


def cli(module, *args, timeout=300):
    proc = subprocess.run([sys.executable, "-m", module, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.mark.parametrize("module", ["lingbot_ros.tools.bench.cli",
                                    "lingbot_ros.tools.bench.cache_cost"])
def test_a_bench_refuses_to_overwrite_a_file_it_did_not_write(tmp_path, module):
    target = tmp_path / "results.json"
    target.write_text('{"mine": 1}\n')
    proc = cli(module, "--out", target)
    assert proc.returncode == 2
    assert "results.json: it exists and was not written" in proc.stderr
    assert target.read_text() == '{"mine": 1}\n'
    proc = cli(module, "--out", tmp_path / "results.json" / "x.json")
    assert proc.returncode == 2 and "cannot be created" in proc.stderr


@pytest.fixture(scope="module")
def frames(tmp_path_factory):
    return write_image_folder(render_sequence(8, 80, 60),
                              tmp_path_factory.mktemp("seq") / "frames").path


def test_eval_refuses_a_table_or_a_unit_file_it_did_not_write(tmp_path, frames):
    out = tmp_path / "eval"
    args = ["lingbot_ros.tools.eval.table", frames, "--policies", "all", "--out", out, *FAST]
    assert cli(*args).returncode == 0  # a fresh folder
    assert cli(*args).returncode == 0  # its own files are replaced
    (out / "frames" / "all" / "notes.txt").write_text("mine")
    proc = cli(*args)
    errors = [x for x in proc.stderr.splitlines() if x.startswith("ERROR")]
    assert proc.returncode == 2 and len(errors) == 1, proc.stderr
    assert "frames/all/notes.txt was not written by lingbot_ros" in errors[0]
    assert "RANDOM weights" not in proc.stderr  # before the model was built
    (out / "frames" / "all" / "notes.txt").unlink()
    (out / "table.md").write_text("my table\n")
    proc = cli(*args)
    assert proc.returncode == 2 and "table.md: it exists and was not written" in proc.stderr
    assert (out / "table.md").read_text() == "my table\n"
    proc = cli("lingbot_ros.tools.eval.table", frames, "--out", "/proc/eval_out", *FAST)
    assert proc.returncode == 2 and "cannot write in /proc" in proc.stderr


def test_the_demo_refuses_an_out_holding_its_bag_before_rendering(tmp_path):
    (tmp_path / "scene_bag").mkdir()
    proc = cli("lingbot_ros.tools.offline.demo", "--frames", "4", "--out", tmp_path)
    assert proc.returncode == 2 and "scene_bag exists" in proc.stderr
    assert "rendering" not in proc.stdout


def test_the_ros_demo_refuses_a_map_it_did_not_write_before_starting_anything(tmp_path):
    (tmp_path / "map.ply").write_text("my map\n")
    proc = cli("lingbot_ros.clients.demo", "--frames", "4", "--out", tmp_path)
    assert proc.returncode == 2 and "map.ply: it exists and was not written" in proc.stderr
    assert "rendering" not in proc.stdout and not (tmp_path / "scene_bag").exists()
    assert (tmp_path / "map.ply").read_text() == "my map\n"

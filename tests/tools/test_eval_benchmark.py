"""lingbot-ros-eval --benchmark lingbot-map: upstream's protocol on synthetic sequences laid
out as its datasets (TUM RGB-D, 7-Scenes, KITTI), tiny model with random weights: every
dataset found, configured as declared, run, and its row printed beside the published figure.
Never accuracy. And the --loop-closure columns, from a run folder holding a
trajectory_optimized.tum and a loops.json written here."""
import csv
import json
import logging
import shutil

import numpy as np
import pytest

from lingbot_ros.geometry import read_tum, write_tum
from lingbot_ros.tools.eval.benchmark import BENCHMARKS, auto_keyframes, plan_benchmark
from lingbot_ros.tools.eval.loop_columns import LOOP_COLUMNS, loop_summary
from lingbot_ros.tools.eval.table import main, row_of, table_columns
from lingbot_ros.tools.metrics.loops import parse_loops, read_loops
from lingbot_ros.tools.metrics.trajectory import evaluate
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_kitti, write_seven_scenes, write_tum_rgbd

FAST = ["--scale-frames", "2", "--window", "4", "--rollover", "8", "--no-progress"]


@pytest.fixture(scope="module")
def data_root(tmp_path_factory):
    """One sequence of each dataset, where the benchmark expects it: 9 frames each, the
    first 8 of them the anchors upstream's protocol starts on (7-Scenes: 41 frames, 9 after
    its stride of 5)."""
    root = tmp_path_factory.mktemp("bench_data")
    write_tum_rgbd(render_sequence(9, 80, 60, seed=1),
                   root / "tum_rgbd" / "rgbd_dataset_freiburg1_xyz")
    write_seven_scenes(render_sequence(41, 80, 60, seed=2),
                       root / "seven_scenes" / "chess" / "seq-03")
    write_kitti(render_sequence(9, 80, 60, seed=3), root / "kitti", "07")
    return root


def test_auto_keyframes_is_upstreams_interval():
    assert auto_keyframes(1) == ("all", 1) and auto_keyframes(320) == ("all", 1)
    assert auto_keyframes(321) == ("every_n", 2) and auto_keyframes(4541) == ("every_n", 15)


def test_the_declared_protocol():
    tum, seven, kitti = BENCHMARKS["lingbot-map"]
    assert (len(tum.sequences), len(seven.sequences), len(kitti.sequences)) == (9, 18, 11)
    assert (tum.width, tum.stride, seven.stride, kitti.width, kitti.height) == \
        (518, 1, 5, 504, 280)
    assert (tum.published_ate, seven.published_ate, kitti.published_ate) == \
        (0.045, 0.079, 24.046)


def test_every_dataset_is_found_configured_run_and_printed(data_root, tmp_path, capsys,
                                                           caplog):
    out = tmp_path / "eval"
    with caplog.at_level(logging.WARNING, "lingbot_ros.eval"):
        rc = main(["--benchmark", "lingbot-map", "--data-root", str(data_root),
                   "--out", str(out), *FAST])
    assert rc == 0
    rows = {r["sequence"]: r for r in csv.DictReader((out / "table.csv").open())}
    assert set(rows) == {"tum_rgbd_fr1_xyz", "seven_scenes_chess_seq-03",
                         "kitti_07"}
    summaries = {r["sequence"]: r["summary"] for r in
                 json.loads((out / "results.json").read_text())}
    declared = {"tum_rgbd_fr1_xyz": (518, None, 1, 9),
                "seven_scenes_chess_seq-03": (518, None, 5, 9),
                "kitti_07": (504, 280, 1, 9)}
    for name, summary in summaries.items():
        width, height, stride, frames = declared[name]
        s = summary["settings"]
        assert (s["width"], s["height"], s["stride"]) == (width, height, stride), name
        assert s["keyframes"]["policy"] == "all" and s["scale_frames"] == 8
        assert s["window"] == 64
        assert summary["frames_processed"] == frames == int(rows[name]["frames"])
        assert rows[name]["ate_sim3_rmse"] != ""  # evaluated against its ground truth
    assert summaries["kitti_07"]["settings"]["input_size_hw"] == [280, 504]
    bench = (out / "benchmark.md").read_text()
    assert bench in capsys.readouterr().out
    lines = {line.split(" | ")[0].lstrip("| "): line for line in bench.splitlines()}
    assert "| 1/9 | 518 | 1 |" in lines["TUM RGB-D"] and "| 0.045 |" in lines["TUM RGB-D"]
    assert "| 1/18 | 518 | 5 |" in lines["7-Scenes"] and "| 0.079 |" in lines["7-Scenes"]
    assert "| 1/11 | 504x280 | 1 |" in lines["KITTI (504x280)"]
    assert "| 24.046 |" in lines["KITTI (504x280)"] and "loops" not in bench
    ate = float(rows["kitti_07"]["ate_sim3_rmse"])
    assert f"| {ate:.3f} |" in lines["KITTI (504x280)"]
    missing = [r.message for r in caplog.records if "missing under" in r.message]
    assert len(missing) == 3 and "rgbd_dataset_freiburg1_desk" in missing[0]
    assert "expected layout: ROOT/kitti/sequences/NN/" in missing[2]


def test_missing_datasets_are_named_and_the_others_run(data_root, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(data_root / "tum_rgbd", root / "tum_rgbd")
    planned, missing = plan_benchmark("lingbot-map", root, {})
    assert [p.name for p in planned] == ["tum_rgbd_fr1_xyz"]
    assert missing[1].startswith("7-Scenes: 18 of 18 sequences missing under")
    assert missing[1].endswith("the dataset is left out") and "seq-NN" in missing[1]
    assert missing[2].startswith("KITTI (504x280): 11 of 11") and "poses/NN.txt" in missing[2]
    assert main(["--benchmark", "lingbot-map", "--data-root", str(tmp_path / "none"),
                 "--out", str(tmp_path / "o")]) == 2


def test_sequences_and_a_benchmark_are_exclusive(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([str(tmp_path), "--benchmark", "lingbot-map", "--data-root", str(tmp_path)])
    with pytest.raises(SystemExit):
        main(["--benchmark", "lingbot-map"])
    assert "--data-root" in capsys.readouterr().err


# --- loop closure -----------------------------------------------------------------------------

def _loops(accepted=2, **change):
    loop = {"stamp_ns": 5, "keyframe_id": 9, "matched_id": 1, "matched_stamp_ns": 1,
            "jump_m": 0.2, "jump_deg": 1.5, "residual_m": 0.01, "residual_deg": 0.1,
            "inlier_fraction": 0.8, "relative_scale": 1.01}
    data = {"schema": 1, "loops": [dict(loop, stamp_ns=5 + i) for i in range(accepted)],
            "counts": {"keyframes": 12, "kept": 8, "candidates": 5, "verified": 3,
                       "accepted": accepted, "rejected": {"inliers": 1, "jump": 2}}}
    data.update(change)
    return data


def test_loops_json_is_read_and_checked(tmp_path):
    report = parse_loops(_loops())
    assert report.accepted == 2 and report.loops[1].stamp_ns == 6
    assert report.rejected == (("inliers", 1), ("jump", 2)) and report.rejected_total == 3
    bad = [(_loops(schema=2), "schema 2"),
           (_loops(counts=dict(_loops()["counts"], accepted=3)), "3 but 2 loops"),
           (_loops(counts=dict(_loops()["counts"], verified=-1)), "counts.verified must"),
           (dict(_loops(), loops=[{"stamp_ns": 1}]), "loops[0] lacks keyframe_id"),
           (dict(_loops(), loops=[dict(_loops()["loops"][0], jump_m="x")]),
            "loops[0].jump_m must be a finite number"),
           (dict(_loops(), loops=[dict(_loops()["loops"][0], keyframe_id=1.5)]),
            "loops[0].keyframe_id must be an integer"),
           ({"loops": []}, "lacks schema, counts")]
    for data, message in bad:
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            parse_loops(data, "run/loops.json")
    path = tmp_path / "loops.json"
    with pytest.raises(FileNotFoundError, match="--loop-closure"):
        read_loops(path)
    path.write_text("{not json")
    with pytest.raises(ValueError, match="loops.json: not JSON"):
        read_loops(path)


@pytest.fixture(scope="module")
def run_folder(data_root, tmp_path_factory):
    """A real front-end run of the TUM sequence (its trajectory.tum, groundtruth.tum,
    summary.json), through lingbot-ros-eval."""
    out = tmp_path_factory.mktemp("lc") / "eval"
    seq = data_root / "tum_rgbd" / "rgbd_dataset_freiburg1_xyz"
    assert main([str(seq), "--policies", "all", "--width", "56", "--out", str(out),
                 *FAST]) == 0
    return out / "rgbd_dataset_freiburg1_xyz" / "all"


def test_the_loop_columns_come_from_the_run_folders_files(run_folder, tmp_path):
    folder = tmp_path / "unit"
    shutil.copytree(run_folder, folder)
    summary = json.loads((folder / "summary.json").read_text())
    stamps, poses = read_tum(folder / "trajectory.tum")
    # the back end's output, written here: the front end's poses, the last three moved
    moved = poses.copy()
    moved[-3:, :3, 3] += np.array([0.01, -0.02, 0.03])
    write_tum(folder / "trajectory_optimized.tum", stamps, moved, frame="test")
    (folder / "loops.json").write_text(json.dumps(_loops(), indent=2))
    lc = loop_summary(folder, summary)
    assert lc["error"] is None and lc["loops_accepted"] == 2
    assert lc["loops"]["rejected"] == {"inliers": 1, "jump": 2}
    expected = evaluate(*read_tum(folder / "trajectory_optimized.tum"),
                        *read_tum(folder / "groundtruth.tum"))
    assert lc["evaluation"]["ate_sim3"]["rmse"] == expected["ate_sim3"]["rmse"]
    row = row_of("seq", "all", dict(summary, loop_closure=lc))
    assert row["opt_ate_sim3_rmse"] == expected["ate_sim3"]["rmse"]
    assert row["opt_rpe_1f_trans_rmse"] == expected["rpe_1_frame"]["trans_rmse"]
    assert row["loops_accepted"] == 2
    assert row["ate_sim3_rmse"] == summary["evaluation"]["ate_sim3"]["rmse"]  # front end
    # the optimised trajectory equal to the front end's: the same numbers
    write_tum(folder / "trajectory_optimized.tum", stamps, poses, frame="test")
    same = row_of("seq", "all", dict(summary, loop_closure=loop_summary(folder, summary)))
    assert same["opt_ate_sim3_rmse"] == same["ate_sim3_rmse"]
    keys = [k for k, _ in table_columns(True)]
    assert keys[keys.index("drift_pct") + 1:keys.index("worker")] == \
        [k for k, _ in LOOP_COLUMNS]
    # a broken loops.json is the row's note, not a crash
    (folder / "loops.json").write_text(json.dumps(_loops(schema=7)))
    broken = row_of("seq", "all", dict(summary, loop_closure=loop_summary(folder, summary)))
    assert "loop closure" in broken["error"] and "schema 7" in broken["error"]
    assert broken.get("opt_ate_sim3_rmse") is None
    (folder / "trajectory_optimized.tum").unlink()
    (folder / "loops.json").write_text(json.dumps(_loops()))
    assert "trajectory_optimized.tum: missing" in loop_summary(folder, summary)["error"]

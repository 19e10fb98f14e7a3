"""lingbot-ros-eval: sequences x policies in one call, one Markdown/CSV table whose numbers
are those of each run's summary (the same evaluation as lingbot-ros-offline)."""
import csv
import json

import pytest

from lingbot_ros.tools.eval.table import main, sequence_names
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_tum_rgbd

FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--rollover", "8",
        "--no-progress"]


@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
    root = tmp_path_factory.mktemp("seqs")
    return [write_tum_rgbd(render_sequence(12, 80, 60, seed=seed), root / f"room{seed}").path
            for seed in (0, 1)]


def test_two_sequences_three_policies_one_table(tmp_path, sequences, capsys):
    out = tmp_path / "eval"
    assert main([*map(str, sequences), "--policies", "all,every_n,flow", "--out", str(out),
                 *FAST]) == 0
    rows = list(csv.DictReader((out / "table.csv").open()))
    assert [(r["sequence"], r["policy"]) for r in rows] == [
        (s, p) for s in ("room0", "room1") for p in ("all", "every_n", "flow")]
    results = json.loads((out / "results.json").read_text())
    for row, result in zip(rows, results):
        summary = result["summary"]
        ev = summary["evaluation"]
        assert summary["settings"]["keyframes"]["policy"] == row["policy"]
        assert int(row["frames"]) == summary["frames_processed"] == 12
        assert int(row["keyframes"]) == summary["keyframes"]
        assert float(row["ate_sim3_rmse"]) == pytest.approx(ev["ate_sim3"]["rmse"])
        assert float(row["rpe_1f_trans_rmse"]) == pytest.approx(ev["rpe_1_frame"]["trans_rmse"])
        assert int(row["associated"]) == 12
        assert (out / row["sequence"] / row["policy"] / "trajectory.tum").is_file()
    # every_n keeps half the frames as keyframes; all keeps every one.
    by = {(r["sequence"], r["policy"]): int(r["keyframes"]) for r in rows}
    assert by[("room0", "all")] == 12 and by[("room0", "every_n")] < 12
    table = (out / "table.md").read_text()
    assert table.count("\n") == 2 + 6 and "ATE Sim(3) RMSE" in table
    assert table in capsys.readouterr().out


def test_a_failing_sequence_is_a_row_with_its_error_and_exit_1(tmp_path, sequences):
    out = tmp_path / "eval"
    missing = tmp_path / "no_such_sequence"
    assert main([str(sequences[0]), str(missing), "--policies", "all", "--out", str(out),
                 *FAST]) == 1
    rows = list(csv.DictReader((out / "table.csv").open()))
    assert rows[0]["ate_sim3_rmse"] and "does not exist" not in rows[0]["error"]
    assert "1.0 (m)" in rows[0]["error"]  # the only note: a 12-frame path is under 1 m
    assert "does not exist" in rows[1]["error"] and rows[1]["ate_sim3_rmse"] == ""


def test_bad_policies_are_refused_before_anything_runs(tmp_path, sequences, capsys):
    with pytest.raises(SystemExit):
        main([str(sequences[0]), "--policies", "all,sometimes", "--out", str(tmp_path)])
    assert "sometimes" in capsys.readouterr().err
    assert not (tmp_path / "table.md").exists()


def test_sequence_names_are_unique_folder_names(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "b" / "a").mkdir()
    clip = tmp_path / "clip.mp4"
    clip.write_bytes(b"")
    assert sequence_names([tmp_path / "a", tmp_path / "b" / "a", clip]) == ["a", "a_2", "clip"]


def test_with_a_scale_the_table_has_the_se3_ate_in_metres(tmp_path, sequences):
    from lingbot_ros.tools.eval.fleet import run_settings, settings_digest
    from lingbot_ros.tools.eval.table import parse_args
    out = tmp_path / "eval"
    assert main([str(sequences[0]), "--policies", "all", "--out", str(out), "--scale",
                 "fixed:0.5", *FAST]) == 0
    row, = list(csv.DictReader((out / "table.csv").open()))
    summary = json.loads((out / "results.json").read_text())[0]["summary"]
    ev = summary["evaluation"]
    assert ev["estimate_units"] == "m" and summary["scale"]["metres_per_unit"] == 0.5
    assert float(row["ate_se3_metres_rmse"]) == pytest.approx(ev["ate_se3_metres"]["rmse"])
    assert float(row["metres_per_unit"]) == 0.5
    assert "ATE SE(3) metres RMSE" in (out / "table.md").read_text()
    # the scale is part of a work unit's configuration (and of the resume digest)
    plain = run_settings(parse_args([str(sequences[0])]))
    scaled = run_settings(parse_args([str(sequences[0]), "--scale", "fixed:0.5"]))
    assert scaled["scale"] == "fixed:0.5" and plain["scale"] == "none"
    assert settings_digest(plain) != settings_digest(scaled)


def test_a_unit_whose_input_ended_early_says_so_in_its_note():
    from lingbot_ros.tools.eval.table import row_of
    row = row_of("rec", "all", {"input_ended_early": "bag rec is truncated (rec_0.mcap: the "
                                "MCAP file ends inside a record)", "frames_processed": 9})
    assert row["error"].startswith("input ended early: bag rec is truncated")
    assert row["error"].endswith("; no ground truth") and row["frames"] == 9
    assert row_of("rec", "all", {})["error"] == "no ground truth"

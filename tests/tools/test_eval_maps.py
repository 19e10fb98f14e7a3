"""lingbot-ros-eval --loop-closure --save-maps: every unit writes its run's place map into
its own folder (``place_map/``), the manifest holds its files' digests (--resume keeps an
intact map, redoes a unit whose map was altered or removed), and a unit folder's
``place_map`` that is not a place map of ours is refused before anything runs."""
import json
import shutil

import pytest

from lingbot_ros.loop.place_map import read_place_map
from lingbot_ros.tools.eval.fleet import run_settings, unit_run
from lingbot_ros.tools.eval.loop_columns import unit_files
from lingbot_ros.tools.eval.table import main, parse_args
from lingbot_ros.tools.out_folder import OutRefused, check_our_folder
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_tum_rgbd

FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--rollover", "8",
        "--no-progress"]


@pytest.fixture(scope="module")
def sequence(tmp_path_factory):
    root = tmp_path_factory.mktemp("seqs")
    return write_tum_rgbd(render_sequence(12, 80, 60, seed=0), root / "room0").path


def map_ids(out) -> dict:
    return {p: read_place_map(out / "room0" / p / "place_map").map_id
            for p in ("all", "every_n")}


def test_every_unit_writes_its_map_and_resume_checks_it(tmp_path, sequence, caplog):
    out = tmp_path / "eval"
    args = [str(sequence), "--policies", "all,every_n", "--out", str(out), "--loop-closure",
            "--save-maps", *FAST]
    assert main(args) == 0
    manifest = json.loads((out / "manifest.json").read_text())["units"]
    for result in json.loads((out / "results.json").read_text()):
        folder = out / "room0" / result["policy"]
        place = read_place_map(folder / "place_map")  # every file's digest checked
        assert len(place) >= 1 and place.units == "model"
        assert result["summary"]["outputs"]["place_map"] == str(folder / "place_map")
        files = manifest[f"room0/{result['policy']}"]["files"]
        assert {"place_map/poses.npy", "place_map/manifest.json",
                "place_map/lingbot_ros_place_map"} <= set(files)
    assert not list((out / ".fleet").glob("staging/*"))  # nothing left in staging
    first = map_ids(out)
    assert first["all"] != first["every_n"]  # each unit its own map

    caplog.clear()
    assert main([*args, "--resume"]) == 0
    assert "resume: 2 of 2 units finished and intact, 0 to run" in caplog.text
    assert map_ids(out) == first  # kept, not rewritten

    poses = out / "room0" / "every_n" / "place_map" / "poses.npy"
    blob = bytearray(poses.read_bytes())
    blob[-1] ^= 0x01  # one flipped bit in the last pose
    poses.write_bytes(bytes(blob))
    caplog.clear()
    assert main([*args, "--resume"]) == 0
    assert "resume: 1 of 2 units finished and intact, 1 to run" in caplog.text
    again = map_ids(out)  # read_place_map: the redone map is whole again
    assert again["all"] == first["all"] and again["every_n"] != first["every_n"]

    shutil.rmtree(out / "room0" / "all" / "place_map")
    caplog.clear()
    assert main([*args, "--resume"]) == 0
    assert "resume: 1 of 2 units finished and intact, 1 to run" in caplog.text
    assert map_ids(out)["every_n"] == again["every_n"]


def test_a_foreign_place_map_in_a_unit_folder_is_refused_before_the_run(tmp_path, sequence,
                                                                        caplog):
    out = tmp_path / "eval"
    foreign = out / "room0" / "all" / "place_map"
    foreign.mkdir(parents=True)
    (foreign / "notes.txt").write_text("not ours")
    args = [str(sequence), "--policies", "all", "--out", str(out), "--loop-closure",
            "--save-maps", *FAST]
    assert main(args) == 2
    assert "room0/all/place_map" in caplog.text and "not a place-map folder" in caplog.text
    assert (foreign / "notes.txt").read_text() == "not ours"
    assert not (out / "table.md").exists() and not (out / "manifest.json").exists()
    shutil.rmtree(foreign)
    foreign.write_bytes(b"a file named place_map")
    caplog.clear()
    assert main(args) == 2
    assert "place_map is a regular file, not a folder" in caplog.text


def test_a_unit_folder_may_hold_an_empty_place_map_folder_and_nothing_foreign(tmp_path):
    unit = tmp_path / "seq" / "all"
    (unit / "place_map").mkdir(parents=True)
    check_our_folder(tmp_path, "seq/all", unit_files())  # an empty folder: accepted
    (unit / "other").mkdir()
    with pytest.raises(OutRefused, match="seq/all/other was not written by lingbot_ros"):
        check_our_folder(tmp_path, "seq/all", unit_files())
    (unit / "other").rmdir()
    (unit / "place_map").rmdir()
    (unit / "place_map").symlink_to(tmp_path)
    with pytest.raises(OutRefused, match="place_map is a symlink, not a folder"):
        check_our_folder(tmp_path, "seq/all", unit_files())


def test_save_maps_is_each_units_own_path_never_a_shared_setting(tmp_path, sequence,
                                                                  capsys):
    settings = run_settings(parse_args([str(sequence), "--loop-closure", "--save-maps"]))
    assert settings["save_maps"] is True and "save_map" not in settings
    run = unit_run(settings, "all", input=str(sequence), out=str(tmp_path / "staging"))
    assert run.save_map == str(tmp_path / "staging" / "place_map")
    assert unit_run(settings).save_map is None  # the model's run: no unit folder
    plain = run_settings(parse_args([str(sequence), "--loop-closure"]))
    assert unit_run(plain, "all", input=str(sequence), out="o").save_map is None
    with pytest.raises(SystemExit):
        main([str(sequence), "--save-maps", "--out", str(tmp_path / "eval")])
    assert "--save-maps needs --loop-closure" in capsys.readouterr().err
    assert not (tmp_path / "eval").exists()

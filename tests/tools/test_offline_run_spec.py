"""offline.run takes a typed run description (OfflineRun) that the command line and the fleet
both build, and raises typed errors that the fleet tells apart by type, never by message."""
import dataclasses

import pytest

from lingbot_ros.tools.eval.fleet import (OutputTree, execute_unit, plan_units, run_settings,
                                          unit_run, unit_snapshot_folder)
from lingbot_ros.tools.eval.table import parse_args as eval_args
from lingbot_ros.tools.offline.cli import load_model, main, parse_args, run
from lingbot_ros.tools.offline.run_spec import (BadRunOptions, CannotResume, OfflineRun,
                                                OfflineRunError)
from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_bag

FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--rollover", "8"]


@pytest.fixture(scope="module")
def bag(tmp_path_factory):
    return write_bag(render_sequence(10, 80, 60), tmp_path_factory.mktemp("bag") / "bag").path


def test_the_command_line_and_the_fleet_build_the_same_run(tmp_path, bag):
    out = str(tmp_path / "out")
    cli = OfflineRun.from_namespace(parse_args([str(bag), "--out", out, "--keyframes",
                                                "every_n", "--no-progress", "--scale-param",
                                                "min_samples=3", *FAST]))
    settings = run_settings(eval_args([str(bag), "--policies", "every_n", "--scale-param",
                                       "min_samples=3", *FAST]))
    fleet = unit_run(settings, "every_n", input=str(bag), out=out)
    assert fleet == cli
    assert cli.scale_param == ("min_samples=3",)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cli.window = 5  # type: ignore[misc]


def test_a_run_description_names_every_field_and_no_other(bag):
    settings = run_settings(eval_args([str(bag), *FAST]))
    with pytest.raises(TypeError, match="bogus"):
        OfflineRun.from_settings(dict(settings, bogus=1), input=str(bag))
    del settings["window"]
    with pytest.raises(TypeError, match="window"):
        OfflineRun.from_settings(settings, input=str(bag))


def test_run_takes_an_offline_run_not_an_argparse_namespace(tmp_path, bag):
    with pytest.raises(TypeError, match="OfflineRun"):
        run(parse_args([str(bag), "--out", str(tmp_path / "o"), *FAST]))


def test_run_raises_typed_errors(tmp_path, bag):
    snap = tmp_path / "snap"
    assert main([str(bag), "--out", str(tmp_path / "a"), "--max-frames", "4", "--no-progress",
                 "--save-session", str(snap), *FAST]) == 0
    other = [a if a != "4" else "5" for a in FAST]  # --window 5
    with pytest.raises(CannotResume, match="window: saved 4, here 5") as caught:
        run(OfflineRun.from_namespace(parse_args([str(bag), "--out", str(tmp_path / "b"),
                                                  "--no-progress", "--resume", str(snap),
                                                  *other])))
    assert isinstance(caught.value, OfflineRunError) and isinstance(caught.value, ValueError)
    with pytest.raises(BadRunOptions, match="needs --save-session"):
        run(OfflineRun.from_namespace(parse_args([str(bag), "--out", str(tmp_path / "c"),
                                                  "--no-progress", "--snapshot-every", "2",
                                                  *FAST])))


def test_a_fleet_unit_drops_a_snapshot_it_cannot_resume(tmp_path, bag):
    """A unit whose snapshot cannot continue it (made with other settings) fails with
    CannotResume and drops the snapshot, so that its retry starts over."""
    args = eval_args([str(bag), "--policies", "every_n", "--out", str(tmp_path / "eval"),
                      *FAST, "--snapshot-every", "2"])
    settings = run_settings(args)
    unit = plan_units([str(bag)], ["bag"], ["every_n"], args.snapshot_every)[0]
    tree = OutputTree(tmp_path / "eval")
    folder = unit_snapshot_folder(unit, tree, settings)
    folder.parent.mkdir(parents=True)
    other = [a if a != "4" else "5" for a in FAST]  # a snapshot of --window 5
    assert main([str(bag), "--out", str(tmp_path / "half"), "--max-frames", "4",
                 "--no-progress", "--save-session", str(folder), *other]) == 0
    result = execute_unit(unit, settings, load_model(unit_run(settings)), tree, "local")
    assert result.status == "error"
    assert result.error.startswith("CannotResume: --resume"), result.error
    assert not folder.exists()


def test_the_back_ends_options_reach_every_unit(bag):
    settings = run_settings(eval_args([str(bag), "--loop-closure", "--loop-param", "top_k=1",
                                       "--loop-param", "min_age_s=3", "--localize-in",
                                       "/maps/office", *FAST]))
    unit = unit_run(settings, "all", input=str(bag), out="o")
    assert unit.loop_closure is True
    assert unit.loop_param == ("top_k=1", "min_age_s=3")
    assert unit.localize_in == "/maps/office" and unit.save_map is None
    assert "reoptimize" not in settings  # the offline CLI's other mode, not a unit setting

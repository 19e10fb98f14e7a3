"""python -m lingbot_ros.tools.bench.place_map_cost: a stored place map's costs, as JSON (a
small run: the keys and their plumbing; the figures themselves are docs/loop.md's)."""
import json

import pytest

from lingbot_ros.tools.bench.place_map_cost import main, run_place_map_bench


def test_the_place_map_bench_reports_its_figures(tmp_path):
    r = run_place_map_bench(keyframes=5, model_hw=(28, 42), repeats=2, offers=2,
                            feature_dim=32, folder=tmp_path)
    assert {"write_ms", "read_ms", "to_metres_ms", "database_from_ms", "bytes_on_disk",
            "offer_ms", "offer_prior_ms", "machine"} <= r.keys()
    assert set(r["read_ms"]) == {"median", "p90"} and r["read_ms"]["median"] > 0
    assert r["bytes_on_disk"] > 5 * 14 * 21 * 3  # the compact images at least
    assert list(tmp_path.iterdir()) == []  # its temporary folder removed
    json.dumps(r)


def test_the_place_map_bench_cli_prints_json_and_refuses_bad_counts(capsys, tmp_path):
    assert main(["--keyframes", "3", "--repeats", "1", "--offers", "1", "--height", "28",
                 "--width", "42", "--feature-dim", "16", "--folder", str(tmp_path),
                 "--all-cores"]) == 0
    assert json.loads(capsys.readouterr().out)["keyframes"] == 3
    with pytest.raises(SystemExit):
        main(["--keyframes", "0", "--all-cores"])

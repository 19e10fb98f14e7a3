"""python -m lingbot_ros.tools.bench.loop.verify_cost: a candidate's verification cost, as JSON."""
import json

from lingbot_ros.tools.bench.loop.verify_cost import main


def test_the_bench_prints_medians_of_the_pair_and_the_gates(capsys):
    assert main(["--width", "56", "--height", "42", "--repeats", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["bench"] == "verify_cost" and out["model_hw"] == [42, 56]
    for key in ("pair_ms", "verify_ms"):
        assert 0 < out[key]["median"] <= out[key]["p90"]

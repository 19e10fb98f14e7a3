"""python -m lingbot_ros.tools.bench.loop.retrieval_cost: the keyframe database's costs, as JSON
(a small run: the keys and their plumbing; the figures themselves are docs/loop.md's)."""
import json

import pytest

from lingbot_ros.tools.bench.loop.retrieval_cost import GOAL_MS, main, run_retrieval_bench


def test_the_retrieval_bench_reports_its_figures():
    r = run_retrieval_bench(keyframes=300, queries=5, memory_keyframes=4, model_hw=(28, 42),
                            feature_dim=64)
    assert {"keyframes", "query_ms", "goal_ms", "goal_met", "float32_matvec_ms", "add_us",
            "add_ms_model_res", "descriptor_ms", "bytes_per_1000_keyframes",
            "machine"} <= r.keys()
    assert r["keyframes"] == 300 and r["goal_ms"] == GOAL_MS
    assert r["candidates_returned"] == 5 * r["top_k"]
    assert set(r["query_ms"]) == {"median", "p90"} and r["query_ms"]["median"] > 0
    b = r["bytes_per_1000_keyframes"]
    assert b["image"] == 1000 * 14 * 21 * 3 and b["measured"] > 0
    json.dumps(r)


def test_the_retrieval_bench_cli_prints_json_and_refuses_bad_counts(capsys):
    assert main(["--keyframes", "100", "--queries", "2", "--memory-keyframes", "2",
                 "--height", "28", "--width", "42", "--feature-dim", "32",
                 "--all-cores"]) == 0
    assert json.loads(capsys.readouterr().out)["keyframes"] == 100
    with pytest.raises(SystemExit):
        main(["--keyframes", "0", "--all-cores"])

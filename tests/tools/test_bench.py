"""lingbot-ros-bench runs (tiny network, CPU, a few frames) and writes its JSON report."""
import json

from lingbot_ros.tools.bench import main


def test_bench_reports_latency_fps_and_cache_per_config(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["--preset", "tiny", "--device", "cpu", "--frames", "24", "--height", "28",
                 "--width", "28", "--configs", "default,every2", "--rollover", "12",
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["config"] for r in report["runs"]] == ["default", "every2"]
    for r in report["runs"]:
        assert r["frames"] == 24 and r["fps_overall"] > 0
        assert r["latency_ms"]["p50"] <= r["latency_ms"]["p99"] <= r["latency_ms"]["max"]
        assert r["cache"]["frames_cached"] <= 8 + 64
    assert report["runs"][0]["rollovers"] >= 1

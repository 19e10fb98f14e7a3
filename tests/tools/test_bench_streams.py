"""lingbot-ros-bench --streams: the batched engine beside separate sessions, on the CPU."""
import json

import pytest

from lingbot_ros.tools.bench.cli import main
from lingbot_ros.tools.bench.streams_cost import parse_counts


def test_bench_streams_reports_each_count_beside_separate_sessions(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["--preset", "tiny", "--device", "cpu", "--height", "42", "--width", "56",
                 "--streams", "1,2", "--streams-frames", "12", "--out", str(out)]) == 0
    runs = json.loads(out.read_text())["streams"]
    assert [r["streams"] for r in runs] == [1, 2]
    for r in runs:
        names = [f"cam{s}" for s in range(r["streams"])]
        for way in ("batched", "separate"):
            figures = r[way]
            assert figures["fps_aggregate"] > 0 and figures["fps_per_stream"] > 0
            assert sorted(figures["latency_ms"]) == names
            assert figures["pool_bytes"] > 0
        assert r["fps_ratio"] > 0 and r["pool_bytes_ratio"] > 0
        # every streaming tick ran as one batched step of all the streams
        assert r["batched"]["batch_steps"][str(r["streams"])] >= 12 - 8
        assert r["frames_failed"] == {name: 0 for name in names}
        # the batched run gives each stream the poses of that stream run alone (fp32 CPU)
        assert set(r["max_pose_diff"]) == set(names)
        assert all(d is not None and d <= 1e-5 for d in r["max_pose_diff"].values())


def test_bench_streams_refuses_bad_counts():
    for text in ("", "0", "a,b", "1,17"):
        with pytest.raises(ValueError, match="--streams"):
            parse_counts(text)
    assert parse_counts("1, 2,4") == [1, 2, 4]

"""The cost benchmark's contract (numbers, not speed: speed is shown by benchmarks)."""
from lingbot_ros.scale import bench_depth_source


def test_bench_reports_percentiles_and_recovers_the_factor():
    out = bench_depth_source(frames=5)
    assert out["model_hw"] == [378, 518] and out["frames"] == 5
    assert 0 < out["p50_us"] <= out["p99_us"]
    assert abs(out["metres_per_unit"] / 2.5 - 1) < 0.01

"""lingbot-ros-bench runs (tiny network, CPU, a few frames) and writes its JSON report."""
import json

from lingbot_ros.tools.bench import main


def test_bench_reports_latency_fps_memory_cache_and_parity_per_config(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["--preset", "tiny", "--device", "cpu", "--frames", "24", "--height", "28",
                 "--width", "28", "--configs", "default,every2:30,eager", "--rollover", "12",
                 "--parity-frames", "12", "--parity-configs", "default,every2,flow",
                 "--profile", "default,eager", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["config"] for r in report["runs"]] == ["default", "every2", "eager"]
    assert report["command"].startswith("lingbot-ros-bench --preset tiny")
    assert [r["frames"] for r in report["runs"]] == [24, 30, 24]
    for r in report["runs"]:
        assert r["fps_per_1000_frames"] == [] and r["fps_overall"] > 0 and r["last_over_first"] > 0
        assert r["latency_ms"]["p50"] <= r["latency_ms"]["p90"] <= r["latency_ms"]["p99"] \
            <= r["latency_ms"]["max"]
        assert r["cache"]["frames_cached"] <= 8 + 64
        assert r["fast_path"] == "eager (device cpu)" if r["config"] != "eager" \
            else r["fast_path"] == "eager (cuda_graphs off)"
    assert "gpu_ms_per_frame" not in report["runs"][1]  # every2 was not asked to profile
    assert all(r["fused_kernels"] is False for r in report["runs"])  # CPU: torch ops
    assert report["runs"][0]["rollovers"] >= 1
    assert report["runs"][1]["keyframes"] == "every_n=2"
    assert report["runs"][1]["keyframes_committed"] < 24
    profile = report["runs"][0]["gpu_ms_per_frame"]  # CPU run: no GPU kernels, wall time only
    assert profile["total_gpu"] == 0 and profile["wall_under_profiler"] > 0
    assert [p["config"] for p in report["parity"]] == ["default", "every2", "flow"]
    for parity in report["parity"]:
        assert parity["frames"] == 12 and parity["nan"] is False
        assert parity["keyframe_decisions_agree"] and parity["frames_compared"] == 12
        assert parity["pose_enc_max_abs_diff"] == 0.0  # on the CPU both paths are eager
    assert report["parity"][1]["keyframes"] < 12
    assert (tmp_path / "bench_default_profile.txt").exists()
    stages = report["runs"][0]["cpu_ms_per_stage"]  # eager on the CPU: the model's stages
    assert set(stages) >= {"dino", "frame_block", "global_block", "global_attention",
                           "camera_head", "depth_head", "global_block_without_attention"}
    assert 0 < stages["global_attention"] < stages["global_block"]

"""lingbot-ros-bench runs (tiny network, CPU, a few frames) and writes its JSON report."""
import json
import math

import pytest

from lingbot_ros.tools.bench.cli import main


def test_bench_reports_latency_fps_memory_cache_and_parity_per_config(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["--preset", "tiny", "--device", "cpu", "--frames", "24", "--height", "28",
                 "--width", "28", "--configs", "default,every2:30,eager", "--rollover", "12",
                 "--parity-frames", "12", "--parity-configs", "default,every2,flow",
                 "--profile", "default,eager", "--scale-bench-frames", "30",
                 "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert [r["config"] for r in report["runs"]] == ["default", "every2", "eager"]
    # the metric-scale estimator's CPU cost per frame at 518x378 (no timing bound here)
    scale = report["scale_estimator"]
    assert scale["model_hw"] == [378, 518] and scale["frames"] == 30
    assert scale["source"] == "depth" and scale["state"] == "LOCKED"
    for key in ("p50", "p99", "mean"):
        value = scale["cpu_us_per_frame"][key]
        assert isinstance(value, float) and math.isfinite(value) and value > 0, scale
    assert scale["cpu_us_per_frame"]["p50"] <= scale["cpu_us_per_frame"]["p99"]
    assert scale["budget_p99_us"] == 1000.0
    assert scale["within_budget"] == (scale["cpu_us_per_frame"]["p99"] <= 1000.0)
    # every source's figures (the synthetic truth: 2.5 metres per model unit)
    assert set(scale["by_source"]) == {"depth", "camera_height", "odometry"}
    for name, entry in scale["by_source"].items():
        cpu = entry["cpu_us_per_frame"]
        assert 0 < cpu["p50"] <= cpu["p99"] and math.isfinite(cpu["p99"]), (name, entry)
        assert entry["within_budget"] == (cpu["p99"] <= 1000.0)
        assert entry["state"] == "LOCKED", (name, entry)
        assert entry["metres_per_unit"] == pytest.approx(2.5, rel=0.01), (name, entry)
    assert scale["by_source"]["depth"]["cpu_us_per_frame"] == scale["cpu_us_per_frame"]
    assert scale["all_within_budget"] == all(e["within_budget"]
                                             for e in scale["by_source"].values())
    assert report["command"].startswith("lingbot-ros-bench --preset tiny")
    assert [r["frames"] for r in report["runs"]] == [24, 30, 24]
    for r in report["runs"]:
        assert r["fps_per_1000_frames"] == []  # fewer than 1,000 streaming frames
        # the frame rate is the one of the loop's own times: no slower than its slowest frame
        assert 1e3 / r["latency_ms"]["max"] <= r["fps_overall"]
        assert r["last_over_first"] == pytest.approx(r["fps_last_10pct"] / r["fps_first_10pct"])
        assert r["latency_ms"]["p50"] <= r["latency_ms"]["p90"] <= r["latency_ms"]["p99"] \
            <= r["latency_ms"]["max"]
        # the 8 anchors plus the segment's keyframes, bounded by the rollover every 12
        # keyframes (the window of 64 never fills)
        assert 8 <= r["cache"]["frames_cached"] < 12
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


def test_settings_table_configs_and_the_flop_count(tmp_path):
    """The settings sweep: names -> (4:3 input on the patch grid, window, policy); the GFLOPs
    of a steady frame grow with the input and with the window."""
    import pytest

    from lingbot_ros.tools.bench.cli import height_for, settings_config, settings_configs
    assert [height_for(w) for w in (518, 392, 294, 224)] == [392, 294, 224, 168]
    names = settings_configs()
    assert len(names) == 4 * 3 * 2 and names[0] == "w518_win64_all"
    over = settings_config("w294_win16_every2")
    assert over["hw"] == (224, 294) and over["window"] == 16 and over["keyframes"].n == 2
    for bad in ("w294_win16", "x294_win16_all", "w294_win16_often", "w294_wind16_all"):
        with pytest.raises(ValueError, match="not a settings config"):
            settings_config(bad)
    out = tmp_path / "bench.json"
    assert main(["--preset", "tiny", "--device", "cpu", "--configs",
                 "w56_win2_all:20,w56_win4_all:20,w84_win2_every2:20", "--flops",
                 "--scale-bench-frames", "0", "--out", str(out)]) == 0
    assert "scale_estimator" not in json.loads(out.read_text())  # 0: skipped
    runs = {r["config"]: r for r in json.loads(out.read_text())["runs"]}
    assert runs["w56_win2_all"]["input_hw"] == [42, 56] and runs["w56_win2_all"]["window"] == 2
    g = {k: r["gflops_per_frame"] for k, r in runs.items()}
    assert 0 < g["w56_win2_all"] < g["w56_win4_all"] < g["w84_win2_every2"]


def test_bench_at_a_camera_rate_reports_each_frames_own_latency(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["--preset", "tiny", "--device", "cpu", "--height", "28", "--width", "28",
                 "--configs", "default:20,push:20", "--rate", "40", "--out", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [r["pipelined"] for r in runs] == [True, False]
    for r in runs:
        assert r["rate_hz"] == 40 and r["frames_failed"] == 0
        # paced: frame i is handed in no earlier than i periods after the start, however
        # fast the step (and however late a loaded machine makes any frame)
        assert r["last_hand_in_s"] >= 19 / 40
        assert 0 < r["result_latency_ms"]["p50"] <= r["result_latency_ms"]["p99"]


def test_parity_compares_depth_and_each_precision_candidate(tmp_path):
    """--parity-depth: the depth maps too; the speed candidates (bf16 depth head, FP8 MLPs)
    differ from the fp32 reference by a small, nonzero amount, the default by none (CPU:
    both paths are the same eager path)."""
    out = tmp_path / "parity.json"
    assert main(["--preset", "tiny", "--device", "cpu", "--frames", "20", "--height", "28",
                 "--width", "28", "--configs", "default", "--parity-frames", "10",
                 "--parity-depth", "--parity-configs", "default,depth_bf16,fp8_mlp",
                 "--scale-bench-frames", "0", "--out", str(out)]) == 0
    parity = {p["config"]: p for p in json.loads(out.read_text())["parity"]}
    assert parity["default"]["pose_enc_max_abs_diff"] == 0.0
    assert parity["default"]["depth_rel_diff"]["max"] == 0.0
    assert "'depth_head': 'bfloat16'" in parity["depth_bf16"]["fast_path"]
    assert parity["depth_bf16"]["pose_enc_max_abs_diff"] == 0.0  # depth does not feed pose
    assert 0 < parity["depth_bf16"]["depth_rel_diff"]["max"] < 5e-2
    assert "'mlp': 'fp8'" in parity["fp8_mlp"]["fast_path"]
    assert 0 < parity["fp8_mlp"]["pose_enc_max_abs_diff"] < 0.1
    for p in parity.values():
        d = p["depth_rel_diff"]
        assert d["median"] <= d["p99"] <= d["max"] and not p["nan"]

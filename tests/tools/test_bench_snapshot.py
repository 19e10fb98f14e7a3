"""lingbot-ros-bench --snapshot: the snapshot's cost, and a restore that continues exactly."""
import json

from lingbot_ros.tools.bench.cli import main


def test_bench_snapshot_reports_size_times_and_an_identical_next_frame(tmp_path):
    out = tmp_path / "bench.json"
    assert main(["--preset", "tiny", "--device", "cpu", "--height", "42", "--width", "56",
                 "--snapshot", "4", "--snapshot-repeats", "2", "--out", str(out)]) == 0
    r = json.loads(out.read_text())["snapshot"]
    assert r["bytes"] > 0 and r["kv_pages"]["patch"] == 4 and r["repeats"] == 2
    assert all(r[k] > 0 for k in ("blocked_ms", "write_ms", "save_ms", "restore_ms"))
    assert r["next_frame_identical"] is True

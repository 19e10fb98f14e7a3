"""python -m lingbot_ros.tools.bench.backend_cost: its JSON, on a short stream (no timing
checked)."""
import json

import pytest

from lingbot_ros.tools.bench.backend_cost import main


def test_backend_cost_prints_its_report(capsys):
    assert main(["--keyframes", "90", "--height", "56", "--width", "70", "--feature-dim",
                 "32", "--all-cores"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["keyframes"] == 90 and 0 < report["kept"] <= 90
    assert set(report["offer_ms"]) == {"median", "p90", "max", "n"}
    assert report["offer_ms"]["n"] == 90 and report["patches"] == 20
    assert {"keyframe_poses_ms", "keyframe_depths_ms", "state_dict_ms",
            "load_state_dict_ms", "candidates"} <= set(report)
    assert {"cpu", "python", "numpy"} <= set(report["machine"])


def test_backend_cost_refuses_a_stream_too_short(capsys):
    with pytest.raises(SystemExit):
        main(["--keyframes", "1", "--all-cores"])
    assert "keyframes must be >= 2" in capsys.readouterr().err

"""Golden parity with the reference implementation (shared/fixtures/reference_tiny*)."""
import pytest
from safetensors.torch import load_file

from lingbot_ros.session import StepKind
from lingbot_ros.tools import parity

from tests.conftest import FIXTURE, FIXTURE_KF2


@pytest.mark.parametrize("fixture", [FIXTURE, FIXTURE_KF2], ids=["every_frame", "keyframes_2"])
def test_parity_tool_passes_on_the_reference_fixtures(fixture, capsys):
    assert parity.main(["--fixture", str(fixture)]) == 0
    out = capsys.readouterr().out
    assert "13/13 keys within tolerance" in out


def test_the_kf2_fixture_pins_the_deferred_eviction(monkeypatch):
    """With every step begun as a keyframe (non-keyframes hiding the oldest window frame, as
    this repository once did), the non-keyframes' outputs leave the tolerance: the fixture
    cannot pass by accident."""
    class EveryStepAKeyframe:
        KEYFRAME = SPECULATIVE = StepKind.KEYFRAME
    monkeypatch.setattr(parity, "StepKind", EveryStepAKeyframe)
    expected = load_file(str(FIXTURE_KF2 / "expected.safetensors"))
    results = {r.key: r for r in parity.compare(expected, parity.run_fixture(FIXTURE_KF2))}
    assert not results["pose_enc"].ok and results["pose_enc"].error > 1e-3
    assert not results["depth"].ok
    assert all(results[k].ok for k in results if k.startswith("cache/"))


def test_compare_fails_a_key_just_outside_its_tolerance():
    expected = load_file(str(FIXTURE / "expected.safetensors"))
    actual = {k: v.clone() for k, v in expected.items()}
    actual["pose_enc"][3, 2] += 3 * parity.TOLERANCES["pose"]
    actual["depth"][0, 5, 5, 0] *= 1 + 3 * parity.TOLERANCES["dense"]
    actual["cache/kv_full_frames"][7] += 1
    del actual["debug/f5_global_block0_out"]
    failed = {r.key for r in parity.compare(expected, actual) if not r.ok}
    assert failed == {"pose_enc", "depth", "cache/kv_full_frames", "debug/f5_global_block0_out"}


def test_parity_tool_reports_a_missing_fixture_file(tmp_path, capsys):
    assert parity.main(["--fixture", str(tmp_path)]) == 2
    assert "config.json is missing" in capsys.readouterr().err

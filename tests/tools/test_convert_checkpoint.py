"""lingbot-ros-convert-checkpoint: a pickled .pt (as upstream saves them) -> .safetensors, names
checked against the model's, unknown keys refused, written atomically, SHA-256 printed; and
--trust-checkpoint on the tools that take --checkpoint. Real files: random tiny networks saved
with torch.save."""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lingbot_ros.model import CheckpointError, GCTConfig, GCTModel, load_weights, read_state_dict
from lingbot_ros.tools.convert_checkpoint import main as convert_main
from lingbot_ros.tools.offline.cli import load_model as offline_load_model
from lingbot_ros.tools.offline.cli import parse_args as offline_args

REPO = Path(__file__).resolve().parents[2]


def tiny_state(seed: int = 0) -> dict:
    torch.manual_seed(seed)
    return GCTModel(GCTConfig.tiny()).state_dict()


def save_upstream_style(path: Path, state: dict, key: str = "model") -> Path:
    """Weights under ``key`` beside pickled objects: torch.load(weights_only=True) refuses it."""
    torch.save({key: state, "args": argparse.Namespace(lr=1e-4, epochs=20), "epoch": 19}, path)
    return path


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_converts_a_pickled_checkpoint_and_prints_its_sha256(tmp_path, capsys):
    state = tiny_state()
    source = save_upstream_style(tmp_path / "lingbot-map.pt", state)
    with pytest.raises(CheckpointError, match="weights_only"):  # the safe loader refuses it
        read_state_dict(source)
    out = tmp_path / "lingbot-map.safetensors"
    with pytest.warns(UserWarning, match="full unpickling"):
        assert convert_main([str(source), str(out)]) == 0
    printed, said = capsys.readouterr()
    assert "trusted" in said and "runs code" in said, "it says that it unpickles"
    digest = hashlib.sha256(out.read_bytes()).hexdigest()
    assert re.search(rf"sha256\s+{digest}\b", printed), printed
    params = sum(v.numel() for v in state.values())
    assert re.search(rf"tensors\s+{len(state)} \({params} parameters\)", printed), printed
    assert "network     tiny" in printed
    # Loadable without any trust (safetensors), into the model, bit for bit.
    model = load_weights(GCTModel(GCTConfig.tiny()), out)
    assert _same(model.state_dict(), state)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lingbot-map.pt",
                                                          "lingbot-map.safetensors"]


@pytest.mark.parametrize("wrapper", ["state_dict", "ddp"])
def test_wrappers_and_the_ddp_prefix_map_to_the_official_names(tmp_path, wrapper):
    state = tiny_state(1)
    if wrapper == "ddp":
        source = tmp_path / "ddp.pt"
        torch.save({"model": {f"module.{k}": v for k, v in state.items()}}, source)
    else:
        source = save_upstream_style(tmp_path / "wrapped.pt", state, key="state_dict")
    out = tmp_path / "out.safetensors"
    # Tensors only (the DDP save) need no unpickling: no warning then.
    with pytest.warns(UserWarning) if wrapper != "ddp" else contextlib.nullcontext():
        assert convert_main([str(source), str(out)]) == 0
    assert _same(read_state_dict(out), state)


def test_unknown_keys_are_refused_and_listed_nothing_written(tmp_path, capsys):
    state = tiny_state()
    state["aggregator.extra_adapter.weight"] = torch.zeros(4, 4)
    state["ema_decay"] = torch.tensor(0.999)
    source = save_upstream_style(tmp_path / "extra.pt", state)
    out = tmp_path / "extra.safetensors"
    with pytest.warns(UserWarning):
        assert convert_main([str(source), str(out)]) == 1
    said = capsys.readouterr().err
    assert "2 unknown key(s)" in said, said
    assert "aggregator.extra_adapter.weight" in said and "ema_decay" in said
    assert "nothing written" in said
    assert sorted(p.name for p in tmp_path.iterdir()) == ["extra.pt"]


def test_missing_and_misshaped_tensors_are_refused(tmp_path, capsys):
    state = tiny_state()
    state.pop(sorted(state)[0])
    name = next(k for k, v in sorted(state.items()) if v.ndim == 2)
    state[name] = torch.zeros(3, 3)
    source = tmp_path / "broken.pt"
    torch.save(state, source)
    assert convert_main([str(source), str(tmp_path / "broken.safetensors")]) == 1
    said = capsys.readouterr().err
    assert "1 missing" in said and "1 mis-shaped" in said and name in said, said
    assert not (tmp_path / "broken.safetensors").exists()


def test_an_existing_output_is_kept_without_force(tmp_path, capsys):
    source = tmp_path / "w.pt"
    torch.save(tiny_state(), source)
    out = tmp_path / "w.safetensors"
    out.write_bytes(b"keep me")
    assert convert_main([str(source), str(out)]) == 2
    assert out.read_bytes() == b"keep me"
    assert "--force" in capsys.readouterr().err
    assert convert_main([str(source), str(out), "--force"]) == 0
    assert _same(read_state_dict(out), tiny_state())


def test_a_file_that_is_no_checkpoint_is_a_clear_error(tmp_path, capsys):
    source = tmp_path / "notes.pt"
    source.write_text("not a checkpoint\n")
    assert convert_main([str(source), str(tmp_path / "x.safetensors")]) == 2
    assert "neither a torch checkpoint" in capsys.readouterr().err


def test_the_console_script(tmp_path):
    setup = (REPO / "setup.py").read_text()
    assert re.search(r"lingbot-ros-convert-checkpoint\s*=\s*"
                     r"lingbot_ros\.tools\.convert_checkpoint:main", setup)
    source = save_upstream_style(tmp_path / "a.pt", tiny_state())
    out = tmp_path / "a.safetensors"
    result = subprocess.run([sys.executable, "-m", "lingbot_ros.tools.convert_checkpoint",
                             str(source), str(out)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert hashlib.sha256(out.read_bytes()).hexdigest() in result.stdout


def test_offline_tools_take_trust_checkpoint(tmp_path):
    """lingbot-ros-offline (and lingbot-ros-eval, same model arguments): refused without
    --trust-checkpoint, loaded with it."""
    state = tiny_state(2)
    source = save_upstream_style(tmp_path / "w.pt", state)
    args = offline_args([str(tmp_path), "--checkpoint", str(source)])
    assert args.trust_checkpoint is False
    with pytest.raises(CheckpointError, match="--trust-checkpoint"):
        offline_load_model(args)
    args = offline_args([str(tmp_path), "--checkpoint", str(source), "--trust-checkpoint"])
    with pytest.warns(UserWarning, match="full unpickling"):
        model, random_weights = offline_load_model(args)
    assert not random_weights and _same(model.state_dict(), state)

"""Strict, all-or-nothing checkpoint loading (.pt with or without a wrapper, .safetensors)."""
import argparse

import pytest
import torch
from safetensors.torch import load_file, save_file

from lingbot_ros.model import CheckpointError, GCTModel, load_model, load_weights, read_state_dict

from tests.conftest import FIXTURE


@pytest.fixture(scope="module")
def reference_state():
    return load_file(str(FIXTURE / "model.safetensors"))


def _snapshot(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("form", ["pt", "pt_wrapped", "safetensors"])
def test_load_model_reads_every_format(tmp_path, tiny_config, reference_state, form):
    path = tmp_path / ("ckpt.safetensors" if form == "safetensors" else "ckpt.pt")
    if form == "safetensors":
        save_file(reference_state, str(path))
    else:
        wrapped = {"model": reference_state, "epoch": 3}
        torch.save(wrapped if form == "pt_wrapped" else reference_state, path)
    model = load_model(path, config=tiny_config, device="cpu", precision="fp32")
    assert model.point_head is None  # the file has no point_head.*
    assert _same(model.state_dict(), reference_state)
    assert not any(t.is_meta for t in list(model.parameters()) + list(model.buffers()))


def test_load_model_builds_the_point_head_when_the_file_has_one(tmp_path, tiny_config,
                                                                reference_state):
    state = dict(reference_state)
    state |= {k.replace("depth_head.", "point_head."): v.clone() for k, v in reference_state.items()
              if k.startswith("depth_head.")}
    state["point_head.scratch.output_conv2.2.weight"] = torch.randn(4, 32, 1, 1)
    state["point_head.scratch.output_conv2.2.bias"] = torch.randn(4)
    save_file(state, str(tmp_path / "stage1.safetensors"))
    model = load_model(tmp_path / "stage1.safetensors", config=tiny_config, precision="fp32")
    assert model.point_head is not None and _same(model.state_dict(), state)


def test_a_renamed_key_is_reported_as_missing_and_unexpected(tmp_path, tiny_config,
                                                             reference_state):
    state = dict(reference_state)
    state["camera_head.token_norm.scale"] = state.pop("camera_head.token_norm.weight")
    torch.save(state, tmp_path / "renamed.pt")
    model = GCTModel(tiny_config)
    before = _snapshot(model)
    with pytest.raises(CheckpointError) as err:
        load_weights(model, tmp_path / "renamed.pt")
    msg = str(err.value)
    assert "1 missing: camera_head.token_norm.weight" in msg
    assert "1 unexpected: camera_head.token_norm.scale" in msg
    assert "mis-shaped" not in msg
    assert _same(model.state_dict(), before)  # nothing half-loaded


def test_a_changed_shape_is_reported_with_both_shapes(tmp_path, tiny_config, reference_state):
    state = dict(reference_state)
    state["aggregator.global_blocks.2.mlp.fc1.weight"] = torch.zeros(256, 128)
    save_file(state, str(tmp_path / "shape.safetensors"))
    model = GCTModel(tiny_config)
    before = _snapshot(model)
    with pytest.raises(CheckpointError) as err:
        load_weights(model, tmp_path / "shape.safetensors")
    assert ("1 mis-shaped: aggregator.global_blocks.2.mlp.fc1.weight: file (256, 128) vs model "
            "(512, 128)") in str(err.value)
    assert _same(model.state_dict(), before)
    with pytest.raises(CheckpointError, match="mis-shaped"):
        load_model(tmp_path / "shape.safetensors", config=tiny_config)


def test_an_unrelated_checkpoint_is_refused_with_the_key_lists(tmp_path, tiny_config):
    save_file({"encoder.weight": torch.zeros(3, 3), "decoder.bias": torch.zeros(3)},
              str(tmp_path / "other.safetensors"))
    with pytest.raises(CheckpointError) as err:
        load_model(tmp_path / "other.safetensors", config=tiny_config)
    msg = str(err.value)
    assert "286 missing" in msg and "2 unexpected: decoder.bias, encoder.weight" in msg
    assert "... and" in msg  # long lists are cut, with the count


def test_files_that_are_not_checkpoints_give_a_clear_error(tmp_path, tiny_config):
    (tmp_path / "notes.pt").write_text("not a checkpoint")
    (tmp_path / "broken.safetensors").write_bytes(b"\x00" * 16)
    torch.save([1, 2, 3], tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="neither a torch checkpoint"):
        read_state_dict(tmp_path / "notes.pt")
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        read_state_dict(tmp_path / "broken.safetensors")
    with pytest.raises(CheckpointError, match="does not hold a state dict"):
        read_state_dict(tmp_path / "list.pt")
    with pytest.raises(CheckpointError, match="does not exist"):
        read_state_dict(tmp_path / "missing.pt")


def test_pickled_objects_need_an_explicit_trust_flag(tmp_path, reference_state):
    path = tmp_path / "with_args.pt"
    torch.save({"model": reference_state, "args": argparse.Namespace(lr=1e-4)}, path)
    with pytest.raises(CheckpointError, match="trust_pickle=True"):
        read_state_dict(path)
    with pytest.warns(UserWarning, match="full unpickling"):
        state = read_state_dict(path, trust_pickle=True)
    assert state.keys() == reference_state.keys()


def test_load_model_picks_the_architecture_the_file_matches(tmp_path, tiny_config,
                                                            reference_state):
    """Candidates are tried in order: the tiny fixture loads with the official one first;
    a file matching none reports the first candidate's mismatches."""
    from lingbot_ros.model import GCTConfig
    from lingbot_ros.model.presets import build_model
    path = tmp_path / "tiny.safetensors"
    save_file(reference_state, str(path))
    model = load_model(path, [GCTConfig.official(), tiny_config], precision="fp32")
    assert _same(model.state_dict(), reference_state)
    with pytest.raises(CheckpointError, match="does not match"):
        load_model(path, [GCTConfig.official()], precision="fp32")
    built, random_weights = build_model("tiny", str(path), precision="fp32")
    assert not random_weights and _same(built.state_dict(), reference_state)


def _pickled_tiny_checkpoint(path, seed=0):
    """A random tiny network saved as upstream does: a dict with the weights under 'model'
    and pickled objects beside them (weights_only=True refuses it)."""
    from lingbot_ros.model import GCTConfig
    torch.manual_seed(seed)
    state = GCTModel(GCTConfig.tiny()).state_dict()
    torch.save({"model": state, "args": argparse.Namespace(lr=1e-4), "epoch": 3}, path)
    return state


def test_the_trust_flag_reaches_the_loader_from_the_session_builder(tmp_path):
    from lingbot_ros.config import SessionConfig
    from lingbot_ros.session import load_session_model
    path = tmp_path / "lingbot-map.pt"
    state = _pickled_tiny_checkpoint(path)
    with pytest.raises(CheckpointError) as refused:
        load_session_model(SessionConfig(), "tiny", str(path))
    message = str(refused.value)
    assert "lingbot-ros-convert-checkpoint" in message and "--trust-checkpoint" in message
    assert "model.trust_pickle" in message
    with pytest.warns(UserWarning, match="full unpickling"):
        model, random_weights = load_session_model(SessionConfig(), "tiny", str(path),
                                                   trust_pickle=True)
    assert not random_weights
    assert _same(model.state_dict(), state)


@pytest.mark.skipif(torch.version.cuda is not None or getattr(torch.version, "hip", None),
                    reason="needs a CPU-only torch build")
@pytest.mark.parametrize("device", ["cuda", "cuda:0"])
def test_cuda_on_a_cpu_only_torch_says_which_torch_and_how_to_get_cuda(device):
    from lingbot_ros.config import SessionConfig
    from lingbot_ros.model import DeviceError, check_device
    from lingbot_ros.session import load_session_model
    with pytest.raises(DeviceError) as err:
        check_device(device)
    message = str(err.value)
    assert "CPU-only torch" in message and torch.__version__ in message
    assert "download.pytorch.org/whl/cu" in message and "device cpu" in message
    # The session builder checks first: the clear message, not torch's AssertionError.
    with pytest.raises(DeviceError, match="CPU-only torch"):
        load_session_model(SessionConfig(device=device), "tiny")


def test_devices_that_do_not_exist_are_clear_errors():
    from lingbot_ros.model import DeviceError, check_device
    assert check_device("cpu") == torch.device("cpu")
    with pytest.raises(DeviceError, match="not a torch device name"):
        check_device("gpu")
    if torch.cuda.is_available():
        with pytest.raises(DeviceError, match="CUDA device\\(s\\) visible"):
            check_device(f"cuda:{torch.cuda.device_count()}")

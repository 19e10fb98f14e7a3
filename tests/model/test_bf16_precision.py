"""bf16 precision without autocast: activations in bf16, float32 islands where the reference
(under bf16 autocast) had them, heads in float32; tracks the float32 network closely.
The camera head may run in bf16 too (its own setting, fp32 by default)."""
import pytest
import torch

from lingbot_ros.model import record_intermediates
from lingbot_ros.model.layers import Attention
from lingbot_ros.session import StepKind
from tests.session.micro_model import micro_model
from tests.session.runners import make_runner

HW, NSF = (42, 56), 2


def stream(model, images):
    runner = make_runner(model, HW, NSF, 3)
    with record_intermediates(model) as debug:  # the anchor step's intermediates
        out, txn = runner.step(images[:NSF], StepKind.KEYFRAME)
    txn.commit()
    poses = [out.pose_enc]
    for start in range(NSF, images.shape[0]):
        out, txn = runner.step(images[start:start + 1], StepKind.KEYFRAME)
        txn.commit()
        poses.append(out.pose_enc)
    return torch.cat(poses), debug, runner.kv_cache


def test_bf16_aggregator_keeps_float32_islands_and_tracks_float32():
    torch.manual_seed(0)
    images = torch.rand(8, 3, *HW)
    fp32 = micro_model()
    bf16 = micro_model().prepare("cpu", "bf16")
    assert bf16.kv_dtype == torch.bfloat16
    qk_normed = [m for m in bf16.aggregator.modules()
                 if isinstance(m, Attention) and isinstance(m.q_norm, torch.nn.LayerNorm)]
    assert qk_normed and all(m.q_norm.weight.dtype == torch.float32 for m in qk_normed)
    assert bf16.camera_head.token_norm.weight.dtype == torch.float32
    ref, _, _ = stream(fp32, images)
    low, debug, cache = stream(bf16, images)
    assert debug["global_block0_out"].dtype == torch.bfloat16  # activations: no fp32 leak
    assert debug["aggregator_selected_layers"].dtype == torch.bfloat16
    assert cache.storage.dtype == torch.bfloat16
    assert low.dtype == torch.float32 and torch.isfinite(low).all()
    assert (low - ref).abs().max() < 5e-2


def test_camera_head_precision_is_fp32_unless_set():
    assert micro_model().prepare("cpu", "fp32").camera_head.dtype == torch.float32
    assert micro_model().prepare("cpu", "bf16").camera_head.dtype == torch.float32
    assert micro_model().prepare("cpu", "fp32", "bf16").camera_head.dtype == torch.bfloat16
    with pytest.raises(ValueError, match="camera_head_precision must be one of"):
        micro_model().prepare("cpu", "fp32", "fp16")


def test_bf16_camera_head_caches_in_bf16_and_tracks_the_float32_head():
    torch.manual_seed(0)
    images = torch.rand(8, 3, *HW)
    ref, _, _ = stream(micro_model().prepare("cpu", "fp32"), images)
    model = micro_model().prepare("cpu", "fp32", camera_head_precision="bf16")
    runner = make_runner(model, HW, NSF, 3)
    assert runner.camera_cache.data.dtype == torch.bfloat16
    low, _, _ = stream(model, images)
    assert low.dtype == torch.float32 and torch.isfinite(low).all()  # the pose sums in fp32
    diff = (low - ref).abs().max()
    assert 0 < diff < 5e-2  # it did run in bf16, and stays close

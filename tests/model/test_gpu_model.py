"""GPU: the tiny model on CUDA, fp32 parity and the bf16 aggregator on FlashInfer vs torch_ref.

Skipped without CUDA (CI is CPU-only); run on the device machine.
"""
import pytest
import torch
from safetensors.torch import load_file

from lingbot_ros.model import GCTModel, load_weights
from tests.session.runners import make_runner, stream_poses

from tests.conftest import FIXTURE, SCALE_FRAMES, WINDOW

try:
    import flashinfer  # noqa: F401
    HAVE_FLASHINFER = True
except ImportError:
    HAVE_FLASHINFER = False

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def test_fp32_on_cuda_matches_the_reference(tiny_config, frames):
    model = load_weights(GCTModel(tiny_config), FIXTURE / "model.safetensors")
    model.prepare("cuda", "fp32")
    poses = stream_poses(make_runner(model, frames.shape[2:], SCALE_FRAMES, WINDOW),
                         frames.cuda())
    expected = load_file(str(FIXTURE / "expected.safetensors"))["pose_enc"]
    assert (poses - expected).abs().max() < 1e-4


@pytest.mark.skipif(not HAVE_FLASHINFER, reason="needs flashinfer")
def test_bf16_aggregator_flashinfer_matches_torch_ref(tiny_config, frames):
    model = load_weights(GCTModel(tiny_config), FIXTURE / "model.safetensors")
    model.prepare("cuda", "bf16")
    assert model.kv_dtype == torch.bfloat16
    assert model.camera_head.token_norm.weight.dtype == torch.float32
    runner = make_runner(model, frames.shape[2:], SCALE_FRAMES, WINDOW,
                         attention_backend="flashinfer", kv_splits=1)
    fi = stream_poses(runner, frames.cuda())
    ref = stream_poses(make_runner(model, frames.shape[2:], SCALE_FRAMES, WINDOW), frames.cuda())
    expected = load_file(str(FIXTURE / "expected.safetensors"))["pose_enc"]
    assert torch.isfinite(fi).all()
    assert (fi - ref).abs().max() < 2e-2
    assert (ref - expected).abs().max() < 0.1  # bf16 vs the fp32 reference

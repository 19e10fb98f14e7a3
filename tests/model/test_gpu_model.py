"""GPU: the tiny model on CUDA, fp32 parity and the bf16 aggregator on FlashInfer vs torch_ref.

Skipped without CUDA (CI is CPU-only); run on the device machine.
"""
import pytest
import torch
from safetensors.torch import load_file

from lingbot_ros.attention import make_backend
from lingbot_ros.cache import PagedKVCache
from lingbot_ros.cache.camera_cache import CameraKVCache
from lingbot_ros.model import GCTModel, load_weights

from .conftest import FIXTURE, SCALE_FRAMES, WINDOW

try:
    import flashinfer  # noqa: F401
    HAVE_FLASHINFER = True
except ImportError:
    HAVE_FLASHINFER = False

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


def stream_poses(model, frames, backend_name, dtype):
    config = model.config
    cache = PagedKVCache(config.cache_config(frames.shape[2:], SCALE_FRAMES, WINDOW, dtype=dtype,
                                             device="cuda"))
    camera = CameraKVCache(**config.camera_cache_dims(), device="cuda")
    backend = make_backend(backend_name, cache.storage)
    poses = []
    for start in [0] + list(range(SCALE_FRAMES, frames.shape[0])):
        n = SCALE_FRAMES if start == 0 else 1
        out, txn = model.step(frames[start:start + n], cache, camera, backend, SCALE_FRAMES)
        txn.commit()
        poses.append(out.pose_enc)
    return torch.cat(poses).cpu()


def test_fp32_on_cuda_matches_the_reference(tiny_config, frames):
    model = load_weights(GCTModel(tiny_config), FIXTURE / "model.safetensors")
    model.prepare("cuda", "fp32")
    poses = stream_poses(model, frames.cuda(), "torch_ref", "float32")
    expected = load_file(str(FIXTURE / "expected.safetensors"))["pose_enc"]
    assert (poses - expected).abs().max() < 1e-4


@pytest.mark.skipif(not HAVE_FLASHINFER, reason="needs flashinfer")
def test_bf16_aggregator_flashinfer_matches_torch_ref(tiny_config, frames):
    model = load_weights(GCTModel(tiny_config), FIXTURE / "model.safetensors")
    model.prepare("cuda", "bf16")
    assert model.kv_dtype == torch.bfloat16
    assert model.camera_head.token_norm.weight.dtype == torch.float32
    fi = stream_poses(model, frames.cuda(), "flashinfer", "bfloat16")
    ref = stream_poses(model, frames.cuda(), "torch_ref", "bfloat16")
    expected = load_file(str(FIXTURE / "expected.safetensors"))["pose_enc"]
    assert torch.isfinite(fi).all()
    assert (fi - ref).abs().max() < 2e-2
    assert (ref - expected).abs().max() < 0.1  # bf16 vs the fp32 reference

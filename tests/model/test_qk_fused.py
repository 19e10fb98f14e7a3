"""The fused q/k-norm + RoPE path: when it is chosen, and that it computes what the torch
ops compute (on the GPU; the Triton kernel needs CUDA)."""
import pytest
import torch

from lingbot_ros.model import qk_fused
from lingbot_ros.model.layers import Attention
from lingbot_ros.model.rope import FrameRope, VideoRope, rotate
from lingbot_ros.config import SessionConfig
from lingbot_ros.session import StepKind
from tests.session.micro_model import micro_model
from tests.session.runners import make_runner

CUDA = torch.cuda.is_available()
gpu = [pytest.mark.gpu, pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")]


def test_modes_are_checked_and_explain_why_the_kernel_is_off():
    with pytest.raises(ValueError, match="fused_kernels"):
        qk_fused.resolve("yes", torch.device("cpu"), torch.bfloat16)
    with pytest.raises(ValueError, match="fused_kernels"):
        SessionConfig(fused_kernels="fast")
    assert qk_fused.resolve("off", torch.device("cuda"), torch.bfloat16) is False
    assert qk_fused.resolve("auto", torch.device("cpu"), torch.bfloat16) is False
    with pytest.raises(RuntimeError, match="needs CUDA"):
        qk_fused.resolve("on", torch.device("cpu"), torch.bfloat16)
    with pytest.raises(RuntimeError, match="bfloat16"):
        qk_fused.resolve("on", torch.device("cuda"), torch.float32)


def test_the_model_only_answers_whether_a_stream_may_use_the_kernel():
    model = micro_model()
    assert model.resolve_fused_kernels("auto") is False  # CPU model
    assert model.resolve_fused_kernels("off") is False
    with pytest.raises(RuntimeError, match="needs CUDA"):
        model.resolve_fused_kernels("on")
    # fused_qk=True on CPU tensors still takes the torch ops, and the step runs
    images = torch.rand(3, 3, 28, 28)
    runner = make_runner(model, (28, 28))
    runner.fused_kernels = True  # forced
    out, txn = runner.step(images[:2], StepKind.KEYFRAME)
    txn.commit()
    assert torch.isfinite(out.pose_enc).all()


@pytest.mark.parametrize("rope_kind", ["frame", "video"])
def test_rope_tables_rotate_like_the_rope(rope_kind):
    torch.manual_seed(0)
    if rope_kind == "frame":
        rope = FrameRope.for_grid((3, 4), 6, 16, 100.0, "cpu")
        x = torch.randn(2, 4, 18, 16)  # (B, h, N, d)
        cos, sin, partner = rope.tables()
        expect = rotate(x, cos, sin, partner)
    else:
        rope = VideoRope.for_frames(5, 2, (3, 4), 6, (4, 6, 6), 10000.0, "cpu")
        x = torch.randn(36, 4, 16)  # (N, h, d)
        cos, sin, partner = rope.tables()
        expect = rotate(x, cos[:, None], sin[:, None], partner)
    assert cos.dtype == sin.dtype == torch.float32 and cos.is_contiguous() and sin.is_contiguous()
    assert cos.shape == sin.shape and cos.shape[1] == 16 and partner.shape == (16,)
    torch.testing.assert_close(rope(x), expect)


def _attention(dim=1024, heads=16, seed=0):
    torch.manual_seed(seed)
    attn = Attention(dim, heads, qk_norm=True).cuda().to(torch.bfloat16)
    attn.q_norm.float()
    attn.k_norm.float()
    for norm in (attn.q_norm, attn.k_norm):  # trained-like affine, not the identity init
        torch.nn.init.normal_(norm.weight, 1.0, 0.3)
        torch.nn.init.normal_(norm.bias, 0.0, 0.3)
    return attn


def _both(run):
    """``run(fused_qk)`` unfused, then fused."""
    return run(False), run(True)


@pytest.mark.parametrize("frames", [1, 8])
@pytest.mark.skipif(not CUDA or bool(qk_fused.triton_status()), reason="needs CUDA and Triton")
@pytest.mark.gpu
def test_fused_frame_attention_matches_torch(frames):
    attn = _attention()
    rope = FrameRope.for_grid((27, 36), 6, 64, 100.0, "cuda")
    x = torch.randn(frames, 978, 1024, device="cuda", dtype=torch.bfloat16)
    ref, got = _both(lambda fused: attn(x, rope, fused))
    assert got.dtype == ref.dtype == torch.bfloat16 and torch.isfinite(got).all()
    err = (got.float() - ref.float()).norm() / ref.float().norm()
    assert err < 1e-2, err


@pytest.mark.parametrize("frames,first", [(1, 300), (8, 0)])
@pytest.mark.skipif(not CUDA or bool(qk_fused.triton_status()), reason="needs CUDA and Triton")
@pytest.mark.gpu
def test_fused_global_projection_matches_torch(frames, first):
    attn = _attention(seed=1)
    rope = VideoRope.for_frames(first, frames, (27, 36), 6, (8, 28, 28), 10000.0, "cuda")
    x = torch.randn(frames * 978, 1024, device="cuda", dtype=torch.bfloat16)
    (q0, k0, v0), (q1, k1, v1) = _both(lambda fused: attn.project_qkv(x, rope, fused))
    assert q1.dtype == k1.dtype == torch.bfloat16 and q1.shape == q0.shape == (frames * 978, 16, 64)
    assert q1.is_contiguous() and k1.is_contiguous()
    assert torch.equal(v0, v1)
    for ref, got in ((q0, q1), (k0, k1)):  # float32 reference, rounded once by the kernel
        assert (got.float() - ref).abs().max() <= 2 ** -7 * ref.abs().max()
        assert (got.float() - ref.to(torch.bfloat16).float()).abs().max() < 3e-2

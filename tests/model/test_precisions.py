"""The speed options of ``GCTModel.prepare``: the depth head in bf16 and FP8 (e4m3) MLP GEMMs.

Both are off by default. On the CPU the FP8 path is the torch emulation; on CUDA the Triton
quantization and ``torch._scaled_mm`` are held to that emulation."""
import pytest
import torch
import torch.nn.functional as F

from lingbot_ros.model import fp8_mlp
from lingbot_ros.model.fp8_mlp import E4M3, E4M3_MAX, Fp8Mlp, quantize_rows, quantize_weight
from lingbot_ros.model.layers import Mlp
from lingbot_ros.session import StepKind
from tests.session.micro_model import micro_model
from tests.session.runners import make_runner

CUDA = torch.cuda.is_available()
HW, NSF = (42, 56), 2


def e4m3_values(shape, generator) -> torch.Tensor:
    """Random values that e4m3 holds exactly (a random e4m3 byte pattern, finite)."""
    raw = torch.randint(0, 256, shape, generator=generator, dtype=torch.uint8)
    v = raw.view(E4M3).float()
    return torch.where(torch.isfinite(v), v, torch.zeros_like(v))


def test_quantization_is_exact_where_e4m3_holds_the_values():
    g = torch.Generator().manual_seed(0)
    x = e4m3_values((5, 32), g)
    x[:, 0] = E4M3_MAX  # each row's max is 448: its scale is exactly 1
    q, scale = quantize_rows(x)
    assert q.dtype == E4M3 and scale.shape == (5, 1)
    assert torch.equal(scale, torch.ones(5, 1))
    assert torch.equal(q.float(), x)
    zero_q, zero_scale = quantize_rows(torch.zeros(2, 16))  # no NaN from an all-zero row
    assert torch.equal(zero_q.float(), torch.zeros(2, 16)) and (zero_scale > 0).all()


def test_known_scale_factor_comes_back_out():
    """A row scaled by k quantizes to the same e4m3 values with k times the scale."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(4, 64, generator=g)
    q1, s1 = quantize_rows(x)
    q2, s2 = quantize_rows(x * 8.0)  # a power of two: exact in float32
    assert torch.equal(q1.view(torch.uint8), q2.view(torch.uint8))
    assert torch.equal(s2, s1 * 8.0)
    w8, ws = quantize_weight(x.t().contiguous())  # per output channel: (64, 4) -> (1, 64)
    assert ws.shape == (1, 64) and w8.shape == (64, 4)


def test_fp8_mlp_equals_the_mlp_when_quantization_is_exact_and_tracks_it_otherwise():
    torch.manual_seed(0)
    mlp = Mlp(32, 128).eval()
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():  # weights e4m3 holds, each row's max 448: per-channel scale 1
        for fc in (mlp.fc1, mlp.fc2):
            w = e4m3_values(fc.weight.shape, g) / 64
            w[:, 0] = E4M3_MAX / 64
            fc.weight.copy_(w)
    fast = Fp8Mlp.from_mlp(mlp)
    x = e4m3_values((6, 32), g)
    x[:, 0] = E4M3_MAX
    with torch.no_grad():
        h = mlp.fc1(x)
        ref_h = fast.fc1_bias.float() + x @ mlp.fc1.weight.t()
        assert torch.allclose(h, ref_h, rtol=1e-6, atol=1e-4)
        # fc1 is exact; the GELU output is rounded to e4m3 before fc2 (3 mantissa bits)
        out, ref = fast(x), mlp(x)
        assert out.shape == ref.shape == (6, 32)
        rel = (out - ref).norm() / ref.norm()
        assert 0 < rel < 0.05
        y = torch.randn(3, 7, 32)  # any leading shape, ordinary values
        rel = (fast(y) - mlp(y)).norm() / mlp(y).norm()
        assert rel < 0.08


def stream(model, images):
    runner = make_runner(model, HW, NSF, 3)
    out, txn = runner.step(images[:NSF], StepKind.KEYFRAME)
    txn.commit()
    poses, depths = [out.pose_enc], [out.depth]
    for start in range(NSF, images.shape[0]):
        out, txn = runner.step(images[start:start + 1], StepKind.KEYFRAME)
        txn.commit()
        poses.append(out.pose_enc)
        depths.append(out.depth)
    return torch.cat(poses), torch.cat(depths)


def test_prepare_selects_each_option_and_refuses_unknown_ones():
    model = micro_model()
    assert model.precisions == {"aggregator": "float32", "camera_head": "float32",
                                "depth_head": "float32", "mlp": "aggregator"}
    model = micro_model().prepare("cpu", "fp32", depth_head_precision="bf16",
                                  mlp_precision="fp8")
    assert model.precisions["depth_head"] == "bfloat16" and model.precisions["mlp"] == "fp8"
    blocks = [*model.aggregator.frame_blocks, *model.aggregator.global_blocks]
    assert blocks and all(isinstance(b.mlp, Fp8Mlp) for b in blocks)
    assert not any(isinstance(b.mlp, Fp8Mlp) for b in model.aggregator.patch_embed.modules()
                   if hasattr(b, "mlp"))  # only the aggregator's frame and global blocks
    with pytest.raises(ValueError, match="depth_head_precision must be one of"):
        micro_model().prepare("cpu", "fp32", depth_head_precision="fp8")
    with pytest.raises(ValueError, match="mlp_precision must be one of"):
        micro_model().prepare("cpu", "fp32", mlp_precision="int8")


def test_bf16_depth_head_and_fp8_mlps_track_the_reference_stream():
    torch.manual_seed(0)
    images = torch.rand(6, 3, *HW)
    ref_pose, ref_depth = stream(micro_model(), images)
    pose, depth = stream(micro_model().prepare("cpu", "fp32", depth_head_precision="bf16"),
                         images)
    assert depth.dtype == torch.float32 and torch.isfinite(depth).all()
    assert torch.equal(pose, ref_pose)  # the depth head does not feed the pose
    rel = ((depth - ref_depth).abs() / ref_depth).max()
    assert 0 < rel < 5e-2
    pose8, depth8 = stream(micro_model().prepare("cpu", "fp32", mlp_precision="fp8"), images)
    assert torch.isfinite(pose8).all()
    assert 0 < (pose8 - ref_pose).abs().max() < 0.1


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.skipif(bool(fp8_mlp.quant_status()), reason=f"needs CUDA and Triton: {fp8_mlp.quant_status()}")
@pytest.mark.gpu
@pytest.mark.parametrize("gelu", [False, True])
def test_triton_quantization_equals_the_emulation(gelu):
    g = torch.Generator(device="cuda").manual_seed(0)
    x = (torch.randn(977, 4096, device="cuda", generator=g) * 3).to(torch.bfloat16)
    q, scale = quantize_rows(x, gelu)
    v = F.gelu(x.float()) if gelu else x.float()
    ref_scale = (v.abs().amax(dim=1, keepdim=True) / E4M3_MAX).clamp_min(fp8_mlp.MIN_SCALE)
    assert torch.allclose(scale, ref_scale, rtol=1e-6, atol=0)
    ref_q = (v / scale).to(E4M3)  # the same scale: only the rounding is compared
    differ = (q.view(torch.uint8) != ref_q.view(torch.uint8)).float().mean().item()
    assert differ < 1e-3  # erf/division ulps may flip a rounding tie, rarely


@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.skipif(bool(fp8_mlp.quant_status()), reason=f"needs CUDA and Triton: {fp8_mlp.quant_status()}")
@pytest.mark.gpu
def test_scaled_mm_fp8_mlp_on_cuda_matches_the_emulation():
    torch.manual_seed(0)
    mlp = Mlp(1024, 4096).cuda().to(torch.bfloat16).eval()
    fast = Fp8Mlp.from_mlp(mlp)
    x = torch.randn(2, 489, 1024, device="cuda", dtype=torch.bfloat16)  # M = 978, not /16
    with torch.no_grad():
        out = fast(x)
        ref = mlp(x)
        rows = x.reshape(-1, 1024)
        q, s = fp8_mlp.quantize_rows(rows.cpu().float())
        emu_h = fp8_mlp.scaled_matmul(q, s, fast.fc1_weight.cpu(), fast.fc1_scale.cpu(),
                                      fast.fc1_bias.cpu(), torch.float32)
    assert out.dtype == torch.bfloat16 and out.shape == ref.shape
    assert torch.isfinite(out).all()
    rel = ((out.float() - ref.float()).norm() / ref.float().norm()).item()
    assert rel < 0.08
    h = fp8_mlp.scaled_matmul(*quantize_rows(rows), fast.fc1_weight, fast.fc1_scale,
                              fast.fc1_bias, torch.bfloat16)
    assert ((h.float().cpu() - emu_h).norm() / emu_h.norm()).item() < 1e-2

"""add_scaled_norm: the LayerScale residual + LayerNorm pair, fused. The fallback is the two
torch ops exactly (CPU); the Triton kernel matches them (GPU): the residual bit for bit, the
normed rows within one ulp."""
import pytest
import torch
from torch import nn

from lingbot_ros.model import add_norm
from lingbot_ros.model.add_norm import add_scaled_norm, fusable
from tests.kernel_cases import add_norm_case, layer_norm, max_ulps

CUDA = torch.cuda.is_available()


@pytest.mark.parametrize("norm_dtype,affine", [(torch.bfloat16, True), (torch.float32, True),
                                               (torch.bfloat16, False)])
def test_fallback_is_addcmul_then_layer_norm(norm_dtype, affine):
    torch.manual_seed(0)
    x = torch.randn(2, 7, 96, dtype=torch.bfloat16)
    wide = torch.randn(2, 7, 130, dtype=torch.bfloat16)
    y = wide[..., 17:113]  # a strided view, channels contiguous
    gamma = torch.randn(96, dtype=torch.bfloat16)
    norm = layer_norm(96, norm_dtype, "cpu", affine)
    x_new, normed = add_scaled_norm(x, y, gamma, norm)
    expect = torch.addcmul(x, y, gamma)
    assert x_new.dtype == normed.dtype == torch.bfloat16
    assert torch.equal(x_new, expect) and torch.equal(normed, norm(expect))


def test_the_kernel_is_only_chosen_where_it_applies():
    x = torch.zeros(3, 64)
    assert not fusable(x, nn.LayerNorm(64))  # CPU
    if not CUDA:
        assert add_norm.add_norm_status() == "no CUDA device"
        return
    x = x.cuda()
    assert fusable(x, nn.LayerNorm(64).cuda())
    assert not fusable(x, nn.LayerNorm(64))  # parameters on the CPU
    assert not fusable(x, nn.LayerNorm(64).cuda().to(torch.bfloat16))  # torch would raise
    assert not fusable(x, nn.LayerNorm((3, 64)).cuda())  # not over the last dim alone
    assert not fusable(x, nn.Identity())
    assert not fusable(torch.zeros(3, 4096, device="cuda"), nn.LayerNorm(4096).cuda())


@pytest.mark.parametrize("rows", [978, 7])
@pytest.mark.parametrize("width,dtype,norm_dtype", [
    (1024, torch.bfloat16, torch.bfloat16),  # aggregator / DINO blocks
    (2048, torch.float32, torch.float32),  # camera head, fp32 (the reference)
    (2048, torch.bfloat16, torch.bfloat16),  # camera head, bf16
])
@pytest.mark.skipif(bool(add_norm.add_norm_status()), reason="needs Triton")
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_kernel_matches_torch(rows, width, dtype, norm_dtype):
    for y_layout in ("contiguous", "sliced", "transposed"):
        print(add_norm_case("cuda", dtype, rows, width, norm_dtype, y_layout=y_layout))
    print(add_norm_case("cuda", dtype, rows, width, norm_dtype, affine=False))


@pytest.mark.skipif(bool(add_norm.add_norm_status()), reason="needs Triton")
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_on_cuda_the_kernel_runs_and_replays_in_a_cuda_graph():
    torch.manual_seed(0)
    x, y = torch.randn(2, 978, 1024, device="cuda", dtype=torch.bfloat16)
    gamma = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    norm = layer_norm(1024, torch.bfloat16, "cuda")
    expect = add_norm.add_scaled_norm_triton(x, y, gamma, norm)
    got = add_scaled_norm(x, y, gamma, norm)
    assert all(torch.equal(a, b) for a, b in zip(got, expect))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = add_scaled_norm(x, y, gamma, norm)
    x.copy_(torch.randn_like(x))
    graph.replay()
    expect = add_norm.add_scaled_norm_torch(x, y, gamma, norm)
    assert torch.equal(captured[0], expect[0])
    assert max_ulps(captured[1], expect[1]) <= 1


def test_chained_norms_give_the_unchained_step_bit_for_bit():
    """With ``add_norm`` each block's last residual carries the next block's norm1 (DINO's
    final norm too); on the CPU the fused op is the torch pair, so the step must not move."""
    from lingbot_ros.model.fused_kernels import FusedKernels
    from lingbot_ros.session import StepKind
    from tests.session.micro_model import micro_model
    from tests.session.runners import make_runner

    torch.manual_seed(0)
    images = torch.rand(4, 3, 28, 28)
    outs = []
    for fused in (FusedKernels(), FusedKernels(add_norm=True)):
        runner = make_runner(micro_model(), (28, 28))
        runner.fused = fused
        out, txn = runner.step(images[:2], StepKind.KEYFRAME)
        txn.commit()
        out2, txn = runner.step(images[2:3], StepKind.KEYFRAME)
        txn.commit()
        outs.append((out, out2, runner.kv_cache.storage.data.clone()))
    (a, a2, kv_a), (b, b2, kv_b) = outs
    assert torch.equal(a.pose_enc, b.pose_enc) and torch.equal(a2.pose_enc, b2.pose_enc)
    assert torch.equal(a2.depth, b2.depth) and torch.equal(kv_a, kv_b)

"""The fused q/k-norm + RoPE path: when it is chosen, and that it computes what the torch
ops compute (the Triton kernel on the GPU; the fallback API on the CPU); its options (q
repeated for split-KV, k and v written into the cache)."""
import pytest
import torch

from lingbot_ros.cache.storage import KVStorage
from lingbot_ros.config import CacheConfig, SessionConfig
from lingbot_ros.model import qk_fused
from lingbot_ros.model.fused_kernels import FusedKernels
from lingbot_ros.model.layers import Attention
from lingbot_ros.model.rope import FrameRope, VideoRope, rotate
from lingbot_ros.session import StepKind
from tests.kernel_cases import qk_case
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
    runner.fused = FusedKernels.select(True)  # forced: every kernel on
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
    """``run(fused)`` unfused, then with every fused kernel on."""
    return run(FusedKernels.select(False)), run(FusedKernels.select(True))


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


def test_fallback_api_rounds_the_torch_path_once_and_applies_the_options():
    """On the CPU norm_rope is the torch ops: project_qkv's float32 q/k rounded once, q
    repeated, k and v written to their cache rows."""
    torch.manual_seed(2)
    attn = Attention(64, 4, qk_norm=True).to(torch.bfloat16)
    attn.q_norm.float()
    attn.k_norm.float()
    rope = VideoRope.for_frames(3, 1, (3, 4), 6, (4, 6, 6), 10000.0, "cpu")
    x = torch.randn(18, 64, dtype=torch.bfloat16)
    q_ref, k_ref, v_ref = attn.project_qkv(x, rope)  # float32 q/k, bf16 v
    qkv = attn.qkv(x)
    flat = torch.randn(50, 4, 16, dtype=torch.bfloat16)
    before = flat.clone()
    perm = torch.randperm(50)
    k_rows, v_rows = perm[:18], perm[18:36]
    q, k = qk_fused.norm_rope(qkv, 4, attn.q_norm, attn.k_norm, rope.tables())
    assert torch.equal(q, q_ref.to(torch.bfloat16)) and torch.equal(k, k_ref.to(torch.bfloat16))
    q3, none = qk_fused.norm_rope(qkv, 4, attn.q_norm, attn.k_norm, rope.tables(), q_copies=3,
                                  kv_dst=(flat, k_rows, v_rows))
    assert none is None and torch.equal(q3, q.repeat(3, 1, 1))
    assert torch.equal(flat[k_rows], k) and torch.equal(flat[v_rows], v_ref)
    assert torch.equal(flat[perm[36:]], before[perm[36:]])


def test_frame_tables_repeat_over_a_batch_of_frames():
    torch.manual_seed(3)
    attn = Attention(64, 4, qk_norm=True)
    rope = FrameRope.for_grid((3, 4), 6, 16, 100.0, "cpu")
    qkv = torch.randn(2 * 18, 3 * 64)  # two frames of 18 tokens
    q, k = qk_fused.norm_rope(qkv, 4, attn.q_norm, attn.k_norm, rope.tables())
    q_ref, k_ref = qkv.view(2, 18, 3, 4, 16).permute(2, 0, 3, 1, 4)[:2]  # (B, h, N, d)
    q_ref, k_ref = attn.norm_qk(q_ref, k_ref)
    for got, ref in ((q, rope(q_ref)), (k, rope(k_ref))):
        torch.testing.assert_close(got, ref.transpose(1, 2).reshape(36, 4, 16))


def test_options_are_checked():
    attn = Attention(64, 4, qk_norm=True)
    tables = VideoRope.for_frames(0, 1, (3, 4), 6, (4, 6, 6), 10000.0, "cpu").tables()
    qkv = torch.randn(18, 192)
    rows = torch.arange(18)

    def call(**options):
        return qk_fused.norm_rope(qkv, 4, attn.q_norm, attn.k_norm, tables, **options)
    with pytest.raises(ValueError, match="q_copies"):
        call(q_copies=0)
    with pytest.raises(ValueError, match=r"\(slots, 4, 16\)"):
        call(kv_dst=(torch.zeros(40, 4, 8), rows, rows + 18))
    with pytest.raises(ValueError, match="flat is torch.bfloat16"):
        call(kv_dst=(torch.zeros(40, 4, 16, dtype=torch.bfloat16), rows, rows + 18))
    with pytest.raises(ValueError, match="k_rows must be int64"):
        call(kv_dst=(torch.zeros(40, 4, 16), rows.int(), rows + 18))
    with pytest.raises(ValueError, match="v_rows must be int64"):
        call(kv_dst=(torch.zeros(40, 4, 16), rows, rows[:5]))


@pytest.mark.parametrize("rope,rows,q_copies", [("frame", 990, 4), ("video", 978, 2),
                                                 ("video", 7, 1)])
@pytest.mark.skipif(bool(qk_fused.triton_status()), reason="needs Triton")
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_kernel_options_match_the_default_kernel_and_the_torch_math(rope, rows, q_copies):
    print(qk_case("cuda", rows, heads=16, dim=64, rope=rope, q_copies=q_copies))


@pytest.mark.skipif(bool(qk_fused.triton_status()), reason="needs Triton")
@pytest.mark.skipif(not CUDA, reason="needs a CUDA GPU")
@pytest.mark.gpu
def test_norm_rope_with_options_replaces_repeat_and_the_cache_write():
    """Today's path (norm_rope, q.repeat, KVStorage.write's two index_copy_) vs the options,
    through the public API on CUDA, into a layer of a real cache storage."""
    attn = _attention(seed=4)
    rope = VideoRope.for_frames(2, 1, (27, 36), 6, (8, 28, 28), 10000.0, "cuda")
    qkv = attn.qkv(torch.randn(978, 1024, device="cuda", dtype=torch.bfloat16))
    tables = rope.tables()
    config = CacheConfig(num_layers=2, num_heads=16, head_dim=64, page_size=972,
                         device="cuda", dtype="bfloat16")
    today, fused = KVStorage(config, 4), KVStorage(config, 4)
    slots = torch.randperm(today.layer_tokens(1).shape[0], device="cuda")
    k_rows, v_rows = slots[:978], slots[978:1956]
    q, k = qk_fused.norm_rope(qkv, 16, attn.q_norm, attn.k_norm, tables)
    v = qkv.view(978, 3, 16, 64)[:, 2]
    today.write(1, k_rows, v_rows, k, v)
    q4, none = qk_fused.norm_rope(qkv, 16, attn.q_norm, attn.k_norm, tables, q_copies=4,
                                  kv_dst=(fused.layer_tokens(1), k_rows, v_rows))
    assert none is None and torch.equal(q4, q.repeat(4, 1, 1))
    assert torch.equal(fused.data, today.data)

"""RoPE: positions as documented, on-demand angles past the reference's 1,024-frame table."""
import math

import torch

from lingbot_ros.model import AggregatorConfig, CameraHeadConfig, DinoConfig, GCTConfig, GCTModel
from lingbot_ros.model.rope import FrameRope, VideoRope
from lingbot_ros.session import StepKind
from tests.session.runners import make_runner

DIMS, THETA = (20, 22, 22), 10000.0


def expected_angles(f: int, y: int, x: int) -> torch.Tensor:
    """Angles of one (f, y, x) position, straight from the formula (float64)."""
    out = []
    for pos, d in zip((f, y, x), DIMS):
        out += [pos * THETA ** (-2 * i / d) for i in range(d // 2)]
    return torch.tensor(out, dtype=torch.float64)


def test_video_rope_positions_and_no_table_limit():
    first, grid, special = 5000, (2, 3), 6  # far past the reference's 1,024-row table
    rope = VideoRope.for_frames(first, 2, grid, special, DIMS, THETA, "cpu")
    tokens = special + 6
    assert rope.cos.shape == (2 * tokens, 1, 32)
    for frame in range(2):
        for i in range(special):  # special i of frame f sits at (f, i, i)
            row = frame * tokens + i
            assert torch.allclose(rope.cos[row, 0], expected_angles(first + frame, i, i).cos(),
                                  atol=1e-12)
        for y in range(2):
            for x in range(3):  # patch (y, x) sits at (f, 6 + y, 6 + x), row-major
                row = frame * tokens + special + y * 3 + x
                ang = expected_angles(first + frame, 6 + y, 6 + x)
                assert torch.allclose(rope.sin[row, 0], ang.sin(), atol=1e-12)


def test_video_rope_is_relative_in_time():
    """q.k after rotation depends only on the time difference, for any absolute index."""
    q, k = torch.randn(12, 1, 64, dtype=torch.float64), torch.randn(12, 1, 64, dtype=torch.float64)
    dots = []
    for base in (0, 1023, 250_000):
        r_q = VideoRope.for_frames(base + 7, 1, (2, 3), 6, DIMS, THETA, "cpu")
        r_k = VideoRope.for_frames(base + 2, 1, (2, 3), 6, DIMS, THETA, "cpu")
        dots.append((r_q(q) * r_k(k)).sum(-1))
    assert torch.allclose(dots[0], dots[1], atol=1e-9)
    assert torch.allclose(dots[0], dots[2], atol=1e-6)


def test_frame_rope_leaves_special_tokens_unrotated_and_rotates_patches():
    rope = FrameRope.for_grid((2, 2), 6, 64, 100.0, "cpu")
    x = torch.randn(1, 2, 10, 64)
    out = rope(x)
    assert torch.equal(out[:, :, :6], x[:, :, :6])  # position (0, 0)
    # patch (0, 1) -> position (1, 2): y half rotates by 1, x half by 2 (first pair, freq 1)
    c = (torch.tensor([1.0, 2.0])).cos()
    s = (torch.tensor([1.0, 2.0])).sin()
    v = x[0, 0, 7]
    assert torch.allclose(out[0, 0, 7, 0], v[0] * c[0] - v[16] * s[0], atol=1e-6)
    assert torch.allclose(out[0, 0, 7, 32], v[32] * c[1] - v[48] * s[1], atol=1e-6)
    assert math.isclose(out[0, 0, 6].norm().item(), x[0, 0, 6].norm().item(), rel_tol=1e-5)


def micro_config() -> GCTConfig:
    """A network small enough to stream a thousand frames in seconds."""
    agg = AggregatorConfig(embed_dim=32, depth=4, num_heads=2, video_rope_dims=(4, 6, 6),
                           selected_layers=(0, 1, 2, 3))
    return GCTConfig(dino=DinoConfig(embed_dim=32, depth=1, num_heads=2, pos_embed_grid=4),
                     aggregator=agg, camera_head=CameraHeadConfig(trunk_depth=1, num_heads=1,
                                                                  num_iterations=1),
                     depth_head=None)


def test_a_stream_runs_past_1024_cached_frames():
    torch.manual_seed(0)
    config = micro_config()
    model = GCTModel(config).prepare("cpu", "fp32")
    hw = (14, 14)
    runner = make_runner(model, hw, scale_frames=1, window=2)
    image = torch.rand(1, 3, *hw)
    for _ in range(1030):
        outputs, txn = runner.step(image, StepKind.KEYFRAME)
        txn.commit()
    assert txn.first_frame == 1029  # the last step's time index
    assert runner.kv_cache.info()["frames_committed"] == runner.camera_cache.num_frames == 1030
    assert torch.isfinite(outputs.pose_enc).all()

"""Per-frame time indices (``StepContext.frame_indices``): a batched step of several streams
gives each frame its own stream's index; the special tokens and the rotation it gets are
exactly those of ``first_frame ..`` for the same indices."""
import pytest
import torch

from tests.session.micro_model import micro_model

GRID = (3, 4)


@pytest.mark.parametrize("first, n, nsf", [(0, 2, 2), (0, 3, 2), (1, 1, 2), (2, 1, 2),
                                           (5, 1, 8), (7, 1, 8), (8, 1, 8), (0, 1, 1)])
def test_special_tokens_of_indices_equal_those_of_a_range(first, n, nsf):
    agg = micro_model().aggregator
    indices = tuple(range(first, first + n))
    assert torch.equal(agg.special_tokens(0, n, nsf, indices),
                       agg.special_tokens(first, n, nsf))


def test_special_tokens_of_mixed_indices_are_each_frames_own():
    agg = micro_model().aggregator
    indices = (9, 0, 3, 1)  # four streams' frames, one at its stream's first frame
    tokens = agg.special_tokens(0, 4, 2, indices)
    for row, f in enumerate(indices):
        assert torch.equal(tokens[row], agg.special_tokens(f, 1, 2)[0])
    with pytest.raises(ValueError, match="3 entries for 4 frames"):
        agg.special_tokens(0, 4, 2, (1, 2, 3))


def test_rope_of_indices_equals_the_rope_of_each_frame():
    agg = micro_model().aggregator
    indices = (4, 17, 2)
    rope = agg.video_rope(0, 3, GRID, indices)
    tokens = rope.cos.shape[0] // 3
    for row, f in enumerate(indices):
        alone = agg.video_rope(f, 1, GRID)
        assert torch.equal(rope.cos[row * tokens:(row + 1) * tokens], alone.cos)
        assert torch.equal(rope.sin[row * tokens:(row + 1) * tokens], alone.sin)
    assert torch.equal(agg.video_rope(0, 2, GRID, (5, 6)).cos, agg.video_rope(5, 2, GRID).cos)
    with pytest.raises(ValueError, match="time indices >= 0"):
        agg.video_rope(0, 2, GRID, (1, -1))

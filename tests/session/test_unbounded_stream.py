"""Segment rollover and unbounded streams: continuity across segments, constant memory."""
import numpy as np
import pytest
import torch

from lingbot_ros.config import KeyframeConfig, SessionConfig
from lingbot_ros.model import GCTConfig
from lingbot_ros.model.presets import random_model
from lingbot_ros.session.session import StreamingSession
from tests.session.micro_model import SIZE_28, SIZE_42x56, micro_model
from tests.session.test_streaming_session import frames, run


def test_rollover_keeps_the_trajectory_continuous_at_every_segment_change():
    s = StreamingSession(micro_model(), SessionConfig(
        num_scale_frames=3, window=3, rollover_keyframes=7, preprocess=SIZE_42x56,
        keyframes=KeyframeConfig(policy="every_n", n=2)))
    results = run(s, frames(40, seed=3))
    assert s.info().rollovers >= 4 and len(s.rollovers) == s.info().rollovers
    by_index = {r.index: r for r in results}
    for roll in s.rollovers:
        # The anchor frame, re-estimated in the new segment and aligned, is where it was
        # published: same camera centre and orientation (scale is from the depth ratio).
        np.testing.assert_allclose(roll.anchor_c2w_aligned[:3, 3],
                                   roll.anchor_c2w_published[:3, 3], atol=1e-5)
        np.testing.assert_allclose(roll.anchor_c2w_aligned[:3, :3],
                                   roll.anchor_c2w_published[:3, :3], atol=1e-5)
        np.testing.assert_allclose(by_index[roll.frame_index].c2w, roll.anchor_c2w_published)
        assert 1e-3 <= roll.alignment.scale <= 1e3
        # The first frame after the change is the new segment's first keyframe.
        nxt = by_index[roll.frame_index + 1]
        assert nxt.segment == roll.segment and nxt.keyframe
    segments = [r.segment for r in results]
    assert segments == sorted(segments)  # segments only move forward
    assert all(np.isfinite(r.c2w).all() for r in results)


@pytest.fixture
def one_thread():
    """Tiny tensors: one intra-op thread is ~30 % faster than two fighting over 2 cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_ten_thousand_frames_at_constant_memory_and_cached_tokens(one_thread):
    model = random_model(GCTConfig.tiny()).prepare("cpu", "fp32")  # the embedded tiny network
    s = StreamingSession(model, SessionConfig(
        num_scale_frames=2, window=3, rollover_keyframes=40, preprocess=SIZE_28,
        with_depth=False, return_depth=False, keyframes=KeyframeConfig(policy="every_n", n=2)))
    img = np.zeros((28, 28, 3), np.uint8)
    img[::3] = 200  # some texture
    samples = []
    for i in range(10_000):
        s.push(img, 1_000 + i)
        if i >= 300 and i % 50 == 0:
            info = s.info()
            samples.append((s.runner.kv_cache.storage.data.data_ptr(), info.stream.cache.bytes_reserved,
                            info.stream.camera_cache.bytes_reserved,
                            info.stream.camera_cache.capacity_frames,
                            info.stream.cache.tokens_visible, info.stream.cache.frames_cached))
    info = s.info()
    assert info.frames_processed == 10_000 and info.rollovers > 100
    assert len({x[:4] for x in samples}) == 1  # no reallocation, constant bytes
    tokens = [x[4] for x in samples]
    page = info.stream.cache.page_size
    # bounded: scale + window pages plus at most one segment of specials
    assert max(tokens) <= (2 + 3) * page + 6 * 40
    assert max(x[5] for x in samples) == 5
    assert len(s.trajectory) == 10_000

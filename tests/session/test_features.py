"""``SessionConfig.return_features``: each result carries its frame's DINO patch tokens, the
tapped ``dino_patch_tokens`` of that frame (the oracle), context-free (the same image gives
the same features in any stream), and the front end is bit-identical with it on or off."""
import functools

import numpy as np
import pytest
import torch

from lingbot_ros.cache import StepKind
from lingbot_ros.config import KeyframeConfig, SessionConfig
from lingbot_ros.model import record_intermediates, run_to_end
from lingbot_ros.model.presets import preset_config, random_model
from lingbot_ros.session import StreamingSession
from tests.session.micro_model import MICRO, SIZE_42x56, micro_model
from tests.session.runners import make_runner
from tests.session.test_graph_step import gpu, gpu_frames, run_session, uncaptured_graph_runner
from tests.session.test_pipelined_session import pipelined
from tests.session.test_streaming_session import DT, STAMP0, frames, run

PATCHES = 3 * 4  # 42 x 56 in patches of 14
EVERY2 = KeyframeConfig(policy="every_n", n=2)
FIELDS = ("index", "stamp_ns", "keyframe", "segment")
ARRAYS = ("c2w", "pose_enc", "K", "K_model", "depth", "depth_conf", "rgb")


def session(model=None, **kw):
    kw.setdefault("num_scale_frames", 2)
    kw.setdefault("window", 3)
    return StreamingSession(model or micro_model(), SessionConfig(preprocess=SIZE_42x56, **kw))


@functools.lru_cache(maxsize=2)
def oracle_features(n: int, seed: int) -> list[np.ndarray]:
    """Each frame's tapped DINO patch tokens of ``frames(n, seed)`` in a stream without
    rollovers: every push runs one forward (the anchors' together), recorded with
    ``record_intermediates``; each result's features are checked against its own step's."""
    images = frames(n, seed=seed)
    s = session(rollover_keyframes=None, return_features=True)
    tapped = []
    for i, image in enumerate(images):
        with record_intermediates(s.model) as taps:
            out = s.push(image, STAMP0 + i * DT)
        if out:
            assert taps["dino_patch_tokens"].shape == (len(out), PATCHES, 32)
            tapped += [t.float().numpy() for t in taps["dino_patch_tokens"]]
            for r, t in zip(out, tapped[-len(out):]):
                np.testing.assert_array_equal(r.features, t)
    return tapped


def assert_front_ends_equal(got, ref):
    assert len(got) == len(ref)
    for a, b in zip(got, ref):
        assert [getattr(a, f) for f in FIELDS] == [getattr(b, f) for f in FIELDS]
        for name in ARRAYS:
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)


def test_features_are_the_tapped_patch_tokens_of_each_frame():
    imgs = frames(7, seed=3)
    tapped = oracle_features(7, 3)  # asserts each result against its own step's taps
    assert len(tapped) == 7
    r = session(rollover_keyframes=None, return_features=True)
    last = run(r, imgs)[-1]
    assert last.features.shape == (PATCHES, MICRO.aggregator.embed_dim)
    assert last.features.dtype == np.float32 and last.features.flags.owndata
    # different images, different features: the field is the frame's, not a constant
    assert not np.array_equal(tapped[0], tapped[1])


def test_features_are_off_by_default_and_a_bad_setting_is_refused():
    assert SessionConfig().return_features is False
    assert all(r.features is None for r in run(session(), frames(4)))
    with pytest.raises(ValueError, match="return_features must be a bool"):
        SessionConfig(return_features=1)


@pytest.mark.parametrize("mode", ["blocking", "sliced"])
def test_the_front_end_is_bit_identical_with_features_on_or_off(mode):
    imgs = frames(14, seed=4)
    kw = dict(num_scale_frames=3, rollover_keyframes=4, keyframes=EVERY2, rollover_mode=mode,
              rollover_slices_per_frame=2)
    on, off = session(return_features=True, **kw), session(**kw)
    got, ref = run(on, imgs), run(off, imgs)
    assert on.info().rollovers >= 1
    assert_front_ends_equal(got, ref)
    assert on.info().stream.cache == off.info().stream.cache
    assert on.info().stream.camera_cache == off.info().stream.camera_cache
    assert all(r.features is None for r in ref)
    # context-free: through rollovers and rolled-back frames, each frame's features are the
    # ones it has in a plain stream of its own (the taps of the oracle)
    for r, t in zip(got, oracle_features(14, 4)):
        np.testing.assert_array_equal(r.features, t)


def test_pipelined_features_equal_push_features_through_sliced_rollovers():
    imgs = frames(14, seed=5)
    kw = dict(num_scale_frames=3, rollover_keyframes=4, keyframes=EVERY2, return_features=True,
              rollover_mode="sliced", rollover_slices_per_frame=2)
    ref = run(session(**kw), imgs)
    s = session(**kw)
    got = pipelined(s, imgs)
    assert s.info().rollovers >= 1
    assert_front_ends_equal(got, ref)
    for a, b in zip(got, ref):
        np.testing.assert_array_equal(a.features, b.features)


def test_sliced_and_graph_body_steps_hand_out_the_same_patch_tokens():
    """The two other ways a step runs: cut into slices (a sliced rollover's anchor step) and
    the CUDA graph's body through its static buffers (run uncaptured on the CPU)."""
    model = micro_model()
    images = torch.rand(6, 3, 42, 56, generator=torch.Generator().manual_seed(6))
    with record_intermediates(model) as taps:
        eager = make_runner(model, (42, 56)).step(images[:2], StepKind.KEYFRAME)[0]
    assert torch.equal(eager.patch_tokens, taps["dino_patch_tokens"])
    runner = make_runner(model, (42, 56))
    txn = runner.begin(2, StepKind.KEYFRAME)
    sliced = run_to_end(runner.run_slices(images[:2], txn))
    txn.commit()
    assert torch.equal(sliced.patch_tokens, eager.patch_tokens)
    graphed = uncaptured_graph_runner(model)
    graphed.step(images[:2], StepKind.KEYFRAME)[1].commit()
    for i in range(2, 6):
        with record_intermediates(model) as taps:
            out, txn = graphed.step(images[i:i + 1], StepKind.KEYFRAME)
        txn.commit()
        assert out.patch_tokens.shape == (1, PATCHES, 32)
        assert torch.equal(out.patch_tokens, taps["dino_patch_tokens"])
    assert graphed.graph is not None  # the steps above were the graph's body


# -- GPU: the CUDA graph's static outputs (skipped without CUDA and flashinfer) -------------

@gpu
def test_graph_replays_hand_out_the_features_and_keep_the_front_end_bit_identical():
    tiny_bf16 = random_model(preset_config("tiny"), seed=0).prepare("cuda", "bf16")
    images = gpu_frames(30)
    kw = dict(rollover_keyframes=10, keyframes=EVERY2)
    on_s, on = run_session(tiny_bf16, images, True, "auto", return_features=True, **kw)
    _, off = run_session(tiny_bf16, images, True, "auto", **kw)
    assert on_s.info().stream.fast_path == "cuda_graph" and on_s.info().rollovers >= 1
    assert_front_ends_equal(on, off)
    # each replay's features are its own frame's (read before the next replay overwrote the
    # static outputs): those of the eager session, and unlike the frame before's
    _, eager = run_session(tiny_bf16, images, False, "auto", return_features=True, **kw)
    for r, e in zip(on, eager):
        assert r.features.dtype == np.float32 and r.features.shape == e.features.shape
        scale = np.abs(e.features).max()
        np.testing.assert_allclose(r.features, e.features, atol=1e-2 * scale, rtol=0)
    assert all(not np.array_equal(a.features, b.features) for a, b in zip(on, on[1:]))

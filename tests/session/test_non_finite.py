"""A frame whose pose comes out non-finite is rolled back: FrameFailed, caches exactly as
before it, nothing in the trajectory, and the stream goes on as if it had never come."""
import numpy as np
import pytest

from lingbot_ros.session import FrameFailed
from tests.session.test_streaming_session import DT, STAMP0, frames, session


class NanOnce:
    """A forward hook on the camera head that poisons the outputs of the calls it is armed
    for (a diverged network, a bf16 overflow), and leaves the others alone."""

    def __init__(self, model) -> None:
        self.armed = False
        self.handle = model.camera_head.register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        if not self.armed:
            return None
        return [p * float("nan") for p in output]


COUNTERS = {"frames_seen", "frames_rolled_back"}  # the failed step counts as seen, rolled back


def cache_state(s):
    info = s.info()
    cache = {k: v for k, v in info.stream.cache.as_dict().items() if k not in COUNTERS}
    camera = {k: v for k, v in info.stream.camera_cache.as_dict().items() if k not in COUNTERS}
    return cache, camera, info.trajectory_poses, info.keyframes


@pytest.mark.parametrize("policy", ["all", "every_n"])
def test_a_non_finite_streaming_frame_is_rolled_back_and_the_stream_goes_on(policy):
    from lingbot_ros.config import KeyframeConfig
    imgs = frames(7, seed=3)
    kf = KeyframeConfig(policy=policy, n=2)
    poisoned = session(keyframes=kf, rollover_keyframes=None)
    hook = NanOnce(poisoned.model)
    clean = session(keyframes=kf, rollover_keyframes=None)
    for i in range(4):  # anchors (2) and two streaming frames, on both
        poisoned.push(imgs[i], STAMP0 + i * DT)
        clean.push(imgs[i], STAMP0 + i * DT)
    before = cache_state(poisoned)
    hook.armed = True
    with pytest.raises(FrameFailed) as err:
        poisoned.push(imgs[4], STAMP0 + 4 * DT)
    hook.armed = False
    assert err.value.reason == "non_finite" and "rolled back" in str(err.value)
    assert cache_state(poisoned) == before  # page counts, frames, specials, trajectory
    assert poisoned.info().frames_failed == 1
    # The next frames: as a clean session that never saw frame 4 (policy all: the same
    # cache, so the same pose; every_n counts indices, so compare with the same indices).
    if policy == "all":
        got = poisoned.push(imgs[5], STAMP0 + 5 * DT)[0]
        ref = clean.push(imgs[5], STAMP0 + 5 * DT)[0]
        np.testing.assert_allclose(got.pose_enc, ref.pose_enc, atol=1e-6)
        assert np.isfinite(got.c2w).all()
    else:
        got = poisoned.push(imgs[5], STAMP0 + 5 * DT)[0]
        assert np.isfinite(got.c2w).all() and got.index == 5
    hook.handle.remove()


def test_non_finite_anchor_frames_are_dropped_and_new_anchors_are_collected():
    imgs = frames(5, seed=4)
    s = session()
    hook = NanOnce(s.model)
    s.push(imgs[0], STAMP0)
    hook.armed = True
    with pytest.raises(FrameFailed, match="anchor frames 0-1"):
        s.push(imgs[1], STAMP0 + DT)
    hook.armed = False
    info = s.info()
    assert info.phase == "scale_frames" and info.scale_frames_buffered == 0
    assert info.trajectory_poses == 0 and info.stream.cache.frames_cached == 0
    assert s.push(imgs[2], STAMP0 + 2 * DT) == []
    out = s.push(imgs[3], STAMP0 + 3 * DT)
    assert [r.stamp_ns for r in out] == [STAMP0 + 2 * DT, STAMP0 + 3 * DT]
    assert all(np.isfinite(r.c2w).all() for r in out)
    hook.handle.remove()

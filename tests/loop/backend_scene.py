"""A synthetic stream for the back end's tests (tests/loop/test_backend.py): the room of
lingbot_ros/loop/synthetic.py (a 3 m circle, N keyframes a lap, the front end drifting in
rotation, translation and scale), driven past its start so that the first places are seen
again, and a ``pair`` that builds the two-frame stream's outputs from the known geometry
(the real model on the pair is tested in tests/loop/test_verify.py).

Each place (keyframe index mod N) has its own image and patch features (seeded), so a
revisit shows the same images. The cameras look up (the synthetic poses' z axis is near the
world's z) at a flat ceiling; depth is its distance along the optical axis. The front end
sees metres times its drifting ``units_per_m``; the pair sees metres times ``PAIR_UNITS``.
"""
from __future__ import annotations

import numpy as np

from lingbot_ros.geometry import rigid_inverse
from lingbot_ros.loop.backend_types import KeyframeInput
from lingbot_ros.loop.synthetic import drifted, loop_path
from lingbot_ros.loop.verify import PairOutputs

N = 200  # keyframes a lap; keyframe N is back at keyframe 0's place
H, W = 48, 64  # the model resolution of the test stream
K = np.array([[40.0, 0.0, 31.5], [0.0, 40.0, 23.5], [0.0, 0.0, 1.0]])
CEILING_M = 2.5  # the plane z = 2.5 (world, metres)
PAIR_UNITS = 0.5  # the pair's model units per metre
STEP_NS = 100_000_000  # 10 keyframes a second
T0_NS = 1_000_000_000


def ceiling_depth(c2w: np.ndarray) -> np.ndarray:
    """(H, W) float64 depth along the optical axis of the ceiling (metres)."""
    vs, us = np.mgrid[0:H, 0:W]
    rays = c2w[:3, :3] @ (np.linalg.inv(K) @ np.stack([us.ravel(), vs.ravel(),
                                                       np.ones(H * W)]))  # (3, HW) world
    return ((CEILING_M - c2w[2, 3]) / rays[2]).reshape(H, W)


class Scene:
    """``revisit`` keyframes past the lap: keyframe k is at place k mod N."""

    def __init__(self, revisit: int = 12, seed: int = 1):
        self.n = N + 1 + revisit
        self.truth = loop_path(self.n, per_lap=N)  # (n, 4, 4)
        self.front_end, self.units = drifted(self.truth, seed=seed)
        rng = np.random.default_rng(34)
        self.images = rng.integers(0, 256, (N, H, W, 3), dtype=np.uint8)
        self.features = rng.standard_normal((N, 16, 32)).astype(np.float32)
        self._place_of = {self.images[p].tobytes(): p for p in range(N)}
        self.wrong = {}  # current place -> (4, 4) the pair's error for it (a wrong loop)

    def keyframe(self, k: int, features=None) -> KeyframeInput:
        p = k % N
        depth = ceiling_depth(self.truth[k]) * self.units[k]  # the front end's units
        return KeyframeInput(k, T0_NS + k * STEP_NS, 0, self.front_end[k], K,
                             self.features[p] if features is None else features,
                             self.images[p], depth.astype(np.float32),
                             np.full((H, W), 2.0, np.float32))

    def pair(self, stored, image) -> PairOutputs:
        """The two-frame stream's outputs from the geometry: the stored keyframe's place and
        the current image's place, in the pair's units."""
        cur = self._place_of[image.tobytes()]
        c2w = []
        for place in (stored.keyframe_id % N, cur):
            m = self.truth[place].copy()
            m[:3, 3] *= PAIR_UNITS
            c2w.append(m)
        depth_kf = ceiling_depth(self.truth[stored.keyframe_id % N]) * PAIR_UNITS
        depth_cur = ceiling_depth(self.truth[cur]) * PAIR_UNITS
        if cur in self.wrong:  # the pair is wrong about the current frame: the keyframe
            c2w[1] = c2w[0] @ self.wrong[cur] @ rigid_inverse(c2w[0]) @ c2w[1]
            depth_cur = ceiling_depth(_metres(c2w[1])) * PAIR_UNITS  # consistent with it
        conf = np.full((H, W), 2.0)
        return PairOutputs(c2w[0], c2w[1], depth_kf, conf, depth_cur, conf, K, K)


def _metres(c2w_pair: np.ndarray) -> np.ndarray:
    m = c2w_pair.copy()
    m[:3, 3] /= PAIR_UNITS
    return m

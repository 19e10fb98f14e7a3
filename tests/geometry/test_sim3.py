"""Sim(3): the algebra is consistent, poses stay rigid, Umeyama recovers similarities.
(The window rollover's alignment: tests/session/test_alignment.py.)"""
import numpy as np
import pytest

from lingbot_ros.geometry import Sim3, ate_rmse, umeyama
from tests.geometry.sim3_cases import is_rigid, random_c2w, random_sim3


# --- algebra -----------------------------------------------------------------------------

def test_sim3_algebra():
    rng = np.random.default_rng(0)
    a, b, c = (random_sim3(rng) for _ in range(3))
    p = rng.normal(size=(10, 3))
    assert np.allclose(a.apply_points(p), (a.matrix() @ np.c_[p, np.ones(10)].T).T[:, :3])
    assert np.allclose((a @ b).apply_points(p), a.apply_points(b.apply_points(p)))
    assert np.allclose(((a @ b) @ c).matrix(), (a @ (b @ c)).matrix())
    assert np.allclose((a @ a.inverse()).matrix(), np.eye(4), atol=1e-12)
    back = Sim3.from_matrix(a.matrix())
    assert np.isclose(back.scale, a.scale) and np.allclose(back.rotation, a.rotation)
    assert np.allclose(back.translation, a.translation)
    assert np.allclose(Sim3.identity().matrix(), np.eye(4))


def test_apply_c2w_rotates_and_moves_the_centre_and_stays_rigid():
    rng = np.random.default_rng(1)
    s = random_sim3(rng)
    c2w = random_c2w(rng, 5)
    out = s.apply_c2w(c2w)
    assert is_rigid(out)
    assert np.allclose(out[:, :3, :3], s.rotation @ c2w[:, :3, :3])
    assert np.allclose(out[:, :3, 3], s.apply_points(c2w[:, :3, 3]))
    # a camera-frame point lands where the similarity sends its world point (up to scale of
    # the camera-frame offset: only translation is scaled, the camera stays metric-free)
    assert np.allclose(out[:, :3, 3], s.scale * (c2w[:, :3, 3] @ s.rotation.T) + s.translation)
    assert out.dtype == np.float64 and s.apply_c2w(c2w.astype(np.float32)).dtype == np.float64
    assert np.allclose(s.apply_depth(np.ones(3)), s.scale)
    with pytest.raises(ValueError, match=r"shape \(\.\.\., 4, 4\)"):
        s.apply_c2w(np.eye(3))


@pytest.mark.parametrize("kwargs,match", [
    ({"scale": 0.0}, "scale must be finite and > 0"),
    ({"scale": float("nan")}, "scale must be finite"),
    ({"rotation": np.diag([1.0, 1.0, -1.0])}, "proper rotation"),
    ({"rotation": 2 * np.eye(3)}, "proper rotation"),
    ({"translation": [0, np.inf, 0]}, "finite"),
])
def test_sim3_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Sim3(**kwargs)


def test_sim3_is_immutable():
    s = Sim3()
    with pytest.raises(ValueError):
        s.rotation[0, 0] = 2.0
    with pytest.raises(Exception):
        s.scale = 2.0


# --- Umeyama and ATE ---------------------------------------------------------------------

@pytest.mark.parametrize("seed", range(3))
def test_umeyama_recovers_a_similarity(seed):
    rng = np.random.default_rng(seed)
    truth = random_sim3(rng)
    src = rng.normal(size=(50, 3)) * 2
    est = umeyama(src, truth.apply_points(src))
    assert np.allclose(est.matrix(), truth.matrix(), atol=1e-9)
    rigid = Sim3(1.0, truth.rotation, truth.translation)
    est_se3 = umeyama(src, rigid.apply_points(src), with_scale=False)
    assert est_se3.scale == 1.0 and np.allclose(est_se3.matrix(), rigid.matrix(), atol=1e-9)


def test_umeyama_handles_a_reflection_free_planar_set_and_errors():
    rng = np.random.default_rng(5)
    truth = random_sim3(rng)
    src = np.c_[rng.normal(size=(20, 2)), np.zeros(20)]  # coplanar points
    assert np.allclose(umeyama(src, truth.apply_points(src)).matrix(), truth.matrix(), atol=1e-9)
    with pytest.raises(ValueError, match="at least 3"):
        umeyama(src[:2], src[:2])
    with pytest.raises(ValueError, match="must both be"):
        umeyama(src, src[:, :2])
    with pytest.raises(ValueError, match="identical"):
        umeyama(np.ones((4, 3)), src[:4])


def test_ate_rmse():
    rng = np.random.default_rng(7)
    gt = rng.normal(size=(30, 3))
    truth = random_sim3(rng)
    est = truth.inverse().apply_points(gt)
    assert ate_rmse(est, gt) < 1e-9
    assert ate_rmse(est, gt, align="se3") > 1e-3  # the scale differs
    assert ate_rmse(gt + 0.1, gt, align=None) == pytest.approx(0.1 * np.sqrt(3))
    with pytest.raises(ValueError, match="align must be"):
        ate_rmse(gt, gt, align="sim2")

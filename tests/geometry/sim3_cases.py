"""Random similarities, rotations and camera poses for the Sim(3) tests (geometry and the
session's rollover alignment)."""
import numpy as np

from lingbot_ros.geometry import Sim3


def random_rotation(rng):
    q = rng.normal(size=4)
    q /= np.linalg.norm(q)
    x, y, z, w = q
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def random_sim3(rng, scale_range=(0.2, 5.0)):
    return Sim3(float(rng.uniform(*scale_range)), random_rotation(rng), rng.normal(size=3) * 3)


def random_c2w(rng, n):
    out = np.tile(np.eye(4), (n, 1, 1))
    for i in range(n):
        out[i, :3, :3] = random_rotation(rng)
        out[i, :3, 3] = rng.normal(size=3)
    return out


def is_rigid(c2w, atol=1e-9):
    r = c2w[..., :3, :3]
    eye = np.broadcast_to(np.eye(3), r.shape)
    return np.allclose(r @ np.swapaxes(r, -1, -2), eye, atol=atol) and \
        np.allclose(np.linalg.det(r), 1, atol=atol) and np.allclose(c2w[..., 3, :], [0, 0, 0, 1])

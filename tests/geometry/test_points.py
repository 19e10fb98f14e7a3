"""Depth -> world points: every kept pixel back-projects through K onto the surface it saw,
moved by c2w; the confidence, depth and stride filters keep exactly the pixels they name."""
from dataclasses import dataclass
from typing import Optional

import numpy as np

from lingbot_ros.geometry import VoxelMap, frame_points


@dataclass
class Frame:
    depth: Optional[np.ndarray]
    depth_conf: Optional[np.ndarray]
    rgb: Optional[np.ndarray]
    K_model: np.ndarray
    c2w: np.ndarray


K = np.array([[50.0, 0.0, 16.0], [0.0, 40.0, 12.0], [0.0, 0.0, 1.0]])


def plane_frame(h=24, w=32, z=2.0, c2w=np.eye(4), rgb=True):
    rng = np.random.default_rng(0)
    return Frame(np.full((h, w), z, np.float32), np.full((h, w), 3.0, np.float32),
                 rng.integers(0, 256, (h, w, 3), dtype=np.uint8) if rgb else None, K, c2w)


def test_a_plane_back_projects_onto_itself_and_moves_with_the_camera():
    f = plane_frame()
    xyz, rgb = frame_points(f, stride=1)
    assert xyz.dtype == np.float32 and rgb.dtype == np.uint8 and len(xyz) == 24 * 32
    assert np.allclose(xyz[:, 2], 2.0)
    # the principal point's pixel lies on the optical axis; one pixel right is z / fx further
    v, u = 12, 16
    assert np.allclose(xyz[v * 32 + u], [0.0, 0.0, 2.0])
    assert np.allclose(xyz[v * 32 + u + 1], [2.0 / 50.0, 0.0, 2.0])
    assert np.array_equal(rgb, f.rgb.reshape(-1, 3))
    moved = np.eye(4)
    moved[:3, :3] = [[0, 0, 1], [0, 1, 0], [-1, 0, 0]]  # 90 degrees about y
    moved[:3, 3] = [1.0, 2.0, 3.0]
    xyz_moved, _ = frame_points(plane_frame(c2w=moved), stride=1)
    assert np.allclose(xyz_moved, xyz @ moved[:3, :3].T + moved[:3, 3], atol=1e-6)


def test_filters_and_stride_keep_exactly_the_named_pixels():
    f = plane_frame()
    f.depth_conf[0, :] = 1.0  # below min_conf
    f.depth[1, 0], f.depth[2, 0], f.depth[3, 0] = np.nan, 0.0, -1.0  # not a valid depth
    f.depth[4, :] = 9.0  # beyond max_depth
    xyz, _ = frame_points(f, stride=1, min_conf=1.5, max_depth=5.0)
    assert len(xyz) == 24 * 32 - 32 - 3 - 32
    xyz, rgb = frame_points(plane_frame(rgb=False), stride=4)
    assert len(xyz) == 6 * 8 and (rgb == 200).all()  # no colour: grey
    none = Frame(None, None, None, K, np.eye(4))
    xyz, rgb = frame_points(none)
    assert xyz.shape == (0, 3) and rgb.shape == (0, 3)


def test_frame_points_accumulate_into_one_voxel_map():
    """The node's map and the offline PLY: the same frame seen twice adds nothing new."""
    m = VoxelMap(0.01, 10_000)
    assert m.add(*frame_points(plane_frame(), stride=2)) == 12 * 16
    assert m.add(*frame_points(plane_frame(), stride=2)) == 0 and len(m) == 12 * 16

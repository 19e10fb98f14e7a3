"""Numpy-only geometry and files, the ground floor of the package: SE(3) and Sim(3), the one
rigid-transform check, the REP-103 camera frames, TUM trajectories and PLY point clouds
(written atomically), a stamped trajectory, depth -> points and the bounded voxel map that
accumulates them; our marked folders on disk (``marked_folder.py``, the snapshots' and
place maps' rules).

Imports numpy and the standard library only: no torch, no rclpy, nothing else of
``lingbot_ros`` (tests/test_import_boundaries.py), so the node's TF buffer and the tools can
use it without loading the model's stack."""
from .atomic_file import PathLike, write_atomic
from .file_rules import FileRefused, FileRoot, check_regular, kind_of, read_regular
from .ply import PLY_HEADER, read_ply, read_ply_comments, write_ply
from .points import DepthFrame, frame_points
from .poses import (R_BODY_OPTICAL, T_BODY_OPTICAL, T_OPTICAL_BODY, as_transforms, c2w_to_map,
                    interpolate_pose, interpolate_poses, interpolate_tq, matrix_to_tq,
                    quaternion_to_rotation, rigid_inverse, rotation_angle, rotation_exp,
                    rotation_vector,
                    rotation_to_quaternion, slerp, tq_to_matrix)
from .rigid import LAST_ROW_TOL, check_rigid, is_rigid, rigid_error
from .sim3 import Sim3, ate_rmse, umeyama
from .trajectory import SESSION_FRAME, Trajectory
from .tum import TUM_HEADER, format_stamp, parse_stamp, read_tum, read_tum_header, write_tum
from .voxel_map import INDEX_LIMIT, VoxelMap

__all__ = ["PathLike", "write_atomic", "FileRefused", "FileRoot", "check_regular", "kind_of",
           "read_regular", "read_ply", "write_ply", "DepthFrame", "frame_points",
           "R_BODY_OPTICAL", "T_BODY_OPTICAL", "T_OPTICAL_BODY", "as_transforms", "c2w_to_map",
           "interpolate_pose", "interpolate_poses", "interpolate_tq", "matrix_to_tq",
           "quaternion_to_rotation", "rigid_inverse", "rotation_angle", "rotation_exp",
           "rotation_vector",
           "rotation_to_quaternion", "slerp", "tq_to_matrix", "LAST_ROW_TOL", "check_rigid",
           "is_rigid", "rigid_error", "Sim3", "ate_rmse", "umeyama",
           "SESSION_FRAME", "Trajectory", "format_stamp", "parse_stamp", "read_tum",
           "write_tum", "INDEX_LIMIT", "VoxelMap", "read_ply_comments", "read_tum_header",
           "PLY_HEADER", "TUM_HEADER"]

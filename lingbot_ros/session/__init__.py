"""A stream's state around the model: the stream runner (caches, backend, CUDA graphs),
keyframe policies, Sim(3) segment alignment, pose conventions and trajectories. No rclpy, no
ROS messages. Front ends (``ros/``, ``tools/``) import from here only."""
from ..cache import StepKind
from .factory import PRESETS, load_session_model, open_session, warm_up
from .keyframes import KeyframePolicy, make_policy
from .ply import read_ply, write_ply
from .points import PointAccumulator, frame_points
from .poses import (R_BODY_OPTICAL, T_BODY_OPTICAL, c2w_to_map, format_stamp, map_to_c2w,
                    matrix_to_tq, parse_stamp, quaternion_to_rotation, read_tum,
                    rotation_to_quaternion, tq_to_matrix, write_tum, slerp,
                    interpolate_poses, rigid_inverse)
from .session import Rollover, SessionEvent, StreamingSession
from .sim3 import Sim3, ate_rmse, umeyama
from .stats import LatencyWindow
from .step_txn import StepTxn
from .stream_runner import StreamRunner, fast_path_of
from .trajectory import Trajectory
from .types import FrameFailed, FrameRejected, FrameResult
from .voxel_map import VoxelMap

__all__ = ["StepKind", "PRESETS", "load_session_model", "open_session", "warm_up",
           "KeyframePolicy", "make_policy", "PointAccumulator", "frame_points",
           "R_BODY_OPTICAL", "T_BODY_OPTICAL", "c2w_to_map", "format_stamp", "map_to_c2w",
           "matrix_to_tq", "parse_stamp", "quaternion_to_rotation", "read_tum",
           "rotation_to_quaternion", "tq_to_matrix", "write_tum", "slerp", "interpolate_poses",
           "rigid_inverse",           "Rollover", "SessionEvent",
           "StreamingSession",
           "Sim3", "ate_rmse", "umeyama", "LatencyWindow", "StepTxn", "StreamRunner",
           "fast_path_of", "Trajectory", "FrameFailed", "FrameRejected", "FrameResult",
           "VoxelMap", "read_ply", "write_ply"]

"""A stream's state around the model: the stream runner (caches, backend, CUDA graphs),
keyframe policies, Sim(3) segment alignment, the stream's trajectory. No rclpy, no ROS
messages. Front ends (``ros/``, ``tools/``) import the session from here only; poses, files
and points come from :mod:`lingbot_ros.geometry`."""
from ..cache import StepKind
from .batch_step import BatchRunner, SharedStreams, check_batchable
from .factory import PRESETS, load_session_model, open_session, warm_up
from .fingerprint import FRAMES as FINGERPRINT_FRAMES
from .fingerprint import fingerprint_key, frame_digest
from .info import CameraCacheInfo, KVCacheInfo, LatencySummary, SessionInfo, StreamInfo
from .input_policy import InputPolicy, SessionEvent
from .keyframes import KeyframePolicy, make_policy
from .segments import AnchorFrame, Rollover, Segments
from .session import Outcome, StreamingSession
from .multi_session import FrameIn, MultiStreamSession
from .session_state import SessionSnapshots
from .snapshot_codec import SnapshotData, SnapshotError, read_manifest, write_snapshot
from .snapshot_folder import check_replaceable, sweep_stale
from .snapshot_parts import (LOOP_BACKEND, PARTS, PATH_RECORDS, SCALE, VOXEL_MAP, SnapshotPart,
                             front_end_state, saved_part)
from .stats import LatencyWindow
from .step_txn import StepTxn
from .stream_runner import StreamRunner, fast_path_of
from .timing import BenchTiming
from .types import FrameFailed, FrameRejected, FrameResult
from .weights import WeightsIdentity

__all__ = ["StepKind", "PRESETS", "load_session_model", "open_session", "warm_up",
           "KeyframePolicy", "make_policy", "InputPolicy", "SessionEvent", "AnchorFrame",
           "Rollover", "Segments", "Outcome", "StreamingSession", "FrameIn", "MultiStreamSession",
           "LatencyWindow", "StepTxn", "StreamRunner", "fast_path_of", "FrameFailed",
           "FrameRejected", "FrameResult", "SnapshotData", "SnapshotError", "read_manifest",
           "write_snapshot", "sweep_stale", "check_replaceable", "FINGERPRINT_FRAMES",
           "frame_digest", "fingerprint_key", "SessionInfo", "StreamInfo", "KVCacheInfo",
           "CameraCacheInfo", "LatencySummary", "SessionSnapshots", "BenchTiming",
           "WeightsIdentity", "SnapshotPart", "PARTS", "SCALE", "VOXEL_MAP", "PATH_RECORDS",
           "LOOP_BACKEND", "front_end_state", "saved_part", "BatchRunner", "SharedStreams",
           "check_batchable"]

"""The node's parameters: one table, one row per parameter.

A row gives the parameter's name, type, default, range or choices, description, and the
config field it sets (``session.window``, ``node.queue_size``, ``settings.checkpoint``...).
Everything else is derived from the rows: the ROS declaration with its descriptor
(``params.declare``), the checks of ``ros2 param set`` while unconfigured
(``params.check_update``), the configs built at configure (``params.build_settings``), the
range checks of ``NodeConfig``, and the defaults listed in ``config/lingbot_ros.yaml`` and
docs/node.md (a test keeps both equal to the table). Ranges live here and nowhere else; the
choice lists are config.py's (the session's configs check them too).

No rclpy and no torch here (stdlib, config.py, scale/config.py and loop/config.py only):
``NodeConfig`` (node_config.py) validates itself against these rows, and the torch-free TF
code imports ``NodeConfig``.
"""
from __future__ import annotations

from ...config import (ATTENTION_BACKENDS, FLASHINFER_VARIANTS, FUSED_KERNEL_MODES,
                      HEAD_PRECISIONS, KEYFRAME_POLICIES, MAX_KV_SPLITS, MLP_PRECISIONS,
                      MODEL_PRESETS, PRECISIONS, ROLLOVER_MODES,
                      STAMP_BACKWARDS_POLICIES)
from ...loop.config import ROBUST_KERNELS
from ...scale.config import BEFORE_LOCK_POLICIES, SCALE_SOURCES
from .rig import RIG_PARAMS
from .row import Param, check_value, none_if_negative, none_if_zero  # noqa: F401 -- re-exported

IMAGE_QOS = ("auto", "sensor_data", "reliable")  # qos.image (ros/intake/image_input.py)
ODOMETRY_INPUTS = ("topic", "tf")  # scale.odometry_input (ros/intake/scale_inputs.py)


P = Param
PARAMS: tuple[Param, ...] = (
    P("autostart", bool, True, "settings.autostart",
      "configure and activate on start (no lifecycle manager)"),
    P("warmup", bool, True, "settings.warmup",
      "run a short dummy stream at configure so frame 1 is not slow"),
    P("gc_freeze", bool, True, "settings.gc_freeze",
      "after configure, move every object Python holds then (model, session, rclpy) out of "
      "the cyclic garbage collector's sweeps (gc.freeze): a full collection then takes under "
      "1 ms instead of ~130 ms, during which a frame waits"),
    # --- model
    P("checkpoint", str, "", "settings.checkpoint",
      "LingBot-Map weights (.pt/.safetensors); empty = random weights"),
    P("model.trust_pickle", bool, False, "settings.trust_pickle",
      "allow full unpickling of a .pt checkpoint that torch.load(weights_only=True) refuses: "
      "runs code from the file, only for a trusted file (better: convert it once with "
      "lingbot-ros-convert-checkpoint)"),
    P("model.preset", str, "tiny", "settings.preset", "network size without a checkpoint "
      "(with one, the file's shapes pick the release's size or this one)", choices=MODEL_PRESETS),
    P("device", str, "cpu", "session.device", "torch device: cpu | cuda | cuda:N"),
    P("precision", str, "auto", "settings.precision",
      "auto (bf16 aggregator on CUDA) | fp32 | bf16", choices=PRECISIONS),
    P("camera_head.precision", str, "fp32", "settings.camera_head_precision",
      "camera head: fp32 (the reference) | bf16 (1.2 ms faster on an H200, pose within "
      "1.1e-2)", choices=HEAD_PRECISIONS),
    P("depth_head.precision", str, "fp32", "settings.depth_head_precision",
      "depth head: fp32 (the reference) | bf16 (faster; depth within the figures of "
      "docs/performance.md)", choices=HEAD_PRECISIONS),
    P("aggregator.mlp_precision", str, "aggregator", "settings.mlp_precision",
      "the aggregator's MLP GEMMs: aggregator (its precision) | fp8 (e4m3, CUDA; faster, "
      "pose within the figures of docs/performance.md)", choices=MLP_PRECISIONS),
    P("attention.backend", str, "auto", "session.attention_backend",
      "auto (flashinfer on CUDA when installed) | torch_ref | flashinfer",
      choices=ATTENTION_BACKENDS),
    P("attention.flashinfer_variant", str, "auto", "session.flashinfer_variant",
      "auto (fa3 on Hopper, else fa2) | fa2 | fa3", choices=FLASHINFER_VARIANTS),
    P("attention.cuda_graphs", bool, True, "session.cuda_graphs",
      "replay streaming steps as CUDA graphs (CUDA + flashinfer; else eager)"),
    P("attention.kv_splits", int, 4, "session.kv_splits",
      "flashinfer split-KV parts per attention call (fills the GPU; 1 = off)",
      range=(1, MAX_KV_SPLITS)),
    P("attention.fused_kernels", str, "auto", "session.fused_kernels",
      "fused Triton kernels (q/k norm + RoPE, K/V write, residual + LayerNorm, split-KV "
      "merge): auto (CUDA + bf16 + Triton) | on | off", choices=FUSED_KERNEL_MODES),
    # --- input
    P("input.width", int, 518, "session.preprocess.width", "model input width, multiple of 14",
      range=(14, 4088), step=14),
    P("input.height", int, 0, "session.preprocess.height",
      "model input height, multiple of 14; 0 = from the aspect", range=(0, 4088),
      step=14, to_config=none_if_zero),
    P("max_image_pixels", int, 4096 * 4096, "node.max_image_pixels",
      "larger images are rejected", range=(1, 2**31 - 1)),
    # --- streaming session
    P("session.num_scale_frames", int, 8, "session.num_scale_frames",
      "anchor frames processed together first", range=(1, 64)),
    P("session.rollover_keyframes", int, 320, "session.rollover_keyframes",
      "keyframes per segment (then a new Sim(3)-aligned segment); 0 = never roll over",
      range=(0, 100_000), to_config=none_if_zero),
    P("session.rollover_mode", str, "blocking", "session.rollover_mode",
      "blocking (the new segment's anchor step between two frames) | sliced (built beside "
      "the stream, a few slices per frame: no stall at a rollover; for camera rate)",
      choices=ROLLOVER_MODES),
    P("session.rollover_slices_per_frame", int, 2, "session.rollover_slices_per_frame",
      "sliced rollovers: anchor-step slices (one block each) queued behind each frame",
      range=(1, 1000)),
    P("session.with_depth", bool, True, "session.with_depth",
      "run the depth head on every frame (else only for frames whose depth is read)"),
    P("session.on_stamp_backwards", str, "reset", "session.on_stamp_backwards",
      "a stamp not after the previous one: reset the stream on it | drop it (counted)",
      choices=STAMP_BACKWARDS_POLICIES),
    P("session.max_gap_s", float, 10.0, "session.max_gap_s",
      "a forward stamp jump over this many seconds resets the stream; 0 = never",
      range=(0.0, 1e6), to_config=none_if_zero),
    P("session.size_change_frames", int, 3, "session.size_change_frames",
      "consecutive frames of a new input size that reset the stream on it", range=(1, 1000)),
    P("session.resume_from", str, "", "settings.resume_from",
      "snapshot directory (~/save_session) to continue at configure, in the same map frame, "
      "under files.root; empty = a new stream. A snapshot that cannot be restored (or none "
      "there, unless session.resume_if_present) fails the configure"),
    P("session.resume_if_present", bool, False, "settings.resume_if_present",
      "with session.resume_from: nothing there yet (a first start) starts a new stream "
      "instead of failing the configure; a snapshot there that cannot be restored still fails"),
    P("session.save_on_shutdown", str, "", "settings.save_on_shutdown",
      "snapshot directory written on a clean shutdown (SIGINT, SIGTERM, lifecycle "
      "shutdown), under files.root; empty = none. Its folder must exist and be writable "
      "(checked at configure)"),
    # --- files
    P("files.root", str, "", "settings.files_root",
      "the folder every path given to the node resolves under (~/save_trajectory, "
      "~/save_map, ~/save_session, ~/load_session, ~/load_map, ~/localize_in_map, "
      "session.resume_from, session.save_on_shutdown, map.load_on_start): relative paths "
      "are its, paths and symlinks leading outside are refused; created at configure. "
      "Empty = $ROS_HOME/lingbot_ros "
      "(~/.ros/lingbot_ros); '/' = anywhere (WARN)"),
    # --- paged KV cache
    P("cache.window", int, 64, "session.window", "frames of full context, current included",
      range=(1, 1024)),
    P("cache.max_special_frames", int, -1, "session.max_special_frames",
      "trajectory memory bound in frames; -1 = all", range=(-1, 10_000_000),
      to_config=none_if_negative),
    P("cache.max_cache_bytes", int, -1, "session.max_cache_bytes",
      "KV pool byte budget; -1 = device memory", range=(-1, 2**50),
      to_config=none_if_negative),
    # --- keyframes
    P("keyframes.policy", str, "all", "session.keyframes.policy", "all | every_n | flow",
      choices=KEYFRAME_POLICIES),
    P("keyframes.n", int, 2, "session.keyframes.n", "every_n: keyframe interval",
      range=(1, 1000)),
    P("keyframes.flow_threshold", float, 10.0, "session.keyframes.flow_threshold",
      "flow: mean pixel flow for a keyframe", range=(0.0, 1e4)),
    P("keyframes.max_gap", int, 30, "session.keyframes.max_gap",
      "flow: at most this many frames between keyframes", range=(1, 10_000)),
    # --- topics and QoS
    P("topics.image", str, "image", "node.image_topic", "image topic (remappable)"),
    P("topics.use_compressed", bool, False, "node.use_compressed",
      "subscribe <topics.image>/compressed instead"),
    P("topics.image_raw_take", bool, False, "node.image_raw_take",
      "take the images (and the aligned depth) as serialized bytes and read them without "
      "building a Python message (less GIL held per image; not for /compressed)"),
    P("topics.camera_info", str, "camera_info", "node.camera_info_topic",
      "camera info topic (optional input)"),
    P("qos.image", str, "auto", "node.image_qos", "auto (reliable when every image "
      "publisher is, else best effort; re-checked every second) | sensor_data (best effort) "
      "| reliable", choices=IMAGE_QOS),
    P("qos.image_depth", int, 5, "node.image_qos_depth", "image subscription history depth",
      range=(1, 1000)),
    P("queue_size", int, 2, "node.queue_size", "latest-wins frames between callback and worker",
      range=(1, 100)),
    # --- frames and TF
    P("frames.map", str, "map", "node.map_frame",
      "world frame of pose, path, points and map (REP-105)"),
    P("frames.odom", str, "odom", "node.odom_frame", "odometry frame: parent of the base frame"),
    P("frames.base", str, "base_link", "node.base_frame", "robot base frame, tracked in "
      "map/odom; '' = camera-only (a bare camera: the camera frame is tracked)"),
    P("frames.camera", str, "", "node.camera_frame",
      "camera frame; empty = the image header's frame_id"),
    P("frames.camera_is_optical", bool, True, "node.camera_is_optical",
      "the camera frame has optical axes"),
    P("frames.ground", str, "base_footprint", "node.ground_frame",
      "scale camera_height: the frame on the floor under the robot (the camera's height over "
      "it from TF, when scale.camera_height_m is 0)"),
    P("tf.publish_map_to_odom", bool, True, "node.publish_map_to_odom",
      "publish map -> odom (identity, or the correction of another node's odom -> base when "
      "tf.publish_odom_to_base is false)"),
    P("tf.publish_odom_to_base", bool, True, "node.publish_odom_to_base",
      "publish odom -> base (this node is the odometry source)"),
    P("tf.wait_for_extrinsic_s", float, 10.0, "node.wait_for_extrinsic_s",
      "the base -> camera transform missing this long after the first image: diagnostics "
      "ERROR (the node keeps waiting)", range=(0.1, 3600.0)),
    # --- ~/odometry covariance
    P("odometry.position_variance", float, 1e-2, "node.odom_position_var",
      "~/odometry pose covariance diagonal, x y z (squared output units: m^2 once a scale "
      "source locked, + the scale's uncertainty)", range=(0.0, 1e6)),
    P("odometry.orientation_variance", float, 1e-3, "node.odom_orientation_var",
      "~/odometry pose covariance diagonal, roll pitch yaw (rad^2)", range=(0.0, 1e6)),
    P("odometry.linear_velocity_variance", float, 1e-1, "node.odom_linear_var",
      "~/odometry twist covariance diagonal, linear ((output units/s)^2)", range=(0.0, 1e6)),
    P("odometry.angular_velocity_variance", float, 1e-2, "node.odom_angular_var",
      "~/odometry twist covariance diagonal, angular ((rad/s)^2)", range=(0.0, 1e6)),
    # --- metric scale (docs/node.md "Scale", docs/scale.md)
    P("scale.source", str, "none", "scale.source",
      "where metres come from: none (model units) | fixed (scale.factor) | depth "
      "(aligned_depth) | odometry (odom_in, or TF: scale.odometry_input) | camera_height "
      "(the floor in the predicted depth; scale.camera_height_m or TF frames.ground)",
      choices=SCALE_SOURCES),
    P("scale.factor", float, 1.0, "scale.factor", "fixed: metres per model unit",
      range=(1e-6, 1e6)),
    P("scale.depth_unit_m", float, 0.0, "scale.depth_unit_m",
      "depth: metres per sensor unit; 0 = by the encoding (16UC1 mm, 32FC1 m)",
      range=(0.0, 1e3), to_config=none_if_zero),
    P("scale.depth_max_dt_s", float, 0.02, "scale.depth_max_dt_s",
      "depth: max stamp difference between a depth and a colour image", range=(1e-6, 10.0)),
    P("scale.depth_min_m", float, 0.1, "scale.depth_min_m",
      "depth: sensor readings below this are invalid", range=(0.0, 1e4)),
    P("scale.depth_max_m", float, 10.0, "scale.depth_max_m",
      "depth: sensor readings above this are invalid", range=(1e-3, 1e6)),
    P("scale.depth_min_conf", float, 1.5, "scale.depth_min_conf",
      "depth: model pixels below this confidence (1 + exp(.)) are masked", range=(1.0, 1e6)),
    P("scale.depth_stride", int, 3, "scale.depth_stride",
      "depth, camera_height: the evaluation grid, every n-th model pixel along x and y",
      range=(1, 64)),
    P("scale.min_pixels", int, 1000, "scale.min_pixels",
      "depth: valid pixels (of the scale.depth_stride grid) a sample needs",
      range=(1, 100_000_000)),
    P("scale.min_baseline_m", float, 0.3, "scale.min_baseline_m",
      "odometry: base path length (m) per sample", range=(1e-3, 1e3)),
    P("scale.odom_min_step_m", float, 0.1, "scale.odom_min_step_m",
      "odometry: frames paired this far apart (less: the base stood still); at most "
      "scale.min_baseline_m", range=(1e-4, 1e3)),
    P("scale.odom_window", int, 150, "scale.odom_window",
      "odometry: frames in the sliding window (a sample uses the newest that reach "
      "scale.min_baseline_m)", range=(2, 100_000)),
    P("scale.odom_max_dt_s", float, 0.1, "scale.odom_max_dt_s",
      "odometry: max gap between odometry poses around an image stamp", range=(1e-4, 10.0)),
    P("scale.odometry_input", str, "topic", "node.odometry_input",
      "odometry: topic (nav_msgs/Odometry on odom_in) | tf (another node's frames.odom -> "
      "frames.base on /tf; needs tf.publish_odom_to_base false)", choices=ODOMETRY_INPUTS),
    P("scale.planar", bool, False, "scale.planar",
      "odometry: compare x/y of the base only (wheel odometry)"),
    P("scale.camera_height_m", float, 0.0, "scale.camera_height_m",
      "camera_height: the camera's height over the floor (m); 0 = from TF (frames.ground)",
      range=(0.0, 1e3), to_config=none_if_zero),
    P("scale.max_ground_tilt_deg", float, 10.0, "scale.max_ground_tilt_deg",
      "camera_height: max angle of the floor's normal to the base's up axis",
      range=(0.1, 89.0)),
    P("scale.ground_inlier_ratio", float, 0.02, "scale.ground_inlier_ratio",
      "camera_height: the floor's inlier band, as a share of the camera height",
      range=(1e-6, 0.99)),
    P("scale.ground_min_inliers", int, 500, "scale.ground_min_inliers",
      "camera_height: the points a credible floor needs", range=(3, 100_000_000)),
    P("scale.min_samples", int, 10, "scale.min_samples",
      "samples LOCKED needs", range=(1, 100)),
    P("scale.max_samples", int, 100, "scale.max_samples",
      "the sliding window of samples the median is taken over (>= scale.min_samples)",
      range=(1, 100_000)),
    P("scale.lock_spread", float, 0.05, "scale.lock_spread",
      "max relative spread (1.4826 MAD of the log samples) to lock", range=(1e-6, 10.0)),
    P("scale.max_change_per_s", float, 0.01, "scale.max_change_per_s",
      "after LOCKED: max change of log(scale) per second of stamps (no TF jump)",
      range=(1e-9, 10.0)),
    P("scale.stale_timeout_s", float, 5.0, "scale.stale_timeout_s",
      "diagnostics WARN (with the reason) when the source gave no sample this long",
      range=(0.01, 3600.0)),
    P("scale.drift_warn_sigma", float, 5.0, "scale.drift_warn_sigma",
      "after LOCKED: diagnostics WARN when the median of the last scale.min_samples samples "
      "is this many sigmas (its standard error) from the applied scale ...",
      range=(0.1, 1e6)),
    P("scale.drift_warn_s", float, 1.0, "scale.drift_warn_s",
      "... for this long (seconds of the frames' stamps)", range=(0.0, 3600.0)),
    P("scale.before_lock", str, "withhold", "scale.before_lock",
      "before LOCKED: withhold (no pose, odometry, TF, depth, points; ~/path gets them in "
      "metres at the lock) | publish_model_units", choices=BEFORE_LOCK_POLICIES),
    # --- loop closure and stored maps (docs/node.md "Loop closure", docs/loop.md)
    P("loop.enable", bool, False, "loop.enable",
      "run the back end beside the stream: keyframe database, verification of loop candidates "
      "with the model, pose graph; map -> odom carries its correction. Off by default: each "
      "verification costs a model step on a pair, whose GPU cost is not measured yet"),
    P("loop.min_keyframe_distance_m", float, 0.5, "loop.min_keyframe_distance_m",
      "a keyframe within this distance (and loop.min_keyframe_angle_deg) of a kept one is not "
      "added to the database (the stream's units: metres once the scale locked)",
      range=(0.0, 1e6)),
    P("loop.min_keyframe_angle_deg", float, 15.0, "loop.min_keyframe_angle_deg",
      "... and within this rotation", range=(0.0, 180.0)),
    P("loop.min_age_s", float, 20.0, "loop.min_age_s",
      "candidates are at least this old (stamps), never in the window", range=(0.0, 1e9)),
    P("loop.top_k", int, 5, "loop.top_k", "candidates retrieved per keyframe",
      range=(1, 1000)),
    P("loop.odom_sigma_t_per_m", float, 0.02, "loop.odom_sigma_t_per_m",
      "pose graph: the front end's translation sigma per metre moved", range=(1e-9, 1e6)),
    P("loop.odom_sigma_deg_per_m", float, 0.5, "loop.odom_sigma_deg_per_m",
      "pose graph: the front end's rotation sigma (deg) per metre moved", range=(1e-9, 1e6)),
    P("loop.odom_sigma_t_min_m", float, 0.005, "loop.odom_sigma_t_min_m",
      "pose graph: the front end's translation sigma at least (a standstill)",
      range=(0.0, 1e6)),
    P("loop.odom_sigma_deg_min", float, 0.1, "loop.odom_sigma_deg_min",
      "pose graph: the front end's rotation sigma (deg) at least", range=(0.0, 1e6)),
    P("loop.odom_sigma_log_scale_per_m", float, 0.01, "loop.odom_sigma_log_scale_per_m",
      "pose graph: sigma of the front end's log relative scale per metre moved",
      range=(1e-9, 1e6)),
    P("loop.odom_sigma_log_scale_min", float, 0.001, "loop.odom_sigma_log_scale_min",
      "pose graph: ... at least", range=(1e-9, 1e6)),
    P("loop.rollover_sigma_log_scale", float, 0.05, "loop.rollover_sigma_log_scale",
      "pose graph: sigma of the log relative scale across a rollover", range=(1e-9, 1e6)),
    P("loop.loop_sigma_t_m", float, 0.05, "loop.loop_sigma_t_m",
      "pose graph: an accepted loop's translation sigma", range=(1e-9, 1e6)),
    P("loop.loop_sigma_deg", float, 1.0, "loop.loop_sigma_deg",
      "pose graph: an accepted loop's rotation sigma (deg)", range=(1e-9, 1e6)),
    P("loop.loop_sigma_log_scale", float, 0.05, "loop.loop_sigma_log_scale",
      "pose graph: an accepted loop's log-scale sigma", range=(1e-9, 1e6)),
    P("loop.loop_robust_kernel", str, "huber", "loop.loop_robust_kernel",
      "robust kernel on loop edges", choices=ROBUST_KERNELS),
    P("loop.loop_robust_k", float, 1.345, "loop.loop_robust_k",
      "the robust kernel's threshold (sigmas)", range=(1e-9, 1e6)),
    P("loop.max_correction_m", float, 10.0, "loop.max_correction_m",
      "gate: a loop moving the current estimate further than this is rejected",
      range=(1e-9, 1e9)),
    P("loop.max_correction_deg", float, 10.0, "loop.max_correction_deg",
      "gate: ... or rotating it more than this", range=(1e-9, 180.0)),
    P("loop.confirm_m", float, 1.0, "loop.confirm_m",
      "gate: two verifications must agree within this translation", range=(1e-9, 1e9)),
    P("loop.confirm_deg", float, 2.0, "loop.confirm_deg",
      "gate: ... and this rotation", range=(1e-9, 180.0)),
    P("loop.verify_min_conf", float, 1.5, "loop.verify_min_conf",
      "verification: pair depth below this confidence (1 + exp(.)) is not used",
      range=(0.0, 1e6)),
    P("loop.min_valid_pixels", int, 100, "loop.min_valid_pixels",
      "verification: valid pixels the scale tie and the geometric check need",
      range=(1, 100_000_000)),
    P("loop.inlier_depth_ratio", float, 0.1, "loop.inlier_depth_ratio",
      "verification: a reprojected pixel is an inlier within this relative depth",
      range=(1e-9, 1e6)),
    P("loop.min_inlier_fraction", float, 0.6, "loop.min_inlier_fraction",
      "gate: the inlier fraction a loop needs", range=(1e-9, 1.0)),
    P("loop.confirm_window_s", float, 10.0, "loop.confirm_window_s",
      "a verified loop waits this long (stamps) for a second that agrees", range=(1e-9, 1e9)),
    P("loop.confirm_max_pending", int, 8, "loop.confirm_max_pending",
      "verified loops waiting for confirmation, at most", range=(1, 10_000)),
    P("loop.max_verify_per_keyframe", int, 2, "loop.max_verify_per_keyframe",
      "verification: at most this many of a keyframe's candidates verified (a model step "
      "each)", range=(1, 1000)),
    P("loop.loop_sigma_t_best_m", float, 0.03, "loop.loop_sigma_t_best_m",
      "pose graph: a loop whose every overlapping pixel is an inlier gets this translation "
      "sigma (one at the gate gets loop.loop_sigma_t_m)", range=(1e-9, 1e6)),
    P("loop.loop_sigma_deg_best", float, 0.5, "loop.loop_sigma_deg_best",
      "pose graph: ... this rotation sigma (deg)", range=(1e-9, 1e6)),
    P("loop.loop_sigma_log_scale_best", float, 0.005, "loop.loop_sigma_log_scale_best",
      "pose graph: ... this log-scale sigma", range=(1e-9, 1e6)),
    P("loop.loop_sigma_t_per_m", float, 0.02, "loop.loop_sigma_t_per_m",
      "pose graph: a loop's translation sigma grows by this per unit of the pair's baseline",
      range=(0.0, 1e6)),
    P("loop.queue_size", int, 2, "node.loop_queue_size",
      "keyframes waiting for verification on the back end's thread; a keyframe beyond them "
      "still enters the database and the graph, unverified (counted busy)", range=(1, 1000)),
    P("map.load_on_start", str, "", "settings.map_load_on_start",
      "a place map (~/save_map's place_map, under files.root) loaded at configure for "
      "relocalization; needs loop.enable and a metric scale.source; \"\" = none"),
    P("map.localize_on_start", bool, False, "settings.map_localize_on_start",
      "with map.load_on_start: relocalize the stream in it from the first keyframes; map -> "
      "odom is withheld until localized"),
    # --- outputs
    P("publish.depth_rate_hz", float, 10.0, "node.depth_rate_hz",
      "~/depth and ~/depth/camera_info at most this often; 0 = off", range=(0.0, 1000.0)),
    P("publish.points", bool, False, "node.publish_points", "publish keyframe points on ~/points"),
    P("publish.points_rate_hz", float, 1.0, "node.points_rate_hz", "max point cloud rate",
      range=(0.01, 100.0)),
    P("publish.points_stride", int, 4, "node.points_stride",
      "pixel stride of the points (~/points and the map)", range=(1, 64)),
    P("publish.points_min_conf", float, 1.5, "node.points_min_conf",
      "minimum depth confidence (1 + exp(.)) of a point", range=(1.0, 1e6)),
    P("publish.map_points", bool, False, "node.map_points",
      "accumulate keyframe points into ~/map_points (voxel map; ~/save_map writes it)"),
    P("map.rate_hz", float, 1.0, "node.map_rate_hz",
      "keyframes added to the map, and the map published, at most this often",
      range=(0.01, 100.0)),
    P("map.voxel_size", float, 0.05, "node.map_voxel_size",
      "map voxel edge (the outputs' units: metres once a scale source locked); doubles when "
      "the map is full", range=(1e-4, 1e3)),
    P("map.max_points", int, 1_000_000, "node.map_max_points",
      "memory bound of the map (up to 23 bytes held a point: xyz float32, rgb, its voxel "
      "key; at least 8: one voxel's corners)",
      range=(8, 100_000_000)),
    P("publish.path_max_poses", int, 10_000, "node.path_max_poses",
      "poses kept in ~/path; 0 = all", range=(0, 10_000_000)),
    P("publish.cache_info_rate_hz", float, 1.0, "node.cache_info_rate_hz", "~/cache_info rate",
      range=(0.01, 100.0)),
    P("publish.diagnostics_rate_hz", float, 1.0, "node.diagnostics_rate_hz",
      "/diagnostics rate", range=(0.01, 100.0)),
    P("publish.path_rate_hz", float, 1.0, "node.path_rate_hz",
      "~/path (the whole history) at most this often", range=(0.01, 100.0)),
    P("diagnostics.warn_drop_share", float, 0.5, "node.warn_drop_share",
      "WARN when more than this share of recent frames is dropped or rejected",
      range=(0.01, 1.0)),
    P("diagnostics.stall_timeout_s", float, 5.0, "node.stall_timeout_s",
      "ERROR when images arrive but none was processed for this long", range=(0.1, 3600.0)),
) + RIG_PARAMS  # cameras.*: a camera rig (rig.py, with its per-camera template rows)
del P
PARAM_NAMES = tuple(p.name for p in PARAMS)
PARAMS_BY_NAME = {p.name: p for p in PARAMS}
# A config's own error starts with its field's name: the parameter that set it.
PARAMS_BY_ATTRIBUTE = {p.attribute: p for p in PARAMS}


def rows(config: str) -> tuple[Param, ...]:
    """The rows that set fields of ``config`` (``node``, ``session``, ``session.keyframes``,
    ``session.preprocess``, ``scale``, ``loop``, ``settings``, ``rig``)."""
    return tuple(p for p in PARAMS if p.field.rsplit(".", 1)[0] == config)

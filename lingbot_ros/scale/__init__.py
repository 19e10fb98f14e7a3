"""Metric scale for a scale-agnostic stream: metres per model unit, applied at the boundary.

* :class:`ScaleConfig` -- the ``scale.*`` settings (source, thresholds, policies);
* :class:`ScaleEstimator` -- one per stream: samples -> robust log-scale estimate, states
  UNKNOWN -> CONVERGING -> LOCKED, bounded refinement, stale reasons, the recent samples'
  drift from the applied value (:class:`ScaleDrift`); readers get immutable
  :class:`ScaleEstimate` snapshots;
* sample sources, each returning a :class:`ScaleSample` or a counted :class:`Rejection`:
  :class:`DepthSource` / :func:`depth_sample`, :class:`OdometrySource` /
  :func:`fit_odometry_scale`, :func:`camera_height_sample` /
  :func:`camera_height_depth_sample` (``fixed`` needs none);
* :class:`ScaleStream` -- the one owner of a stream's scale (estimator, source, lock,
  segment, snapshot) for the node and the offline runner; its source is looked up in the
  one registry (:data:`SOURCES`, :class:`ScaleSource`);
* the conversions where outputs leave: :func:`c2w_to_metres`, :func:`depth_to_metres`,
  :func:`points_to_metres`, :func:`base_in_map_metres` (``T_bo · S(c2w) · T_bo⁻¹``).

Numpy only: no torch, no rclpy. See docs/scale.md.
"""
from .bench import bench_camera_height_source, bench_depth_source, bench_odometry_source
from .camera_height import (GroundPlane, camera_height_depth_sample, camera_height_sample,
                            depth_grid_points, fit_ground_plane)
from .config import BEFORE_LOCK_POLICIES, ScaleConfig
from .depth import (DEPTH_ENCODINGS, CropLike, DepthBuffer, DepthImage, DepthSource,
                    crop_depth, crop_indices, depth_sample, sensor_depth_m)
from .drift import ScaleDrift, measure_drift
from .estimator import ScaleEstimate, ScaleEstimator, ScaleState
from .odometry import OdometrySource, PoseBuffer, fit_odometry_scale, odometry_rejection
from .samples import REASONS, Reason, Rejection, SampleResult, ScaleSample, span_s
from .source_impl import make_source
from .sources import (SCALE_SOURCES, SOURCES, LookupMissed, ScaleSource, SourceKind,
                      source_kind)
from .stream import SNAPSHOT_KEY, ScaleStream
from .units import (MODEL_UNITS, base_in_map_metres, c2w_to_metres, check_factor,
                    depth_to_metres, points_to_metres, units_header)

__all__ = ["ScaleConfig", "SCALE_SOURCES", "BEFORE_LOCK_POLICIES",
           "ScaleEstimator", "ScaleEstimate", "ScaleState", "ScaleDrift", "measure_drift",
           "ScaleSample", "Rejection", "SampleResult", "Reason", "REASONS",
           "ScaleSource", "SourceKind", "SOURCES", "source_kind", "make_source", "LookupMissed",
           "span_s",
           "DepthSource", "DepthBuffer", "DepthImage", "CropLike", "DEPTH_ENCODINGS",
           "depth_sample", "crop_depth", "crop_indices", "sensor_depth_m",
           "OdometrySource", "PoseBuffer", "fit_odometry_scale", "odometry_rejection",
           "GroundPlane", "fit_ground_plane", "camera_height_sample",
           "camera_height_depth_sample", "depth_grid_points",
           "c2w_to_metres", "depth_to_metres", "points_to_metres", "base_in_map_metres",
           "check_factor", "units_header", "MODEL_UNITS", "ScaleStream", "SNAPSHOT_KEY",
           "bench_depth_source", "bench_camera_height_source", "bench_odometry_source"]

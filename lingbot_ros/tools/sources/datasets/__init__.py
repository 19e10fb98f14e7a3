"""Public camera datasets read as they are published, for the offline runner.

:func:`open_dataset` ``(path, format="auto", stamps="auto", fps=30.0, topic=None)`` returns a
:class:`Dataset` (frozen):

* ``source`` -- a :class:`lingbot_ros.tools.sources.frame.FrameSource` yielding
  :class:`~lingbot_ros.tools.sources.frame.SourceFrame` with the dataset's own stamps (integer ns, exact),
  ``len()`` when known (the images the index lists). A listed image that is missing is
  skipped and counted (``source.stats.skipped["missing_file"]``), never fatal.
* ``ground_truth`` -- None, or a :class:`GroundTruth` ``(stamps_ns, poses)``: int64 (N,)
  strictly increasing, float64 (N, 4, 4) rigid **camera-to-world poses of the camera whose
  images are read**, in the dataset's world frame; converted once, at open.
* ``format`` -- the layout used (one of :data:`FORMATS`), ``description`` -- one line for
  logs (``"TUM RGB-D fr1_xyz: 798 images, ground truth 2,431 poses"``), ``path`` -- the
  sequence folder (or file) read.

Formats (``format="auto"`` detects them from the layout, in this order; a forced format on a
path that is not one says which file is missing). Ground truth is always camera-to-world of
the camera read, in the dataset's world:

* ``tum_rgbd`` -- a folder with ``rgb.txt`` [``groundtruth.txt``]. Stamps: rgb.txt's seconds.
  Ground truth: the RGB camera's optical frame in the mocap world, as published
  (quaternion x, y, z, w).
* ``euroc`` -- a sequence folder holding ``mav0/``, or ``mav0/`` itself; images of cam0.
  Stamps: ``cam0/data.csv``'s ns. Ground truth: ``state_groundtruth_estimate0/data.csv`` is
  the body (IMU) in the world, quaternion **w, x, y, z**; moved to cam0 by
  ``cam0/sensor.yaml``'s ``T_BS`` (cam0 in the body): ``T_W_cam0 = T_W_B @ T_BS``.
* ``kitti`` -- ``<root>/sequences/XX/`` (``image_2/``, ``times.txt``, ``calib.txt``); ground
  truth at ``<root>/poses/XX.txt`` (00-10). Stamps: times.txt's seconds. Ground truth:
  camera 0 in camera 0 at image 0, moved to camera 2 (the images read):
  ``T_w_c2 = T_w_c0 @ [I | t0 - t2]`` with ``t = K^-1 P[:, 3]`` of P0 / P2 (camera 2 sits
  6 cm left of camera 0).
* ``seven_scenes`` -- a ``seq-XX/`` folder of ``frame-N.color.png`` / ``frame-N.pose.txt``.
  Stamps: ``round(N * 1e9 / fps)`` (30 Hz). Ground truth: the pose files, as published.
* ``folder`` -- a folder of images. Stamps: the file names (seconds with a decimal point, or
  integer ns of 16+ digits) or ``i / fps``. No ground truth.
* ``video`` -- a video file. Stamps: the container's times (or ``i / fps``). No ground truth.
* ``bag`` -- a rosbag2 folder or a ``.db3``/``.mcap``/``.bag`` file. Stamps: the headers (or
  the record times). No ground truth.

Depth and camera height (for ``--scale``): ``Dataset.depth`` is the aligned sensor depth where the
dataset has it (a :class:`~lingbot_ros.tools.sources.depth_stream.DepthStream`: TUM RGB-D's
``depth.txt``, 16-bit PNG at 5000 per metre; 7-Scenes' ``frame-N.depth.png``, millimetres, 65535
invalid; a bag's ``depth_topic`` or ``/camera/aligned_depth_to_color/image_raw``), in
:mod:`lingbot_ros.tools.sources.datasets.depth`. ``Dataset.camera_height_m`` is KITTI's 1.65 m.

``stamps``: ``'auto'`` everywhere (the dataset's own); ``folder`` also takes ``'filename'`` and
``'fps'``, ``video`` ``'fps'``, ``seven_scenes`` ``'fps'`` (the same as auto), ``bag``
``'header'`` and ``'bag'``; anything else is a ValueError. ``fps`` is used by ``folder``
(fps stamps), ``seven_scenes`` and ``video`` (``stamps='fps'``); ``topic`` by ``bag`` only.

Bad lines in index files (rgb.txt, data.csv, times.txt, calib.txt, poses, pose files) are a
ValueError naming ``file:line``; ground truth with a stamp twice is refused, naming both
lines. The layout details (KITTI's P2 sign, EuRoC's T_BS) are in each module's docstring.

Usage::

    from lingbot_ros.tools.sources.datasets import open_dataset, write_ground_truth_tum

    ds = open_dataset("rgbd_dataset_freiburg1_xyz")         # format detected: tum_rgbd
    print(ds.description)
    for frame in ds.source:                                 # SourceFrame(stamp_ns, image, encoding)
        ...
    print(ds.source.stats.summary())                        # yielded / skipped by reason
    if ds.ground_truth is not None:
        stamps_ns, poses = ds.ground_truth                  # (N,), (N, 4, 4) camera-to-world
        write_ground_truth_tum(ds, "out/groundtruth.tum")   # beside trajectory.tum, for evo

:func:`write_ground_truth_tum` writes with :func:`lingbot_ros.geometry.write_tum`
(callers holding the arrays may call that directly). Times and poses are parsed with
:mod:`lingbot_ros.geometry` (numpy only): reading a dataset never imports torch.
"""
from .common import Dataset, GroundTruth, write_ground_truth_tum
from .depth import (SEVEN_SCENES_INVALID, TUM_DEPTH_FACTOR, read_seven_scenes_depth,
                    read_tum_depth)
from .detect import FORMATS, detect_format, open_dataset

__all__ = ["FORMATS", "Dataset", "GroundTruth", "detect_format", "open_dataset",
           "write_ground_truth_tum", "TUM_DEPTH_FACTOR", "SEVEN_SCENES_INVALID",
           "read_tum_depth", "read_seven_scenes_depth"]

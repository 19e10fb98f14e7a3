"""The scale package is numpy-only: importing it pulls in neither torch nor rclpy."""
import subprocess
import sys


def test_import_pulls_in_no_torch_and_no_rclpy():
    code = ("import sys, lingbot_ros.scale as s; "
            "bad = [m for m in ('torch', 'rclpy') if m in sys.modules]; "
            "assert not bad, bad; assert s.ScaleEstimator and s.bench_depth_source")
    subprocess.run([sys.executable, "-c", code], check=True)

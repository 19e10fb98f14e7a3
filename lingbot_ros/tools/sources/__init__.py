"""Where frames come from: image folders, videos, rosbag2 (and what a truncated one still
holds), datasets, aligned depth."""

"""lingbot_ros: an ament_python ROS 2 package that is also a plain pip package."""
from glob import glob

from setuptools import find_packages, setup

PACKAGE = "lingbot_ros"

setup(
    name=PACKAGE,
    version="0.1.0",
    description="Realtime camera poses from LingBot-Map's streaming transformer on a paged "
                "GPU KV cache, as a ROS 2 node",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(exclude=["tests", "tests.*"]),
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml"]),
        (f"share/{PACKAGE}/config", glob("config/*.yaml") + glob("config/*.rviz")),
        (f"share/{PACKAGE}/launch", glob("launch/*.launch.py")),
        (f"share/{PACKAGE}/msg", glob("msg/*.msg")),
        (f"share/{PACKAGE}/srv", glob("srv/*.srv")),
    ],
    # torch is not pinned here: robots bring their own CUDA build; the Makefile installs the
    # CPU build for development and CI before this package. requirements.txt lists what a
    # ROS install's rosdep cannot provide, with these same bounds (tests/test_package_deps.py).
    install_requires=[
        "setuptools", "numpy", "pyyaml", "safetensors>=0.4", "torch>=2.4",
        "opencv-python-headless>=4.8",  # video, compressed images, image folders
        "rosbags>=0.11,<0.12",  # rosbag2 (sqlite3, mcap) without a ROS install
        "tqdm",  # progress bars of the offline tools
    ],
    extras_require={
        # evo: trajectory files read back as users will (pulls in matplotlib for plots)
        "test": ["pytest>=8,<9", "hypothesis>=6.100", "evo>=1.30"],
        "viz": ["matplotlib"],
        "gpu": ["flashinfer-python>=0.6"],
        # lingbot-ros-eval --ray: work units on a Ray cluster (tested with 2.60)
        "fleet": ["ray>=2.60,<3"],
        # lingbot-ros-view and lingbot-ros-offline --view: the browser viewer (docs/viewer.md)
        "view": ["viser>=1.1,<2"],
    },
    zip_safe=True,
    entry_points={
        "console_scripts": [
            "lingbot-ros-demo = lingbot_ros.clients.demo:main",
            "lingbot-ros-offline-demo = lingbot_ros.tools.offline.demo:main",
            "lingbot-ros-bench = lingbot_ros.tools.bench.cli:main",
            "lingbot-ros-bench-cache = lingbot_ros.tools.bench.cache_cost:main",
            "lingbot-ros-parity = lingbot_ros.tools.parity:main",
            "lingbot-ros-offline = lingbot_ros.tools.offline.cli:main",
            "lingbot-ros-view = lingbot_ros.clients.view:main",
            "lingbot-ros-eval = lingbot_ros.tools.eval.table:main",
            "lingbot-ros-replay = lingbot_ros.tools.replay.cli:main",
            "lingbot-ros-convert-checkpoint = lingbot_ros.tools.convert_checkpoint:main",
            "lingbot_ros_node = lingbot_ros.ros.main:main",
        ],
    },
)

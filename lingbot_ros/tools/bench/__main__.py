"""``python -m lingbot_ros.tools.bench``: the same as ``python -m lingbot_ros.tools.bench.cli``."""
import sys

from .cli import main

sys.exit(main())

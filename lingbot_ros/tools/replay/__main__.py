"""``python -m lingbot_ros.tools.replay``: the same as
``python -m lingbot_ros.tools.replay.cli``."""
import sys

from .cli import main

sys.exit(main())

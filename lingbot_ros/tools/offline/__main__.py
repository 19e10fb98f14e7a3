"""``python -m lingbot_ros.tools.offline``: the same as
``python -m lingbot_ros.tools.offline.cli``."""
import sys

from .cli import main

sys.exit(main())

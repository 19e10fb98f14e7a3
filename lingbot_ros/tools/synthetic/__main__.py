"""``python -m lingbot_ros.tools.synthetic``: the same as
``python -m lingbot_ros.tools.synthetic.render``."""
import sys

from .render import main

sys.exit(main())

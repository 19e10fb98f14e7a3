"""Clients of a running node, not part of it: the demo (``make demo``), the Probe it and the
tests call services with, and an rclpy node on its own thread."""

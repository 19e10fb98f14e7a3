"""BackgroundNode: an rclpy node on its own Context, spun by a daemon thread.

For clients that live beside other ROS code in one process (the demo's probe, test
receivers): entering creates the context, the node (``setup(node)`` adds its entities) and
the spinning thread; leaving shuts the context down and joins the thread.
"""
from __future__ import annotations

import threading

import rclpy
from rclpy.executors import SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions


class BackgroundNode:
    def __init__(self, node_name: str, **node_kwargs) -> None:
        self._rclpy_name = node_name
        self._node_kwargs = node_kwargs

    def setup(self, node) -> None:
        """Create subscriptions, clients and publishers on ``node`` (override)."""

    def __enter__(self):
        self.context = rclpy.Context()
        # Our own context and no signal handlers: the owning process keeps Ctrl-C.
        rclpy.init(args=[], context=self.context, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(self._rclpy_name, context=self.context, **self._node_kwargs)
        self.setup(self.node)
        self._executor = SingleThreadedExecutor(context=self.context)
        self._executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.context.try_shutdown()
        self._thread.join(timeout=5)
        self._executor.shutdown()

    def _spin(self) -> None:
        while self.context.ok():
            try:
                self._executor.spin_once(timeout_sec=0.05)
            except Exception:  # noqa: BLE001 -- the context was shut down under us
                return

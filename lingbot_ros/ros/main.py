"""lingbot_ros_node's entry point: start rclpy, run the lifecycle node, exit cleanly on a
signal (``python -m lingbot_ros.ros.main`` and ``python -m lingbot_ros.ros.node`` run this).

Exit status: 0 after a lifecycle shutdown or a SIGINT/SIGTERM at any point (importing,
configuring, running); 1 when ``autostart`` cannot configure or activate (the reason is
logged at ERROR first); 2 when rclpy cannot start (a malformed ``--params-file``).
"""
from __future__ import annotations

import faulthandler
import os
import signal
import sys


class _Stopped(Exception):
    """SIGTERM before rclpy took the signals over (while importing torch and the node)."""


_starting = True  # until the node exists; then rclpy's handler (which calls ours) acts
_signalled = False  # a SIGINT/SIGTERM arrived: whatever is raised next is the way out


def _on_signal(signum, frame):
    """Ours, installed before rclpy's (which calls it after shutting the context down)."""
    global _signalled
    _signalled = True
    if _starting:
        raise _Stopped()
    if signum == signal.SIGINT:
        raise KeyboardInterrupt


def main(args=None) -> int:
    global _starting
    # A native crash (an abort in a C++ library, a segfault) prints every thread's Python
    # stack to stderr before the process dies: the log says where it happened.
    faulthandler.enable(all_threads=True)
    # Until the node exists, SIGTERM ends the start as Ctrl-C does. rclpy.init installs its
    # own handlers, which call these too: they then note the signal (and SIGINT raises
    # KeyboardInterrupt, as Python's own handler does).
    _starting = True
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)
    try:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor

        from .node import ConfigureInterrupted, LingbotNode
    except (KeyboardInterrupt, Exception) as exc:
        # A signal's _Stopped may come out wrapped (raised inside an extension module's
        # init, it is an ImportError): once a signal arrived, whatever is raised is the way out.
        if not (_signalled or isinstance(exc, KeyboardInterrupt)):
            raise
        print("lingbot_ros: interrupted while starting; exiting", file=sys.stderr)
        return 0
    try:
        rclpy.init(args=args)  # from here on rclpy's handlers shut the context down
        node = LingbotNode()
        _starting = False
    except (KeyboardInterrupt, _Stopped):
        rclpy.try_shutdown()
        return 0
    except Exception as exc:  # noqa: BLE001 -- a malformed --params-file or --ros-args
        if _signalled:  # the signal's exception, wrapped on its way out
            rclpy.try_shutdown()
            return 0
        print(f"lingbot_ros: cannot start: {type(exc).__name__}: {exc}".rstrip(),
              file=sys.stderr)
        rclpy.try_shutdown()
        return 2
    # One executor thread. rclpy's MultiThreadedExecutor re-yields a subscription whose
    # message a pool thread has not taken yet, rebuilding its wait set in Python each time: at
    # 60 Hz input it held a core and the GIL, and the worker got 2-5 frames/s where it
    # computes 25-30. Every callback here is short; a reset waits at most for the frame in
    # flight, and intake waits in DDS meanwhile.
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    code = _run(node, executor, ConfigureInterrupted)
    job = node.configure_job  # a configure abandoned on a signal: its thread still runs
    if job is not None and job.running:
        # Nothing to save: the model load / warm-up writes nothing. Waiting for it (minutes
        # with a large preset on a CPU) is what a signal must not do; a daemon thread in
        # torch can also crash the interpreter's own shutdown. End the process here.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


def _run(node, executor, interrupted_types) -> int:
    import rclpy
    from rclpy.executors import ExternalShutdownException
    from rclpy.lifecycle import TransitionCallbackReturn

    interrupted = False
    try:
        if node.get_parameter("autostart").value:
            for name, trigger in (("configure", node.trigger_configure),
                                  ("activate", node.trigger_activate)):
                if trigger() == TransitionCallbackReturn.SUCCESS:
                    continue
                if not node.context.ok():  # SIGINT/SIGTERM arrived meanwhile
                    interrupted = True
                    print(f"lingbot_ros: interrupted while {name[:-1]}ing; exiting",
                          file=sys.stderr)
                    return 0
                node.get_logger().error(f"autostart: {name} failed (see above); exiting "
                                        "with status 1")
                return 1
        # Until a signal, or a lifecycle shutdown transition (which completes ``finished``).
        executor.spin_until_future_complete(node.finished)
    except (KeyboardInterrupt, ExternalShutdownException, interrupted_types):
        # SIGINT/SIGTERM (rclpy's handler shuts the context down), also while configuring
        interrupted = True
        print("lingbot_ros: interrupted; exiting", file=sys.stderr)
    except Exception:
        if rclpy.ok() and not _signalled:
            raise
        # A signal met the executor inside rclpy's C++ code: a KeyboardInterrupt there
        # comes out as pybind11's RuntimeError ("Unable to convert call argument"), a
        # shutdown between its checks as RCLError ("the given context is not valid").
        interrupted = True
        print("lingbot_ros: interrupted; exiting", file=sys.stderr)
    finally:
        _exit_cleanly(node, executor, interrupted)
    return 0


def _exit_cleanly(node, executor, interrupted: bool) -> None:
    """Stop the worker, free the session, destroy the node and shut rclpy down, whatever
    brought us here (a signal, a shutdown transition, an error)."""
    import rclpy

    # A second Ctrl-C (or SIGTERM) while we clean up must not abort the cleanup with a
    # KeyboardInterrupt traceback: we are exiting already.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    if not interrupted and rclpy.ok() and not node.finished.done():
        try:
            node.trigger_shutdown()
        except Exception as exc:  # noqa: BLE001 -- shutting down anyway
            print(f"lingbot_ros: shutdown transition failed: {exc}", file=sys.stderr)
    # On SIGINT/SIGTERM rclpy's handler shuts the context down (from its own thread): no
    # transition can run then (its event cannot be published), so do the shutdown work
    # directly: stop the worker before the node's entities are destroyed under it (that
    # aborted the process), free the session. A no-op after the shutdown transition.
    job = node.configure_job
    if job is None or not job.running:  # else nothing was built yet: main() ends it all
        node.on_shutdown(None)
    executor.shutdown()
    node.destroy_node()
    rclpy.try_shutdown()


if __name__ == "__main__":
    sys.exit(main())

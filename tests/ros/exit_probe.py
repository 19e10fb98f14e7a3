"""Runs the node's ``main()`` in this process, sends itself a signal once the node is active,
and prints (one JSON line) main()'s status and the DDS threads alive while active and after
main() returned: the node's DDS participant must be gone before the interpreter finalizes.

    python tests/ros/exit_probe.py SIGINT --ros-args -p model.preset:=tiny ...

(The thread names are Fast DDS's, the RMW the wheels ship: ``dds.*``.)
"""
from __future__ import annotations

import json
import os
import signal
import sys
import threading

from lingbot_ros.ros import main as entry
from lingbot_ros.ros.node import LingbotNode

# One per process, not per participant: Fast DDS's shared-memory watchdog stays until exit.
PROCESS_WIDE = {"dds.shm.wdog"}


def dds_threads() -> list[str]:
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return sorted(n for n in names if n.startswith("dds."))


def run(sig: signal.Signals, argv: list[str]) -> dict:
    active = threading.Event()
    seen: list[str] = []
    on_activate = LingbotNode.on_activate

    def activated(node, state):
        result = on_activate(node, state)
        seen.extend(dds_threads())
        active.set()
        return result

    def send() -> None:  # from another thread, as an operator's Ctrl-C lands anywhere
        active.wait()
        os.kill(os.getpid(), sig)

    LingbotNode.on_activate = activated
    threading.Thread(target=send, daemon=True).start()
    rc = entry.main(argv)
    return {"rc": rc, "while_active": seen,
            "after_main": [n for n in dds_threads() if n not in PROCESS_WIDE]}


if __name__ == "__main__":
    print(json.dumps(run(signal.Signals[sys.argv[1]], sys.argv[:1] + sys.argv[2:])), flush=True)

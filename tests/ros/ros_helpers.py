"""Helpers for tests that talk ROS: an isolated environment, bag writing, a raw receiver.

Every test that starts ROS (in this process or a child) uses ``ros_env``: discovery limited to
the loopback interface (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST; ROS_LOCALHOST_ONLY alone still
multicasts out), a random domain id, and logs under the test's temp dir.
"""
from __future__ import annotations

import os
import random
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from lingbot_ros.clients.background_node import BackgroundNode

REPO = Path(__file__).resolve().parents[2]
BAG_START_NS = 1_700_000_000 * 10**9  # far from the wall clock: /clock values are bag time


@pytest.fixture
def ros_env(tmp_path, monkeypatch) -> dict[str, str]:
    """Environment for ROS in this test: set in os.environ, returned for subprocesses."""
    for name in ("ROS_LOCALHOST_ONLY", "ROS_STATIC_PEERS", "RMW_IMPLEMENTATION"):
        monkeypatch.delenv(name, raising=False)
    values = {"ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST",
              "ROS_DOMAIN_ID": str(random.randint(1, 101)),
              "ROS_LOG_DIR": str(tmp_path / "ros_log"),
              "ROS_HOME": str(tmp_path / "ros_home"),  # files.root's default: never ~/.ros
              "PYTHONUNBUFFERED": "1"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    return env


@dataclass(frozen=True)
class Recorded:
    """One message as written to a bag."""

    topic: str
    msgtype: str
    time_ns: int
    raw: bytes


def write_bag(path: Path, storage: str, messages: list[Recorded], *,
              extra_types: str = "", fake_hashes: tuple[str, ...] = ()) -> Path:
    """Write ``messages`` to a rosbag2 at ``path`` with rosbags (storage 'sqlite3' or 'mcap').

    Args:
        path: bag directory to create.
        storage: 'sqlite3' or 'mcap'.
        messages: in time order; ``raw`` is CDR (e.g. rclpy.serialization.serialize_message).
        extra_types: .msg text of one extra type 'lingbot_fake_msgs/msg/Thing', which no ROS
            install has, registered for topics that use it.
        fake_hashes: topics recorded with a wrong RIHS01 type hash (as if from another
            distro's definition of the type).
    Returns:
        ``path``.
    """
    from rosbags.rosbag2 import StoragePlugin, Writer
    from rosbags.typesys import Stores, get_types_from_msg, get_typestore

    typestore = get_typestore(Stores.ROS2_KILTED)
    if extra_types:
        typestore.register(get_types_from_msg(extra_types, "lingbot_fake_msgs/msg/Thing"))
    plugin = {"sqlite3": StoragePlugin.SQLITE3, "mcap": StoragePlugin.MCAP}[storage]
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        connections = {}
        for m in messages:
            if m.topic not in connections:
                if m.topic in fake_hashes:  # rosbags takes a given hash only without a store
                    kwargs = {"msgdef": typestore.generate_msgdef(m.msgtype, ros_version=2)[0],
                              "rihs01": "RIHS01_" + "0" * 64}
                else:
                    kwargs = {"typestore": typestore}
                connections[m.topic] = writer.add_connection(m.topic, m.msgtype, **kwargs)
            writer.write(connections[m.topic], m.time_ns, m.raw)
    return path


class RawReceiver(BackgroundNode):
    """Raw (CDR bytes) subscriptions in this process, on its own rclpy context and thread.

    Use as a context manager; ``received[topic]`` lists (bytes, monotonic receive time).
    """

    def __init__(self, topics: dict[str, type], qos_depth: int = 1000, best_effort=()):
        super().__init__(f"test_receiver_{os.getpid()}")
        self._topics, self._depth, self._best_effort = topics, qos_depth, set(best_effort)
        self.received: dict[str, list[tuple[bytes, float]]] = {t: [] for t in topics}
        self._lock = threading.Lock()

    def setup(self, node) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy

        for topic, msg_type in self._topics.items():
            reliability = (ReliabilityPolicy.BEST_EFFORT if topic in self._best_effort
                           else ReliabilityPolicy.RELIABLE)
            node.create_subscription(
                msg_type, topic, lambda raw, t=topic: self._on_message(t, raw),
                QoSProfile(depth=self._depth, reliability=reliability), raw=True)

    def _on_message(self, topic: str, raw: bytes) -> None:
        with self._lock:
            self.received[topic].append((bytes(raw), time.monotonic()))

    def count(self, topic: str) -> int:
        with self._lock:
            return len(self.received[topic])

    def wait_for(self, counts: dict[str, int], timeout: float) -> bool:
        """Wait until each topic has at least its count of messages."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self.count(t) >= n for t, n in counts.items()):
                return True
            time.sleep(0.02)
        return False

    def wait_for_last(self, last: dict[str, bytes], timeout: float) -> bool:
        """Wait until each topic's ``last`` message (the one published LAST on it: the
        sentinel) has arrived. A topic's messages come from one reliable writer in order, so
        everything published on it before that one has arrived too: compare the whole list
        then, instead of sleeping and hoping a stray message would have come."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if all(any(raw == r for r, _ in self.received[t]) for t, raw in last.items()):
                    return True
            time.sleep(0.02)
        return False


def start_replay(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    """``python -m lingbot_ros.tools.replay.cli ARGS`` in a child process (text output)."""
    return subprocess.Popen([sys.executable, "-m", "lingbot_ros.tools.replay.cli", *args],
                            env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def finish(proc: subprocess.Popen, timeout: float = 30) -> tuple[int, str, str]:
    """Wait for a child; kill it (and fail) if it outlives ``timeout``."""
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"process did not finish in {timeout} s\nstdout:\n{out}\nstderr:\n{err}")
    return proc.returncode, out, err

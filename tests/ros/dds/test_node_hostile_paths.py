"""Hostile requests over DDS: one real node, every service called with bad paths and requests
(empty, '/', '..', '../../etc/passwd', an absolute path outside files.root, a FIFO, a folder,
a symlink out of the root, a symlink to a 2 GiB sparse file, a symlink loop, a 10 kB path,
a 300-byte name, a NUL byte, a file the node did not write; for ~/load_session also snapshot
folders whose manifest.json is a folder, a FIFO or a link to the 2 GiB file, or whose tensor
file is a folder). The node stays up, answers each within 5 s with success=false and a
reason, changes no file, and keeps tracking: images published
between the batches and after them give poses. ~/pause, ~/get_cache_info and ~/reset take no
path: they are called in between and must answer too. A good snapshot loads after all the
failed loads.

Non-UTF-8 cannot be sent from rclpy: a str with lone surrogates (how Python carries
undecodable bytes) raises UnicodeEncodeError in the client's serialization, before anything
is sent (asserted below); FileRoot refuses such names for callers that can pass them
(tests/ros/dds/test_node_files.py). A NUL cuts the string on the wire: 'x\\0y' arrives as 'x', so
the case sends an outside path with a NUL-led suffix, which must be refused as outside.
"""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time

import pytest

from tests.ros.node_harness import NodeProcess, Probe, good_images
from tests.ros.ros_helpers import BAG_START_NS
from tests.ros.ros_helpers import ros_env  # noqa: F401 -- the fixture

ANSWER_S = 5.0  # each request answered within this
PARAMS = {"qos.image": "reliable", "qos.image_depth": 100, "queue_size": 100,
          "publish.map_points": True}
HUGE = 2 << 30  # the sparse file's size (no disk used)


class ServiceProbe(Probe):
    def setup(self, node) -> None:
        from lingbot_ros_interfaces.srv import LoadSession, SaveMap, SaveSession
        from std_srvs.srv import SetBool
        super().setup(node)
        n = self._node_name
        for name, srv in (("save_map", SaveMap), ("save_session", SaveSession),
                          ("load_session", LoadSession), ("pause", SetBool)):
            self.clients[name] = node.create_client(srv, f"{n}/{name}")

    def ask(self, name: str, request, timeout: float = ANSWER_S):
        """(response or None, seconds): one request, no re-send."""
        client = self.clients[name]
        t0 = time.monotonic()
        future = client.call_async(request)
        while not future.done() and time.monotonic() - t0 < timeout:
            time.sleep(0.005)
        if not future.done():
            client.remove_pending_request(future)
            return None, time.monotonic() - t0
        return future.result(), time.monotonic() - t0

    def warm_up(self, name: str, request) -> None:
        """Until ``request`` (a refused one: changes nothing) is answered: the node's response
        writer has then matched this client (a first response can be lost to discovery)."""
        assert self.clients[name].wait_for_service(timeout_sec=30)
        for _ in range(10):
            if self.ask(name, request, 3.0)[0] is not None:
                return
        pytest.fail(f"no answer from ~/{name}")


def request(name: str, path: str):
    from lingbot_ros_interfaces.srv import LoadSession, SaveMap, SaveSession, SaveTrajectory
    srv = {"save_trajectory": SaveTrajectory, "save_map": SaveMap,
           "save_session": SaveSession, "load_session": LoadSession}[name]
    return srv.Request(path=path)


def hostile_tree(tmp_path):
    """files.root (with a FIFO, a folder, links, a 2 GiB sparse file, a foreign file and broken
    snapshot folders) beside a folder outside it holding a victim file."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "victim.txt").write_text("keep me\n")
    os.mkfifo(root / "fifo")
    (root / "dir").mkdir()
    (root / "dir" / "inside").write_text("x")
    (root / "link_out").symlink_to(outside / "victim.txt")
    (root / "link_out_dir").symlink_to(outside)
    subprocess.run(["truncate", "-s", str(HUGE), str(root / "huge")], check=True)
    (root / "link_huge").symlink_to(root / "huge")
    (root / "params.yaml").write_text("lingbot_ros:\n  ros__parameters: {}\n")
    (root / "loop").symlink_to(root / "loop")  # ELOOP for whoever follows it
    for name in ("snap_dir", "snap_fifo", "snap_huge"):
        (root / name).mkdir()
    (root / "snap_dir" / "manifest.json").mkdir()
    os.mkfifo(root / "snap_fifo" / "manifest.json")
    (root / "snap_huge" / "manifest.json").symlink_to(root / "huge")
    return root, outside


def tree_state(*folders):
    """What is in ``folders`` (names, kinds, sizes, contents of small files): must not change."""
    state = {}
    for folder in folders:
        for dirpath, dirnames, filenames in os.walk(folder):
            for name in dirnames + filenames:
                path = os.path.join(dirpath, name)
                st = os.lstat(path)
                small = stat.S_ISREG(st.st_mode) and st.st_size < 4096
                state[path] = (stat.S_IFMT(st.st_mode), st.st_size,
                               open(path, "rb").read() if small else None)
    return state


def cases(root, outside):
    """(label, path) for every service, then those of ~/load_session only."""
    victim = str(outside / "victim.txt")
    common = [("empty", ""), ("slash", "/"), ("dotdot", ".."),
              ("etc_passwd", "../../etc/passwd"), ("outside_absolute", victim),
              ("fifo", "fifo"), ("folder", "dir"), ("symlink_out", "link_out"),
              ("symlink_to_2GiB", "link_huge"), ("long_10kB", "d/" * 5000),
              ("nul", victim + "\x00.tum"), ("not_ours", "params.yaml"),
              ("symlink_loop", "loop"), ("name_300B", "n" * 300)]
    load_only = [("symlink_out_folder", "link_out_dir"), ("manifest_is_a_folder", "snap_dir"),
                 ("manifest_is_a_fifo", "snap_fifo"), ("manifest_is_2GiB", "snap_huge")]
    return common, load_only


def test_every_service_refuses_hostile_paths_and_the_node_keeps_tracking(tmp_path, ros_env):
    from lingbot_ros_interfaces.srv import GetCacheInfo, SaveTrajectory
    from rclpy.serialization import serialize_message
    from std_srvs.srv import SetBool, Trigger

    with pytest.raises(UnicodeEncodeError):  # non-UTF-8 never leaves an rclpy client
        serialize_message(SaveTrajectory.Request(path="\udcff.tum"))

    root, outside = hostile_tree(tmp_path)
    common, load_only = cases(root, outside)
    load_only.append(("tensor_file_is_a_folder", "bad_tensor.snap"))
    batch = [0]
    with NodeProcess(ros_env, tmp_path, {**PARAMS, "files.root": str(root)}) as node, \
            ServiceProbe() as probe:
        probe.wait_active(node)
        probe.wait_for_image_subscriber()

        def track(count: int = 2) -> None:
            """``count`` new images give ``count`` more poses."""
            had = len(probe.poses)
            batch[0] += 1
            for msg in good_images(count, start_ns=BAG_START_NS + batch[0] * 10**9):
                probe.publish_image(msg)
            probe.wait_until(lambda: len(probe.poses) >= had + count, 60,
                             lambda: f"{count} poses after batch {batch[0]}")

        track(3)
        # A good snapshot, and a copy whose tensor file is a folder (read by the snapshot
        # reader: the service answers whatever it raises). The good one loads at the end:
        # a failed load, then a successful one.
        probe.warm_up("save_session", request("save_session", ""))
        reply, _ = probe.ask("save_session", request("save_session", "good.snap"), 30.0)
        assert reply is not None and reply.success, reply
        shutil.copytree(root / "good.snap", root / "bad_tensor.snap")
        tensor = next(p for p in (root / "bad_tensor.snap").iterdir()
                      if p.name != "manifest.json")
        tensor.unlink()
        tensor.mkdir()
        before = tree_state(root, outside)
        answered = []
        for name in ("save_trajectory", "save_map", "save_session", "load_session"):
            probe.warm_up(name, request(name, ""))
            for label, path in common + (load_only if name == "load_session" else []):
                reply, took = probe.ask(name, request(name, path))
                where = f"~/{name} {label}"
                assert reply is not None, f"{where}: no answer in {ANSWER_S} s\n" \
                    f"{node.log()[-3000:]}"
                assert not reply.success and reply.message, (where, reply.message)
                assert took < ANSWER_S, (where, took)
                assert node.poll() is None, f"{where}: the node exited\n{node.log()[-3000:]}"
                answered.append((name, label, round(took, 3), reply.message[:120]))
            track()
        # The services without a path: answered, and tracking goes on after each.
        for name, req in (("pause", SetBool.Request(data=True)),
                          ("pause", SetBool.Request(data=False)),
                          ("get_cache_info", GetCacheInfo.Request()),
                          ("reset", Trigger.Request())):
            reply, took = probe.ask(name, req, 30.0)
            assert reply is not None and reply.success, (name, reply)
            answered.append((name, "no path", round(took, 3), reply.message[:120]))
        track(3)
        reply, _ = probe.ask("load_session", request("load_session", "good.snap"), 30.0)
        assert reply is not None and reply.success, reply
        track(2)
        assert node.poll() is None, node.log()[-3000:]
        log = node.log()

    assert tree_state(root, outside) == before, "a refused request changed a file"
    assert set(os.listdir(tmp_path)) <= {"root", "outside", "node.stdout", "node.stderr",
                                         "ros_log", "ros_home"}, os.listdir(tmp_path)
    assert "Traceback" not in log, log[-3000:]
    for name, label, took, message in answered:
        print(f"{name:16} {label:22} {took:6.3f} s  {message}")
    print(f"hostile-input cases answered: {len(answered)} "
          f"({sum(1 for a in answered if a[1] != 'no path')} refused paths over 4 services, "
          f"{sum(1 for a in answered if a[1] == 'no path')} calls of the path-less services)")

"""lingbot-ros-eval --ray on a real Ray cluster started here: a head and a second raylet (a
second node) with one logical GPU each, inside a network namespace this test creates
(``unshare --net``: only ``lo`` exists there, up), every Ray process started with
``--node-ip-address=127.0.0.1``.

Loopback only, proven twice: the namespace has no other interface, and every socket of
every process in it (gcs_server, both raylets, their agents, the workers, the driver)
listens on, and talks to, a loopback address only. The cluster's processes are ended by
their namespace (never ``ray stop``, which ends every Ray of the machine), even when a test
fails.

Identity: the table, each trajectory.tum and each summary's numbers of the cluster run are
those of the local run (timing fields and the worker column aside). Faults: a worker
SIGKILLed under a unit (its unit rerun), a corrupt bag (an error row after its retries,
exit 1), a SIGKILLed driver run again with --resume (finished units skipped, checked by
their digests), a bad address and a cluster without the requested GPUs (an error before
any work).
"""
import csv
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from lingbot_ros.tools.synthetic.render import render_sequence
from lingbot_ros.tools.synthetic.writers import write_bag, write_kitti, write_tum_rgbd

RAY = Path(sys.executable).with_name("ray")
GCS_PORT = 46379  # the namespace has its own ports: nothing else listens there
FAST = ["--width", "56", "--scale-frames", "2", "--window", "4", "--rollover", "8",
        "--no-progress"]
POLICIES = ["--policies", "all,every_n"]
TIMING = {"fps", "wall_s", "latency_ms"}  # may differ between two runs of the same unit
LOOPBACK_V4 = "127."
CLUSTER_START_S = 120
RUN_S = 150


# --- the cluster ------------------------------------------------------------------------------

def _pids_in(netns: str) -> list[int]:
    """Processes in the network namespace ``netns`` (everything the cluster started: only
    our commands enter it; Ray's processes overwrite their environment with their title, so
    an environment marker would miss some)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/net") == netns:
                    found.append(int(entry))
            except OSError:
                continue
    return found


def _end(netns: str) -> None:
    """SIGTERM then SIGKILL to the namespace's processes only, until none is left."""
    for sig, grace in ((signal.SIGTERM, 3), (signal.SIGKILL, 10)):
        for pid in _pids_in(netns):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while _pids_in(netns) and time.monotonic() < deadline:
            time.sleep(0.1)
    assert not _pids_in(netns), "cluster processes survived SIGKILL"


# Run inside the new namespaces: lo up (SIOCGIFFLAGS / SIOCSIFFLAGS, no `ip` needed), a
# hostname that resolves nowhere, then hold the namespace open.
NAMESPACE_HOLDER = """
import fcntl, socket, struct, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
req = struct.pack("16sH14x", b"lo", 0)
flags = struct.unpack("16sH14x", fcntl.ioctl(s, 0x8913, req))[1]
fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", flags | 0x1))
socket.sethostname("lingbot-fleet-test")
print("ready", flush=True)
time.sleep(3600)
"""
ENV = dict(os.environ, RAY_USAGE_STATS_ENABLED="0", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")


def local_eval(*args, check_rc=None):
    """lingbot-ros-eval without --ray, in a subprocess (one torch thread, like a worker)."""
    proc = subprocess.run([sys.executable, "-m", "lingbot_ros.tools.eval.table",
                           *map(str, args)], env=ENV, capture_output=True, text=True,
                          timeout=RUN_S)
    out = proc.stdout + proc.stderr
    if check_rc is not None:
        assert proc.returncode == check_rc, out
    return proc.returncode, out


class Cluster:
    def __init__(self):
        self.temp = self.holder = self.netns = None
        self.env = ENV
        self.address = f"127.0.0.1:{GCS_PORT}"

    def in_netns(self, argv) -> list[str]:
        return ["nsenter", "-t", str(self.netns_pid), "-n", "-u", "--", *map(str, argv)]

    def start(self) -> None:
        # The namespace: its own network (only lo, brought up) and hostname (one that does
        # not resolve, so Ray's address discovery falls back to 127.0.0.1).
        self.holder = subprocess.Popen(
            ["unshare", "--net", "--uts", "--fork", sys.executable, "-c", NAMESPACE_HOLDER],
            env=self.env, stdout=subprocess.PIPE, text=True)
        assert self.holder.stdout.readline().strip() == "ready", "unshare --net failed"
        children = Path(f"/proc/{self.holder.pid}/task/{self.holder.pid}/children")
        self.netns_pid = int(children.read_text().split()[0])
        self.netns = os.readlink(f"/proc/{self.netns_pid}/ns/net")
        assert self.netns != os.readlink("/proc/self/ns/net")
        temp = self.temp = Path(tempfile.mkdtemp(prefix="lbf", dir="/tmp"))  # short: AF_UNIX
        common = ["--node-ip-address=127.0.0.1", f"--temp-dir={temp}", "--num-cpus=1",
                  "--num-gpus=1", "--disable-usage-stats", "--object-store-memory=80000000"]
        head = [RAY, "start", "--head", f"--port={GCS_PORT}", "--include-dashboard=false",
                "--dashboard-port=46380", *common]
        worker = [RAY, "start", f"--address={self.address}", *common]
        for i, argv in enumerate((head, worker)):
            ports = 46400 + 100 * i
            argv += [f"--node-manager-port={ports}", f"--object-manager-port={ports + 1}",
                     f"--dashboard-agent-grpc-port={ports + 2}",
                     f"--dashboard-agent-listen-port={ports + 3}",
                     f"--metrics-export-port={ports + 4}",
                     f"--runtime-env-agent-port={ports + 5}",
                     f"--min-worker-port={ports + 10}", f"--max-worker-port={ports + 99}"]
            proc = subprocess.run(self.in_netns(argv), env=self.env, capture_output=True,
                                  text=True, timeout=CLUSTER_START_S)
            assert proc.returncode == 0, proc.stdout + proc.stderr

    def eval(self, *args, ray=True, check_rc=None):
        """lingbot-ros-eval in a subprocess (in the namespace with --ray); (rc, output)."""
        if not ray:
            return local_eval(*args, check_rc=check_rc)
        argv = self.in_netns([sys.executable, "-m", "lingbot_ros.tools.eval.table",
                              *map(str, args), "--ray", self.address])
        proc = subprocess.run(argv, env=self.env, capture_output=True, text=True,
                              timeout=RUN_S)
        out = proc.stdout + proc.stderr
        if check_rc is not None:
            assert proc.returncode == check_rc, out
        return proc.returncode, out

    def popen_eval(self, *args):
        argv = self.in_netns([sys.executable, "-m", "lingbot_ros.tools.eval.table",
                              *map(str, args), "--ray", self.address])
        return subprocess.Popen(argv, env=self.env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)

    def stop(self) -> None:
        if self.netns is not None:
            _end(self.netns)
        if self.holder is not None:
            self.holder.kill()
            self.holder.wait(timeout=10)
        if getattr(self, "temp", None) is not None:
            shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if shutil.which("unshare") is None or shutil.which("nsenter") is None:
        pytest.fail("the Ray cluster tests need unshare and nsenter (util-linux)")
    c = Cluster()
    try:
        c.start()
        yield c
    finally:
        c.stop()


# --- loopback only ----------------------------------------------------------------------------

def _addr(hex_addr: str) -> str:
    ip, _ = hex_addr.split(":")
    raw = bytes.fromhex(ip)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw[::-1])
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4))
    return socket.inet_ntop(socket.AF_INET6, raw)


def _is_loopback(ip: str) -> bool:
    return ip.startswith(LOOPBACK_V4) or ip == "::1" or ip.startswith("::ffff:127.")


def _sockets(pid: int) -> list[tuple[str, str, str, str]]:
    """(kind, local ip, remote ip, state) of each inet socket ``pid`` holds, read from its
    own network namespace's tables."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            link = os.readlink(fd)
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[8:-1])
    found = []
    for kind in ("tcp", "tcp6", "udp", "udp6"):
        lines = Path(f"/proc/{pid}/net/{kind}").read_text().splitlines()[1:]
        for line in lines:
            f = line.split()
            if f[9] in inodes:
                found.append((kind, _addr(f[1]), _addr(f[2]), f[3]))
    return found


def assert_loopback_only(cluster: Cluster) -> int:
    """Every cluster process (gcs_server, raylets, agents, workers, the driver when one
    runs): its namespace has only lo, each TCP listener is on a loopback address, each
    connection and UDP socket between loopback addresses. Returns the number of listening
    sockets seen (so a check of nothing cannot pass)."""
    listening, bad, names = 0, [], []
    pids = _pids_in(cluster.netns)
    for pid in pids:
        try:
            devices = [line.split(":")[0].strip() for line in
                       Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]]
            socks = _sockets(pid)
            names.append(Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0])
        except (FileNotFoundError, ProcessLookupError):
            continue  # ended meanwhile
        assert devices == ["lo"], f"pid {pid} sees interfaces {devices}"
        for kind, local, remote, state in socks:
            if kind.startswith("tcp") and state == "0A":  # LISTEN
                listening += 1
                if not _is_loopback(local):
                    bad.append((pid, kind, local, "listens"))
            elif not _is_loopback(local) or (remote not in ("0.0.0.0", "::")
                                             and not _is_loopback(remote)):
                bad.append((pid, kind, local, remote))
    assert not bad, f"Ray sockets off loopback: {bad}"
    assert listening >= 4, "no listening socket found: the check saw nothing"
    assert sum(b"gcs_server" in n for n in names) == 1 and \
        sum(n.endswith(b"raylet") for n in names) == 2, names
    return listening


# --- data -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def sequences(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet_seqs")
    return [write_tum_rgbd(render_sequence(16, 80, 60, seed=seed), root / f"room{seed}").path
            for seed in range(4)]


@pytest.fixture(scope="module")
def corrupt_bag(tmp_path_factory):
    """A rosbag2 whose sqlite file has 4 KiB of garbage in the middle."""
    bag = Path(write_bag(render_sequence(6, 80, 60, seed=9),
                         tmp_path_factory.mktemp("bad") / "drive").path)
    db = next(bag.rglob("*.db3"))
    data = bytearray(db.read_bytes())
    data[len(data) // 4:len(data) // 4 + 4096] = b"\xde\xad\xbe\xef" * 1024
    db.write_bytes(bytes(data))
    return bag


@pytest.fixture(scope="module")
def local_run(sequences, tmp_path_factory):
    """The reference: the same command without --ray (not in the namespace)."""
    out = tmp_path_factory.mktemp("local") / "eval"
    local_eval(*sequences, *POLICIES, "--out", out, *FAST, check_rc=0)
    return out


def _rows(out: Path) -> list[dict]:
    return list(csv.DictReader((out / "table.csv").open()))


def _numbers(summary: dict) -> dict:
    """A summary without its timing fields and output paths."""
    return {k: v for k, v in summary.items() if k not in TIMING | {"outputs"}}


def assert_same_results(out: Path, reference: Path, paths: bool = True) -> None:
    """``out``'s units (all of the reference's, or its first ones) equal the reference's."""
    rows, ref_rows = _rows(out), _rows(reference)
    assert [(r["sequence"], r["policy"]) for r in rows] == \
        [(r["sequence"], r["policy"]) for r in ref_rows[:len(rows)]]
    for row, ref in zip(rows, ref_rows):
        assert {k: v for k, v in row.items() if k not in ("fps", "worker")} == \
            {k: v for k, v in ref.items() if k not in ("fps", "worker")}
        unit = Path(row["sequence"]) / row["policy"]
        for name in ("trajectory.tum", "groundtruth.tum"):
            assert (out / unit / name).read_bytes() == (reference / unit / name).read_bytes()
        summary = json.loads((out / unit / "summary.json").read_text())
        ref_summary = json.loads((reference / unit / "summary.json").read_text())
        assert _numbers(summary) == _numbers(ref_summary)
        if paths:  # (a copied folder keeps the paths it was written with)
            assert summary["outputs"]["trajectory"] == str(out / unit / "trajectory.tum")


# --- tests ------------------------------------------------------------------------------------

def test_the_cluster_is_two_nodes_on_loopback_only(cluster):
    assert_loopback_only(cluster)
    probe = ("import json, ray; ray.init(address='%s', logging_level='ERROR'); "
             "print(json.dumps([[n['NodeManagerAddress'], n['Resources'].get('GPU')] "
             "for n in ray.nodes() if n['Alive']]))" % cluster.address)
    proc = subprocess.run(cluster.in_netns([sys.executable, "-c", probe]), env=cluster.env,
                          capture_output=True, text=True, timeout=RUN_S)
    assert proc.returncode == 0, proc.stderr
    nodes = json.loads(proc.stdout.strip().splitlines()[-1])
    assert nodes == [["127.0.0.1", 1.0], ["127.0.0.1", 1.0]]


def test_cluster_run_is_identical_to_the_local_run(cluster, sequences, local_run, tmp_path):
    out = tmp_path / "eval"
    _, log = cluster.eval(*sequences, *POLICIES, "--out", out, *FAST,
                          "--gpus-per-worker", "1", check_rc=0)
    assert_same_results(out, local_run)
    assert (out / "table.md").read_text().count("\n") == 2 + 8
    workers = json.loads((out / "workers.json").read_text())
    assert len(workers) == 2 and len({w["node"] for w in workers}) == 2  # both nodes
    assert sum(w["units"] for w in workers) == 8
    assert sum(w["frames"] for w in workers) == 8 * 16
    assert {r["worker"] for r in _rows(out)} <= {w["worker"] for w in workers}
    assert "| worker | node | units | frames | FPS |" in log
    manifest = json.loads((out / "manifest.json").read_text())
    assert len(manifest["units"]) == 8
    assert all(u["status"] == "ok" and "trajectory.tum" in u["files"]
               for u in manifest["units"].values())
    assert not list((out / ".fleet" / "staging").glob("*"))  # every attempt committed


def _unit_in_flight(out: Path):
    """(pid, staging folder) of a worker now writing a unit, or None."""
    for path in (out / ".fleet" / "staging").glob("*"):
        try:
            return int(path.name.split(".")[-2]), path
        except (ValueError, IndexError):
            continue
    return None


def test_a_worker_killed_under_a_unit_has_it_rerun(cluster, sequences, local_run,
                                                   tmp_path):
    out = tmp_path / "eval"
    driver = cluster.popen_eval(*sequences[:2], *POLICIES, "--out", out, *FAST,
                                "--gpus-per-worker", "1")
    killed = None
    try:
        deadline = time.monotonic() + RUN_S
        while killed is None and driver.poll() is None and time.monotonic() < deadline:
            found = _unit_in_flight(out)
            if found is None:
                time.sleep(0.02)
                continue
            pid, staging = found
            os.kill(pid, signal.SIGSTOP)  # frozen: it cannot finish the unit meanwhile
            if staging.exists():  # still under a unit: kill it there
                assert_loopback_only(cluster)  # driver, workers and all, mid-run
                os.kill(pid, signal.SIGKILL)
                killed = (pid, staging.name.split(".")[0].replace("__", "/"))
            else:
                os.kill(pid, signal.SIGCONT)
        log, _ = driver.communicate(timeout=RUN_S)
    finally:
        if driver.poll() is None:
            driver.kill()
    assert killed is not None, "no unit was caught in flight"
    assert driver.returncode == 0, log
    assert_same_results(out, local_run)
    results = {f"{r['sequence']}/{r['policy']}": r for r in
               json.loads((out / "results.json").read_text())}
    assert results[killed[1]]["attempts"] == 2, log
    workers = json.loads((out / "workers.json").read_text())
    assert [w["lost_to_worker_death"] for w in workers if killed[0] in w["pids"]] == [1]
    assert sum(w["lost_to_worker_death"] for w in workers) == 1
    assert sum(w["units"] for w in workers) == 4 and len(_rows(out)) == 4


def test_a_corrupt_bag_is_an_error_row_after_its_retries(cluster, sequences, corrupt_bag,
                                                         local_run, tmp_path):
    out = tmp_path / "eval"
    rc, log = cluster.eval(sequences[0], corrupt_bag, "--policies", "all", "--out", out,
                           *FAST, "--gpus-per-worker", "1", "--retries", "1")
    assert rc == 1, log
    rows = _rows(out)
    assert [r["sequence"] for r in rows] == ["room0", "drive"]
    assert "malformed" in rows[1]["error"] and rows[1]["frames"] == ""  # sqlite says so
    assert rows[0]["ate_sim3_rmse"] == _rows(local_run)[0]["ate_sim3_rmse"]
    results = json.loads((out / "results.json").read_text())
    assert [r["attempts"] for r in results] == [1, 2]
    manifest = json.loads((out / "manifest.json").read_text())["units"]
    assert manifest["drive/all"]["status"] == "error" and not (out / "drive").exists()


def test_a_killed_driver_resumes_from_its_manifest(cluster, sequences, local_run, tmp_path):
    out = tmp_path / "eval"
    args = (*sequences, *POLICIES, "--out", out, *FAST, "--gpus-per-worker", "1")
    driver = cluster.popen_eval(*args)
    manifest = out / "manifest.json"
    finished = {}
    try:
        deadline = time.monotonic() + RUN_S
        while len(finished) < 3 and time.monotonic() < deadline:
            assert driver.poll() is None, driver.communicate()[0]
            try:
                finished = {k: u for k, u in json.loads(manifest.read_text())["units"].items()
                            if u["status"] == "ok"}
            except (FileNotFoundError, json.JSONDecodeError):
                pass  # not yet written (it is replaced atomically: never half)
            time.sleep(0.02)
        driver.kill()  # SIGKILL, mid-run
        driver.communicate(timeout=30)
    finally:
        if driver.poll() is None:
            driver.kill()
    finished = {k: u for k, u in json.loads(manifest.read_text())["units"].items()
                if u["status"] == "ok"}
    assert 3 <= len(finished) < 8, "the driver was to be killed mid-run"
    kept = {k: os.stat(out / k / "trajectory.tum").st_mtime_ns for k in finished}
    tampered = sorted(finished)[0]  # a finished unit whose file changed since: redone
    with open(out / tampered / "trajectory.tum", "a") as f:
        f.write("# edited\n")
    _, log = cluster.eval(*args, "--resume", check_rc=0)
    assert f"resume: {len(finished) - 1} of 8 units finished and intact" in log, log
    assert len(_rows(out)) == 8
    assert_same_results(out, local_run)
    for key, mtime in kept.items():
        now = os.stat(out / key / "trajectory.tum").st_mtime_ns
        assert (now != mtime) == (key == tampered), key
    workers = json.loads((out / "workers.json").read_text())
    assert sum(w["units"] for w in workers) == 8 - (len(finished) - 1)


def test_a_bad_address_or_too_few_gpus_fail_before_any_work(cluster, sequences, tmp_path):
    out = tmp_path / "eval"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = f"127.0.0.1:{s.getsockname()[1]}"
    rc, log = cluster.eval(sequences[0], "--out", out, *FAST, "--ray", closed, ray=False)
    assert rc == 2 and f"cannot reach a Ray cluster at {closed}" in log, log
    rc, log = cluster.eval(sequences[0], "--out", out, *FAST, "--gpus-per-worker", "2")
    assert rc == 2 and "holds 0 worker(s) of 2 GPU" in log, log
    assert "127.0.0.1: 1 GPU, 1 CPU" in log
    rc, log = cluster.eval(sequences[0], "--out", out, *FAST, "--gpus-per-worker", "1",
                           "--workers", "3")
    assert rc == 2 and "holds 2 worker(s) of 1 GPU and 1 CPU per worker, 3 asked" in log, log
    assert not [p for p in out.iterdir() if p.name != ".fleet"]  # no unit, no table


def test_the_benchmark_with_loop_closure_on_the_cluster(cluster, tmp_path):
    """--benchmark lingbot-map --loop-closure on two workers: each unit runs with its
    dataset's declared settings and the option on its worker (the worker reads its folder
    for the back end's files: its loop_closure entry says what it found), the manifest lists
    every file each unit's folder holds (trajectory_optimized.tum and loops.json when the
    offline runner writes them), and the tables equal the local run's."""
    root = tmp_path / "data"
    write_tum_rgbd(render_sequence(9, 80, 60, seed=1),
                   root / "tum_rgbd" / "rgbd_dataset_freiburg1_xyz")
    write_kitti(render_sequence(9, 80, 60, seed=3), root / "kitti", "04")
    args = ["--benchmark", "lingbot-map", "--data-root", root, "--loop-closure",
            "--no-progress"]
    local = tmp_path / "local"
    local_eval(*args, "--out", local, check_rc=0)
    out = tmp_path / "eval"
    _, log = cluster.eval(*args, "--out", out, "--gpus-per-worker", "1", check_rc=0)
    assert "| KITTI (504x280) | 1/11 | 504x280 | 1 |" in log and "| 24.046 |" in log
    assert "ATE ours + loops" in log and "sequences missing under" in log
    assert (out / "benchmark.md").read_text() == (local / "benchmark.md").read_text()
    assert_same_results(out, local)
    manifest = json.loads((out / "manifest.json").read_text())["units"]
    results = json.loads((out / "results.json").read_text())
    assert [r["sequence"] for r in results] == ["tum_rgbd_fr1_xyz",
                                                "kitti_04"]
    for result in results:
        unit = f"{result['sequence']}/{result['policy']}"
        on_disk = {p.name for p in (out / unit).iterdir()}
        assert set(manifest[unit]["files"]) == on_disk
        assert result["summary"]["loop_closure"] is not None  # computed on the worker
        assert ["stride", 1] in manifest[unit]["overrides"]
    kitti = results[1]["summary"]["settings"]
    assert kitti["input_size_hw"] == [280, 504] and kitti["scale_frames"] == 8


def test_each_units_place_map_is_written_on_its_worker(cluster, sequences, tmp_path):
    """--loop-closure --save-maps on two workers: each unit's run writes its place map on
    its worker into its staging folder, committed with the unit as
    OUT/<sequence>/<policy>/place_map/; the manifest lists every file of it, the summary
    names its final place."""
    from lingbot_ros.loop.place_map import read_place_map
    out = tmp_path / "eval"
    cluster.eval(sequences[0], *POLICIES, "--out", out, "--loop-closure", "--save-maps",
                 *FAST, "--gpus-per-worker", "1", check_rc=0)
    manifest = json.loads((out / "manifest.json").read_text())["units"]
    for result in json.loads((out / "results.json").read_text()):
        unit = out / result["sequence"] / result["policy"]
        assert len(read_place_map(unit / "place_map")) >= 1
        assert result["summary"]["outputs"]["place_map"] == str(unit / "place_map")
        on_disk = {p.name for p in unit.iterdir() if p.is_file()} | \
            {f"place_map/{p.name}" for p in (unit / "place_map").iterdir()}
        assert set(manifest[f"{result['sequence']}/{result['policy']}"]["files"]) == on_disk
    assert not list((out / ".fleet" / "staging").glob("*"))  # every attempt committed


def test_resume_without_ray_redoes_only_missing_or_changed_units(sequences, local_run,
                                                                  tmp_path):
    out = tmp_path / "eval"
    shutil.copytree(local_run, out)
    shutil.rmtree(out / "room1" / "flow", ignore_errors=True)
    shutil.rmtree(out / "room1" / "every_n")  # gone: redone
    summary = out / "room2" / "all" / "summary.json"
    summary.write_text(summary.read_text().replace('"keyframes"', '"keyframes" ', 1))
    kept = os.stat(out / "room0" / "all" / "trajectory.tum").st_mtime_ns
    _, log = local_eval(*sequences, *POLICIES, "--out", out, *FAST, "--resume", check_rc=0)
    assert "resume: 6 of 8 units finished and intact, 2 to run" in log, log
    assert len(_rows(out)) == 8
    assert "room2/all: " in log and "missing or changed" in log
    assert_same_results(out, local_run, paths=False)
    assert os.stat(out / "room0" / "all" / "trajectory.tum").st_mtime_ns == kept
    # other settings: nothing is trusted
    _, log = local_eval(sequences[0], "--policies", "all", "--out", out, *FAST,
                        "--window", "5", "--resume", check_rc=0)
    assert "resume: 0 of 1 units finished and intact, 1 to run" in log, log


def test_a_rerun_unit_with_scale_and_ply_resumes_from_its_snapshot(sequences, tmp_path):
    """--snapshot-every with --scale and --ply (no Ray: the unit's own code): an earlier
    attempt saved the unit's stream after 9 frames; the rerun continues from there and
    writes the trajectory (in metres) and the points of one uninterrupted run."""
    from lingbot_ros.tools.eval.fleet import (OutputTree, execute_unit, plan_units, run_settings,
                                         unit_snapshot_folder)
    from lingbot_ros.tools.eval.table import parse_args as eval_args
    from lingbot_ros.tools.offline.cli import load_model
    from lingbot_ros.tools.offline.cli import main as offline_main

    extra = ["--scale", "fixed:0.25", "--ply"]

    def unit_run(out, snapshot_every):
        args = eval_args([str(sequences[0]), "--policies", "every_n", "--out", str(out),
                          *FAST, *extra, "--snapshot-every", str(snapshot_every)])
        unit = plan_units([str(sequences[0])], ["room0"], ["every_n"],
                          args.snapshot_every)[0]
        return unit, run_settings(args), OutputTree(out), load_model(args)

    unit, settings, tree, model = unit_run(tmp_path / "plain", 0)
    assert execute_unit(unit, settings, model, tree, "local").status == "ok"
    want = {name: (tree.unit_dir(unit.key) / name).read_bytes()
            for name in ("trajectory.tum", "points.ply")}
    assert b"units: m" in want["trajectory.tum"]
    unit, settings, tree, model = unit_run(tmp_path / "snap", 3)
    folder = unit_snapshot_folder(unit, tree, settings)
    folder.parent.mkdir(parents=True)
    assert offline_main([str(sequences[0]), "--out", str(tmp_path / "half"), "--max-frames",
                         "9", "--save-session", str(folder), "--keyframes", "every_n", *FAST,
                         *extra]) == 0
    result = execute_unit(unit, settings, model, tree, "local")
    assert result.status == "ok", result.error
    assert result.summary["snapshot"]["frames_skipped"] == 9
    for name, data in want.items():
        assert (tree.unit_dir(unit.key) / name).read_bytes() == data, name
    assert not folder.exists()  # the unit is done: its snapshot is gone

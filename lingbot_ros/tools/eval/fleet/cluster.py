"""Work units on a Ray cluster: one actor per worker (GPU) loads the model once and runs
units; the driver hands out units, reruns those of a worker that died (on another worker or
the restarted one) and retries failed ones, then gives up on a unit with an error result.

Imports Ray (``pip install 'lingbot_ros[fleet]'``); the rest of the package does not.
"""
from __future__ import annotations

import logging
import math
import os
import socket
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Callable, Optional

try:
    import ray
    from ray.exceptions import RayActorError, RayError
except ImportError as exc:  # pragma: no cover - the message is the point
    raise ImportError("--ray needs Ray: pip install 'lingbot_ros[fleet]'") from exc

from ...offline.cli import load_model
from .report import WorkerStats
from .tree import OutputTree
from .units import UnitResult, WorkUnit, error_result, execute_unit, unit_run

log = logging.getLogger("lingbot_ros.fleet")


class FleetError(RuntimeError):
    """The cluster cannot run this work (unreachable, too small, workers that cannot load
    the model): said before any unit runs."""


@dataclass(frozen=True)
class FleetOptions:
    """How the work is spread: ``address`` (``host:port`` of the head's GCS, or ``auto``:
    ``RAY_ADDRESS``, else the cluster ``ray start`` last started here), resources per worker,
    ``workers`` (None: as many as the cluster holds), ``retries`` per unit (attempts beyond
    the first, for a unit error or a worker that died under it)."""
    address: str
    gpus_per_worker: float = 1.0
    cpus_per_worker: float = 1.0
    workers: Optional[int] = None
    retries: int = 2
    connect_timeout_s: float = 10.0

    def __post_init__(self):
        if self.gpus_per_worker < 0 or self.cpus_per_worker < 0:
            raise ValueError("--gpus-per-worker / --cpus-per-worker must be >= 0")
        if self.gpus_per_worker == 0 and self.cpus_per_worker == 0:
            raise ValueError("a worker needs a GPU or a CPU: --gpus-per-worker or "
                             "--cpus-per-worker > 0")
        if self.workers is not None and self.workers < 1:
            raise ValueError("--workers must be >= 1")
        if self.retries < 0:
            raise ValueError("--retries must be >= 0")


class FleetWorker:
    """The actor: the model, loaded once, and the units it is given."""

    def __init__(self, name: str, settings: dict, out_root: str):
        logging.basicConfig(level=logging.WARNING,
                            format="%(levelname)s %(name)s: %(message)s")
        self.name = f"{name}@{ray.util.get_node_ip_address()}"
        self.settings = settings
        self.tree = OutputTree(out_root)
        self.model = load_model(unit_run(settings))

    def identity(self) -> dict:
        ctx = ray.get_runtime_context()
        return {"name": self.name, "node": ctx.get_node_id(), "pid": os.getpid()}

    def run_unit(self, unit: WorkUnit) -> tuple[UnitResult, float]:
        t0 = time.perf_counter()
        result = execute_unit(unit, self.settings, self.model, self.tree, self.name)
        return result, time.perf_counter() - t0


def resolve_address(address: str) -> str:
    """``host:port`` to connect to; ``auto``: ``RAY_ADDRESS`` if set."""
    if address == "auto":
        address = os.environ.get("RAY_ADDRESS", "auto")
    if address.startswith("ray://"):
        raise FleetError(f"--ray {address}: Ray Client addresses are not supported; give the "
                         "head's GCS address host:port (ray start --head prints it)")
    return address


def probe(address: str, timeout_s: float) -> None:
    """Fail fast, with the address in the message, when nothing listens there (Ray itself
    would retry for a long time)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise FleetError(f"--ray {address}: expected host:port (the head's GCS address) or "
                         "auto")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
            pass
    except OSError as exc:
        raise FleetError(f"cannot reach a Ray cluster at {address}: {exc}. Start one with "
                         "`ray start --head` and pass the address it prints") from None


def connect(options: FleetOptions) -> None:
    address = resolve_address(options.address)
    if address != "auto":
        probe(address, options.connect_timeout_s)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=True,
                 configure_logging=False)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError, ValueError ...
        raise FleetError(f"cannot connect to the Ray cluster at {address}: "
                         f"{type(exc).__name__}: {exc}") from None


def capacity(options: FleetOptions) -> tuple[int, list[str]]:
    """How many workers the cluster's alive nodes can hold (an actor's resources come from
    one node), and one line per node for messages."""
    total, lines = 0, []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        res = node.get("Resources", {})
        gpus, cpus = res.get("GPU", 0.0), res.get("CPU", 0.0)
        fits = min(math.floor(gpus / options.gpus_per_worker + 1e-9)
                   if options.gpus_per_worker else math.inf,
                   math.floor(cpus / options.cpus_per_worker + 1e-9)
                   if options.cpus_per_worker else math.inf)
        total += int(fits)
        lines.append(f"{node.get('NodeManagerAddress')}: {gpus:g} GPU, {cpus:g} CPU")
    return total, lines


class RayRunner:
    """Runs units on the connected cluster; ``on_result`` is called in the driver for each
    unit's final result (ok, or error after its retries)."""

    def __init__(self, options: FleetOptions, settings: dict, tree: OutputTree):
        self.options, self.settings, self.tree = options, settings, tree
        self.stats: dict[str, WorkerStats] = {}

    def start(self, n_units: int) -> int:
        """Connect, check the resources and start the workers; returns their number."""
        connect(self.options)
        fits, nodes = capacity(self.options)
        want = self.options.workers or fits
        need = (f"{self.options.gpus_per_worker:g} GPU and {self.options.cpus_per_worker:g} "
                "CPU per worker")
        if fits == 0 or want > fits:
            ray.shutdown()
            raise FleetError(
                f"the cluster holds {fits} worker(s) of {need}, {want or 1} asked; its nodes: "
                + ("; ".join(nodes) or "none alive")
                + ". Start the nodes with their GPUs (ray start --num-gpus N) or ask for less "
                "(--gpus-per-worker / --cpus-per-worker / --workers)")
        n = max(1, min(want, n_units))
        actor = ray.remote(FleetWorker).options(
            num_gpus=self.options.gpus_per_worker, num_cpus=self.options.cpus_per_worker,
            max_restarts=self.options.retries, max_task_retries=0)
        self.actors = {f"w{i}": actor.remote(f"w{i}", self.settings, str(self.tree.root))
                       for i in range(n)}
        return n

    def run(self, units: list[WorkUnit], on_result: Callable[[WorkUnit, UnitResult], None]):
        max_attempts = 1 + self.options.retries
        pending = deque(units)
        attempts = {u.key: 0 for u in units}
        ready = {a.identity.remote(): name for name, a in self.actors.items()}
        inflight = {}
        idle = deque()
        started_any = False
        while pending or inflight:
            while idle and pending:
                name, unit = idle.popleft(), pending.popleft()
                attempts[unit.key] += 1
                inflight[self.actors[name].run_unit.remote(unit)] = (name, unit, time.time())
            refs = list(inflight) + list(ready)
            if not refs:  # every worker gone for good
                for unit in pending:
                    on_result(unit, error_result(unit, "no worker left to run it (every "
                                                 "worker died or could not start)", "",
                                                 attempts[unit.key]))
                return
            done, _ = ray.wait(refs, num_returns=1, timeout=1.0)
            for ref in done:
                if ref in ready:
                    name = ready.pop(ref)
                    try:
                        ident = ray.get(ref)
                    except RayActorError as exc:
                        if not started_any:  # the same settings everywhere: none would
                            raise FleetError(f"worker {name} could not start: {exc}") from None
                        log.error("worker %s is gone: %s", name, exc)
                        continue
                    started_any = True
                    st = self.stats.setdefault(name, WorkerStats(ident["name"]))
                    st.name, st.node = ident["name"], ident["node"]
                    st.pids.append(ident["pid"])
                    idle.append(name)
                    continue
                name, unit, t_sent = inflight.pop(ref)
                st = self.stats[name]
                try:
                    result, wall = ray.get(ref)
                except RayActorError as exc:  # the worker died under the unit
                    st.lost += 1
                    log.warning("worker %s died running %s (%s); attempt %d of %d",
                                st.name, unit.key, type(exc).__name__, attempts[unit.key],
                                max_attempts)
                    self._retry_or_fail(unit, attempts, max_attempts, pending, on_result,
                                        error_result(unit, f"its worker died under it "
                                                     f"{attempts[unit.key]} time(s)", st.name,
                                                     attempts[unit.key]))
                    # A restarted actor answers again (a new process); one out of restarts
                    # raises and is dropped.
                    ready[self.actors[name].identity.remote()] = name
                    continue
                except RayError as exc:
                    result, wall = error_result(unit, f"{type(exc).__name__}: {exc}", st.name,
                                                attempts[unit.key]), time.time() - t_sent
                idle.append(name)
                st.busy_s += wall
                if result.status == "ok":
                    st.units += 1
                    st.frames += result.frames
                    on_result(unit, replace(result, attempts=attempts[unit.key]))
                else:
                    st.failed += 1
                    log.warning("%s failed on %s: %s (attempt %d of %d)", unit.key, st.name,
                                result.error, attempts[unit.key], max_attempts)
                    self._retry_or_fail(unit, attempts, max_attempts, pending, on_result,
                                        result)

    @staticmethod
    def _retry_or_fail(unit, attempts, max_attempts, pending, on_result, result: UnitResult):
        """Back to the front of the queue (the next free worker takes it), or, after its
        last attempt, ``result`` is final."""
        if attempts[unit.key] < max_attempts:
            pending.appendleft(unit)
            return
        on_result(unit, replace(result, attempts=attempts[unit.key]))

    def stop(self) -> None:
        for actor in getattr(self, "actors", {}).values():
            ray.kill(actor)
        ray.shutdown()

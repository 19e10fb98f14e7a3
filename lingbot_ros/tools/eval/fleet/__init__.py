"""lingbot-ros-eval's work units, locally or on a Ray cluster (``--ray``).

A work unit is one sequence with one configuration (:class:`WorkUnit`). A worker holds a
model and executes units (:func:`execute_unit`: the same code on the local machine and in a
Ray actor), each into a staging folder renamed into ``OUT/<sequence>/<policy>/`` when done
(:class:`OutputTree`). The driver alone writes the :class:`Manifest` (each finished unit's
files with their SHA-256), which ``--resume`` checks. The Ray side (:mod:`.cluster`: actors,
retries, resources) is imported only when ``--ray`` is used.
"""
from .manifest import Manifest
from .report import UnitProgress, WorkerStats, worker_table
from .tree import OutputBusy, OutputTree
from .units import (UnitResult, WorkUnit, error_result, execute_unit, input_fingerprint,
                    plan_units, run_settings, settings_digest, sha256_file, unit_run,
                    unit_snapshot_args, unit_snapshot_folder)

__all__ = ["Manifest", "UnitProgress", "WorkerStats", "worker_table", "OutputBusy",
           "OutputTree", "UnitResult", "WorkUnit", "error_result", "execute_unit",
           "plan_units", "run_settings", "settings_digest", "sha256_file", "unit_run",
           "unit_snapshot_args", "unit_snapshot_folder", "input_fingerprint"]

"""The manifest of a run's finished units, with the digests of their files: what
``--resume`` trusts. Written by the driver only, atomically, after each unit."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Optional

from ....geometry import write_atomic
from .units import UnitResult, WorkUnit, sha256_file

log = logging.getLogger("lingbot_ros.fleet")
MANIFEST = "manifest.json"
FORMAT = "lingbot_ros.fleet.manifest/1"


class Manifest:
    """``OUT/manifest.json``: per unit key, its sequence (an absolute path), the fingerprint
    of its input's first frames, settings digest, worker, attempts and the SHA-256 of every
    file it wrote (with ``--save-maps`` each file of its place map too, as
    ``place_map/<name>``: an altered or removed map makes ``--resume`` redo the unit)."""

    def __init__(self, root, settings_sha256: str, units: Optional[dict] = None):
        self.path = Path(root) / MANIFEST
        self.settings_sha256 = settings_sha256
        self.units = dict(units or {})

    @classmethod
    def load(cls, root, settings_sha256: str) -> "Manifest":
        """The manifest in ``root`` (an unreadable one is ignored, with a warning: every unit
        is then redone)."""
        path = Path(root) / MANIFEST
        try:
            data = json.loads(path.read_text())
            if data.get("format") != FORMAT:
                raise ValueError(f"format {data.get('format')!r}, expected {FORMAT!r}")
            units = data["units"]
        except FileNotFoundError:
            return cls(root, settings_sha256)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("%s unreadable (%s): every unit is redone", path, exc)
            return cls(root, settings_sha256)
        return cls(root, settings_sha256, units)

    def finished(self, unit: WorkUnit) -> Optional[dict]:
        """The entry of ``unit`` when it finished with these settings and every file it wrote
        is on disk with its recorded digest; else None (and the reason is logged)."""
        entry = self.units.get(unit.key)
        if entry is None or entry.get("status") != "ok":
            return None
        if entry.get("sequence") != unit.sequence:
            log.info("%s: was %s, now %s: redone", unit.key, entry.get("sequence"),
                     unit.sequence)
            return None
        if entry.get("input_fingerprint") != unit.fingerprint or not unit.fingerprint:
            log.info("%s: its input's first frames are not those it ran on (fingerprint %s, "
                     "now %s): redone", unit.key, entry.get("input_fingerprint"),
                     unit.fingerprint or "unreadable")
            return None
        if entry.get("settings_sha256") != self.settings_sha256 or \
                entry.get("overrides", []) != [list(kv) for kv in unit.overrides]:
            log.info("%s: settings changed: redone", unit.key)
            return None
        folder = self.path.parent / unit.key
        for name, digest in entry.get("files", {}).items():
            path = folder / name
            if not path.is_file() or sha256_file(path) != digest:
                log.info("%s: %s missing or changed since it was written: redone",
                         unit.key, path)
                return None
        return entry

    def record(self, unit: WorkUnit, result: UnitResult) -> None:
        self.units[unit.key] = {
            "sequence": unit.sequence, "policy": unit.policy, "status": result.status,
            "input_fingerprint": unit.fingerprint,
            "settings_sha256": self.settings_sha256,
            "overrides": [list(kv) for kv in unit.overrides], "worker": result.worker,
            "attempts": result.attempts, "error": result.error, "files": result.files}
        self.save()

    def save(self) -> None:
        data = {"format": FORMAT, "settings_sha256": self.settings_sha256,
                "units": self.units}
        write_atomic(self.path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode())

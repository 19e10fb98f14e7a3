"""The snapshot codec: a stream's state tree to a directory of ``manifest.json`` +
safetensors files and our marker (``lingbot_ros_snapshot``: the format and the manifest's
SHA-256), and back; no pickle.

    data = snapshot_data(model, config, origin, state)   # origin: WeightsIdentity.origin()
    path, nbytes = write_snapshot(data, "run1.snap")  # temp dir, fsync, one rename/exchange
    manifest, state = read_snapshot("run1.snap")       # every digest checked, the manifest's too
    check_compatible(manifest, model, config, origin)  # SnapshotError naming the mismatch

The state is a tree of dicts and lists whose leaves are JSON values, numpy arrays or (host)
torch tensors, as each owner's ``state_dict`` gives it. Tensors and arrays go to the tensor
files (the runner's caches to ``kv_cache.safetensors``, the rest to ``stream.safetensors``)
and are replaced in the manifest's ``state`` by a reference; their dtype is kept exactly
(bfloat16 included). The manifest records the format version, the model's origin (the
checkpoint's SHA-256, or its random-weight preset and seed, or a digest of its weights), the
model, cache and stream configuration, the input size and the fingerprint of the input's
first frames (``input.fingerprint``: ``session/fingerprint.py``), the dtypes, the page counts
and the size and SHA-256 of each tensor file. The folder on disk -- what a save may replace,
the atomic replace, safe reading -- is ``snapshot_folder.py``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from ..geometry.atomic_file import write_new_file
from .snapshot_folder import (FORMAT, FORMAT_VERSION, MANIFEST, NotReplaced, SnapshotError,
                             TempFolder, check_replaceable, fsync_dir, read_marked_manifest,
                             read_snapshot_file, sweep_stale)

__all__ = ["FORMAT", "FORMAT_VERSION", "SnapshotError", "NotReplaced", "SnapshotData",
           "snapshot_data", "write_snapshot", "read_snapshot", "read_manifest",
           "check_compatible", "stream_config"]

_RUNNER_FILE = "kv_cache.safetensors"
_STREAM_FILE = "stream.safetensors"
_FRONT_END_FILE = "front_end.safetensors"
_TENSOR = "__tensor__"  # a reference to a tensor file's entry, in the manifest's state

# Settings that change how a stream runs on a device, not what it computes: a snapshot
# taken with one value restores with another (e.g. saved on a GPU, restored on the CPU).
_RUN_ONLY = ("device", "attention_backend", "flashinfer_variant", "cuda_graphs", "kv_splits",
             "fused_kernels", "fused_kernels_off", "max_cache_bytes", "with_depth",
             "return_depth", "return_features", "preprocess")


@dataclass
class SnapshotData:
    """A snapshot in memory, on the host: the manifest (without the files' digests) and
    the tensor files' contents. Made between frames (``StreamingSession.snapshot_state``);
    writing it (``write_snapshot``) needs nothing of the stream."""

    manifest: dict
    files: dict[str, dict[str, torch.Tensor]]

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for f in self.files.values() for t in f.values())


def _jsonable(value):
    return json.loads(json.dumps(value))


def stream_config(config) -> dict:
    """The part of a ``SessionConfig`` that decides what a stream computes (JSON-able)."""
    d = dataclasses.asdict(config)
    return _jsonable({k: v for k, v in d.items() if k not in _RUN_ONLY})


def _model_description(model, origin: str) -> dict:
    return {
        "origin": origin,
        "config": _jsonable(dataclasses.asdict(model.config)),
        "kv_dtype": str(model.kv_dtype).replace("torch.", ""),
        "camera_head_dtype": str(model.camera_head.dtype).replace("torch.", ""),
        "mlp_precision": model.precisions["mlp"],  # fp8 MLPs write other keys and values
    }


def snapshot_data(model, config, origin: str, state: dict, extra: Optional[dict] = None,
                  front_end_state: Optional[dict] = None) -> SnapshotData:
    """The manifest and tensor files of ``state`` (``StreamingSession.state_dict()``) of a
    stream of ``model`` under ``config`` (``origin``: its ``WeightsIdentity.origin()``);
    ``extra``: a front end's JSON-able additions
    (kept under ``manifest["extra"]``); ``front_end_state``: a front end's own state, a tree
    like ``state`` (its arrays go to ``front_end.safetensors``; ``restore`` gives it back as
    ``manifest["front_end_state"]``)."""
    files: dict[str, dict[str, torch.Tensor]] = {_RUNNER_FILE: {}, _STREAM_FILE: {},
                                                 _FRONT_END_FILE: {}}

    def flatten(value, key: str, file: str):
        if isinstance(value, dict):
            return {k: flatten(v, f"{key}.{k}" if key else k,
                               _RUNNER_FILE if key == "" and k == "runner" else file)
                    for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [flatten(v, f"{key}.{i}", file) for i, v in enumerate(value)]
        if isinstance(value, np.ndarray):
            files[file][key] = torch.from_numpy(np.ascontiguousarray(value))
            return {_TENSOR: key, "file": file, "numpy": True}
        if isinstance(value, torch.Tensor):
            if value.device.type != "cpu":
                raise SnapshotError(f"{key}: a device tensor in the state (owners copy to the "
                                    "host)")
            files[file][key] = value.contiguous()
            return {_TENSOR: key, "file": file}
        if isinstance(value, (np.integer, np.floating, np.bool_)):
            return value.item()
        return value

    tree = flatten(state, "", _STREAM_FILE)
    front_end = flatten(front_end_state, "front_end", _FRONT_END_FILE) \
        if front_end_state is not None else None
    runner = state.get("runner")
    kv = runner["state"]["kv_cache"] if runner else None
    manifest = {
        "format": FORMAT, "version": FORMAT_VERSION,
        "created_unix": time.time(),
        "model": _model_description(model, origin),
        "stream_config": stream_config(config),
        "input": {"preprocess": _jsonable(dataclasses.asdict(config.preprocess)),
                  "model_hw": state.get("model_hw"),
                  # the digests of the input's first frames (session/fingerprint.py)
                  "fingerprint": list(state.get("input_fingerprint") or [])},
        "saved_on": str(config.device),
        "cache": None if kv is None else {
            "page_size": runner["tensors"]["kv_patch"].shape[3],
            "patch_pages": len(kv["patches"]["scale_frames"]) + len(kv["patches"]["window_frames"]),
            "special_pages": (len(kv["specials"]["pinned_chunks"])
                              + len(kv["specials"]["live_chunks"])),
            "special_pages_total": kv["special_pages_total"],
            "special_tokens": kv["specials"]["num_tokens"],
            "frames_committed": runner["state"]["camera_cache"]["num_frames"],
            "kv_dtype": str(runner["tensors"]["kv_patch"].dtype).replace("torch.", ""),
        },
        "frames_processed": int(state.get("counts", {}).get("processed", 0)),
        "extra": _jsonable(extra or {}),
        "front_end_state": front_end,
        "state": tree,
    }
    try:
        json.dumps(manifest)
    except (TypeError, ValueError) as exc:
        raise SnapshotError(f"the state is not JSON-able: {exc}") from exc
    return SnapshotData(manifest, {k: v for k, v in files.items() if v})


def write_snapshot(data: SnapshotData, path) -> tuple[Path, int]:
    """Write ``data`` as the snapshot folder ``path``: into a new temporary folder beside it
    (our marker written first), every file fsynced, the marker sealed with the manifest's
    SHA-256, then put at ``path`` in one step (a rename, or an exchange with the snapshot
    there, which is then removed). Only nothing, an empty folder or a complete snapshot of
    ours (marker and digest checked, no other file in it) is replaced; anything else is
    refused (``NotReplaced``, a ``FileExistsError``, with the reason). Temporary folders a
    killed save left beside ``path`` are removed first (snapshot_folder.py). Returns (path,
    bytes written)."""
    path = Path(path)
    parent = path.parent
    if not parent.is_dir():
        raise FileNotFoundError(f"folder {parent} does not exist")
    sweep_stale(path)
    kind = check_replaceable(path)
    total = 0
    with TempFolder(path) as tmp:
        manifest = dict(data.manifest, files={})
        for name, tensors in data.files.items():
            blob = save_tensors(tensors)
            write_new_file(tmp.path / name, blob)
            manifest["files"][name] = {"bytes": len(blob),
                                       "sha256": hashlib.sha256(blob).hexdigest()}
            total += len(blob)
        blob = json.dumps(manifest, indent=1).encode()
        write_new_file(tmp.path / MANIFEST, blob)
        total += len(blob)
        total += tmp.seal(hashlib.sha256(blob).hexdigest())
        old = tmp.install(kind)
    try:
        fsync_dir(parent)
    finally:
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return path, total


def read_manifest(path) -> dict:
    """The manifest of the snapshot at ``path``: its marker, checksum, format and version
    checked; every file opened without following a link or blocking (snapshot_folder.py)."""
    path = Path(path)
    blob = read_marked_manifest(path)
    try:
        manifest = json.loads(blob)
    except (ValueError, UnicodeDecodeError) as exc:
        raise SnapshotError(f"{path}/{MANIFEST} is not valid JSON ({exc}): truncated or "
                            "corrupted") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise SnapshotError(f"{path}: not a lingbot_ros stream snapshot (format "
                            f"{manifest.get('format') if isinstance(manifest, dict) else None!r})")
    if manifest.get("version") != FORMAT_VERSION:
        raise SnapshotError(f"{path}: snapshot format version {manifest.get('version')!r} is "
                            f"unknown; this build reads version {FORMAT_VERSION}")
    return manifest


def read_snapshot(path) -> tuple[dict, dict]:
    """(manifest, state) of the snapshot at ``path``: every file's size and SHA-256 checked
    before it is parsed; tensors on the CPU (``SnapshotError`` names what is wrong)."""
    path = Path(path)
    manifest = read_manifest(path)
    files = manifest.get("files")
    if not isinstance(files, dict):
        raise SnapshotError(f"{path}: the manifest lists no files")
    loaded: dict[str, dict[str, torch.Tensor]] = {}
    for name, meta in files.items():
        if not isinstance(name, str) or "/" in name or "\x00" in name or name.startswith("."):
            raise SnapshotError(f"{path}: bad file name {name!r} in the manifest")
        if not isinstance(meta, dict) or type(meta.get("bytes")) is not int \
                or meta["bytes"] < 0 or not isinstance(meta.get("sha256"), str):
            raise SnapshotError(f"{path}: the manifest's entry of {name} is malformed")
        blob = read_snapshot_file(path, name, meta["bytes"])  # size checked before reading
        if hashlib.sha256(blob).hexdigest() != meta["sha256"]:
            raise SnapshotError(f"{path}/{name}: SHA-256 digest mismatch (the file is "
                                "corrupted)")
        loaded[name] = load_tensors(blob)

    def unflatten(value):
        if isinstance(value, dict):
            if _TENSOR in value:
                try:
                    t = loaded[value["file"]][value[_TENSOR]]
                except KeyError:
                    raise SnapshotError(f"{path}: tensor {value[_TENSOR]} is missing from "
                                        f"{value.get('file')}") from None
                return t.numpy() if value.get("numpy") else t
            return {k: unflatten(v) for k, v in value.items()}
        if isinstance(value, list):
            return [unflatten(v) for v in value]
        return value

    state = unflatten(manifest["state"])
    manifest = dict(manifest, front_end_state=unflatten(manifest.get("front_end_state")))
    return manifest, state


def check_compatible(manifest: dict, model, config, origin: str) -> None:
    """``SnapshotError`` unless a stream of ``model`` (weights ``origin``) under ``config``
    can continue the snapshot: the same weights, model configuration, stream
    configuration, input size and dtypes (the device, attention backend and fast path may
    differ)."""
    saved = manifest["model"]
    here = _model_description(model, origin)
    if saved["origin"] != here["origin"]:
        raise SnapshotError(f"the snapshot was made with other weights ({saved['origin']}); "
                            f"this model's are {here['origin']}")
    if saved["config"] != here["config"]:
        diff = sorted(k for k in set(saved["config"]) | set(here["config"])
                      if saved["config"].get(k) != here["config"].get(k))
        raise SnapshotError(f"the snapshot's model configuration differs from this model's "
                            f"(in {', '.join(diff)})")
    ours = stream_config(config)
    if manifest["stream_config"] != ours:
        diff = sorted(f"{k}: saved {manifest['stream_config'].get(k)!r}, here {ours.get(k)!r}"
                      for k in set(ours) | set(manifest["stream_config"])
                      if manifest["stream_config"].get(k) != ours.get(k))
        raise SnapshotError("the snapshot's stream configuration differs: " + "; ".join(diff))
    pre = _jsonable(dataclasses.asdict(config.preprocess))
    if manifest["input"]["preprocess"] != pre:
        raise SnapshotError(f"the snapshot's input size differs: saved "
                            f"{manifest['input']['preprocess']}, here {pre}")
    for key, what in (("kv_dtype", "KV cache"), ("camera_head_dtype", "camera head"),
                      ("mlp_precision", "MLP precision")):
        if saved.get(key, "aggregator") != here[key]:  # snapshots before fp8: aggregator
            raise SnapshotError(
                f"the snapshot's {what} is {saved[key]} (saved on {manifest.get('saved_on')}), "
                f"this model's is {here[key]}: a snapshot restores only at the same precision "
                "(choose the model precision it was saved with)")


def describe(manifest: dict) -> dict[str, Any]:
    """A short summary for a service's answer or a log line."""
    return {"frames": manifest.get("frames_processed", 0),
            "origin": manifest["model"]["origin"], "saved_on": manifest.get("saved_on"),
            "bytes": sum(f["bytes"] for f in manifest.get("files", {}).values())}

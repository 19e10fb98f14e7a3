"""lingbot-ros-convert-checkpoint FILE.pt OUT.safetensors: convert a LingBot-Map checkpoint once.

    lingbot-ros-convert-checkpoint lingbot-map.pt lingbot-map.safetensors

Upstream's ``.pt`` files are torch pickles, and some can only be read with full unpickling
(``torch.load(weights_only=False)``), which runs code from the file. The node and the tools
refuse that unless told to trust the file (``model.trust_pickle`` / ``--trust-checkpoint``).
Running this command IS that explicit act of trust, once: FILE.pt is read with the safe loader
and, only if that refuses it, unpickled in full (a warning says so). The result is a
``.safetensors`` file (tensors only: loading it can never run code) for every later run.

The tensors are checked against the model's own names and shapes before anything is written:
a ``{"model": ...}`` or ``{"state_dict": ...}`` wrapper is unwrapped, a ``module.`` prefix on
every name (DistributedDataParallel) is removed, and the names must be exactly those of the
official network (or the embedded tiny one), with or without the point head. Unknown names are
refused and listed, as are missing or mis-shaped tensors: nothing is written then. The output
is written atomically (a reader sees the old file or the whole new one) and its SHA-256 and key
counts are printed.

Exit status: 0 written; 1 the file does not match the model (nothing written); 2 bad
arguments, an unreadable input, or an output that exists (without --force) or cannot be
written.
"""
from __future__ import annotations

import argparse
import hashlib
import sys
from collections import Counter
from pathlib import Path
from typing import Mapping, Optional, Sequence

import torch
from torch import Tensor

from ..geometry import write_atomic
from ..model import CheckpointError, GCTConfig, GCTModel, check_state_dict, read_state_dict
from ..model.loader import POINT_HEAD_PREFIX

PROG = "lingbot-ros-convert-checkpoint"
DDP_PREFIX = "module."
ARCHITECTURES = {"official": GCTConfig.official, "tiny": GCTConfig.tiny}


def official_names(state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """The tensors under the model's own names: a ``module.`` prefix shared by every name
    (a DistributedDataParallel save) is removed; other names are kept as they are."""
    if state and all(k.startswith(DDP_PREFIX) for k in state):
        return {k[len(DDP_PREFIX):]: v for k, v in state.items()}
    return dict(state)


def match_architecture(state: Mapping[str, Tensor],
                       architectures: Sequence[str] = ("official", "tiny")) -> str:
    """The architecture whose tensor names and shapes ``state`` has exactly (the point head
    follows the file). Else CheckpointError for the closest one: its unknown keys first (all
    refused), then the missing and mis-shaped ones."""
    has_points = any(k.startswith(POINT_HEAD_PREFIX) for k in state)
    mismatches = []
    for name in architectures:
        with torch.device("meta"):  # names and shapes only: no memory
            model = GCTModel(ARCHITECTURES[name]().with_point_head(has_points))
        expected = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        unknown = sorted(set(state) - set(expected))
        wrong = len(set(expected) - set(state)) + sum(
            tuple(state[k].shape) != shape for k, shape in expected.items() if k in state)
        if not unknown and not wrong:
            return name
        mismatches.append((len(unknown) + wrong, name, model, unknown))
    _, name, model, unknown = min(mismatches, key=lambda m: m[0])
    try:
        check_state_dict(model, state, source=f"the checkpoint ({name} network)")
    except CheckpointError as exc:
        head = (f"{len(unknown)} unknown key(s), not in the {name} network (refused): "
                f"{', '.join(unknown)}\n" if unknown else "")
        raise CheckpointError(head + str(exc)) from None
    raise AssertionError("unreachable: a mismatch was counted")


def convert(source: Path, out: Path, architectures: Sequence[str] = ("official", "tiny")
            ) -> dict:
    """Read ``source`` (unpickled in full if it must be: the caller trusts it), check it, write
    ``out`` atomically. Returns what was written: architecture, tensor and parameter counts,
    counts per top-level module, bytes and SHA-256 of ``out``."""
    state = official_names(read_state_dict(source, trust_pickle=True))
    architecture = match_architecture(state, architectures)
    from safetensors.torch import save
    # safetensors wants contiguous tensors that share no memory: copy what is not.
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in sorted(state.items())}
    data = save(tensors, metadata={"format": "pt", "converted_by": PROG,
                                   "source": source.name, "architecture": architecture})
    write_atomic(out, data)
    return {"architecture": architecture,
            "tensors": len(tensors),
            "parameters": sum(v.numel() for v in tensors.values()),
            "point_head": any(k.startswith(POINT_HEAD_PREFIX) for k in tensors),
            "modules": dict(sorted(Counter(k.split(".", 1)[0] for k in tensors).items())),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest()}


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog=PROG, description="Convert a LingBot-Map checkpoint (.pt, a torch pickle) once to "
        ".safetensors. Running it means you trust FILE: it may be unpickled in full, which "
        "runs code from the file. Names are checked against the model's; unknown ones are "
        "refused.")
    p.add_argument("source", type=Path, metavar="FILE.pt", help="checkpoint to convert")
    p.add_argument("out", type=Path, metavar="OUT.safetensors", help="file to write")
    p.add_argument("--architecture", choices=("auto", *ARCHITECTURES), default="auto",
                   help="network to check the names against (auto: official, then tiny)")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    args = p.parse_args(argv)
    if args.out.suffix != ".safetensors":
        p.error(f"OUT must end in .safetensors, got {args.out}")
    if args.out.resolve() == args.source.resolve():
        p.error("OUT must differ from FILE")
    return args


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)

    def say(line: str) -> None:
        print(f"{PROG}: {line}", file=sys.stderr, flush=True)

    if args.out.exists() and not args.force:
        say(f"error: {args.out} exists (--force replaces it)")
        return 2
    if not args.out.parent.is_dir():
        say(f"error: the folder of {args.out} does not exist")
        return 2
    say(f"note: reading {args.source} as a trusted file: if the safe loader refuses it, it is "
        f"unpickled in full, which runs code from the file")
    architectures = tuple(ARCHITECTURES) if args.architecture == "auto" else (
        args.architecture,)
    try:
        result = convert(args.source, args.out, architectures)
    except CheckpointError as exc:
        unreadable = "does not match" not in str(exc)  # else: read, but not this model
        say(f"error: {exc}")
        say("nothing written")
        return 2 if unreadable else 1
    except OSError as exc:
        say(f"error: cannot write {args.out}: {exc}")
        return 2
    modules = ", ".join(f"{name} {count}" for name, count in result["modules"].items())
    print(f"wrote {args.out}\n"
          f"  sha256      {result['sha256']}\n"
          f"  bytes       {result['bytes']}\n"
          f"  network     {result['architecture']}"
          f"{' with point head' if result['point_head'] else ''}\n"
          f"  tensors     {result['tensors']} ({result['parameters']} parameters)\n"
          f"  per module  {modules}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

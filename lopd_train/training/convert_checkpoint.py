"""Convert checkpoints of lopd's old pickle format (``trainer.pt``) to the current one (``trainer.safetensors`` +
``trainer.json``, :mod:`lopd_train.statefile`).

Why a converter: lopd no longer reads pickles (loading one can run code). The old file is read here with
torch's restricted unpickler (``weights_only=True``), which builds tensors, plain data and only the few lopd
record classes an old checkpoint held (a trajectory, its trace, a bank experience: plain dataclasses), and
refuses anything else. Each converted folder loses its ``trainer.pt``.

    python -m lopd_train.training.convert_checkpoint runs/my-run            # every checkpoint of a run
    python -m lopd_train.training.convert_checkpoint runs/my-run/checkpoints/step-000010
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from lopd_train import statefile
from lopd_train.training.checkpoints import OLD_STATE, STATE


def _plain_probes(probes: list[Any]) -> list[dict[str, Any]]:
    from lopd_train.experience import plain

    if all(isinstance(p, dict) for p in probes):
        return probes
    return plain.probes_to_plain([(t, list(exps)) for t, exps in probes])


def read_old(path: Path) -> dict[str, Any]:
    """An old ``trainer.pt`` as plain data, without running code from it."""
    import torch

    from lopd_envs.trace import Trace, TraceStep
    from lopd_train.experience.bank import Experience
    from lopd_train.rollout.engine import Trajectory

    try:
        with torch.serialization.safe_globals([Trajectory, Trace, TraceStep, Experience]):
            blob = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - torch's UnpicklingError, or a torn file: say which and why
        raise ValueError(f"{path}: cannot be converted: {str(exc).splitlines()[0]}") from None
    if not isinstance(blob, dict) or "lora" not in blob:
        raise ValueError(f"{path}: not a lopd checkpoint")
    algo = blob.get("algo")
    if isinstance(algo, dict) and algo.get("probes"):
        algo["probes"] = _plain_probes(algo["probes"])
    return blob


def convert(folder: Path) -> bool:
    """Convert the checkpoint ``folder``; False when it is already in the current format."""
    old = folder / OLD_STATE
    if statefile.exists(folder / STATE) or not old.exists():
        return False
    statefile.save(folder / STATE, read_old(old))
    old.unlink()
    return True


def folders(target: Path) -> list[Path]:
    """The checkpoint folders of ``target``: itself, or every one under a run's ``checkpoints/``."""
    if (target / "state.json").exists():
        return [target]
    root = target / "checkpoints" if (target / "checkpoints").is_dir() else target
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / "state.json").exists())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m lopd_train.training.convert_checkpoint",
                                description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="+", type=Path, help="run folders or checkpoint folders")
    args = p.parse_args(argv)
    for target in args.paths:
        if not target.is_dir():
            print(f"convert_checkpoint: {target}: no such folder", file=sys.stderr)
            return 2
        found = folders(target)
        if not found:
            print(f"convert_checkpoint: {target}: no checkpoint there", file=sys.stderr)
            return 2
        for folder in found:
            try:
                done = convert(folder)
            except ValueError as exc:
                print(f"convert_checkpoint: {exc}", file=sys.stderr)
                return 2
            print(f"{folder}: {'converted' if done else 'already current'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

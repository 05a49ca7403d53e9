"""A training run's checkpoints: written atomically, found, forked from another run and read back, so that
``resume`` continues exactly (the random generators included).

Checkpoint folder (``checkpoints/`` of the run)::

    step-NNNNNN/   trainer.safetensors + trainer.json (LoRA weights, the algorithm's state: compressor,
                   optimisers, β, probes, ...; RNG: tensors and plain data, never a pickle, so reading a
                   checkpoint cannot run code; :mod:`lopd_train.statefile`),
                   student_adapter/ (peft folder), bank.sqlite (snapshot), state.json (written last: complete)
    cold-start/    the checkpoint right after the cold start, never pruned (``--init-from``)
    latest         the name of the newest complete checkpoint (replaced atomically)

The functions take the :class:`~lopd_train.training.trainer.Trainer` whose state they write or restore (as
:func:`lopd_train.experience.build.sample_bank` does).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lopd_train import distributed, models, statefile
from lopd_train.errors import CheckpointError, NoSpaceError, RunInputMissing, RunSettingError
from lopd_train.records import read_records

log = logging.getLogger(__name__)

COLD_START = "cold-start"  # the checkpoint right after the cold start, never pruned (``--init-from``)
STATE = "trainer"  # the checkpoint's state files: trainer.safetensors and trainer.json
OLD_STATE = "trainer.pt"  # the pickle of checkpoints before statefile, no longer read
CONVERT = "python -m lopd_train.training.convert_checkpoint"


def check_format(path: Path) -> None:
    """Refuse a checkpoint folder in the old pickle format, saying how to convert it."""
    if not statefile.exists(path / STATE) and (path / OLD_STATE).exists():
        raise CheckpointError(
            f"{path} is a checkpoint in lopd's old pickle format ({OLD_STATE}), which is no longer read because "
            f"loading a pickle can run code; convert it once (it reads only tensors and lopd's own records): "
            f"{CONVERT} {path}")


atomic_write = statefile.write_text_atomic  # where the trainer's callers have always found it


def rng_state(np_rng: np.random.Generator) -> dict[str, Any]:
    state = {"python": random.getstate(), "numpy": np_rng.bit_generator.state, "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any], np_rng: np.random.Generator) -> None:
    random.setstate(state["python"])
    np_rng.bit_generator.state = state["numpy"]
    torch.set_rng_state(state["torch"].cpu())  # a checkpoint loaded onto the GPU brings these there too
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda"]])


def complete(path: Path) -> bool:
    """Whether ``path`` is a whole checkpoint: its ``state.json`` (written last) reads as JSON and its state
    files are there at their recorded size (a torn file, from a full disk or a crash of the file system, makes
    it incomplete; its digest is checked when it is read). An old-format one counts: reading it says how to
    convert it."""
    try:
        json.loads((path / "state.json").read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    if not statefile.exists(path / STATE):
        return (path / OLD_STATE).is_file()
    tensors, record = statefile.paths(path / STATE)
    try:
        meta = json.loads(record.read_text())["tensors"]
        return tensors.stat().st_size == meta["bytes"]
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError):
        return False


def latest(ckpt_dir: Path) -> Path | None:
    """The newest complete checkpoint in ``ckpt_dir`` (the ``latest`` pointer, else the last complete
    ``step-*`` folder), or None."""
    pointer = ckpt_dir / "latest"
    if pointer.is_file():
        name = pointer.read_text(errors="replace").strip()
        if re.fullmatch(r"step-\d+", name) and complete(ckpt_dir / name):  # a folder of this run, nothing else
            return ckpt_dir / name
    done = sorted(p for p in ckpt_dir.glob("step-*") if p.is_dir() and complete(p))
    return done[-1] if done else None


def keep_as_cold_start(ckpt_dir: Path, saved: Path) -> None:
    """Copy the checkpoint ``saved`` to ``cold-start/`` (atomically), for runs that start from this cold start."""
    tmp, kept = ckpt_dir / f".tmp-{COLD_START}", ckpt_dir / COLD_START
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(saved, tmp)
    shutil.rmtree(kept, ignore_errors=True)
    os.replace(tmp, kept)


def fork(trainer, source: Path) -> Path:
    """Make another run's checkpoint ``source`` this run's first (``--init-from``), with the source run's
    records up to that step (metrics, held-out and training-task points) and the successes its bank held
    back for the PIG metric, so the run's files are whole and its diagnostics measured on the same ones.
    Only ranks' rank 0 copies; returns the copied checkpoint."""
    from lopd_train.experience.build import HELD_BACK
    from lopd_train.training.heldout import HELDOUT_FILE, TRAIN_EVAL_FILE

    state_file = source / "state.json"
    if not state_file.exists():
        raise RunInputMissing(f"--init-from {source}: no complete checkpoint there (state.json missing); a "
                                f"LOPD run writes checkpoints/{COLD_START} when its cold start ends")
    check_format(source)
    state = json.loads(state_file.read_text())
    if state.get("algo") not in (None, trainer.cfg.algo):
        raise RunSettingError(f"--init-from {source} is a checkpoint of --algo {state['algo']}, not {trainer.cfg.algo}")
    target = trainer.ckpt_dir / f"step-{int(state['step']):06d}"
    if trainer.dist.is_main:
        tmp = trainer.ckpt_dir / f".tmp-{target.name}"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(source, tmp)
        run = source.parent.parent
        for name in ("metrics.jsonl", HELDOUT_FILE, TRAIN_EVAL_FILE):
            if (run / name).exists():
                keep = [r for r in read_records(run / name) if r.get("step", 0) <= int(state["step"])]
                atomic_write(trainer.out / name, "".join(json.dumps(r) + "\n" for r in keep))
        if (run / HELD_BACK).exists():  # the PIG metric's held-back successes, kept out of that bank
            atomic_write(trainer.out / HELD_BACK, (run / HELD_BACK).read_text())
        os.replace(tmp, target)
        atomic_write(trainer.ckpt_dir / "latest", target.name)
        log.info("starting from %s (step %s, %s rollouts)", source, state["step"], state["rollouts"])
    trainer.dist.barrier()
    return target


def no_space(exc: BaseException) -> bool:
    """Whether ``exc`` says the file system is full (Python's OSError, SQLite's and safetensors' words)."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(exc)
    return "No space left" in text or "os error 28" in text or "disk is full" in text or "Disk quota" in text


def _bytes(n: float) -> str:
    return f"{n / 2**20:.1f} MiB"


def save(trainer) -> Path:
    """Write the trainer's state as ``step-NNNNNN`` (rank 0; every rank's generators gathered), point ``latest``
    at it and prune to ``--keep-checkpoints``; returns the checkpoint folder.

    Written in a temporary folder renamed when whole, so a crash or a full disk never leaves a checkpoint that
    :func:`latest` trusts. A full disk, found before writing (the free space against the checkpoint's size) or
    while writing, is a :class:`NoSpaceError` naming the folder and the space needed; the temporary folder is
    removed and the last good checkpoint stays the one ``--resume`` uses."""
    name = f"step-{trainer.step:06d}"
    ckpt_dir = trainer.ckpt_dir
    final = ckpt_dir / name
    rngs = trainer.dist.gather(rng_state(trainer.np_rng))  # every rank's generators: each resumes its own stream
    if not trainer.dist.is_main:  # rank 0 writes the one checkpoint; the others wait until it is complete
        trainer.dist.barrier()
        return final
    for stale in ckpt_dir.glob(".tmp-*"):  # a write that died (this process holds the folder's lock)
        shutil.rmtree(stale, ignore_errors=True)
    blob = {"lora": models.adapter_state(trainer.policy), "algo": trainer.algo.state_dict(), "rng": rngs[0],
            **({"rng_ranks": rngs} if trainer.dist.world_size > 1 else {})}
    student = sum(t.numel() * t.element_size() for k, t in blob["lora"].items() if ".student." in k)
    bank = trainer.bank.path.stat().st_size if trainer.bank is not None and trainer.bank.path.exists() else 0
    need = statefile.size_of(blob) + student + bank + (1 << 20)
    free = shutil.disk_usage(ckpt_dir).free
    if free < need:
        raise NoSpaceError(errno.ENOSPC, f"no space left on {ckpt_dir}: the checkpoint of step {trainer.step} "
                           f"needs about {_bytes(need)}, {_bytes(free)} are free; {_kept(ckpt_dir)}")
    tmp = ckpt_dir / f".tmp-{name}"
    try:
        tmp.mkdir()
        _write(trainer, tmp, blob)
    except (OSError, RuntimeError, sqlite3.Error, ValueError) as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if no_space(exc):
            raise NoSpaceError(errno.ENOSPC, f"no space left on {ckpt_dir} while writing the checkpoint of step "
                               f"{trainer.step} (about {_bytes(need)} needed); {_kept(ckpt_dir)}") from None
        raise
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    atomic_write(ckpt_dir / "latest", name)
    done = sorted(p for p in ckpt_dir.glob("step-*") if p.is_dir())
    for old in done[:max(0, len(done) - max(1, trainer.cfg.keep_checkpoints))]:
        shutil.rmtree(old, ignore_errors=True)
    trainer.dist.barrier()
    return final


def _kept(ckpt_dir: Path) -> str:
    good = latest(ckpt_dir)
    return (f"the last good checkpoint, {good.name}, is kept for --resume: free some space and resume" if good
            else "there is no earlier checkpoint: free some space and start again")


def _write(trainer, tmp: Path, blob: dict[str, Any]) -> None:
    """The checkpoint's files into ``tmp``, ``state.json`` last (it marks the folder complete)."""
    statefile.save(tmp / STATE, blob)
    models.save_student_adapter(trainer.policy, "student", tmp / "student_adapter")
    if trainer.bank is not None:
        trainer.bank.snapshot(tmp / "bank.sqlite")
    state = {"step": trainer.step, "rollouts": trainer.rollouts, "cold_start_done": trainer.cold_start_done,
             "bank_built": trainer.bank_built, "cold_start_progress": trainer.cold_start_progress,
             **{f: getattr(trainer.algo, f) for f in trainer.algo.state_fields}, "time": time.time(),
             "algo": trainer.cfg.algo}
    atomic_write(tmp / "state.json", json.dumps(state, indent=2))  # written last: marks completeness


def cold_start_row_after(row: dict[str, Any], trainer) -> bool:
    """A cold-start row logged after the checkpoint (inside the cold start): its step is taken again."""
    return (not trainer.cold_start_done and row.get("phase") == "cold_start"
            and int(row.get("cold_start_step", 0)) > trainer.cold_start_progress)


def load(trainer, path: Path) -> dict[str, Any]:
    """Restore the trainer from the checkpoint ``path`` (weights, algorithm state, counters, bank, metrics rows
    up to its step); returns this rank's generator state, to be set once everything else is built."""
    state = json.loads((path / "state.json").read_text())
    check_format(path)
    try:
        blob = statefile.load(path / STATE, device=trainer.device)
    except statefile.StateFileError as exc:
        raise CheckpointError(f"checkpoint {path}: {exc}") from None
    models.load_adapter_state(trainer.policy, blob["lora"])
    trainer.algo.load_state_dict(blob["algo"])
    trainer.step, trainer.rollouts = int(state["step"]), int(state["rollouts"])
    trainer.cold_start_done = bool(state["cold_start_done"])
    trainer.bank_built = bool(state.get("bank_built", True))
    trainer.cold_start_progress = int(state.get("cold_start_progress", 0))
    if trainer.bank is not None and (path / "bank.sqlite").exists() and trainer.dist.is_main:
        # the bank exactly as it was at the checkpoint (rows, ids, the next id): the steps after it are taken
        # again and add their experiences again, as the uninterrupted run did
        trainer.bank.restore_from(path / "bank.sqlite", vocab=trainer.vocab)
    metrics = trainer.out / "metrics.jsonl"
    if metrics.exists() and trainer.dist.is_main:  # drop rows of steps after the checkpoint: they will be run again
        # (a row torn by the kill that stopped the run is dropped too; a corrupt row before the last raises)
        keep = [r for r in read_records(metrics) if r.get("step", 0) <= trainer.step
                and not cold_start_row_after(r, trainer)]
        atomic_write(metrics, "".join(json.dumps(r) + "\n" for r in keep))
    log.info("resumed from %s (step %d, %d rollouts)", path, trainer.step, trainer.rollouts)
    trainer.dist.barrier()  # the bank and the metrics are as rank 0 left them
    return distributed.rank_rng_state(blob, trainer.dist)

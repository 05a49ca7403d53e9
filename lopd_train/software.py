"""The software a run ran on: the interpreter, the packages whose versions move its numbers, the CPU, and
lopd's own commit.

Why a run records it: a greedy evaluation, a sampled rollout and a bf16 forward all change in their last bits
when torch, transformers or peft change, and a study's runs span sessions and machines (a fresh machine
installs whatever versions the registry serves that day). A run appends one line to ``software.jsonl`` each
time it starts or resumes, with the step it starts from, so a run whose steps ran under two stacks says so,
and ``--eval-start-from`` can tell whether another run's point at 0 rollouts was computed on this run's stack
(:func:`lopd_train.training.heldout.adopt_start_points`).
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

FILE = "software.jsonl"
PACKAGES = ("torch", "transformers", "peft", "accelerate", "tokenizers", "numpy", "sentence-transformers",
            "hnswlib", "lopd")
#: what a greedy evaluation's result depends on (the tokenizer's and the model's code, the kernels and the CPU
#: they run on)
NUMERIC = ("python", "torch", "transformers", "peft", "tokenizers", "cpu")


def commit() -> str | None:
    """lopd's git commit when it runs from a checkout (``+dirty`` when tracked files differ from it), else None."""
    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "")


def versions(names: Sequence[str]) -> dict[str, str | None]:
    """The installed version of each distribution in ``names`` (None: not installed)."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


def cpu() -> dict[str, Any]:
    """The CPU's model name, torch's kernel level on it and whether it has bf16 hardware (the same bf16 run is
    ~20x slower without it, and its kernels round differently). The kernel level is there because one model
    name covers machines of several levels: float32 sums run in another order on AVX-512 than on AVX2, so a
    cold start re-made on the other level differs from step 1 in its low digits (study v2, session 34)."""
    from lopd_train.models import native_bf16_cpu

    name = platform.processor() or None
    try:
        name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), name)
    except OSError:
        pass
    return {"model": name, "cores": os.cpu_count(), "native_bf16": native_bf16_cpu(), "kernels": cpu_kernels()}


def cpu_kernels() -> str | None:
    """Torch's CPU kernel level (``AVX2``, ``AVX512``, ...; None when torch cannot say or is not installed)."""
    try:
        import torch

        return str(torch.backends.cpu.get_cpu_capability())
    except Exception:  # noqa: BLE001 (no torch, or an old one without the call: unknown, never an error)
        return None


def cpu_label(cpu_row: dict[str, Any] | None) -> str | None:
    """The CPU as far as it moves a run's numbers: its model name, then torch's kernel level and bf16 hardware
    where the start line recorded them (older lines have the model only, or no kernel level)."""
    cpu_row = cpu_row or {}
    model = cpu_row.get("model")
    if model is None:
        return None
    extra = [cpu_row["kernels"]] if cpu_row.get("kernels") else []
    if cpu_row.get("native_bf16") is not None:
        extra.append("bf16 hardware" if cpu_row["native_bf16"] else "no bf16 hardware")
    return f"{model} ({', '.join(extra)})" if extra else model


def snapshot() -> dict[str, Any]:
    """The interpreter, the platform, the CPU, the versions of :data:`PACKAGES` (None: not installed) and lopd's
    commit."""
    return {"python": platform.python_version(), "platform": platform.platform(), "cpu": cpu(),
            "packages": versions(PACKAGES), "lopd_commit": commit()}


def record(out: Path, step: int, rollouts: int, now: dict[str, Any] | None = None) -> dict[str, Any]:
    """Append this start's line (the step and rollouts it starts from, and :func:`snapshot`) to ``out``'s
    ``software.jsonl``, flushed to disk; returns the line."""
    from lopd_train.records import RecordWriter

    row = {"time": time.time(), "step": int(step), "rollouts": int(rollouts), **(now or snapshot())}
    writer = RecordWriter(Path(out) / FILE)
    try:
        writer.write(row)
    finally:
        writer.close()
    return row


def read(run: Path) -> list[dict[str, Any]]:
    """A run's start lines, oldest first ([] when it recorded none: a run of an older lopd)."""
    from lopd_train.records import read_records

    return read_records(Path(run) / FILE)


def numeric_versions(row: dict[str, Any]) -> dict[str, Any]:
    """The :data:`NUMERIC` versions of a snapshot or a start line (None where it has none; the CPU by
    :func:`cpu_label`)."""
    special = {"python": row.get("python"), "cpu": cpu_label(row.get("cpu"))}
    return {n: special[n] if n in special else (row.get("packages") or {}).get(n) for n in NUMERIC}


def numeric_differences(a: dict[str, Any], b: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{name: (a's, b's)}`` for the :data:`NUMERIC` versions in which two snapshots differ."""
    va, vb = numeric_versions(a), numeric_versions(b)
    return {n: (va[n], vb[n]) for n in NUMERIC if va[n] != vb[n]}


def stacks(rows: list[dict[str, Any]]) -> list[tuple[int, dict[str, Any]]]:
    """``(step, versions)`` at each start whose :data:`NUMERIC` versions differ from the start before it: one
    entry for a run that ran on one stack throughout."""
    out: list[tuple[int, dict[str, Any]]] = []
    for row in rows:
        if not out or numeric_differences(out[-1][1], row):
            out.append((int(row.get("step", 0)), row))
    return out

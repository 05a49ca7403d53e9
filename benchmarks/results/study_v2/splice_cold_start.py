"""Give a run forked from a re-made cold start the records of that cold start.

``--init-from`` copies the records (``metrics.jsonl`` up to the checkpoint's step) from the run folder the
checkpoint sits in. ``remake_cold_start.sh`` re-makes lopd-sN's cold start in a scratch run and puts the
checkpoint in lopd-sN's folder, whose records are the original cold start's (another CPU, other float sums):
so a fork's cold-start rows would describe a composer it did not start from. This replaces a forked run's
rows up to step 0 (the bank and the cold start) with the scratch run's, and adds the scratch run's software
row, so the run's records describe the checkpoint it started from. Idempotent.

Usage: python splice_cold_start.py SCRATCH_RUN FORKED_RUN [FORKED_RUN ...]
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from lopd_train.records import read_records as rows
from lopd_train.training.checkpoints import atomic_write


def lines(records: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def splice(scratch: Path, forked: Path) -> None:
    made = [r for r in rows(scratch / "metrics.jsonl") if r.get("step", 0) == 0]
    if not any("cold_start_steps" in r for r in made):
        raise SystemExit(f"{scratch}: its cold start has not finished (no summary row)")
    own = rows(forked / "metrics.jsonl")
    later = [r for r in own if r.get("step", 0) > 0]
    atomic_write(forked / "metrics.jsonl", lines(made + later))
    soft = scratch / "software.jsonl"
    if soft.exists():
        first = rows(soft)[:1]
        mine = [r for r in rows(forked / "software.jsonl") if r not in first]  # rows: [] when there is none
        atomic_write(forked / "software.jsonl", lines(first + mine))
    print(f"{forked}: {len(own) - len(later)} rows up to step 0 replaced by {len(made)} from {scratch}")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    for run in sys.argv[2:]:
        splice(Path(sys.argv[1]), Path(run))

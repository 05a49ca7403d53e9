"""The privileged-information gain (PIG) of a LOPD run's kept checkpoint, measured afterwards.

A run logs PIG every ``--pig-every`` steps, but not at points it passed before (right after its cold start, say).
This measures it there, by the run's own code path (:meth:`lopd_train.training.trainer.Trainer.privileged_gain`):
the run's settings (``config.json``), the checkpoint's composer, bank and student, the run's held-back
successes (``--init-from`` copies them). The run folder is only read: the checkpoint is forked into a
scratch folder.

    python benchmarks/pig_of_checkpoint.py benchmarks/results/study_v2/runs/lopd-s0 --checkpoint cold-start
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="a LOPD run folder (config.json, checkpoints/, pig_heldback.jsonl)")
    p.add_argument("--checkpoint", default="cold-start", help="a folder under checkpoints/ (default cold-start)")
    p.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args(argv)
    ckpt = args.run / "checkpoints" / args.checkpoint
    if not (args.run / "config.json").is_file() or not ckpt.is_dir():
        p.error(f"{args.run} needs config.json and checkpoints/{args.checkpoint}/")
    import torch

    from lopd_train.config import TrainConfig
    from lopd_train.training.trainer import Trainer

    torch.set_num_threads(max(1, args.threads))
    saved = json.loads((args.run / "config.json").read_text())
    names = {f.name for f in dataclasses.fields(TrainConfig)}
    with tempfile.TemporaryDirectory() as scratch:
        cfg = TrainConfig(**{k: v for k, v in saved.items() if k in names})
        # eval_start_from off: a study run that took its 0-rollout points from another run (every run but the
        # first) would otherwise be refused beside init_from, and no evaluation runs here anyway
        cfg = dataclasses.replace(cfg, output_dir=scratch, init_from=str(ckpt), eval_start_from=None, progress=False,
                                  tensorboard=False, export=False, threads=max(1, args.threads))
        trainer = Trainer(cfg, resume=True)
        try:
            from lopd_train.latent.diagnostics import PIGMetric

            pig = PIGMetric(trainer.algo).measure() if hasattr(trainer.algo, "compose") else {}
            where = {"run": str(args.run), "checkpoint": args.checkpoint, "step": trainer.step,
                     "rollouts": trainer.rollouts}
        finally:
            trainer.close()
    if not pig:
        raise SystemExit("nothing measured: not a LOPD run, or no held-back successes in the run")
    result = {**where, **{k: round(v, 4) for k, v in pig.items()}}
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

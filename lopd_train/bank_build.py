"""Build a reference experience bank: the base model samples k times on each training task, before training.

This is the authors' recipe (``utils/build_memory_bank.py`` over sampled trajectories of the training tasks):
the bank is fixed for the whole run, its entries are keyed and queried by the task instruction, and an
experience of the same task may be retrieved (never the trajectory being scored). Successes are kept, and
failures too on request (the authors keep every trajectory, flagged). The rollouts spent here count in a
run's budget: the bank records them in its provenance, next to the model, the sampling and the tasks.

One success per task that has several may be **held back** (``hold_back``): it never enters the bank, and the
privileged-information-gain diagnostic (:mod:`lopd_train.diagnostics`) scores it, so the teacher's gain is
measured on a trajectory it cannot have been given.

``lopd bank build`` (:func:`main`) runs it from the command line; ``lopd-train`` runs :func:`sample_bank` at
the start of a reference-mode run that was not given ``--bank``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Sequence

HELD_BACK = "pig_heldback.jsonl"


def sample_bank(trainer, tasks: Sequence[str], samples: int, keep_failures: bool = False,
                hold_back: int | None = None, progress: bool = False) -> dict[str, Any]:
    """Sample ``samples`` rollouts of the trainer's student (untrained: the base model) on every task of
    ``tasks`` with the run's sampling, in batches of the trainer's envs; write the bank and its provenance;
    count the rollouts in ``trainer.rollouts``. Successes are held back for the PIG metric only when the run
    measures it (``--pig-every``). Returns the provenance."""
    from lopd_train import models

    with trainer.dist.unsharded(trainer.policy, when=trainer.vllm is None):  # FSDP: the whole backbone
        return build(trainer.policy, trainer.tokenizer, trainer.envs, trainer.pool, trainer.cfg, trainer.bank, tasks,
                     samples, keep_failures=keep_failures, seed=trainer.cfg.seed, progress=progress,
                     hold_back=(trainer.cfg.pig_trajectories if trainer.cfg.pig_every > 0 else 0)
                     if hold_back is None else hold_back,
                     held_back_path=Path(trainer.out) / HELD_BACK, counter=trainer, adapter=models.adapter,
                     generator=trainer.serving_student())


def build(policy, tokenizer, envs, pool, cfg, bank, tasks: Sequence[str], samples: int, keep_failures: bool = False,
          seed: int = 0, progress: bool = False, hold_back: int = 0, held_back_path: Path | None = None,
          counter=None, adapter=None, generator=None) -> dict[str, Any]:
    """The bank-building loop (see :func:`sample_bank`); ``adapter`` is the context manager that selects the
    student adapter when ``policy`` carries LoRA adapters (None: a plain model); ``generator`` samples (None:
    HF generate; the trainer's vLLM engine with ``--rollout-backend vllm``)."""
    import contextlib

    import numpy as np
    from tqdm.auto import tqdm

    from lopd_train.rollout import attach_sequence, run_episodes
    from lopd_train.context import attach_transcript

    if not tasks:
        raise ValueError("no training tasks to build the bank from (give --tasks or a category with tasks)")
    rng = np.random.default_rng(seed)
    jobs = [t for t in tasks for _ in range(samples)]
    sampling = cfg.sampling()
    trajs = []
    bar = tqdm(total=len(jobs), desc="bank", unit="rollout", disable=not progress)
    policy.eval()
    ctx = adapter(policy, "student") if adapter is not None else contextlib.nullcontext()
    with ctx:
        for i in range(0, len(jobs), len(envs)):
            chunk = jobs[i:i + len(envs)]
            seeds = [int(rng.integers(2**31)) for _ in chunk]
            groups = [tasks.index(t) for t in chunk]
            got = run_episodes(policy, tokenizer, envs[:len(chunk)], chunk, sampling, groups=groups, seeds=seeds,
                               pool=pool, generator=generator)
            for t in got:
                if t.trace is not None:
                    attach_transcript(t.trace, tokenizer.decode(t.input_ids))
                    attach_sequence(t)
            trajs += got
            bar.update(len(chunk))
            if counter is not None:
                counter.rollouts += len(chunk)
    bar.close()
    policy.train()
    held = held_back(trajs, hold_back)
    held_ids = {id(t) for t in held}
    kept = [t.trace for t in trajs if id(t) not in held_ids and t.trace is not None]
    bank.add(kept, rollout=0, keep_failures=keep_failures)
    if held_back_path is not None:
        with open(held_back_path, "w") as f:
            for t in held:
                f.write(t.trace.to_json() + "\n")
    prov = {"built_by": "lopd bank build", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "model": cfg.model, "env": cfg.env, "category": cfg.category, "env_kwargs": cfg.env_kwargs,
            "sampling": {"temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p,
                         "max_new_tokens": cfg.max_new_tokens, "tool_syntax": cfg.tool_syntax},
            "samples_per_task": samples, "tasks": list(tasks), "rollouts": len(jobs),
            "successes": sum(bool(t.success) for t in trajs), "kept_failures": bool(keep_failures),
            "held_back": [t.task_id for t in held], "seed": seed, "entries": len(bank)}
    bank.set_provenance(prov)
    return prov


def held_back(trajs, n: int) -> list:
    """Up to ``n`` successes to keep out of the bank, one per task, only from tasks with another success: the
    bank still holds a success of each such task (possibly the same call: a small model's correct answers are
    often identical), which is what same-task retrieval gives the teacher during training too."""
    if n <= 0:
        return []
    by_task: dict[str, list] = {}
    for t in trajs:
        if t.success and t.trace is not None:
            by_task.setdefault(t.task_id, []).append(t)
    return [ts[-1] for ts in by_task.values() if len(ts) >= 2][:n]


def read_held_back(path: Path) -> list:
    from lopd_envs.trace import Trace

    if not Path(path).exists():
        return []
    return [Trace.from_json(line) for line in Path(path).read_text().splitlines() if line.strip()]


# ----------------------------------------------------------------------------------- command line

def parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="lopd bank build",
        description="Build a reference experience bank: the base model samples --samples times on each training "
                    "task with the run's sampling (temperature, top-k, top-p), and the bank keeps the successes "
                    "(failures too with --keep-failures) keyed by the task instruction, with its provenance. Give "
                    "it to lopd-train with --bank FILE; its rollouts count in the run's budget. Every other option "
                    "is lopd-train's (--config FILE, --env, --category, --tasks, --model, --temperature, ...; "
                    "--eval-tasks are left out of the bank).",
        epilog="example: lopd bank build --out banks/simple.sqlite --samples 4 --config run.toml")


def _add_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="the bank file to write (e.g. bank.sqlite)")
    p.add_argument("--samples", type=int, default=4, help="samples per task (default 4)")
    p.add_argument("--keep-failures", action="store_true", help="keep failed samples too, flagged")
    p.add_argument("--hold-back", type=int, default=0, help="successes held back for the PIG diagnostic, written "
                                                            f"beside the bank as {HELD_BACK} (default 0)")


def main(argv: Sequence[str] | None = None) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from lopd_train import models
    from lopd_train.cli import config_from_args
    from lopd_train.experience import ExperienceBank
    from lopd_train.heldout import disjoint_task_pools
    from lopd_train.rollout import make_envs, task_ids

    p = parser()
    _add_options(p)
    args, rest = p.parse_known_args(argv)
    if args.samples < 1:
        p.error("--samples must be at least 1")
    cfg, _ = config_from_args(list(rest))
    out = Path(args.out)
    if out.exists():
        p.error(f"{out} exists: a bank is built once; choose another --out or remove it")
    env_kwargs = json.loads(cfg.env_kwargs) if isinstance(cfg.env_kwargs, str) else dict(cfg.env_kwargs)
    if cfg.category:
        cats = cfg.category.split(",")
        env_kwargs.setdefault("category", cats[0] if len(cats) == 1 else cats)
    envs = make_envs(cfg.env, cfg.tasks_per_step * cfg.group_size, **env_kwargs)
    tasks = cfg.tasks.split(",") if cfg.tasks else task_ids(envs[0])
    if cfg.eval_tasks:
        tasks = disjoint_task_pools(tasks, cfg.eval_tasks.split(","), explicit_train=bool(cfg.tasks))
    model, tokenizer = models.load_backbone(cfg.model, models.default_device(), cfg.dtype)
    out.parent.mkdir(parents=True, exist_ok=True)
    bank = ExperienceBank(out)
    try:
        with ThreadPoolExecutor(max_workers=max(1, cfg.env_workers)) as pool:
            prov = build(model, tokenizer, envs, pool, cfg, bank, tasks, args.samples,
                         keep_failures=args.keep_failures, seed=cfg.seed, progress=cfg.progress,
                         hold_back=args.hold_back, held_back_path=out.parent / HELD_BACK)
    finally:
        bank.close()
        for env in envs:
            env.close()
    print(f"{out}: {prov['entries']} experiences from {prov['rollouts']} rollouts on {len(tasks)} tasks "
          f"({prov['successes']} successes, {len(prov['held_back'])} held back)")
    return 0

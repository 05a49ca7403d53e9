"""Build a reference experience bank: the base model samples k times on each training task, before training.

This is the authors' recipe (``utils/build_memory_bank.py`` over sampled trajectories of the training tasks):
the bank is fixed for the whole run, its entries are keyed and queried by the task instruction, and an
experience of the same task may be retrieved (never the trajectory being scored). Successes are kept, and
failures too on request (the authors keep every trajectory, flagged). The rollouts spent here count in a
run's budget: the bank records them in its provenance, next to the model, the sampling and the tasks.

One success per task that has several may be **held back** (``hold_back``): it never enters the bank's
experiences (nothing can retrieve it), and the privileged-information-gain diagnostic
(:mod:`lopd_train.latent.diagnostics`) scores it, so the teacher's gain is measured on a trajectory it cannot
have been given. The held-back successes are stored in the bank file itself (its ``meta`` table, under
``held_back``), so a bank built once with ``lopd bank build --hold-back N`` hands them to every run given
``--bank`` (:func:`lopd_train.training.trainer.copy_bank` writes them into the run as ``pig_heldback.jsonl``).

``lopd bank build`` (:func:`lopd_train.cli.bank_main`) runs it from the command line; ``lopd-train`` runs :func:`sample_bank` at
the start of a reference-mode run that was not given ``--bank``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HELD_BACK = "pig_heldback.jsonl"


def sample_bank(trainer, tasks: Sequence[str], samples: int, keep_failures: bool = False,
                hold_back: int | None = None, progress: bool = False, per_task: int | None = None) -> dict[str, Any]:
    """Sample ``samples`` rollouts of the trainer's student (untrained: the base model) on every task of
    ``tasks`` with the run's sampling, in batches of the trainer's envs; write the bank and its provenance;
    count the rollouts in ``trainer.rollouts``. Successes are held back for the PIG metric only when the run
    measures it (``--pig-every``). Returns the provenance."""
    from lopd_train import models

    with trainer.dist.unsharded(trainer.policy, when=trainer.vllm is None):  # FSDP: the whole backbone
        return build(trainer.policy, trainer.tokenizer, trainer.envs, trainer.pool, trainer.cfg, trainer.bank, tasks,
                     samples, keep_failures=keep_failures, seed=trainer.cfg.seed, progress=progress,
                     hold_back=(trainer.cfg.lopd.pig_trajectories if trainer.cfg.lopd.pig_every > 0 else 0)
                     if hold_back is None else hold_back,
                     held_back_path=Path(trainer.out) / HELD_BACK, counter=trainer, adapter=models.adapter,
                     generator=trainer.serving_student(),
                     per_task=trainer.cfg.lopd.pig_per_task if per_task is None else per_task)


def build(policy, tokenizer, envs, pool, cfg, bank, tasks: Sequence[str], samples: int, keep_failures: bool = False,
          seed: int = 0, progress: bool = False, hold_back: int = 0, held_back_path: Path | None = None,
          counter=None, adapter=None, generator=None, per_task: int = 1) -> dict[str, Any]:
    """The bank-building loop (see :func:`sample_bank`); ``adapter`` is the context manager that selects the
    student adapter when ``policy`` carries LoRA adapters (None: a plain model); ``generator`` samples (None:
    HF generate; the trainer's vLLM engine with ``--rollout-backend vllm``)."""
    import contextlib

    import numpy as np
    from tqdm.auto import tqdm

    from lopd_train.rollout.engine import run_episodes
    from lopd_train.rollout.replay import attach_sequence, attach_transcript

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
    held = held_back(trajs, hold_back, per_task)
    held_ids = {id(t) for t in held}
    kept = [t.trace for t in trajs if id(t) not in held_ids and t.trace is not None]
    bank.add(kept, rollout=0, keep_failures=keep_failures)
    held_jsonl = "".join(t.trace.to_json() + "\n" for t in held)
    bank.set_meta("held_back", held_jsonl)
    if held_back_path is not None:
        Path(held_back_path).write_text(held_jsonl)
    prov = {"built_by": "lopd bank build", "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "model": cfg.model, "env": cfg.env, "category": cfg.category, "env_kwargs": cfg.env_kwargs,
            "sampling": {"temperature": cfg.temperature, "top_k": cfg.top_k, "top_p": cfg.top_p,
                         "max_new_tokens": cfg.max_new_tokens, "tool_syntax": cfg.tool_syntax},
            "samples_per_task": samples, "tasks": list(tasks), "rollouts": len(jobs),
            "successes": sum(bool(t.success) for t in trajs), "kept_failures": bool(keep_failures),
            "held_back": [t.task_id for t in held], "seed": seed, "entries": len(bank)}
    bank.set_provenance(prov)
    return prov


def held_back(trajs, n: int, per_task: int = 1) -> list:
    """Up to ``n`` successes to keep out of the bank, at most ``per_task`` of each task and always leaving one
    in: the bank still holds a success of each such task (possibly the same call: a small model's correct
    answers are often identical), which is what same-task retrieval gives the teacher during training too.
    Taken round-robin over the tasks (each task's last successes first), so a small ``n`` spreads over as many
    tasks as it can."""
    if n <= 0 or per_task <= 0:
        return []
    by_task: dict[str, list] = {}
    for t in trajs:
        if t.success and t.trace is not None:
            by_task.setdefault(t.task_id, []).append(t)
    out = []
    for k in range(1, per_task + 1):
        out += [ts[-k] for ts in by_task.values() if len(ts) > k]
    return out[:n]


def read_held_back(path: Path) -> list:
    from lopd_envs.trace import read_traces

    if not Path(path).exists():
        return []
    return read_traces(path)

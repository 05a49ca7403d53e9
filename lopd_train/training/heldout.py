"""Held-out evaluation during training, at fixed rollout counts.

A sample-efficiency curve compares algorithms by *rollouts spent*, so the trainer evaluates the student at
rollouts 0, E, 2E, ... (``eval_every_rollouts``) on tasks it never trains on. The evaluation is the one
``lopd-eval`` runs (:func:`lopd_train.evaluation.loop.run_chat_episodes` through the hf backend, greedy), on
the trainer's own in-memory policy with the student adapter active: no export, no reload, so what is
measured is exactly the weights the next step continues from.

Each evaluation point is one line of ``heldout.jsonl`` in the run folder::

    {"milestone": 96, "rollouts": 96, "step": 12, "mean_reward": 0.41, "success_rate": 0.41, "n": 32,
     "rewards": {"simple_3": 1.0, ...}, "seconds": 51.2}

The file is append-only and fsynced; a resumed run reads it and never redoes a milestone already written
(lines past the checkpoint it resumes from are dropped first, since those steps are run again). A milestone
reached while the student has not changed since the last point (bank building and the cold start spend
rollouts but never touch the student) repeats that point (``"reused_from"``) instead of evaluating again.

The same evaluator, with ``filename=TRAIN_EVAL_FILE``, scores the student greedily on the tasks it trains on
(``--eval-training-tasks``): the reward RL optimises, beside the held-out reward that says whether it
generalises.

**The point at 0 rollouts is the same for every run of a setting** (``--eval-start-from``). Before any update the
student is the backbone itself: a fresh LoRA adapter's B matrices are zero, so it adds exactly zero, whatever its
rank, seed or algorithm; and a greedy evaluation of named tasks draws nothing from the seed (the env's generator
only picks a task when none is named, the sampler is greedy). So a new run may take its points at 0 rollouts
from another run (:func:`adopt_start_points`) instead of spending an evaluation on the same weights, provided
the settings that shape an evaluation (:data:`EVAL_SETTINGS`) and the task set are the same; it is refused
otherwise, and a source without such a point yet leaves the run to evaluate its own. An adopted point keeps its
source (``"copied_from"``).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from lopd_train.config import TrainConfig, normalised_settings

HELDOUT_FILE = "heldout.jsonl"
TRAIN_EVAL_FILE = "train_eval.jsonl"


def disjoint_task_pools(train: Sequence[str], heldout: Sequence[str], explicit_train: bool) -> list[str]:
    """The training pool with no held-out task in it.

    An explicit training list (``--tasks``) that names a held-out task is a configuration error: the curve
    would measure memorisation. A default pool (every task of the categories) simply loses the held-out ones.
    """
    held = set(heldout)
    if not held:
        raise ValueError("held-out evaluation needs at least one task (eval_tasks, or an eval env with tasks)")
    overlap = sorted(held.intersection(train))
    if overlap and explicit_train:
        raise ValueError(f"train and held-out tasks must be disjoint; both name {overlap[:5]}"
                         f"{' ...' if len(overlap) > 5 else ''} ({len(overlap)} tasks)")
    pool = [t for t in train if t not in held]
    if not pool:
        raise ValueError("no training task is left once the held-out tasks are removed")
    assert held.isdisjoint(pool)
    return pool


def milestones_due(rollouts: int, every: int, done: set[int]) -> list[int]:
    """Milestones (multiples of ``every``, 0 included) reached by ``rollouts`` and not yet evaluated.

    Several can be due at once (a cold start that spends more than ``every`` rollouts); the policy is the same
    for all of them, so only the latest is evaluated and the earlier ones are reported as skipped."""
    if every <= 0:
        return []
    return [m for m in range(0, rollouts + 1, every) if m not in done]


def read_points(path: Path) -> list[dict[str, Any]]:
    """The evaluation points already written (a torn last line, from a kill, is ignored)."""
    from lopd_train.records import read_records

    return read_records(path)


class StartPointError(ValueError):
    """``--eval-start-from`` names a run whose point at 0 rollouts cannot stand for this run's."""


EVAL_SETTINGS = ("model", "dtype", "device", "env", "category", "env_kwargs", "eval_env_kwargs", "max_turns",
                 "max_new_tokens", "max_sequence_tokens", "tool_syntax", "tool_prompt", "eval_batch_size")
"""The settings a greedy evaluation's result depends on (the batch size too: left padding of a different batch
can move a logit in the last bit, and greedy decoding follows it). Not the seed: see the module docstring."""


def settings_differ(mine: dict[str, Any], theirs: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """``{setting: (mine, theirs)}`` for the :data:`EVAL_SETTINGS` in which two runs' configs differ (each
    read as today's config reads it: an older run's comma strings and JSON text are its lists and tables)."""
    mine, theirs = normalised_settings(TrainConfig, mine), normalised_settings(TrainConfig, theirs)
    out = {}
    for key in EVAL_SETTINGS:
        a, b = mine.get(key), theirs.get(key)
        if a != b:
            out[key] = (a, b)
    return out


def adopt_start_points(evaluators: Sequence[HeldoutEval], source: Path, settings: dict[str, Any],
                       software_now: dict[str, Any] | None = None) -> list[str]:
    """Write ``source``'s points at 0 rollouts as this new run's own (``--eval-start-from``), one per evaluator
    whose file the source has. Returns what was done, a line per evaluator.

    Raises :class:`StartPointError` when an evaluation setting differs (naming each), when the source's point
    covers other tasks, or when its ``config.json`` is damaged. A source that has no point at 0 rollouts yet is
    not an error, nor is one that has not written its settings yet (no ``config.json``: a run of the same study
    starting beside this one, or a folder not made yet): this run then evaluates its untrained student itself,
    which is never wrong, only slower, and says so. The same holds for a source whose first start recorded
    other versions of the packages, or another CPU, that a greedy evaluation depends on (``software.jsonl``;
    ``software_now``, default this process's): its point may differ in a last bit that greedy decoding
    follows. A source that recorded none (a run of an older lopd) is taken, and the message says its software
    is not known."""
    source = Path(source)
    saved = source / "config.json"
    if not saved.is_file():
        return [f"{e.label}: {source} holds no run yet (no config.json); evaluated here" for e in evaluators]
    try:
        theirs = json.loads(saved.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StartPointError(f"--eval-start-from {source}: config.json is not readable JSON ({exc})") from None
    if not isinstance(theirs, dict):
        raise StartPointError(f"--eval-start-from {source}: config.json does not hold an object of settings")
    differ = settings_differ(settings, theirs)
    if differ:
        raise StartPointError(f"--eval-start-from {source}: its evaluation settings differ from this run's, so its "
                              "point at 0 rollouts is not this run's: "
                              + "; ".join(f"{k} {a!r} here, {b!r} there" for k, (a, b) in differ.items()))
    from lopd_train import software

    theirs_software = software.read(source)
    if theirs_software:
        moved = software.numeric_differences(theirs_software[0], software_now or software.snapshot())
        if moved:
            why = "; ".join(f"{k} {b} here, {a} there" for k, (a, b) in moved.items())
            return [f"{e.label}: {source} evaluated its point at 0 rollouts on other software ({why}); evaluated "
                    "here" for e in evaluators]
    unknown = "" if theirs_software else " (its software is not recorded: a run of an older lopd)"
    done = []
    for e in evaluators:
        start = [r for r in read_points(source / e.path.name) if int(r.get("rollouts", -1)) == 0]
        if not start or "rewards" not in start[0]:
            done.append(f"{e.label}: {source} has no point at 0 rollouts yet; evaluated here")
            continue
        e.adopt(start[0], source)
        done.append(f"{e.label} at 0 rollouts: taken from {source} (mean reward {start[0]['mean_reward']:.3f})"
                    + unknown)
    return done


def summarise(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """mean reward, success rate and per-task rewards of one evaluation's records."""
    n = len(records)
    return {"mean_reward": sum(r["reward"] for r in records) / n if n else 0.0,
            "success_rate": sum(bool(r["success"]) for r in records) / n if n else 0.0, "n": n,
            "rewards": {r["task_id"]: r["reward"] for r in records}}


class HeldoutEval:
    """Evaluates a policy on fixed held-out tasks and appends the points to ``heldout.jsonl``."""

    def __init__(self, out: Path, env_id: str, env_kwargs: dict[str, Any], task_ids: Sequence[str], every: int,
                 sampling, batch_size: int = 8, seed: int = 0, filename: str = HELDOUT_FILE,
                 label: str = "held-out"):
        from lopd_train.rollout.engine import make_envs

        self.label = label
        self.path = Path(out) / filename
        self.env_id, self.every, self.sampling, self.seed = env_id, every, sampling, seed
        self.envs = make_envs(env_id, max(1, min(batch_size, len(task_ids))), **env_kwargs)
        known = {t.task_id for t in getattr(self.envs[0].unwrapped, "tasks", None) or []}
        missing = [t for t in task_ids if t not in known]
        if missing:
            self.close()
            raise ValueError(f"held-out tasks not in {env_id} {env_kwargs}: {missing[:5]}")
        self.task_ids = list(task_ids)
        self.pool = ThreadPoolExecutor(max_workers=max(2, len(self.envs)))

    @classmethod
    def all_tasks(cls, env_id: str, env_kwargs: dict[str, Any]) -> list[str]:
        from lopd_train.rollout.engine import make_envs, task_ids

        env = make_envs(env_id, 1, **env_kwargs)[0]
        try:
            return task_ids(env)
        finally:
            env.close()

    def truncate_after(self, rollouts: int) -> None:
        """Drop points past ``rollouts`` (a resumed run's checkpoint): their steps are run again."""
        rows = read_points(self.path)
        keep = [r for r in rows if r["rollouts"] <= rollouts]
        if len(keep) != len(rows) or (self.path.exists() and not self.path.read_text().endswith("\n")):
            tmp = self.path.with_name(f".{self.path.name}.tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in keep))
            os.replace(tmp, self.path)

    def adopt(self, point: dict[str, Any], source: Path) -> None:
        """Write another run's point at 0 rollouts as this run's first (:func:`adopt_start_points`); its tasks
        must be exactly this evaluator's."""
        tasks = point.get("rewards")
        if not isinstance(tasks, dict) or set(tasks) != set(self.task_ids) or point.get("n") != len(self.task_ids):
            have = set(tasks) if isinstance(tasks, dict) else set()
            raise StartPointError(f"--eval-start-from {source}: its {self.label} point covers other tasks than this "
                                  f"run's {len(self.task_ids)} (only there: {sorted(have - set(self.task_ids))[:5]}, "
                                  f"only here: {sorted(set(self.task_ids) - have)[:5]})")
        if read_points(self.path):
            raise StartPointError(f"{self.path} already holds points; a copied start point goes into a new run only")
        keep = {k: point[k] for k in ("milestone", "rollouts", "step", "mean_reward", "success_rate", "n", "rewards",
                                      "seconds") if k in point}
        self._append({**keep, "copied_from": str(source)})

    def _append(self, point: dict[str, Any]) -> None:
        """One point, appended and fsynced: a kill never loses a written point or leaves more than a torn last
        line (which :func:`read_points` ignores)."""
        with open(self.path, "a") as f:
            f.write(json.dumps(point) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def done(self) -> set[int]:
        """Milestones covered: each point's own, and those it stood in for (``skipped_milestones``)."""
        return {int(m) for r in read_points(self.path) for m in [r["milestone"], *r.get("skipped_milestones", [])]}

    def evaluate(self, policy, tokenizer) -> list[dict[str, Any]]:
        """Greedy episodes of every held-out task under ``policy`` as it is (the caller activates the student)."""
        from lopd_train.evaluation.backends import HFBackend
        from lopd_train.evaluation.loop import WorkItem, run_chat_episodes

        backend = HFBackend(policy, tokenizer)
        items = [WorkItem(t, 0, self.seed, order) for order, t in enumerate(self.task_ids)]
        records = []
        for i in range(0, len(items), len(self.envs)):
            records += run_chat_episodes(backend, self.envs, items[i:i + len(self.envs)], self.sampling, self.pool)
        return records

    def maybe_evaluate(self, policy, tokenizer, rollouts: int, step: int, final: bool = False) -> dict[str, Any] | None:
        """Evaluate if a milestone is due; append and return its point (None when nothing was due).

        ``final`` (the end of a run): also evaluate when no milestone is due but no point holds the student as
        it ends, so a run whose length is not a multiple of ``every`` still reports its result (``"final"``).
        The student changes only in training steps, so a point due at the same ``step`` as the last one
        repeats it (``reused_from``: its rollouts) rather than evaluating the same weights again."""
        points = read_points(self.path)
        due = milestones_due(rollouts, self.every, self.done())
        if not due and final and self.every > 0 and rollouts not in {int(r["rollouts"]) for r in points}:
            due = [rollouts]
        if not due:
            return None
        t0 = time.time()
        last = points[-1] if points else None
        if last is not None and int(last["step"]) == step and "rewards" in last:
            result = {k: last[k] for k in ("mean_reward", "success_rate", "n", "rewards")}
            result["reused_from"] = int(last["rollouts"])
        else:
            result = summarise(self.evaluate(policy, tokenizer))
        point = {"milestone": due[-1], "rollouts": rollouts, "step": step, **result,
                 "seconds": round(time.time() - t0, 2)}
        if len(due) > 1:
            point["skipped_milestones"] = due[:-1]
        if rollouts % self.every:
            point["final"] = True  # the end of the run, between milestones
        self._append(point)
        return point

    def close(self) -> None:
        if getattr(self, "pool", None) is not None:
            self.pool.shutdown(wait=True)
        for env in self.envs:
            env.close()


# ----------------------------------------------------------------------------------- a run's evaluators

def make_evaluators(cfg, out: Path, env_kwargs: dict[str, Any], task_pool: list[str], rollouts: int,
                    resumed: bool) -> tuple[list[HeldoutEval], list[str]]:
    """A training run's evaluators (none when ``--eval-every-rollouts`` is 0): the held-out tasks (greedy),
    and the training tasks beside them with ``--eval-training-tasks``; and the training pool without the
    held-out tasks. A resumed run drops points past its checkpoint; a new run drops any earlier run's points
    in the folder, or adopts the untrained student's from ``--eval-start-from``."""
    if cfg.eval_every_rollouts <= 0:
        return [], task_pool
    import sys

    from lopd_train.sampling import Sampling
    from lopd_train.training.envs import run_env_kwargs

    kwargs = run_env_kwargs(cfg, heldout=True)
    held = cfg.eval_tasks or HeldoutEval.all_tasks(cfg.env, kwargs)
    task_pool = disjoint_task_pools(task_pool, held, explicit_train=bool(cfg.tasks))
    sampling = Sampling(temperature=0.0, max_new_tokens=cfg.max_new_tokens,
                        max_sequence_tokens=cfg.max_sequence_tokens, tool_syntax=cfg.tool_syntax,
                        tool_prompt=cfg.tool_prompt, seed=cfg.seed)
    evaluators = [HeldoutEval(out, cfg.env, kwargs, held, cfg.eval_every_rollouts, sampling,
                              batch_size=cfg.eval_batch_size, seed=cfg.seed)]
    if cfg.eval_training_tasks:
        evaluators.append(HeldoutEval(out, cfg.env, env_kwargs, task_pool, cfg.eval_every_rollouts, sampling,
                                      batch_size=cfg.eval_batch_size, seed=cfg.seed, filename=TRAIN_EVAL_FILE,
                                      label="training tasks"))
    if resumed:
        for e in evaluators:
            e.truncate_after(rollouts)
    else:  # a new run: no point of an earlier run in this folder may stand in for one of this run
        for e in evaluators:
            e.path.unlink(missing_ok=True)
        if cfg.eval_start_from:  # the untrained student's points, from a run of the same evaluation settings
            for line in adopt_start_points(evaluators, Path(cfg.eval_start_from), cfg.to_dict()):
                print(f"--eval-start-from: {line}", file=sys.stderr)
    return evaluators, task_pool


def evaluate_due(evaluators: Sequence[HeldoutEval], policy, tokenizer, rollouts: int, step: int, final: bool,
                 tracker=None) -> None:
    """Each evaluator's point if one is due (the student adapter, greedy, no graph), printed to stderr so the
    main job shows the student before and after, each set named, and sent to the tracker."""
    import sys

    import torch
    from tqdm.auto import tqdm

    from lopd_train import models

    for evaluator in evaluators:
        policy.eval()
        with torch.no_grad(), models.adapter(policy, "student"):
            point = evaluator.maybe_evaluate(policy, tokenizer, rollouts, step, final=final)
        policy.train()
        if point is None:
            continue
        tqdm.write(f"{evaluator.label} after {point['rollouts']} rollouts (step {point['step']}): mean reward "
                   f"{point['mean_reward']:.3f}, success {point['success_rate']:.1%} of {point['n']} tasks",
                   file=sys.stderr)
        if tracker is not None:
            tag = "heldout" if evaluator.label == "held-out" else "train_eval"
            tracker.log_scalars({f"{tag}/mean_reward": point["mean_reward"]}, point["rollouts"])

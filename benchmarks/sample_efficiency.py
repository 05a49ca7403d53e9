"""Sample efficiency (study v2, issue 23): held-out reward against rollouts spent, for LOPD, its baselines
and its ablations.

Every run trains one algorithm on the same setting (``examples/study_v2/base.toml``: env, prompt, model, a
recurring pool of 32 training tasks and 120 held-out tasks fixed before any run) with the same rollout budget,
bank building and cold start included. The trainer evaluates the student greedily on the held-out tasks and on
its training pool at rollouts 0, E, 2E, ... (``lopd_train/training/heldout.py``). Each run is an ordinary ``lopd-train``
run folder under ``runs/<variant>-s<seed>/`` with its config beside it in ``configs/``, so any single run can be
rerun or continued by hand with the ``lopd-train`` command printed in ``commands.md``.

Outputs in ``--out`` (default ``benchmarks/results/study_v2``): ``results.md`` and ``results.csv`` (held-out
and training-pool reward at each budget, mean and spread over seeds; the difference to GRPO paired over tasks
with a 95% bootstrap interval; rollouts needed to reach GRPO's final reward; the LOPD diagnostics: cold start,
student KL, δ on successes and failures, β, PIG, and any runaway of δ), ``sample_efficiency.png``,
``diagnostics.png``, ``commands.md``. The first study (``benchmarks/results/sample_efficiency/``) is void for
LOPD; its ``STATUS.md`` says why.

    python benchmarks/sample_efficiency.py                      # the whole study (days on 2 CPU cores)
    python benchmarks/sample_efficiency.py --resume             # continue: finished runs skipped, partial resumed
    python benchmarks/sample_efficiency.py --resume --jobs 2    # two runs side by side, one torch thread each
    python benchmarks/sample_efficiency.py --algos lopd,grpo --seeds 0
    python benchmarks/sample_efficiency.py --only-report        # tables and plot from what is on disk
    python benchmarks/sample_efficiency.py --dry-run            # print the runs and their commands
    python benchmarks/sample_efficiency.py --tiny --out /tmp/se # tiny random model, toy env (the test)
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_OUT = ROOT / "benchmarks" / "results" / "study_v2"
# The shared setting: env, prompt, model, the recurring training pool (32 tasks) and the 120 held-out tasks,
# fixed before any run (the file says how they were drawn). Every run reads it; no run tunes on the held-out.
SETTING = ROOT / "examples" / "study_v2" / "base.toml"


def setting() -> dict[str, Any]:
    import tomllib

    return tomllib.loads(SETTING.read_text())


HELDOUT = setting()["eval_tasks"].split(",")
POOL = setting()["tasks"].split(",")

# What every run adds to the setting: the training pool's reward is evaluated beside the held-out one.
COMMON: dict[str, Any] = {**setting(), "eval_training_tasks": True}

# LOPD's own: a reference bank of 4 base-model samples per training task (128 rollouts, counted in the
# budget), a cold start on its successes, the PIG metric every 8 steps. The cold start's length is the pilot's
# (benchmarks/results/privileged_gain/: the latent PIG after cold start against its controls).
LOPD: dict[str, Any] = {"bank_samples": 4, "cold_start_steps": 200, "cold_start_batch_size": 8,
                        "cold_start_min_successes": 8, "pig_every": 8, "pig_trajectories": 8}
# the text baselines that read a bank build the same one (the same rollouts spent)
BANKED: dict[str, Any] = {"bank_samples": 4}

TINY: dict[str, Any] = {
    "env": "tests.coin_env:lopd-test/Coin-v0", "category": "all", "model": "tiny-random",
    "tasks_per_step": 2, "group_size": 2, "max_new_tokens": 8, "experience_tokens": 96, "lora_r": 4,
    "lora_alpha": 8, "composer_lora_r": 4, "composer_lora_alpha": 8, "num_latents": 4, "qformer_dim": 32,
    "qformer_layers": 1, "top_m": 4, "lr": 1e-3, "composer_lr": 1e-3, "cold_start_lr": 1e-3, "skill_tokens": 8,
    "cold_start_steps": 1, "cold_start_batch_size": 2, "cold_start_min_successes": 1, "cold_start_max_batches": 1,
    "allow_empty_cold_start": True, "bank_samples": 1, "pig_every": 0,
    "tasks": "heads_0,heads_1,tails_0,tails_1", "eval_tasks": "heads_3,tails_3", "eval_batch_size": 2,
    "eval_training_tasks": True,
    "save_every": 1, "keep_checkpoints": 1, "export": False, "progress": False, "tensorboard": False,
}


@dataclass(frozen=True)
class Variant:
    """One line of the plot: an algorithm (``--algo``) and the settings that make it this variant."""

    name: str
    algo: str
    settings: dict[str, Any] = field(default_factory=dict)
    seeds: tuple[int, ...] = (0,)
    about: str = ""
    #: a variant that differs from this one only after the cold start starts from its cold-start checkpoint
    #: (``--init-from``): the same bank, composer and random state, so the comparison is paired and no
    #: cold start is run twice
    fork_from: str | None = None


VARIANTS = [
    Variant("lopd", "lopd", LOPD, seeds=(0, 1, 2), about="LOPD (the method: latent teacher, margin m=0.05)"),
    Variant("grpo", "grpo", seeds=(0, 1, 2), about="GRPO (policy gradient, group-relative advantages)"),
    Variant("opsd", "opsd", seeds=(0, 1, 2), about="OPSD (teacher given the reference answer)"),
    Variant("vanilla", "vanilla", about="no update (the base model at every budget)"),
    Variant("sdpo", "sdpo", {**BANKED, "baseline_semantics": "v2"},
            about="SDPO as study v2 ran it (--baseline-semantics v2: teacher re-prompted with another successful "
                  "rollout or a banked success, or feedback)"),
    Variant("sdft", "sdft", {**BANKED, "baseline_semantics": "v2"},
            about="SDFT as study v2 ran it (--baseline-semantics v2: teacher given the bank's nearest success)"),
    Variant("skill_sd", "skill_sd", {**BANKED, "baseline_semantics": "v2"},
            about="Skill-SD as study v2 ran it (--baseline-semantics v2: teacher given summarised skills)"),
    Variant("sdpo-ref", "sdpo", {"baseline_semantics": "reference"}, seeds=(0, 1, 2),
            about="SDPO as its reference runs it (lasgroup/SDPO 0e6d510: another success of the group as response "
                  "text, else feedback; EMA teacher; JSD over the student's top-100; no bank)"),
    Variant("sdft-ref", "sdft", {"baseline_semantics": "reference"}, seeds=(0, 1, 2),
            about="SDFT as its reference runs it (TRL: this task's own demonstration after the prompt; JSD; no bank)"),
    Variant("lopd-frozen", "lopd", {**LOPD, "margin_ablation": "no-composer-phase"},
            about="LOPD, no margin as the authors' switch (--margin-ablation no-composer-phase, their "
                  "constraint.enabled=false): no composer phase, the cold-started composer kept fixed",
            fork_from="lopd"),
    Variant("lopd-nomargin", "lopd", {**LOPD, "beta_lr": 0.0, "beta_init": 0.0},
            about="LOPD, no margin as study v2's eta-zero variant (--margin-ablation eta-zero: eta 0, beta_0 0, "
                  "the composer still trains on KL + anchor)", fork_from="lopd"),
    Variant("lopd-m0.02", "lopd", {**LOPD, "margin": 0.02}, about="LOPD, margin m=0.02", fork_from="lopd"),
    Variant("lopd-m0.1", "lopd", {**LOPD, "margin": 0.1}, about="LOPD, margin m=0.1", fork_from="lopd"),
]
BY_NAME = {v.name: v for v in VARIANTS}


@dataclass(frozen=True)
class Run:
    variant: Variant
    seed: int

    @property
    def name(self) -> str:
        return f"{self.variant.name}-s{self.seed}"


# ------------------------------------------------------------------------------------------- planning

def plan(names: Sequence[str], seeds: Sequence[int] | None) -> list[Run]:
    """The runs, first seed of every variant before any second seed (so a partial study covers them all)."""
    unknown = [n for n in names if n not in BY_NAME]
    if not names:
        raise SystemExit(f"no variants chosen; choose from {[v.name for v in VARIANTS]}")
    if unknown:
        raise SystemExit(f"unknown variants {unknown}; choose from {[v.name for v in VARIANTS]}")
    chosen = [BY_NAME[n] for n in names]
    per = {v.name: tuple(seeds) if seeds is not None else v.seeds for v in chosen}
    depth = max(len(s) for s in per.values())
    runs = []
    for k in range(depth):
        for v in chosen:
            if k < len(per[v.name]):
                runs.append(Run(v, per[v.name][k]))
    if seeds is None:  # the headline runs first: LOPD, GRPO and OPSD seed 0, then the rest
        runs.sort(key=lambda r: (0 if r.variant.name in ("lopd", "grpo", "opsd") and r.seed == 0 else 1))
    return runs


def has_start_points(run_dir: Path) -> bool:
    """Whether a run folder holds its settings and both points at 0 rollouts (held-out and training pool)."""
    from lopd_train.training.heldout import HELDOUT_FILE, TRAIN_EVAL_FILE, read_points

    if not (run_dir / "config.json").is_file():
        return False
    try:
        return all(any(int(p.get("rollouts", -1)) == 0 and "rewards" in p for p in read_points(run_dir / name))
                   for name in (HELDOUT_FILE, TRAIN_EVAL_FILE))
    except Exception:  # noqa: BLE001 - a damaged file is no source; the run that reads it would say why
        return False


def start_points_source(runs: Sequence[Run], out: Path | None = None) -> Run | None:
    """The run whose points at 0 rollouts every other unforked run takes (``--eval-start-from``): the first
    unforked run of the plan whose folder under ``out`` already holds them (a finished or partial run, e.g.
    one committed by an earlier session), else the first unforked run of the plan. At 0 rollouts every arm's
    student is the untrained backbone, evaluated on the same tasks with the same settings, so one evaluation
    serves all (``lopd_train.training.heldout``); a run that starts before the source has its point evaluates
    its own. Forked runs copy their source's records anyway."""
    unforked = [r for r in runs if not r.variant.fork_from]
    if out is not None:
        ready = next((r for r in unforked if has_start_points(out / "runs" / r.name)), None)
        if ready is not None:
            return ready
    return unforked[0] if unforked else None


def run_config(run: Run, out: Path, budget: int, every: int, tiny: bool,
               start_from: Run | None = None) -> dict[str, Any]:
    base = TINY if tiny else COMMON
    per_step = base["tasks_per_step"] * base["group_size"]
    settings = dict(run.variant.settings)
    if tiny:  # the toy's sizes win over the study's
        settings = {k: v for k, v in settings.items() if k not in TINY}
    fork = {"init_from": str(cold_start_of(out, run))} if run.variant.fork_from else {}
    if not fork and start_from is not None and start_from.name != run.name:
        fork = {"eval_start_from": str(out / "runs" / start_from.name)}
    return {**base, "algo": run.variant.algo, **settings, "seed": run.seed,
            "rollout_budget": budget, "steps": math.ceil(budget / per_step), "eval_every_rollouts": every,
            "output_dir": str(out / "runs" / run.name), **fork}


def cold_start_of(out: Path, run: Run) -> Path:
    """The cold-start checkpoint a forked run starts from: its source variant's run of the same seed."""
    return out / "runs" / f"{run.variant.fork_from}-s{run.seed}" / "checkpoints" / "cold-start"


def wait_for_source(out: Path, run: Run, source_running: Callable[[], bool], poll: float = 30.0) -> bool:
    """Wait until a forked run's cold start exists (its source may be running beside it); False when the source
    is not running and has none (the run then fails with the trainer's message)."""
    if not run.variant.fork_from:
        return True
    ready = cold_start_of(out, run) / "state.json"
    while not ready.exists():
        if not source_running():
            return False
        time.sleep(poll)
    return True


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return str(v).lower()
    if isinstance(v, dict):  # an inline table (env_kwargs); JSON's own object syntax is not TOML
        return "{" + ", ".join(f"{json.dumps(str(k))} = {_toml_value(x)}" for k, x in v.items()) + "}"
    return json.dumps(v)


def to_toml(cfg: dict[str, Any]) -> str:
    return "".join(f"{k} = {_toml_value(v)}\n" for k, v in cfg.items())


def milestones(budget: int, every: int) -> list[int]:
    return list(range(0, budget + 1, every))


def status(run_dir: Path, budget: int) -> str:
    """``done`` (the budget's point is written), ``partial`` (a checkpoint exists) or ``new``."""
    from lopd_train.training.heldout import HELDOUT_FILE, read_points

    if any(p["milestone"] >= budget for p in read_points(run_dir / HELDOUT_FILE)):
        return "done"
    return "partial" if (run_dir / "checkpoints" / "latest").exists() else "new"


def report_status(run_dir: Path, budget: int) -> str:
    """The state the report prints: as :func:`status`, except that a run which wrote training rows is ``partial``
    even without a checkpoint (a committed copy of the results carries no checkpoints, and calling it ``new``
    would drop its rows from the report)."""
    state, metrics = status(run_dir, budget), run_dir / "metrics.jsonl"
    return "partial" if state == "new" and metrics.is_file() and metrics.stat().st_size else state


def display_path(path: Path) -> str:
    """A path inside the checkout as written from its root (what the commands assume), others as they are."""
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def command(cfg_path: Path) -> str:
    return f"lopd-train --config {display_path(cfg_path)} --resume"


# ------------------------------------------------------------------------------------------- running

def execute(run: Run, cfg: dict[str, Any]) -> None:
    """One run in this process (the same :func:`lopd_train.training.trainer.train` that ``lopd-train`` calls)."""
    from lopd_train.config import TrainConfig
    from lopd_train.training.trainer import train

    t0 = time.time()
    result = train(TrainConfig(**cfg), resume=True)
    print(f"[{run.name}] {result['rollouts']} rollouts, {result['step']} steps in {time.time() - t0:.0f} s",
          flush=True)


KILLED = -9  # a child's return code when SIGKILL stopped it: what the kernel's out-of-memory killer sends


def execute_child(run: Run, cfg_path: Path, run_dir: Path, threads: int, retries: int = 0) -> int:
    """One run as a child process: exactly the run's ``lopd-train --config ... --resume`` command from
    ``commands.md``, with ``threads`` torch threads and its output appended to ``<run>/study.log``.

    Why children: on a small CPU machine, N runs side by side at cores/N threads each get through more
    rollouts an hour than one run at a time on every core (torch's threads mostly wait on each other at
    these small batch sizes; on 2 cores, two GRPO runs at one thread each took ~42 s a step, one run alone
    at two threads ~45 s). Runs never share a process, so one that fails or is killed leaves the others
    and its own checkpoints as they were.

    A child killed by SIGKILL (the out-of-memory killer's signal, when something else on the machine took the
    memory) is started again, ``retries`` times at most: the same command resumes it from its last checkpoint,
    so at most the step in progress is run again. Any other failure is reported as it is."""
    import subprocess

    run_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
    for attempt in range(retries + 1):
        t0 = time.time()
        with open(run_dir / "study.log", "ab") as log:
            rc = subprocess.run([sys.executable, "-m", "lopd_train.cli", "--config", str(cfg_path), "--resume"],
                                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                check=False).returncode
        print(f"[{run.name}] exit {rc} after {time.time() - t0:.0f} s (log: {display_path(run_dir / 'study.log')})"
              + (f"; killed (SIGKILL): resuming it, retry {attempt + 1} of {retries}"
                 if rc == KILLED and attempt < retries else ""), flush=True)
        if rc != KILLED:
            break
    return rc


# ------------------------------------------------------------------------------------------- report

def collect(out: Path, runs: Sequence[Run], budget: int, every: int, filename: str | None = None,
            per_task: bool = False) -> dict[str, dict[int, dict[int, Any]]]:
    """variant -> milestone -> seed -> mean reward (or, ``per_task``, the point's ``{task: reward}``), for the
    points written so far; ``filename``: heldout.jsonl (default) or train_eval.jsonl (the training pool)."""
    from lopd_train.training.heldout import HELDOUT_FILE, read_points

    wanted = set(milestones(budget, every))
    data: dict[str, dict[int, dict[int, Any]]] = {}
    for run in runs:
        for p in read_points(out / "runs" / run.name / (filename or HELDOUT_FILE)):
            for m in [p["milestone"], *p.get("skipped_milestones", [])]:
                if m in wanted:
                    value = dict(p.get("rewards") or {}) if per_task else float(p["mean_reward"])
                    data.setdefault(run.variant.name, {}).setdefault(int(m), {})[run.seed] = value
    return data


def seed_mean_per_task(by_seed: dict[int, dict[str, float]]) -> dict[str, float]:
    """Each task's reward averaged over the seeds that scored it."""
    tasks: dict[str, list[float]] = {}
    for rewards in by_seed.values():
        for task, r in rewards.items():
            tasks.setdefault(task, []).append(float(r))
    return {task: sum(v) / len(v) for task, v in tasks.items()}


def paired_difference(a: dict[str, float], b: dict[str, float], reps: int = 2000,
                      seed: int = 0) -> dict[str, float] | None:
    """Mean of ``a[task] - b[task]`` over the tasks both scored, with a 95% percentile bootstrap interval over
    tasks (paired: the same tasks on both sides, so task difficulty cancels). None without common tasks."""
    import numpy as np

    common = sorted(set(a) & set(b))
    if not common:
        return None
    d = np.array([a[k] - b[k] for k in common])
    rng = np.random.default_rng(seed)
    boots = d[rng.integers(len(d), size=(reps, len(d)))].mean(axis=1)
    low, high = np.percentile(boots, [2.5, 97.5])
    return {"diff": float(d.mean()), "low": float(low), "high": float(high), "n": len(common)}


def paired_table(per_task: dict[str, dict[int, dict[int, dict[str, float]]]], budget: int, every: int,
                 ) -> list[list[str]]:
    """Rows ``[variant, cell per milestone]``: the variant minus GRPO, per task (seed means), 95% bootstrap.

    While runs are still landing the two sides can hold different seed counts (a seed mean against one seed
    is noisier than it looks); such a cell names its counts, e.g. ``(2 vs 1 seeds)``, so it is not read as
    the final comparison."""
    grpo = per_task.get("grpo", {})
    rows = []
    for name, by_m in per_task.items():
        if name == "grpo":
            continue
        cells = []
        for m in milestones(budget, every):
            if m not in by_m or m not in grpo:
                cells.append("")
                continue
            d = paired_difference(seed_mean_per_task(by_m[m]), seed_mean_per_task(grpo[m]))
            if d is None:
                cells.append("")
                continue
            counts = "" if len(by_m[m]) == len(grpo[m]) else f" ({len(by_m[m])} vs {len(grpo[m])} seeds)"
            cells.append(f"{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]{counts}")
        rows.append([name, *cells])
    return rows


def cold_start_nll(rows: Sequence[dict[str, Any]]) -> tuple[float | None, float | None]:
    """The cold start's first and last NLL from a run's ``metrics.jsonl`` rows. The summary row has both, except
    after a cold start resumed from a checkpoint (its summary then starts at the resume), where the first comes
    from the per-step row of composer step 1, which the run kept."""
    summary = next((x for x in rows if x.get("phase") == "cold_start" and "cold_start_steps" in x), {})
    first = summary.get("cold_start_nll_first")
    if first is None:
        first = next((x.get("cold_start_nll") for x in rows if x.get("cold_start_step") == 1), None)
    return first, summary.get("cold_start_nll_last")


def runaways(rows: Sequence[dict[str, Any]], window: int = 5, jump: float = 1.0) -> list[tuple[int, int, float]]:
    """Where the privileged margin δ grew by more than ``jump`` nats per token within ``window`` training steps
    (study v1's lopd-m0.1-s0: 0.83 -> 4.29 over steps 41-45, the composer breaking the teacher on the
    student's own tokens): ``(from step, to step, growth)`` for each such stretch, merged."""
    steps = [(int(r["step"]), float(r["margin_delta"])) for r in rows
             if r.get("phase") == "train" and isinstance(r.get("margin_delta"), (int, float))]
    found: list[tuple[int, int, float]] = []
    for i, (s0, d0) in enumerate(steps):
        for s1, d1 in steps[i + 1:]:
            if s1 - s0 > window:
                break
            if d1 - d0 > jump:
                if found and found[-1][1] >= s0:
                    found[-1] = (found[-1][0], max(found[-1][1], s1), max(found[-1][2], d1 - d0))
                else:
                    found.append((s0, s1, d1 - d0))
    return found


DIAGNOSTICS = (("student_kl", "student KL to the teacher (per token)"),
               ("margin_delta_success", "δ on successful rollouts"),
               ("margin_delta_failure", "δ on failed rollouts"),
               ("beta", "β (dual variable)"),
               ("pig_latent", "PIG of the latents (nats / token)"),
               ("probe_teacher_nll", "teacher NLL on banked successes"))


def diagnostics_plot(out: Path, runs: Sequence[Run], path: Path) -> bool:
    """One panel per training diagnostic (:data:`DIAGNOSTICS`) against rollouts, one line per run that logs
    it (the LOPD family). False when no run has any yet."""
    from lopd_train.training.heldout import read_points

    series = {r.name: [x for x in read_points(out / "runs" / r.name / "metrics.jsonl") if x.get("phase") == "train"]
              for r in runs}
    series = {k: v for k, v in series.items() if any("margin_delta" in x for x in v)}
    if not series:
        return False
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(13, 6.5))
    for ax, (key, title) in zip(axes.flat, DIAGNOSTICS):
        for name, rows in series.items():
            pts = [(x["rollouts"], x[key]) for x in rows if isinstance(x.get(key), (int, float))]
            if pts:
                ax.plot(*zip(*pts), lw=1.2, label=name)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("rollouts", fontsize=8)
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def mean_spread(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half the range over seeds (0 for one seed): the band drawn on the plot."""
    return sum(values) / len(values), (max(values) - min(values)) / 2


def rollouts_to_reach(curve: dict[int, float], target: float) -> int | None:
    """The first evaluated budget whose seed-mean reward is at least ``target`` (None: never, so far)."""
    for m in sorted(curve):
        if curve[m] >= target - 1e-12:
            return m
    return None


def table(data: dict[str, dict[int, dict[int, float]]], budget: int, every: int,
          expected_seeds: dict[str, int]) -> tuple[list[str], list[list[str]], list[dict[str, Any]]]:
    """Markdown header and rows, and CSV rows. GRPO's final reward is its seed mean at ``budget``, counted
    only when every planned GRPO seed has reached it."""
    ms = milestones(budget, every)
    grpo = data.get("grpo", {}).get(budget, {})
    target = mean_spread(list(grpo.values()))[0] if grpo and len(grpo) >= expected_seeds.get("grpo", 1) else None
    header = ["variant", "seeds", *[f"{m}" for m in ms], "rollouts to GRPO's final"]
    rows, csv_rows = [], []
    for name, by_m in data.items():
        cells, curve = [], {}
        for m in ms:
            vals = list(by_m.get(m, {}).values())
            if not vals:
                cells.append("")
                continue
            mu, sp = mean_spread(vals)
            curve[m] = mu
            cells.append(f"{mu:.3f} ± {sp:.3f}" if len(vals) > 1 else f"{mu:.3f}")
            csv_rows.append({"variant": name, "rollouts": m, "mean_reward": round(mu, 4), "spread": round(sp, 4),
                             "n_seeds": len(vals), "per_seed": json.dumps(by_m[m], sort_keys=True)})
        if target is None:
            reach = "n/a (GRPO unfinished)"
        else:
            hit = rollouts_to_reach(curve, target)
            complete = max(curve, default=-1) >= budget
            reach = str(hit) if hit is not None else (f"> {budget}" if complete else "not yet")
        seeds = sorted({s for v in by_m.values() for s in v})
        rows.append([name, ",".join(map(str, seeds)), *cells, reach])
    for r in csv_rows:
        r["grpo_final"] = round(target, 4) if target is not None else ""
    return header, rows, csv_rows


def run_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """What a run's ``metrics.jsonl`` says about its training, beside the held-out curve: training steps,
    rollouts, training success (over every training rollout), the steps whose update moved the student
    (non-zero gradient: GRPO has none when every reward in a group is equal), the bank at the end and the
    median step time. Cold-start rows count towards rollouts only."""
    train = [r for r in rows if r.get("phase") == "train"]
    n = len(train)
    per_step = [r.get("success_rate", 0.0) for r in train]
    secs = sorted(float(r["seconds"]) for r in train if "seconds" in r)
    return {
        "steps": n,
        "rollouts": max((int(r.get("rollouts", 0)) for r in rows), default=0),
        "train_success": sum(per_step) / n if n else None,
        "updated_steps": sum(1 for r in train if float(r.get("grad_norm", 0.0) or 0.0) > 0.0),
        "bank": train[-1].get("bank_size") if train else None,
        "median_step_s": secs[len(secs) // 2] if secs else None,
    }


def task_changes(points: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """Which held-out tasks a run's student solves at its last point that it did not at its first (the
    untrained student), and which it lost. A mean can stay level while tasks trade places, and a run can end
    on exactly the untrained student's successes; the mean alone shows neither. None until a run has two
    points with per-task rewards."""
    pts = [p for p in points if isinstance(p.get("rewards"), dict)]
    if len(pts) < 2:
        return None
    before, after = ({t for t, v in p["rewards"].items() if float(v) > 0} for p in (pts[0], pts[-1]))
    return {"from": int(pts[0].get("rollouts", 0)), "to": int(pts[-1].get("rollouts", 0)),
            "gained": sorted(after - before), "lost": sorted(before - after), "kept": len(before & after)}


def plot(data: dict[str, dict[int, dict[int, float]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    for name, by_m in data.items():
        ms = sorted(by_m)
        stats = [mean_spread(list(by_m[m].values())) for m in ms]
        mu = [s[0] for s in stats]
        lo = [min(by_m[m].values()) for m in ms]
        hi = [max(by_m[m].values()) for m in ms]
        line, = ax.plot(ms, mu, marker="o", lw=1.6, label=name)
        if any(h > low for h, low in zip(hi, lo)):
            ax.fill_between(ms, lo, hi, color=line.get_color(), alpha=0.18, lw=0)
    ax.set_xlabel("rollouts")
    ax.set_ylabel("held-out mean reward (greedy)")
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def software_lines(out: Path, runs: Sequence[Run]) -> list[str]:
    """The report's software section: each stack (the versions a run's numbers depend on,
    ``lopd_train.software.NUMERIC``) with the runs, and the steps, that ran on it; runs that recorded
    none (started before lopd recorded it) are named as such. Runs on different stacks are compared all the
    same; the section says where that happened."""
    from lopd_train import software

    stacks: dict[str, list[str]] = {}
    unknown = []
    for r in runs:
        rows = software.read(out / "runs" / r.name)
        if not rows:
            unknown.append(r.name)
            continue
        found = software.stacks(rows)
        for k, (step, row) in enumerate(found):
            label = ", ".join(f"{n} {v}" for n, v in software.numeric_versions(row).items())
            end = f" to step {found[k + 1][0]}" if k + 1 < len(found) else ""
            stacks.setdefault(label, []).append(r.name + (f" (from step {step}{end})" if len(found) > 1 else ""))
    if not stacks and not unknown:
        return []
    md = ["", "Software (each run's `software.jsonl`, the versions its numbers depend on):", ""]
    md += [f"- {label}: {', '.join(names)}" for label, names in stacks.items()]
    if unknown:
        md.append(f"- not recorded (started before runs recorded it): {', '.join(unknown)}")
    return md


def report(out: Path, runs: Sequence[Run], budget: int, every: int, study_cmd: str) -> dict[str, Any]:
    from lopd_train.training.heldout import HELDOUT_FILE, read_points

    data = collect(out, runs, budget, every)
    expected = {}
    for r in runs:
        expected[r.variant.name] = expected.get(r.variant.name, 0) + 1
    header, rows, csv_rows = table(data, budget, every, expected)
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["variant", "rollouts", "mean_reward", "spread", "n_seeds", "per_seed",
                                          "grpo_final"])
        w.writeheader()
        w.writerows(csv_rows)
    states = {r.name: report_status(out / "runs" / r.name, budget) for r in runs}
    md = ["# Sample efficiency: held-out mean reward against rollouts", "",
          f"Held-out mean reward (greedy) at each rollout count; `a ± b`: mean over seeds ± half their range. "
          f"Last column: the first evaluated budget at which the variant's seed mean reaches GRPO's final "
          f"({budget}-rollout) reward. Generated by `{study_cmd}`; the setting is `examples/study_v2/base.toml`, "
          f"the exact commands `commands.md`.", "",
          "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(r) + " |" for r in rows]
    md += ["", "Runs: " + ", ".join(f"`{k}` {v}" for k, v in states.items()), "",
           "Training, from each run's `metrics.jsonl` (success over its training rollouts; steps whose update "
           "had a non-zero gradient; experiences in the bank at the end; median seconds a step):", "",
           "| run | state | steps | rollouts | training success | updated steps | bank | median step (s) |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    fmt = lambda v, f: "" if v is None else format(v, f)  # noqa: E731
    for r in runs:
        if states[r.name] == "new":
            continue
        m = run_summary(read_points(out / "runs" / r.name / "metrics.jsonl"))  # JSON lines, as heldout.jsonl
        md.append(f"| {r.name} | {states[r.name]} | {m['steps']} | {m['rollouts']} | {fmt(m['train_success'], '.3f')} "
                  f"| {m['updated_steps']} | {fmt(m['bank'], 'd')} | {fmt(m['median_step_s'], '.0f')} |")
    md += ["", "Held-out tasks at each run's last point against its first (the untrained student): solved at both, "
           "gained, lost:", "", "| run | rollouts | kept | gained | lost |", "|---|---|---:|---|---|"]
    for r in runs:
        ch = task_changes(read_points(out / "runs" / r.name / HELDOUT_FILE))
        if ch is not None:
            md.append(f"| {r.name} | {ch['from']} → {ch['to']} | {ch['kept']} | {', '.join(ch['gained']) or '–'} "
                      f"| {', '.join(ch['lost']) or '–'} |")
    from lopd_train.training.heldout import TRAIN_EVAL_FILE

    ms = milestones(budget, every)
    pool = collect(out, runs, budget, every, filename=TRAIN_EVAL_FILE)
    if pool:
        _, pool_rows, _ = table(pool, budget, every, expected)
        md += ["", "Training-pool reward (greedy, the tasks the runs train on: what RL optimises), mean over seeds "
               "± half their range:", "", "| variant | seeds | " + " | ".join(map(str, ms)) + " |",
               "|" + "---|" * (len(ms) + 2)]
        md += ["| " + " | ".join(r[:-1]) + " |" for r in pool_rows]
    paired = paired_table(collect(out, runs, budget, every, per_task=True), budget, every)
    if paired:
        md += ["", "Held-out difference to GRPO, paired over the same tasks (each task's reward averaged over "
               "seeds), with a 95% bootstrap interval over tasks; an interval that excludes 0 separates the two:",
               "", "| variant | " + " | ".join(map(str, ms)) + " |", "|" + "---|" * (len(ms) + 1)]
        md += ["| " + " | ".join(r) + " |" for r in paired]
    diag = []
    for r in runs:
        rows_m = read_points(out / "runs" / r.name / "metrics.jsonl")
        train = [x for x in rows_m if x.get("phase") == "train" and "margin_delta" in x]
        if not train:
            continue
        cold = next((x for x in rows_m if x.get("phase") == "cold_start" and "cold_start_steps" in x), {})
        last = train[-1]
        mean = lambda k, train=train: (sum(x[k] for x in train if isinstance(x.get(k), (int, float))) /  # noqa: E731
                          max(1, sum(isinstance(x.get(k), (int, float)) for x in train)))
        pig = [x["pig_latent"] for x in train if isinstance(x.get("pig_latent"), (int, float))]
        jumps = runaways(rows_m)
        nll_first, nll_last = cold_start_nll(rows_m)
        diag.append(f"| {r.name} | {cold.get('cold_start_steps', '')} | {fmt(nll_first, '.3f')} → "
                    f"{fmt(nll_last, '.3f')} | {mean('student_kl'):.4f} | "
                    f"{mean('margin_delta_success'):+.4f} | {mean('margin_delta_failure'):+.4f} | {last['beta']:.3f} | "
                    f"{fmt(pig[-1] if pig else None, '+.3f')} | "
                    f"{'; '.join(f'steps {a}-{b}: +{g:.2f}' for a, b, g in jumps) or '–'} |")
    if diag:
        md += ["", "LOPD diagnostics (`diagnostics.png` has the curves): cold start, the mean student KL, δ on "
               "successful and failed rollouts, β at the end, the latents' last PIG, and any runaway (δ grown by "
               "more than 1 nat/token within 5 steps):", "",
               "| run | cold-start steps | cold-start NLL | student KL | δ success | δ failure | β end | PIG latent | "
               "runaway |", "|---|---:|---|---:|---:|---:|---:|---:|---|", *diag]
        diagnostics_plot(out, runs, out / "diagnostics.png")
    md += software_lines(out, [r for r in runs if states[r.name] != "new"])
    md.append("")
    (out / "results.md").write_text("\n".join(md))
    plot(data, out / "sample_efficiency.png", f"held-out reward vs rollouts ({len(data)} variants)")
    return {"data": data, "rows": rows, "states": states, "paired": paired}


# ------------------------------------------------------------------------------------------- main

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--algos", default=",".join(v.name for v in VARIANTS),
                    help="comma-separated variants (default: all): " + ", ".join(v.name for v in VARIANTS))
    ap.add_argument("--seeds", default=None, help="comma-separated seeds for every variant (default: 0,1,2 for "
                    "lopd, grpo and opsd, 0 for the rest)")
    ap.add_argument("--budget", type=int, default=512, help="rollouts per run, bank building and cold start "
                    "included (default 512)")
    ap.add_argument("--eval-every", type=int, default=128, help="held-out evaluation every N rollouts (default 128)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="results folder")
    ap.add_argument("--resume", action="store_true", help="continue partial runs (finished ones are skipped)")
    ap.add_argument("--only-report", action="store_true", help="write the table and plot from what is on disk")
    ap.add_argument("--dry-run", action="store_true", help="write the configs and commands, print the plan, run nothing")
    ap.add_argument("--tiny", action="store_true", help="tiny random model on the toy coin env (tests)")
    ap.add_argument("--jobs", type=int, default=1, help="runs side by side, each a `lopd-train` child process at "
                    "cores/JOBS torch threads with its output in <run>/study.log (default 1: one run at a time, "
                    "in this process); on 2 cores, --jobs 2 gets through nearly twice the rollouts an hour")
    ap.add_argument("--retries", type=int, default=2, help="with --jobs: resume a run killed by SIGKILL (the "
                    "out-of-memory killer) this many times at most (default 2; 0: never)")
    args = ap.parse_args(argv)
    if args.retries < 0:
        raise SystemExit("--retries must be 0 or more")
    if args.budget < 1 or args.eval_every < 1 or args.jobs < 1:
        raise SystemExit("--budget, --eval-every and --jobs must be positive")
    if args.tiny:
        import tests.coin_env  # noqa: F401  (registers the toy env)
    from lopd_train.algorithms import ALGORITHMS

    out = args.out.resolve()
    (out / "configs").mkdir(parents=True, exist_ok=True)
    (out / "runs").mkdir(exist_ok=True)
    try:
        seeds = [int(s) for s in args.seeds.split(",")] if args.seeds else None
    except ValueError:
        raise SystemExit(f"--seeds {args.seeds!r}: comma-separated integers, e.g. 0,1,2") from None
    runs = plan([a.strip() for a in args.algos.split(",") if a.strip()], seeds)
    study_cmd = "python benchmarks/sample_efficiency.py " + " ".join(
        a for a in (argv if argv is not None else sys.argv[1:]) if a not in ("--only-report", "--dry-run"))
    cmds = ["# Exact commands", "", "The study (finished runs are skipped, partial ones resumed):", "", "```bash",
            study_cmd.strip() + (" --resume" if "--resume" not in study_cmd else ""), "```", "",
            "One run by hand (the same settings; `--resume` also starts a new run):", "", "```bash"]
    configs = {}
    source = start_points_source(runs, out)
    for run in runs:
        cfg = run_config(run, out, args.budget, args.eval_every, args.tiny, start_from=source)
        path = out / "configs" / f"{run.name}.toml"
        shown = dict(cfg, output_dir=display_path(Path(cfg["output_dir"])))  # relative to the checkout
        for key in ("init_from", "eval_start_from"):
            if key in cfg:
                shown[key] = display_path(Path(cfg[key]))
        path.write_text(f"# {run.variant.about}\n" + to_toml(shown))
        configs[run.name] = cfg
        cmds.append(command(path))
    cmds += ["```", "", "Each run folder keeps `heldout.jsonl` (the curve), `metrics.jsonl`, `config.json`, `software.jsonl`; "
             "checkpoints and banks stay out of git.", ""]
    (out / "commands.md").write_text("\n".join(cmds))

    failed: list[str] = []
    if not args.only_report:
        todo = []
        for run in runs:
            state = status(out / "runs" / run.name, args.budget)
            print(f"[{run.name}] {state}: {command(out / 'configs' / f'{run.name}.toml')}", flush=True)
            if args.dry_run or state == "done":
                continue
            if run.variant.algo not in ALGORITHMS:
                print(f"[{run.name}] skipped: --algo {run.variant.algo} is not available in this checkout "
                      f"(have {sorted(ALGORITHMS)})", flush=True)
                continue
            if state == "partial" and not args.resume:
                raise SystemExit(f"{run.name} is partial: pass --resume to continue it")
            todo.append(run)
        if args.jobs == 1:
            for run in todo:
                execute(run, configs[run.name])
                report(out, runs, args.budget, args.eval_every, study_cmd.strip())
        elif todo:
            from concurrent.futures import ThreadPoolExecutor, as_completed

            threads = max(1, len(os.sched_getaffinity(0)) // args.jobs)  # the cores this process may use
            print(f"{len(todo)} runs, {args.jobs} at a time at {threads} torch thread(s) each", flush=True)
            pending = {run.name for run in todo}

            def go(run: Run) -> int:  # a forked run first waits for its source's cold start (FIFO: it runs)
                source = f"{run.variant.fork_from}-s{run.seed}"
                wait_for_source(out, run, lambda: source in pending)
                return execute_child(run, out / "configs" / f"{run.name}.toml", out / "runs" / run.name, threads,
                                     retries=args.retries)

            with ThreadPoolExecutor(max_workers=args.jobs) as pool:
                futures = {pool.submit(go, run): run for run in todo}
                for fut in as_completed(futures):  # the table is rewritten here only, one run at a time
                    pending.discard(futures[fut].name)
                    if fut.result() != 0:
                        failed.append(futures[fut].name)
                    report(out, runs, args.budget, args.eval_every, study_cmd.strip())
    res = report(out, runs, args.budget, args.eval_every, study_cmd.strip())
    print((out / "results.md").read_text())
    if failed:
        print(f"failed runs (see their study.log): {', '.join(failed)}", file=sys.stderr)
    return 0 if res and not failed else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""How long one arm of the study takes: one LOPD and one GRPO run of ``examples/study_v2/base.toml`` timed at a
reduced size, interleaved, and each full arm's time projected from the measured cost of each part.

    python benchmarks/study_arm.py                    # SmolLM2, 2 steps, 12 pool and 12 held-out tasks, 2 rounds
    python benchmarks/study_arm.py --steps 4 --rounds 3 --json out.json
    python benchmarks/study_arm.py --tiny --rounds 2  # tiny random model on the toy env (the test)

Why a projection: a full arm (512 rollouts, bank and cold start included, a held-out point on 120 tasks
every 128 rollouts) takes hours to days on a CPU; the parts of a run cost what they cost per unit whatever
the run's length. Each reduced run is an ordinary ``lopd_train.training.trainer.train`` of the arm's own
config (``benchmarks/sample_efficiency.py``'s, so the projection follows the study if it changes) with
fewer steps, the first ``--pool-tasks`` training tasks, the first ``--heldout-tasks`` held-out tasks,
``--bank-samples`` per task, ``--cold-start-steps`` composer steps, and the diagnostics (PIG, probe NLL) at
every step so that each is timed at least once. Its parts are timed by wrapping the trainer's and the
algorithm's methods (nothing inside ``lopd_train`` changes): bank building, cold-start steps, rollout batches,
updates, diagnostics, held-out and training-pool evaluations, checkpoints; what is left (loading the model,
the envs) is "fixed".

Per unit, median (min-max) over ``--rounds`` rounds: seconds per bank rollout, per cold-start step, per
training rollout (the step's rollout batch and its update, over the rollouts of a step), per PIG and per
probe, per held-out task and per training-pool task evaluated, per checkpoint. The projection multiplies each
by the full arm's count of it, from the full config: bank rollouts ``bank_samples x pool``, cold-start steps,
training steps ``(budget - bank rollouts) / rollouts per step``, the held-out points that evaluate (a point
reached while the student has not changed since the last one is reused, as the trainer does, so LOPD's point
right after its bank costs nothing) times the held-out and pool tasks, the diagnostics at their cadence, a
checkpoint a step; plus the fixed part once. The projection's range uses each unit's min and max. Arms run
in fresh processes, in rounds whose order rotates (round r starts with arm r mod 2), so a machine whose load
changes slows both alike; the load before and after is printed.

The reduced shapes are the study's (tasks per step, group size, evaluation batch), except where a part's batch
depends on the task count: an evaluation of fewer tasks than ``eval_batch_size`` runs a smaller batch, so keep
``--heldout-tasks`` and ``--pool-tasks`` at multiples of it (12) for per-task costs that hold at 120 and 32.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.loadavg import describe, load_average  # noqa: E402

ARMS = ("lopd", "grpo")
#: unit -> what one unit is, in the order the table prints them
UNITS = {"bank": "bank rollout", "cold_start": "cold-start step", "train": "training rollout (rollout + update)",
         "rollout": "  of which rollout", "update": "  of which update", "pig": "PIG measurement",
         "probe": "probe NLL", "heldout": "held-out task evaluated", "train_eval": "training-pool task evaluated",
         "checkpoint": "checkpoint"}


def study():
    """``benchmarks/sample_efficiency.py`` as a module: the arms' configs come from there."""
    from benchmarks import sample_efficiency

    return sample_efficiency


def full_config(arm: str, tiny: bool, out: Path, budget: int = 512, every: int = 128) -> dict[str, Any]:
    se = study()
    return se.run_config(se.Run(se.BY_NAME[arm], 0), out, budget, every, tiny)


def reduced_config(arm: str, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """The arm's config at the reduced size (see the module docstring)."""
    cfg = full_config(arm, args.tiny, out)
    pool = cfg["tasks"].split(",")[:args.pool_tasks]
    held = cfg["eval_tasks"].split(",")[:args.heldout_tasks]
    per_step = cfg["tasks_per_step"] * cfg["group_size"]
    bank = cfg.get("bank_samples", 0) and args.bank_samples
    cfg.update(tasks=",".join(pool), eval_tasks=",".join(held), steps=args.steps, output_dir=str(out),
               rollout_budget=bank * len(pool) + args.steps * per_step, eval_every_rollouts=10**9, save_every=1)
    if "bank_samples" in cfg:
        cfg["bank_samples"] = args.bank_samples
    if "cold_start_steps" in cfg:
        cfg.update(cold_start_steps=args.cold_start_steps, cold_start_min_successes=1, allow_empty_cold_start=True)
    if arm == "lopd":
        cfg.update(pig_every=1, probe_every=1)
    for key in ("init_from", "eval_start_from"):
        cfg.pop(key, None)
    return cfg


class PartTimer:
    """Seconds and units of each part of a run, by wrapping the methods that do them (restored on exit)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.units: dict[str, float] = {}
        self._undo: list = []

    def add(self, part: str, seconds: float, units: float) -> None:
        self.seconds[part] = self.seconds.get(part, 0.0) + seconds
        self.units[part] = self.units.get(part, 0.0) + units

    def wrap(self, owner, name: str, part, units) -> None:
        """``part``: a name, or a function of the call's arguments that returns one; ``units``: a function of
        (arguments, result, state before) giving the units the call did."""
        fn = owner.__dict__.get(name)
        if fn is None:
            return
        timer = self

        def timed(*a, **k):
            before = a[0].rollouts if hasattr(a[0], "rollouts") else None
            t0 = time.perf_counter()
            out = fn(*a, **k)
            label = part(a, out) if callable(part) else part
            done = units(a, out, before)
            if label and done:  # a call that did no unit of its part (GRPO's bank step: no bank) is not a part
                timer.add(label, time.perf_counter() - t0, done)
            return out
        setattr(owner, name, timed)
        self._undo.append((owner, name, fn))

    def __enter__(self):
        from lopd_train import algorithms
        from lopd_train.latent.diagnostics import PIGMetric
        from lopd_train.training import checkpoints, heldout, trainer

        T = trainer.Trainer
        self.wrap(T, "build_bank", "bank", lambda a, out, before: a[0].rollouts - before)
        self.wrap(T, "rollout_batch", "rollout", lambda a, out, before: len(out[0]))
        self.wrap(heldout.HeldoutEval, "evaluate",
                  lambda a, out: "train_eval" if a[0].path.name == heldout.TRAIN_EVAL_FILE else "heldout",
                  lambda a, out, before: len(a[0].task_ids))
        self.wrap(checkpoints, "save", "checkpoint", lambda a, out, before: 1)
        self.wrap(PIGMetric, "measure", "pig", lambda a, out, before: 1)
        for cls in {algorithms.ALGORITHMS[n] for n in ARMS}:
            self.wrap(cls, "update", "update", lambda a, out, before: len(a[1]))
            self.wrap(cls, "cold_start_step", "cold_start", lambda a, out, before: 1)
            self.wrap(cls, "probe_nll", "probe", lambda a, out, before: 1)
        return self

    def __exit__(self, *exc):
        for owner, name, fn in reversed(self._undo):
            setattr(owner, name, fn)


def arm_worker(arm: str, args: argparse.Namespace) -> dict[str, Any]:
    """One reduced run of ``arm`` in this process: its wall time and its parts."""
    if args.tiny:
        __import__(full_config(arm, True, Path("/x"))["env"].split(":")[0])  # the toy env's module registers it
    from lopd_train.config import TrainConfig
    from lopd_train.training.trainer import train

    with tempfile.TemporaryDirectory() as tmp:
        cfg = reduced_config(arm, args, Path(tmp) / arm)
        t0 = time.perf_counter()
        with PartTimer() as parts:
            result = train(TrainConfig(**cfg))
        wall = time.perf_counter() - t0
    # the update is part of each step's cost per rollout; its units are the rollouts it consumed
    return {"arm": arm, "wall_s": wall, "seconds": parts.seconds, "units": parts.units, "rollouts": result["rollouts"],
            "steps": result["step"]}


def per_unit(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each part's seconds per unit, median (min-max) over rounds; "train" is rollout + update per training
    rollout; "fixed" is the run's wall time outside every part."""
    out: dict[str, list[float]] = {}
    for r in runs:
        s, u = r["seconds"], r["units"]
        for part in UNITS:
            if part == "train":
                if u.get("rollout"):
                    out.setdefault(part, []).append((s.get("rollout", 0.0) + s.get("update", 0.0)) / u["rollout"])
            elif u.get(part):
                out.setdefault(part, []).append(s[part] / u[part])
        out.setdefault("fixed", []).append(r["wall_s"] - sum(s.values()))
    return {k: {"median": statistics.median(v), "min": min(v), "max": max(v)} for k, v in out.items()}


def full_counts(arm: str, tiny: bool) -> dict[str, float]:
    """How many of each unit the full arm spends (see the module docstring)."""
    from lopd_train.algorithms import ALGORITHMS

    cfg = full_config(arm, tiny, Path("/x"))
    cls = ALGORITHMS[cfg["algo"]]
    se = study()
    pool, held = len(cfg["tasks"].split(",")), len(cfg["eval_tasks"].split(","))
    per_step = cfg["tasks_per_step"] * cfg["group_size"]
    budget, every = cfg["rollout_budget"], cfg["eval_every_rollouts"]
    bank = cfg.get("bank_samples", 0) * pool if cls.uses_bank else 0
    cold = cfg.get("cold_start_steps", 0) if cls.has_cold_start else 0
    steps = math.ceil((budget - bank) / per_step)
    points = 1 + sum(1 for m in se.milestones(budget, every) if m > bank)  # the rest are reused (same student)
    counts = {"bank": bank, "cold_start": cold, "train": steps * per_step,
              "heldout": points * held, "train_eval": points * pool if cfg.get("eval_training_tasks") else 0,
              "checkpoint": steps // cfg.get("save_every", 1) + (1 if bank else 0) + (1 if cold else 0),
              "fixed": 1}
    if arm == "lopd":
        counts["pig"] = steps // cfg["pig_every"] if cfg.get("pig_every") else 0
        counts["probe"] = steps // 10 + 1  # --probe-every's default (10), and the last step
    counts["points"] = points
    return counts


def project(costs: dict[str, dict[str, float]], counts: dict[str, float]) -> dict[str, Any]:
    """The full arm's seconds: each unit's cost times its count, summed (median, and the min and max sums)."""
    parts = {k: {q: costs[k][q] * n for q in ("median", "min", "max")} for k, n in counts.items()
             if k in costs and k not in ("rollout", "update")}
    missing = [k for k, n in counts.items() if n and k not in costs and k != "points"]
    total = {q: sum(p[q] for p in parts.values()) for q in ("median", "min", "max")}
    return {"parts": parts, "total_s": total, "unmeasured": missing}


def run_arm(arm: str, argv: list[str]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--worker", arm, *argv], cwd=ROOT, capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"study_arm worker {arm!r} failed (exit {proc.returncode}): {proc.stderr[-3000:]}")
    return json.loads(line[len("RESULT "):])


def hours(s: float) -> str:
    return f"{s / 3600:.1f} h"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2, help="training steps of each reduced run")
    p.add_argument("--pool-tasks", type=int, default=12, help="training tasks (the first of the study's pool)")
    p.add_argument("--heldout-tasks", type=int, default=12, help="held-out tasks (the first of the study's 120)")
    p.add_argument("--bank-samples", type=int, default=1, help="LOPD's bank samples per task")
    p.add_argument("--cold-start-steps", type=int, default=2)
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds (each arm once per round)")
    p.add_argument("--tiny", action="store_true", help="the tiny random model on the toy env (tests)")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--worker", choices=ARMS, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        print("RESULT " + json.dumps(arm_worker(args.worker, args)), flush=True)
        return {}
    argv = list(argv if argv is not None else sys.argv[1:])
    if "--json" in argv:
        i = argv.index("--json")
        del argv[i:i + 2]
    before, started = load_average(), time.perf_counter()
    runs: dict[str, list[dict[str, Any]]] = {a: [] for a in ARMS}
    orders, loads = [], []
    for r in range(args.rounds):
        order = list(ARMS[r % 2:] + ARMS[:r % 2])
        orders.append(order)
        loads.append(load_average()[0])
        for arm in order:
            runs[arm].append(run_arm(arm, argv))
            print(f"round {r + 1}/{args.rounds}, load {loads[-1]}: {arm} {runs[arm][-1]['wall_s']:.1f} s "
                  f"({runs[arm][-1]['steps']} steps, {runs[arm][-1]['rollouts']} rollouts)", flush=True)
    result: dict[str, Any] = {"orders": orders, "load_1min_per_round": loads, "arms": {}}
    for arm in ARMS:
        costs, counts = per_unit(runs[arm]), full_counts(arm, args.tiny)
        result["arms"][arm] = {"per_unit_s": costs, "full_counts": counts, "projection": project(costs, counts),
                               "runs": runs[arm]}
    result["load_average"] = {"before": before, "after": load_average()}
    result["wall_s"] = time.perf_counter() - started
    result["command"] = "python benchmarks/study_arm.py " + " ".join(argv)
    print_result(result, args)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


def print_result(result: dict[str, Any], args: argparse.Namespace) -> None:
    def f(d, spec=".3f"):
        return f"{d['median']:{spec}} ({d['min']:{spec}}-{d['max']:{spec}})"
    print(f"reduced runs: {args.steps} steps, {args.pool_tasks} pool and {args.heldout_tasks} held-out tasks, "
          f"{args.bank_samples} bank sample(s) a task, {args.cold_start_steps} cold-start steps; {args.rounds} "
          f"interleaved round(s), orders {result['orders']}, 1-min load per round {result['load_1min_per_round']}")
    for arm, r in result["arms"].items():
        c, n, proj = r["per_unit_s"], r["full_counts"], r["projection"]
        print(f"{arm}: seconds per unit, median (min-max) over rounds; the full arm's count; projected seconds")
        for k in [*UNITS, "fixed"]:
            if k not in c and not n.get(k):
                continue
            cost = f(c[k]) if k in c else "not measured"
            count = "" if k in ("rollout", "update") else f"{n.get(k, 0):>7.0f}"
            part = proj["parts"].get(k)
            print(f"  {UNITS.get(k, 'fixed (load, envs)'):38s} {cost:>26s} {count:>7s} "
                  f"{f(part, '.0f') + ' s' if part else '':>22s}")
        print(f"  {arm} full arm ({n['points']} held-out points evaluated): projected {hours(proj['total_s']['median'])} "
              f"({hours(proj['total_s']['min'])}-{hours(proj['total_s']['max'])})"
              + (f"; not measured in the reduced run: {', '.join(proj['unmeasured'])}" if proj["unmeasured"] else ""))
    print(f"{describe(result['load_average']['before'], result['load_average']['after'])}; "
          f"{result['wall_s']:.0f} s; command: {result['command']}")


if __name__ == "__main__":
    main()

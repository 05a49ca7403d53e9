"""Throughput of lopd/EnvScaler-v0 episodes, in steps per second, against the same work in-process.

Every one of lopd's own scenarios is played along its scripted solution (each tool call one step, then
"Task Completed", which grades the episode), two ways measured in the same run:

* baseline (in-process, trusted classes only, here only): build the class from its source, create the
  instance the official way, call the methods and take ``str(result)``, run the check functions;
* env: ``env.reset`` + ``env.step`` for each action, i.e. a sandboxed worker per episode (bubblewrap),
  the framed RPC with host deadlines, action parsing, observations, trace, and the checks in forked
  children (official scoring: against the final state only).

Reported: steps/s of whole episodes (reset and grading included) and of tool-call steps alone, and the
ratio env / in-process for each.

Timing: a warm-up of both sides, then ``--repeat`` rounds; in each round both sides play every scenario once,
in an order that rotates from round to round (round r starts with side r mod 2), so a machine whose load
changes slows both alike. Each figure is the median over rounds with its range (min-max); each ratio is taken
per round (env over in-process in the same round), then its median and range. The load average before and
after, and the 1-minute load of each round, are printed beside them.

    python benchmarks/envscaler_throughput.py [--repeat 3] [--scenarios N] [--json out.json]

Earlier figures: ``benchmarks/results/envscaler_throughput/README.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402

import lopd_envs  # noqa: E402
from benchmarks.loadavg import describe, load_average  # noqa: E402
from lopd_envs.suites.envscaler import data  # noqa: E402
from lopd_envs.suites.envscaler.ours import build  # noqa: E402

gym.register_envs(lopd_envs)


def load() -> tuple[dict, list[dict], dict]:
    env_path, scen_path = data.ours_paths()
    solutions = json.loads((data.OURS_DIR / "lopd_ours_solutions.json").read_text())
    return json.loads(env_path.read_text()), json.loads(scen_path.read_text()), solutions


def in_process(envs: dict, rows: list[dict], solutions: dict) -> tuple[float, float, int, int]:
    """(seconds for whole episodes, seconds for the calls alone, steps, call steps)."""
    total = calls_time = 0.0
    steps = calls = 0
    for row in rows:
        start = time.perf_counter()
        instance = build._instance(envs[row["env_id"]], row["init_config"])
        initial = build._state(instance)
        t0 = time.perf_counter()
        for call in solutions[row["task_id"]]["calls"]:
            str(getattr(instance, call["name"])(**call["arguments"]))
        calls_time += time.perf_counter() - t0
        calls += len(solutions[row["task_id"]]["calls"])
        final = build._state(instance)
        assert all(build.verdicts(row, initial, final))
        total += time.perf_counter() - start
        steps += len(solutions[row["task_id"]]["calls"]) + 1
    return total, calls_time, steps, calls


def sandboxed(rows: list[dict], solutions: dict) -> tuple[float, float, int, int]:
    env = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation")
    total = calls_time = 0.0
    steps = calls = 0
    for row in rows:
        start = time.perf_counter()
        env.reset(options={"task_id": row["task_id"]})
        for call in solutions[row["task_id"]]["calls"]:
            t0 = time.perf_counter()
            env.step(f"<tool_call>{json.dumps(call)}</tool_call>")
            calls_time += time.perf_counter() - t0
        _, reward, terminated, _, _ = env.step("Task Completed")
        assert terminated and reward == 1.0, row["task_id"]
        total += time.perf_counter() - start
        steps += len(solutions[row["task_id"]]["calls"]) + 1
        calls += len(solutions[row["task_id"]]["calls"])
    env.close()
    return total, calls_time, steps, calls


SIDES = ("in-process", "env")


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max over the rounds: how every repeated figure is reported."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def fmt(d: dict[str, float], spec: str) -> str:
    return f"{d['median']:{spec}} ({d['min']:{spec}}-{d['max']:{spec}})"


def interleaved(envs: dict, rows: list[dict], solutions: dict, repeat: int) -> dict:
    """Both sides once per round, the order rotating from round to round (the first round after a warm-up
    of both): per side, each round's ``(seconds, call seconds, steps, call steps)``; and each round's order
    and 1-minute load."""
    run = {"in-process": lambda: in_process(envs, rows, solutions), "env": lambda: sandboxed(rows, solutions)}
    in_process(envs, rows[:2], solutions)  # warm-up: imports, class building
    sandboxed(rows[:2], solutions)  # warm-up: interpreter resolution, bubblewrap probe
    out: dict = {"runs": {side: [] for side in SIDES}, "orders": [], "load_1min": []}
    for r in range(repeat):
        order = list(SIDES[r % 2:] + SIDES[:r % 2])
        out["orders"].append(order)
        out["load_1min"].append(load_average()[0])
        for side in order:
            out["runs"][side].append(run[side]())
    return out


def summarise(timed: dict) -> dict:
    """Steps/s per side (whole episodes, tool calls alone) as median (min-max) over rounds, and the env /
    in-process ratio of each, paired per round."""
    base, boxed = timed["runs"]["in-process"], timed["runs"]["env"]
    steps, calls = base[0][2], base[0][3]
    result: dict = {"steps": steps, "call_steps": calls, "rounds": len(base), "orders": timed["orders"],
                    "load_1min_per_round": timed["load_1min"]}
    for side, runs in (("in_process", base), ("env", boxed)):
        result[f"{side}_steps_per_s"] = spread([steps / r[0] for r in runs])
        result[f"{side}_call_steps_per_s"] = spread([calls / r[1] for r in runs])
    result["ratio_episode_steps"] = spread([b[0] / e[0] for b, e in zip(base, boxed)])
    result["ratio_call_steps"] = spread([b[1] / e[1] for b, e in zip(base, boxed)])
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="interleaved rounds (each side once per round)")
    parser.add_argument("--scenarios", type=int, default=0, help="only the first N scenarios (0: all)")
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be 1 or more")
    before = load_average()
    envs, rows, solutions = load()
    if args.scenarios:
        rows = rows[:args.scenarios]
    result = {"scenarios": len(rows), **summarise(interleaved(envs, rows, solutions, args.repeat)),
              "machine": platform.platform(), "load_average": {"before": before, "after": load_average()}}
    print(f"{len(rows)} scenarios, {result['steps']} steps ({result['call_steps']} tool calls); median (min-max) of "
          f"{args.repeat} interleaved round(s), orders {result['orders']}, 1-min load per round "
          f"{result['load_1min_per_round']}; ratio env / in-process per round")
    for label, key in (("whole episodes ", "steps_per_s"), ("tool-call steps", "call_steps_per_s")):
        ratio = result["ratio_episode_steps" if key == "steps_per_s" else "ratio_call_steps"]
        print(f"{label}: env {fmt(result[f'env_{key}'], '.1f')} steps/s   in-process "
              f"{fmt(result[f'in_process_{key}'], '.1f')} steps/s   ratio {fmt(ratio, '.4f')}")
    print(describe(before, result["load_average"]["after"]))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()

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

    python benchmarks/envscaler_throughput.py [--repeat 3] [--json out.json]

Measured on the development machine (2 cores shared with other jobs, load average ~8, bubblewrap),
repeat 3: whole episodes 29.6 steps/s (env) vs 603 steps/s (in-process), ratio 0.049; tool-call steps
510/s vs 61,800/s, ratio 0.0082. On that machine one sandboxed call costs 0.4-0.7 ms end to end (session
alone: ~0.1 ms per request) and an episode's fixed cost is ~60-100 ms, mostly the forked checks and the
instance creation; the worker's boot is hidden by the spare that each env keeps booting.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402

import lopd_envs  # noqa: E402
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="write the figures to this file")
    args = parser.parse_args()
    envs, rows, solutions = load()
    sandboxed(rows[:2], solutions)  # warm-up: interpreter resolution, bubblewrap probe
    base = [in_process(envs, rows, solutions) for _ in range(args.repeat)]
    boxed = [sandboxed(rows, solutions) for _ in range(args.repeat)]
    best = lambda runs, i: min(r[i] for r in runs)  # noqa: E731 - best of the repeats
    steps, calls = base[0][2], base[0][3]
    result = {
        "scenarios": len(rows), "steps": steps, "call_steps": calls, "repeat": args.repeat,
        "in_process_steps_per_s": steps / best(base, 0), "env_steps_per_s": steps / best(boxed, 0),
        "in_process_call_steps_per_s": calls / best(base, 1), "env_call_steps_per_s": calls / best(boxed, 1),
        "machine": platform.platform(),
    }
    result["ratio_episode_steps"] = result["env_steps_per_s"] / result["in_process_steps_per_s"]
    result["ratio_call_steps"] = result["env_call_steps_per_s"] / result["in_process_call_steps_per_s"]
    print(f"{len(rows)} scenarios, {steps} steps ({calls} tool calls), best of {args.repeat}")
    print(f"whole episodes : env {result['env_steps_per_s']:9.1f} steps/s   in-process "
          f"{result['in_process_steps_per_s']:10.1f} steps/s   ratio {result['ratio_episode_steps']:.4f}")
    print(f"tool-call steps: env {result['env_call_steps_per_s']:9.1f} steps/s   in-process "
          f"{result['in_process_call_steps_per_s']:10.1f} steps/s   ratio {result['ratio_call_steps']:.4f}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

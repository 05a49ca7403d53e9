"""Throughput of lopd/BFCLv3-v0, in steps per second, and the env's own overhead per step.

Single turn: every single-turn task answered with its ground truth (Python categories in BFCL's
``[f(a=1)]`` text, Java/JavaScript as structured calls, irrelevance with a refusal), two ways in one run:

* baseline, "bare scorer": ``decode_action`` + ``score_single_turn`` on the parsed action, i.e. the
  harness's decoder and AST checker alone;
* env: ``env.reset(options={"task_id": ...})`` + ``env.step(answer)``: prompt, action parsing, decoding,
  scoring, trace and info, as a trainer sees it.

Multi turn: every multi-turn task replayed along its ground truth (one step per turn with the turn's calls,
one step ending the turn); baseline is the bare ``MultiTurnScorer`` (the calls run on the simulated APIs
and each turn checked) fed the same decoded calls.

    python benchmarks/env_throughput.py [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402

import lopd_envs  # noqa: E402
from lopd_envs.suites.bfcl import MULTI_TURN, SINGLE_TURN  # noqa: E402
from lopd_envs.suites.bfcl.data import NO_ANSWER  # noqa: E402
from lopd_envs.suites.bfcl.env import decode_action  # noqa: E402
from lopd_envs.suites.bfcl.gold import (  # noqa: E402
    as_structured, as_text, multi_turn_gold_actions, single_turn_gold_calls)
from lopd_envs.suites.bfcl.multi_turn import MultiTurnScorer  # noqa: E402
from lopd_envs.suites.bfcl.single_turn import score_single_turn  # noqa: E402
from lopd_envs.tools import ToolCall, parse_action  # noqa: E402

gym.register_envs(lopd_envs)


def best_time(repeat: int, run: Callable[[], Any]) -> float:
    """Fastest of ``repeat`` passes: the one least disturbed by other processes on a shared machine."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return best


def single_turn_answer(item) -> Any:
    if item.category in NO_ANSWER:
        if "irrelevance" in item.category:
            return "None of the functions can answer this question."
        return as_text([ToolCall(item.functions[0]["name"], {})])
    calls = single_turn_gold_calls(item.functions, item.answer, item.language)
    return as_text(calls) if item.language == "Python" else as_structured(calls)


def bench_single_turn(repeat: int) -> dict[str, Any]:
    env = gym.make("lopd/BFCLv3-v0", category=list(SINGLE_TURN)).unwrapped
    cases = [(t.task_id, t.data, single_turn_answer(t.data)) for t in env.tasks]

    def bare() -> None:
        for _, item, action in cases:
            decoded, error = decode_action(parse_action(action), item, False)
            score_single_turn(decoded, error, item.functions, item.answer, item.category, item.language)

    rewards: list[float] = []

    def through_env() -> None:
        rewards.clear()
        for task_id, _, action in cases:
            env.reset(options={"task_id": task_id})
            rewards.append(env.step(action)[1])

    t_bare, t_env = best_time(repeat, bare), best_time(repeat, through_env)
    n = len(cases)
    return {"tasks": n, "solved": sum(r == 1.0 for r in rewards), "bare_steps_per_s": n / t_bare,
            "env_steps_per_s": n / t_env, "env_over_bare": t_env / t_bare,
            "overhead_us_per_step": (t_env - t_bare) / n * 1e6}


def bench_multi_turn(repeat: int) -> dict[str, Any]:
    env = gym.make("lopd/BFCLv3-v0", category=list(MULTI_TURN)).unwrapped
    episodes = [(t.task_id, t.data, multi_turn_gold_actions(t.data.entry, t.data.answer, "text")) for t in env.tasks]
    steps = sum(len(actions) for _, _, actions in episodes)

    def bare() -> None:
        for _, item, _ in episodes:
            scorer = MultiTurnScorer(item.entry, item.answer, None)
            for turn in item.answer:
                if turn:
                    scorer.execute(list(turn))
                scorer.end_turn()
            scorer.result(False)

    rewards: list[float] = []

    def through_env() -> None:
        rewards.clear()
        for task_id, _, actions in episodes:
            env.reset(options={"task_id": task_id})
            for action in actions:
                _, reward, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    break
            rewards.append(reward)

    t_bare, t_env = best_time(repeat, bare), best_time(repeat, through_env)
    return {"episodes": len(episodes), "steps": steps, "solved": sum(r == 1.0 for r in rewards),
            "bare_steps_per_s": steps / t_bare, "env_steps_per_s": steps / t_env,
            "env_over_bare": t_env / t_bare, "overhead_us_per_step": (t_env - t_bare) / steps * 1e6}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args()
    results = {"machine": f"{platform.python_implementation()} {platform.python_version()} on "
                          f"{platform.machine()}", "single_turn": bench_single_turn(args.repeat),
               "multi_turn": bench_multi_turn(args.repeat)}
    for kind, r in (("single turn", results["single_turn"]), ("multi turn", results["multi_turn"])):
        print(f"BFCL-v3 {kind}: env {r['env_steps_per_s']:,.0f} steps/s; baseline (bare scorer) "
              f"{r['bare_steps_per_s']:,.0f} steps/s; env/bare time ratio {r['env_over_bare']:.2f}x "
              f"(+{r['overhead_us_per_step']:.0f} µs/step); solved {r['solved']}/"
              f"{r.get('tasks', r.get('episodes'))}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

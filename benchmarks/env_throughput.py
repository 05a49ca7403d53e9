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

    python benchmarks/env_throughput.py [--repeat 15] [--json out.json]

Timing: the two sides of a ratio are timed in interleaved repetitions (bare, env, env, bare, bare, env...:
the order alternates, so neither side always runs first after the other has warmed the caches) and each
repetition's ratio is the env pass over the bare pass next to it. On a shared machine the load moves from
one minute to the next; interleaving makes both sides of one ratio see the same load, and the median
over repetitions with its range (min-max) shows how much it still moved. The load average is printed
before and after each part. Throughputs are medians over the repetitions.

Measured 2026-12-03 (the issue-27 revision), 2 cores, ``--repeat 15``: see
``benchmarks/results/env_throughput/`` for the output and the load average it ran at.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
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


def load_average() -> list[float]:
    """The 1-, 5- and 15-minute load averages (how many processes wanted a CPU while this ran)."""
    return [round(x, 2) for x in os.getloadavg()]


def interleaved(repeat: int, bare: Callable[[], Any], env: Callable[[], Any]) -> dict[str, Any]:
    """Time ``bare`` and ``env`` in ``repeat`` interleaved repetitions, alternating which runs first (ABBA...),
    after one untimed pass of each (imports, caches, first-use compilation of the checkers).

    Returns the per-repetition wall times of each side and the per-repetition ratios env/bare: a ratio
    pairs two passes run back to back, so a change in the machine's load between repetitions moves both of
    its sides, which a ratio of two separately taken best-ofs does not guarantee."""
    bare(), env()
    times: dict[str, list[float]] = {"bare": [], "env": []}
    for rep in range(repeat):
        order = (("bare", bare), ("env", env)) if rep % 2 == 0 else (("env", env), ("bare", bare))
        for name, run in order:
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    ratios = [e / b for e, b in zip(times["env"], times["bare"])]
    return {"bare_s": times["bare"], "env_s": times["env"], "ratios": ratios}


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max: what the summary prints for every figure measured over repetitions."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(timed: dict[str, Any], steps: int, load_before: list[float]) -> dict[str, Any]:
    """Per-side steps/s (median and range over repetitions), the paired ratio's median and range, and the
    env's overhead per step from the medians."""
    bare_rate = [steps / t for t in timed["bare_s"]]
    env_rate = [steps / t for t in timed["env_s"]]
    over = [(e - b) / steps * 1e6 for e, b in zip(timed["env_s"], timed["bare_s"])]
    return {"repetitions": len(timed["ratios"]), "bare_steps_per_s": spread(bare_rate),
            "env_steps_per_s": spread(env_rate), "env_over_bare": spread(timed["ratios"]),
            "overhead_us_per_step": spread(over), "raw": timed,
            "load_average": {"before": load_before, "after": load_average()}}


def single_turn_answer(item) -> Any:
    if item.category in NO_ANSWER:
        if "irrelevance" in item.category:
            return "None of the functions can answer this question."
        return as_text([ToolCall(item.functions[0]["name"], {})])
    calls = single_turn_gold_calls(item.functions, item.answer, item.language)
    return as_text(calls) if item.language == "Python" else as_structured(calls)


def bench_single_turn(repeat: int) -> dict[str, Any]:
    load_before = load_average()
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

    out = summarise(interleaved(repeat, bare, through_env), len(cases), load_before)
    return {"tasks": len(cases), "steps": len(cases), "solved": sum(r == 1.0 for r in rewards), **out}


def bench_multi_turn(repeat: int) -> dict[str, Any]:
    load_before = load_average()
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

    out = summarise(interleaved(repeat, bare, through_env), steps, load_before)
    return {"episodes": len(episodes), "steps": steps, "solved": sum(r == 1.0 for r in rewards), **out}


def report_line(kind: str, r: dict[str, Any]) -> str:
    """One part's summary: medians with their range over the interleaved repetitions, and the load."""
    def fmt(d: dict[str, float], spec: str) -> str:
        return f"{d['median']:{spec}} ({d['min']:{spec}}-{d['max']:{spec}})"
    load = r["load_average"]
    return (f"BFCL-v3 {kind}: env {fmt(r['env_steps_per_s'], ',.0f')} steps/s; baseline (bare scorer) "
            f"{fmt(r['bare_steps_per_s'], ',.0f')} steps/s; env/bare time ratio {fmt(r['env_over_bare'], '.2f')} "
            f"(median (min-max) of {r['repetitions']} interleaved repetitions, each ratio paired); overhead "
            f"+{fmt(r['overhead_us_per_step'], '.0f')} µs/step; solved {r['solved']}/"
            f"{r.get('tasks', r.get('episodes'))}; load average {' '.join(map(str, load['before']))} -> "
            f"{' '.join(map(str, load['after']))}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="interleaved repetitions of each side")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    results = {"machine": f"{platform.python_implementation()} {platform.python_version()} on "
                          f"{platform.machine()}, {os.cpu_count()} CPUs",
               "command": "python benchmarks/env_throughput.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "single_turn": bench_single_turn(args.repeat), "multi_turn": bench_multi_turn(args.repeat)}
    print(results["machine"])
    for kind, r in (("single turn", results["single_turn"]), ("multi turn", results["multi_turn"])):
        print(report_line(kind, r))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

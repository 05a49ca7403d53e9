"""Scoring throughput of lopd/ACEBench-v0, in rows per second.

Every normal and special row is scored with its gold answer (the special ones in ACEBench's expected
form), in both languages, two ways measured in the same run:

* baseline: the bare scorer function (``score_normal`` / ``score_special``) on the answer text;
* env: ``env.reset(options={"task_id": ...})`` + ``env.step(answer)``, i.e. prompt building, action
  parsing, scoring, trace and info, as a trainer sees it.

Agent rows are replayed along their gold milestones (one episode per row, every message executed on the
scenario classes), against the bare end-state comparison as baseline.

    python benchmarks/acebench_scoring.py [--repeat 3] [--scoring official|strict] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
if "LOPD_DATA_DIR" not in os.environ and (ROOT.parent / "shared" / "data").is_dir():
    os.environ["LOPD_DATA_DIR"] = str(ROOT.parent / "shared" / "data")

import gymnasium as gym  # noqa: E402

import lopd_envs  # noqa: E402
from lopd_envs.suites.acebench.agent_score import end_to_end  # noqa: E402
from lopd_envs.suites.acebench.data import AGENT, NORMAL, SPECIAL, load_tasks  # noqa: E402
from lopd_envs.suites.acebench.normal import gold_answer, score_normal  # noqa: E402
from lopd_envs.suites.acebench.special import expected_answer, score_special  # noqa: E402

gym.register_envs(lopd_envs)
FINISH = "finish conversation"


def rate(rows: int, repeat: int, run: Callable[[], None]) -> float:
    """Best rows/s over ``repeat`` passes (the least disturbed by other processes on a shared machine)."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - start)
    return rows / best


def answer(task) -> str:
    row = task.data
    if task.category in SPECIAL:
        return expected_answer(row.gold, task.category)
    return gold_answer(row.gold, row.question["function"])


def single_turn(language: str, scoring: str, repeat: int) -> dict:
    tasks = load_tasks(list(NORMAL + SPECIAL), language)
    answers = [(t, answer(t)) for t in tasks]
    env = gym.make("lopd/ACEBench-v0", category=list(NORMAL + SPECIAL), language=language, scoring=scoring).unwrapped

    def bare() -> None:
        for task, text in answers:
            row = task.data
            if task.category in SPECIAL:
                score_special(text, row.gold, task.category, scoring)
            else:
                score_normal(text, row.question["function"], row.gold, scoring)

    def full() -> None:
        for task, text in answers:
            env.reset(options={"task_id": task.task_id})
            env.step(text)

    return {"rows": len(tasks), "bare_scorer": rate(len(tasks), repeat, bare), "env_reset_step": rate(len(tasks), repeat, full)}


def agent(language: str, scoring: str, repeat: int) -> dict:
    tasks = load_tasks(list(AGENT), language)
    env = gym.make("lopd/ACEBench-v0", category=list(AGENT), language=language, scoring=scoring, user=["ok"] * 30).unwrapped
    states = []

    def episodes() -> None:
        states.clear()
        for task in tasks:
            stones = task.data.milestones
            path = stones[0] if stones and isinstance(stones[0], list) else stones
            env.reset(options={"task_id": task.task_id})
            info: dict = {}
            for stone in [*path, FINISH]:
                *_, terminated, truncated, info = env.step(stone.strip())
                if terminated or truncated:
                    break
            states.append((info["score"]["state"], task.data.gold))

    episodes()

    def bare() -> None:
        for state, gold in states:
            end_to_end(state, gold, scoring)

    return {"rows": len(tasks), "bare_scorer": rate(len(tasks), repeat, bare), "env_episode": rate(len(tasks), repeat, episodes)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--scoring", choices=("official", "strict"), default="official")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = {"python": platform.python_version(), "cpus": os.cpu_count(), "scoring": args.scoring, "languages": {}}
    print(f"ACEBench scoring throughput (scoring={args.scoring}, best of {args.repeat}, rows/s)")
    for language in ("en", "zh"):
        single, agents = single_turn(language, args.scoring, args.repeat), agent(language, args.scoring, args.repeat)
        results["languages"][language] = {"normal_and_special": single, "agent": agents}
        print(f"[{language}] normal+special, {single['rows']} rows: bare scorer {single['bare_scorer']:,.0f}/s (baseline), "
              f"env reset+step {single['env_reset_step']:,.0f}/s = {single['env_reset_step'] / single['bare_scorer']:.3f}x baseline")
        print(f"[{language}] agent gold-path episodes, {agents['rows']} rows: bare end-state check {agents['bare_scorer']:,.0f}/s "
              f"(baseline), env episode {agents['env_episode']:,.0f}/s = {agents['env_episode'] / agents['bare_scorer']:.4f}x baseline")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

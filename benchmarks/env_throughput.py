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

Timing: each repetition is a pass of each side over all the work, cut in ``--chunks`` slices that are run
interleaved (slice 0 bare then env, slice 1 env then bare, ...: neither side always runs first after the
other has warmed the caches), and the repetition's ratio is the env's time over the bare scorer's. On a
shared machine the load moves from one second to the next; slices of ~50 ms run side by side make both
sides of one ratio see the same load, and the median over repetitions with its range (min-max) shows how
much it still moved. The ratio is given in wall time and in CPU time (this process's user+sys, which does
not count the time other jobs held the CPU). The load average is printed before and after each part.
Throughputs are medians over the repetitions.

Measured 2026-12-03 08:21-08:23 (issue 27), ``--json benchmarks/results/env_throughput/bfcl.json`` (output
beside it: 15 repetitions, 20 slices), the 2-core machine shared with other jobs (load average 9.2-11.6),
median (min-max):
  single turn (3,641 tasks): env 3,351 (2,615-4,757) steps/s, bare scorer 5,611 (4,538-8,014) steps/s; env/bare
      1.72x (1.56-1.87x), in CPU time 1.69x (1.56-1.75x); the env's overhead +45 µs of CPU a step.
  multi turn (800 episodes): env 1,897 (1,215-2,783) steps/s, bare scorer 4,244 (2,442-5,757) steps/s;
      env/bare 2.08x (1.77-2.51x), in CPU time 2.07x (1.89-2.21x); +127 µs of CPU a step.
The same script with whole passes interleaved (the revision before, load 8.6) spread the single-turn ratio
over 1.13-3.40x, and at load 2 gave 1.63x (1.52-1.75x, 2 repetitions): slicing is what makes the ratio
stable under load; the CPU-time ratio agrees with it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402

import lopd_envs  # noqa: E402
from benchmarks.loadavg import load_average  # noqa: E402
from lopd_envs.actions import ToolCall  # noqa: E402
from lopd_envs.suites.bfcl import MULTI_TURN, SINGLE_TURN  # noqa: E402
from lopd_envs.suites.bfcl.data import NO_ANSWER  # noqa: E402
from lopd_envs.suites.bfcl.env import decode_action  # noqa: E402
from lopd_envs.suites.bfcl.gold import as_structured, as_text, multi_turn_gold_actions, single_turn_gold_calls  # noqa: E402
from lopd_envs.suites.bfcl.multi_turn import MultiTurnScorer  # noqa: E402
from lopd_envs.suites.bfcl.single_turn import score_single_turn  # noqa: E402
from lopd_envs.tools import parse_action  # noqa: E402

gym.register_envs(lopd_envs)


def interleaved(repeat: int, chunks: int, bare: Callable[[int], Any], env: Callable[[int], Any]) -> dict[str, Any]:
    """Time ``bare`` and ``env`` in ``repeat`` repetitions, each a pass over the work in ``chunks`` slices
    (``bare(i)`` and ``env(i)`` run slice ``i``), interleaved slice by slice: slice 0 bare then env, slice 1 env
    then bare, and so on, after one untimed pass of each (imports, caches, first-use compilation of the
    checkers). A repetition's time per side is the sum over its slices, in wall time and in CPU time.

    Why slices: a whole pass takes about a second, and on a shared machine the share of a CPU this process
    gets changes on that scale, so two whole passes back to back can still see different loads (measured:
    paired whole-pass ratios ranged 1.13-3.40 at load average 8.6). Slices of ~50 ms run next to each other,
    so both sides of a repetition sample the same load. CPU time (user+sys of this process) is the second
    figure: it counts only the time this process ran, whatever the other jobs did."""
    def run_all(fn: Callable[[int], Any]) -> None:
        for i in range(chunks):
            fn(i)
    run_all(bare), run_all(env)
    out: dict[str, list[float]] = {"bare_s": [], "env_s": [], "bare_cpu_s": [], "env_cpu_s": []}
    for _ in range(repeat):
        wall = {"bare": 0.0, "env": 0.0}
        cpu = {"bare": 0.0, "env": 0.0}
        for i in range(chunks):
            order = (("bare", bare), ("env", env)) if i % 2 == 0 else (("env", env), ("bare", bare))
            for name, run in order:
                start, c0 = time.perf_counter(), time.process_time()
                run(i)
                wall[name] += time.perf_counter() - start
                cpu[name] += time.process_time() - c0
        for name in ("bare", "env"):
            out[f"{name}_s"].append(wall[name])
            out[f"{name}_cpu_s"].append(cpu[name])
    return {**out, "ratios": [e / b for e, b in zip(out["env_s"], out["bare_s"])],
            "cpu_ratios": [e / b if b else float("nan") for e, b in zip(out["env_cpu_s"], out["bare_cpu_s"])],
            "chunks": chunks}


def spread(values: list[float]) -> dict[str, float]:
    """Median, min and max: what the summary prints for every figure measured over repetitions."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(timed: dict[str, Any], steps: int, load_before: list[float]) -> dict[str, Any]:
    """Per-side steps/s (median and range over repetitions), the paired ratio's median and range in wall and
    in CPU time, and the env's overhead per step."""
    bare_rate = [steps / t for t in timed["bare_s"]]
    env_rate = [steps / t for t in timed["env_s"]]
    over = [(e - b) / steps * 1e6 for e, b in zip(timed["env_s"], timed["bare_s"])]
    over_cpu = [(e - b) / steps * 1e6 for e, b in zip(timed["env_cpu_s"], timed["bare_cpu_s"])]
    return {"repetitions": len(timed["ratios"]), "bare_steps_per_s": spread(bare_rate),
            "env_steps_per_s": spread(env_rate), "env_over_bare": spread(timed["ratios"]),
            "env_over_bare_cpu": spread(timed["cpu_ratios"]), "overhead_us_per_step": spread(over),
            "overhead_cpu_us_per_step": spread(over_cpu), "raw": timed,
            "load_average": {"before": load_before, "after": load_average()}}


def slices(n: int, chunks: int) -> list[range]:
    """``chunks`` contiguous index ranges covering ``range(n)``, as equal as can be."""
    return [range(n * i // chunks, n * (i + 1) // chunks) for i in range(chunks)]


def single_turn_answer(item) -> Any:
    if item.category in NO_ANSWER:
        if "irrelevance" in item.category:
            return "None of the functions can answer this question."
        return as_text([ToolCall(item.functions[0]["name"], {})])
    calls = single_turn_gold_calls(item.functions, item.answer, item.language)
    return as_text(calls) if item.language == "Python" else as_structured(calls)


def bench_single_turn(repeat: int, chunks: int) -> dict[str, Any]:
    load_before = load_average()
    env = gym.make("lopd/BFCLv3-v0", category=list(SINGLE_TURN)).unwrapped
    cases = [(t.task_id, t.data, single_turn_answer(t.data)) for t in env.tasks]
    parts = slices(len(cases), chunks)

    def bare(i: int) -> None:
        for k in parts[i]:
            _, item, action = cases[k]
            decoded, error = decode_action(parse_action(action), item, False)
            score_single_turn(decoded, error, item.functions, item.answer, item.category, item.language)

    rewards: dict[int, float] = {}

    def through_env(i: int) -> None:
        for k in parts[i]:
            env.reset(options={"task_id": cases[k][0]})
            rewards[k] = env.step(cases[k][2])[1]

    out = summarise(interleaved(repeat, chunks, bare, through_env), len(cases), load_before)
    return {"tasks": len(cases), "steps": len(cases), "solved": sum(r == 1.0 for r in rewards.values()), **out}


def bench_multi_turn(repeat: int, chunks: int) -> dict[str, Any]:
    load_before = load_average()
    env = gym.make("lopd/BFCLv3-v0", category=list(MULTI_TURN)).unwrapped
    episodes = [(t.task_id, t.data, multi_turn_gold_actions(t.data.entry, t.data.answer, "text")) for t in env.tasks]
    steps = sum(len(actions) for _, _, actions in episodes)
    parts = slices(len(episodes), chunks)

    def bare(i: int) -> None:
        for k in parts[i]:
            item = episodes[k][1]
            scorer = MultiTurnScorer(item.entry, item.answer, None)
            for turn in item.answer:
                if turn:
                    scorer.execute(list(turn))
                scorer.end_turn()
            scorer.result(False)

    rewards: dict[int, float] = {}

    def through_env(i: int) -> None:
        for k in parts[i]:
            task_id, _, actions = episodes[k]
            env.reset(options={"task_id": task_id})
            for action in actions:
                _, reward, terminated, truncated, _ = env.step(action)
                if terminated or truncated:
                    break
            rewards[k] = reward

    out = summarise(interleaved(repeat, chunks, bare, through_env), steps, load_before)
    return {"episodes": len(episodes), "steps": steps, "solved": sum(r == 1.0 for r in rewards.values()), **out}


def report_line(kind: str, r: dict[str, Any]) -> str:
    """One part's summary: medians with their range over the interleaved repetitions, and the load."""
    def fmt(d: dict[str, float], spec: str) -> str:
        return f"{d['median']:{spec}} ({d['min']:{spec}}-{d['max']:{spec}})"
    load = r["load_average"]
    return (f"BFCL-v3 {kind}: env {fmt(r['env_steps_per_s'], ',.0f')} steps/s; baseline (bare scorer) "
            f"{fmt(r['bare_steps_per_s'], ',.0f')} steps/s; env/bare time ratio {fmt(r['env_over_bare'], '.2f')} "
            f"(median (min-max) of {r['repetitions']} repetitions interleaved in {r['raw']['chunks']} slices, "
            f"each ratio paired), in CPU time {fmt(r['env_over_bare_cpu'], '.2f')}; overhead "
            f"+{fmt(r['overhead_us_per_step'], '.0f')} µs/step (CPU +{fmt(r['overhead_cpu_us_per_step'], '.0f')}); "
            f"solved {r['solved']}/"
            f"{r.get('tasks', r.get('episodes'))}; load average {' '.join(map(str, load['before']))} -> "
            f"{' '.join(map(str, load['after']))}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=15, help="repetitions of each side")
    parser.add_argument("--chunks", type=int, default=20, help="slices a pass is cut in, interleaved slice by slice")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if args.repeat < 1 or args.chunks < 1:
        parser.error("--repeat and --chunks must be at least 1")
    results = {"machine": f"{platform.python_implementation()} {platform.python_version()} on "
                          f"{platform.machine()}, {os.cpu_count()} CPUs",
               "command": "python benchmarks/env_throughput.py " + " ".join(sys.argv[1:] if argv is None else argv),
               "single_turn": bench_single_turn(args.repeat, args.chunks),
               "multi_turn": bench_multi_turn(args.repeat, args.chunks)}
    print(results["machine"])
    for kind, r in (("single turn", results["single_turn"]), ("multi turn", results["multi_turn"])):
        print(report_line(kind, r))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()

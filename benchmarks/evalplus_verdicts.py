"""lopd's HumanEval+ / MBPP+ verdicts, per task, written to a file and compared with an earlier one: the check
that a change to the scorer's speed (the sandbox, the harness, the result channel) leaves every verdict as
it was (issue 53 item 5).

    python benchmarks/evalplus_verdicts.py --dataset humaneval --out after.json [--against before.json]
        [--sets canonical,mutants,wrong] [--workers N] [--exclude Mbpp/255]

Per solution set and task it keeps what a verdict is made of: base and plus status, inputs passed, the
first failing input (``reason`` is left out: it quotes the host's clock for a timeout). Sets: every
canonical solution; one simple mutant of it per task (``sandbox_throughput.mutant``: an operator, a
comparison or a constant changed, so most fail on some input, some only on plus inputs); and ``wrong``,
three deliberately failing answers per task in turn (a wrong constant, an exception, a wrong type), which
stop at the first input. With ``--against`` it prints every task whose verdict differs and exits 1 if any
does (a canonical solution near evalplus's time limit may time out on a loaded machine: it is named, with
its statuses, for the reader to judge).

Mbpp/255 is left out by default: its canonical solution builds ~1 GB of tuples (see
``tests/test_evalplus.py``), more memory than a shared machine should give a check.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

WRONG = ("    return 0\n", "    raise ValueError('wrong')\n", "    return 'wrong'\n")


def solution_sets(problems: dict, names: list[str]) -> dict[str, dict[str, str]]:
    from sandbox_throughput import mutant

    sets = {}
    if "canonical" in names:
        sets["canonical"] = {t: p["prompt"] + p["canonical_solution"] for t, p in problems.items()}
    if "mutants" in names:
        sets["mutants"] = {t: mutant(p, i) for i, (t, p) in enumerate(problems.items())}
    if "wrong" in names:
        sets["wrong"] = {t: p["prompt"] + WRONG[i % len(WRONG)] for i, (t, p) in enumerate(problems.items())}
    return sets


def verdict(details: dict) -> dict:
    """What a verdict is made of (no ``reason``: a timeout's text quotes the clock)."""
    out = {"base_status": details["base_status"], "plus_status": details["plus_status"]}
    for group in ("base", "plus"):
        g = details.get(group) or {}
        out[group] = {k: g.get(k) for k in ("status", "passed", "total", "failing_index")}
    return out


def score(dataset: str, problems: dict, solutions: dict[str, str], gt, sandbox, workers: int) -> dict[str, dict]:
    from lopd_envs.sandbox import SandboxPool
    from lopd_envs.suites.evalplus import judge

    def one(task_id: str):
        p = problems[task_id]
        return task_id, verdict(judge.evaluate_task(dataset, p, gt.get(p), solutions[task_id], sandbox))

    with SandboxPool(sandbox, workers) as pool:
        return dict(pool.call(one, list(solutions)))


def differences(before: dict, after: dict) -> list[str]:
    lines = []
    for name in sorted(set(before) & set(after)):
        for task_id in before[name]:
            if task_id in after[name] and before[name][task_id] != after[name][task_id]:
                lines.append(f"[{name}] {task_id}: before {before[name][task_id]} after {after[name][task_id]}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default="humaneval", choices=["humaneval", "mbpp"])
    ap.add_argument("--sets", default="canonical,mutants,wrong")
    ap.add_argument("--workers", type=int, default=None)
    ap.add_argument("--exclude", default="Mbpp/255", help="task ids left out, comma-separated")
    ap.add_argument("--out", required=True)
    ap.add_argument("--against", default=None, help="an earlier --out file: print and count the differences")
    args = ap.parse_args()

    os.environ.setdefault("LOPD_DATA_DIR", str(ROOT.parent / "shared" / "data"))
    from lopd_envs.sandbox import default_workers, get_sandbox
    from lopd_envs.suites.evalplus import data as ep_data
    from lopd_envs.suites.evalplus import groundtruth as ep_gt

    path = ep_data.dataset_path(args.dataset)
    excluded = {t for t in args.exclude.split(",") if t}
    problems = {t: p for t, p in ep_data.load_problems(args.dataset, path).items() if t not in excluded}
    sandbox = get_sandbox()
    workers = args.workers or default_workers()
    gt = ep_gt.GroundTruth(args.dataset, path, sandbox)
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as ex:
        list(ex.map(gt.get, problems.values()))
    print(f"expected outputs of {len(problems)} tasks ready in {time.perf_counter() - start:.1f} s", flush=True)
    report: dict = {"dataset": args.dataset, "excluded": sorted(excluded), "load_average": os.getloadavg()}
    for name, solutions in solution_sets(problems, args.sets.split(",")).items():
        start = time.perf_counter()
        report[name] = score(args.dataset, problems, solutions, gt, sandbox, workers)
        passed = sum(v["base_status"] == v["plus_status"] == "pass" for v in report[name].values())
        print(f"[{name}] {len(solutions)} tasks in {time.perf_counter() - start:.1f} s, {passed} pass base+plus "
              f"(load {os.getloadavg()[0]:.1f})", flush=True)
    sandbox.close()
    Path(args.out).write_text(json.dumps(report, indent=1, sort_keys=True))
    if args.against:
        before = json.loads(Path(args.against).read_text())
        diff = differences({k: v for k, v in before.items() if isinstance(v, dict)},
                           {k: v for k, v in report.items() if isinstance(v, dict)})
        compared = {name: len(set(before.get(name, {})) & set(report[name]))
                    for name in report if isinstance(report[name], dict)}
        print(f"compared with {args.against}: {compared} tasks per set, {len(diff)} differ", flush=True)
        for line in diff:
            print(line, flush=True)
        return 1 if diff else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())

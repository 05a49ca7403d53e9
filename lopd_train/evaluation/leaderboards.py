"""Each benchmark's own aggregation of per-task verdicts into the numbers its leaderboard prints.

Pure functions over plain records (one dict per task and sample: ``task_id``, ``category``, ``sample``,
``reward``, ``success``, ``score`` (the env's ``info["score"]``), ``meta``), so the tables researchers put next to
the official leaderboards come from code that is tested against hand-computed tables, apart from any model.

Sources (read for the arithmetic; no code taken):

* BFCL-v3: the wheel ``bfcl-eval==2025.8.6.2``, ``bfcl_eval/eval_checker/eval_runner_helper.py``,
  ``generate_leaderboard_csv`` with ``calculate_weighted_accuracy``, ``calculate_unweighted_accuracy`` and
  ``get_category_score``. A category that was not evaluated counts as accuracy 0 with the *full* size of its
  data file as its count (``get_category_score``), so it also weighs in the count-weighted Live mean.
* ACEBench: GitHub ACEBench/ACEBench at e6db74b, ``model_eval/evaluation_helper.py``, ``generate_result_csv``
  (and ``calculate_unweighted_accuracy``): the arithmetic lives in ``lopd_envs.suites.acebench.summary``
  (the suite owns its quirks); this module only groups records for it.
* pass@k: the unbiased estimator of Chen et al. 2021 (Codex paper), evalplus 0.3.1's own function
  (``evalplus.eval.estimate_pass_at_k``, called here): per task ``1 - C(n-c, k) / C(n, k)``, averaged over
  tasks, for k in (1, 10, 100) where every task has at least k samples; the plus score needs base and plus
  to pass.
* LiveCodeBench: pass@1 per problem (share of passing samples), averaged over the problems of each
  difficulty and over all of them (lcb_runner's ``compute_metrics_from_results`` reports the same).
* EnvScaler: the mean checklist reward and the share of episodes with every check passed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

# --------------------------------------------------------------------------------------------- pass@k


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task with ``n`` samples of which ``c`` passed, by evalplus's own estimator
    (``estimate_pass_at_k``), after checking the counts it assumes valid. Needs ``n >= k``."""
    if not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 0 <= c <= n, got n={n}, c={c}")
    if k < 1 or n < k:
        raise ValueError(f"pass_at_k: need 1 <= k <= n, got n={n}, k={k}")
    return float(mean_pass_at_k([(n, c)], (k,))[f"pass@{k}"])


def mean_pass_at_k(counts: Sequence[tuple[int, int]], ks: Iterable[int] = (1, 10, 100)) -> dict[str, float]:
    """``{"pass@k": mean over tasks}`` for each k that every task has enough samples for, as evalplus's
    ``evaluate`` reports it (its ``estimate_pass_at_k`` per task, then the mean)."""
    from evalplus.eval import estimate_pass_at_k

    if not counts:
        return {}
    fewest = min(n for n, _ in counts)
    samples, correct = [n for n, _ in counts], [c for _, c in counts]
    return {f"pass@{k}": float(estimate_pass_at_k(samples, correct, k).mean()) for k in ks if k <= fewest}


# --------------------------------------------------------------------------------------------- helpers


def _by_task(records: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    out: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        out[r["task_id"]].append(r)
    return out


def _by_sample(records: Iterable[Mapping[str, Any]]) -> dict[int, list[Mapping[str, Any]]]:
    out: dict[int, list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        out[int(r.get("sample", 0))].append(r)
    return dict(sorted(out.items()))


def _mean_tables(tables: list[dict[str, Any]]) -> dict[str, Any]:
    """The mean of several tables of the same shape (one per sample index); lists are kept from the first."""
    first = tables[0]
    out: dict[str, Any] = {}
    for key, value in first.items():
        if isinstance(value, dict):
            out[key] = _mean_tables([t[key] for t in tables])
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and key != "total_count":
            out[key] = float(np.mean([t[key] for t in tables]))
        else:
            out[key] = value
    return out


def per_sample_mean(records: Sequence[Mapping[str, Any]], table_of) -> dict[str, Any]:
    """A leaderboard scores one answer per task: compute it for each sample index and average (for one
    sample, exactly the official table)."""
    tables = [table_of(rs) for rs in _by_sample(records).values()]
    return _mean_tables(tables) if tables else table_of([])


# --------------------------------------------------------------------------------------------- BFCL-v3

#: Entries per category in bfcl-eval 2025.8.6.2's data files (what a missing category counts with).
BFCL_V3_SIZES: dict[str, int] = {
    "simple": 400, "multiple": 200, "parallel": 200, "parallel_multiple": 200, "java": 100, "javascript": 50,
    "irrelevance": 240, "live_simple": 258, "live_multiple": 1053, "live_parallel": 16,
    "live_parallel_multiple": 24, "live_irrelevance": 882, "live_relevance": 18, "multi_turn_base": 200,
    "multi_turn_miss_func": 200, "multi_turn_miss_param": 200, "multi_turn_long_context": 200,
}


def _bfcl_category(scores: Mapping[str, Mapping[str, float]], name: str,
                   sizes: Mapping[str, int]) -> dict[str, Any]:
    if name in scores:
        return {"accuracy": float(scores[name]["accuracy"]), "total_count": int(scores[name]["total_count"]),
                "missing": False, "evaluated": True}
    return {"accuracy": 0.0, "total_count": int(sizes[name]), "missing": True, "evaluated": False}


def _unweighted(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"accuracy": sum(p["accuracy"] for p in parts) / len(parts),
            "total_count": sum(p["total_count"] for p in parts), "missing": any(p["missing"] for p in parts),
            "evaluated": any(p["evaluated"] for p in parts)}


def _weighted(parts: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    total = sum(p["total_count"] for p in parts)
    acc = sum(p["accuracy"] * p["total_count"] for p in parts) / total if total else 0.0
    return {"accuracy": acc, "total_count": total, "missing": any(p["missing"] for p in parts),
            "evaluated": any(p["evaluated"] for p in parts)}


def bfcl_v3_leaderboard(scores: Mapping[str, Mapping[str, float]],
                        sizes: Mapping[str, int] = BFCL_V3_SIZES) -> dict[str, Any]:
    """BFCL-v3's overall table from per-category ``{"accuracy", "total_count"}``.

    Non-Live = unweighted mean of (simple, multiple, parallel, parallel_multiple, irrelevance), simple being
    the unweighted mean of its python/java/javascript parts; Live = count-weighted mean of the six live
    categories; Multi-Turn = unweighted mean of the four; Overall = unweighted mean of the three. A missing
    category is accuracy 0 with its full data size as count, and marks every aggregate it enters as
    ``missing`` (the official table prints those as "N/A" except the overall columns, which it computes);
    ``evaluated`` says whether any category under an aggregate was evaluated at all."""
    unknown = set(scores) - set(sizes)
    if unknown:
        raise ValueError(f"BFCL-v3 leaderboard: unknown categories {sorted(unknown)}")
    cat = {name: _bfcl_category(scores, name, sizes) for name in sizes}
    simple = _unweighted([cat["simple"], cat["java"], cat["javascript"]])
    ast_non_live = [simple, cat["multiple"], cat["parallel"], cat["parallel_multiple"]]
    non_live = _unweighted([*ast_non_live, cat["irrelevance"]])
    live_ast = [cat[c] for c in ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")]
    live = _weighted([*live_ast, cat["live_irrelevance"], cat["live_relevance"]])
    multi_turn = _unweighted([cat[c] for c in ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                                               "multi_turn_long_context")])
    overall = _unweighted([live, non_live, multi_turn])
    return {
        "categories": cat,
        "non_live": {"overall": non_live, "summary_ast": _unweighted(ast_non_live), "simple_ast": simple},
        "live": {"overall": live, "summary_ast": _weighted(live_ast)},
        "multi_turn": {"overall": multi_turn},
        "single_turn_ast": _unweighted([live, non_live]),
        "irrelevance": _unweighted([cat["irrelevance"], cat["live_irrelevance"]]),
        "relevance": cat["live_relevance"],
        "overall": overall,
        "missing_categories": [c for c in sizes if cat[c]["missing"]],
    }


def category_accuracy(records: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per category: share of successful records and their count."""
    groups: dict[str, list[bool]] = defaultdict(list)
    for r in records:
        groups[r["category"]].append(bool(r["success"]))
    return {c: {"accuracy": float(np.mean(v)), "total_count": len(v)} for c, v in sorted(groups.items())}


def bfcl_v3_from_records(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return per_sample_mean(records, lambda rs: bfcl_v3_leaderboard(category_accuracy(rs)))


# --------------------------------------------------------------------------------------------- ACEBench


def acebench_from_records(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Per-category official accuracies (rows in the benchmark's order), the three group means and the
    weighted summary; a missing category counts 0 (``generate_result_csv``'s defaults)."""
    from lopd_envs.suites.acebench import summary

    def table(rs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        by_cat: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in sorted(rs, key=lambda r: r.get("order", 0)):
            by_cat[r["category"]].append(r.get("score") or {})
        cats = {c: summary.category_accuracy(c, s) for c, s in sorted(by_cat.items())}
        groups = summary.overall({c: v["accuracy"] for c, v in cats.items()})
        return {"categories": cats, **groups}
    return per_sample_mean(records, table)


# --------------------------------------------------------------------------------------------- code suites


def evalplus_from_records(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """HumanEval+/MBPP+: pass@k on the base tests and on base+plus (both must pass, as evalplus counts)."""
    base, plus = [], []
    for rs in _by_task(records).values():
        details = [r.get("score") or {} for r in rs]
        base.append((len(rs), sum(d.get("base_status") == "pass" for d in details)))
        if all(d.get("plus_status") is not None for d in details):
            plus.append((len(rs), sum(d.get("base_status") == "pass" and d.get("plus_status") == "pass"
                                      for d in details)))
    out: dict[str, Any] = {"n_tasks": len(base), "base": mean_pass_at_k(base)}
    if plus and len(plus) == len(base):
        out["plus"] = mean_pass_at_k(plus)
    return out


def livecodebench_from_records(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """pass@1 per difficulty and overall (each problem's share of passing samples, averaged)."""
    per_problem: dict[str, list[float]] = defaultdict(list)
    overall = []
    for rs in _by_task(records).values():
        p1 = float(np.mean([bool(r["success"]) for r in rs]))
        per_problem[str((rs[0].get("meta") or {}).get("difficulty", "unknown"))].append(p1)
        overall.append(p1)
    return {"pass@1": float(np.mean(overall)) if overall else 0.0, "n_tasks": len(overall),
            "by_difficulty": {d: {"pass@1": float(np.mean(v)), "n_tasks": len(v)}
                              for d, v in sorted(per_problem.items())}}


def envscaler_from_records(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean checklist reward and full-pass rate (reward 1), overall and per category."""
    def summary(rs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        rewards = [float(r["reward"]) for r in rs]
        return {"mean_reward": float(np.mean(rewards)) if rewards else 0.0,
                "full_pass_rate": float(np.mean([x >= 1.0 for x in rewards])) if rewards else 0.0, "n": len(rs)}
    by_cat: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for r in records:
        by_cat[r["category"]].append(r)
    return {**summary(records), "categories": {c: summary(v) for c, v in sorted(by_cat.items())}}


def generic_from_records(records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    return {"categories": category_accuracy(records),
            "mean_reward": float(np.mean([r["reward"] for r in records])) if records else 0.0}


AGGREGATORS = {
    "BFCLv3": bfcl_v3_from_records, "ACEBench": acebench_from_records, "HumanEvalPlus": evalplus_from_records,
    "MBPPPlus": evalplus_from_records, "LiveCodeBench": livecodebench_from_records,
    "EnvScaler": envscaler_from_records,
}


def benchmark_name(env_id: str) -> str:
    """``lopd/BFCLv3-v0`` -> ``BFCLv3``."""
    return env_id.split("/")[-1].rsplit("-v", 1)[0]


def leaderboard(env_id: str, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The benchmark's own table for an env's records (a generic per-category table for other envs)."""
    return AGGREGATORS.get(benchmark_name(env_id), generic_from_records)(records)


def headline(env_id: str, table: Mapping[str, Any]) -> tuple[str, float]:
    """The one number a leaderboard sorts by, with its name."""
    name = benchmark_name(env_id)
    if name == "BFCLv3":
        return "overall", table["overall"]["accuracy"]
    if name == "ACEBench":
        return "summary", table["summary"]
    if name in ("HumanEvalPlus", "MBPPPlus"):
        part = table.get("plus") or table.get("base") or {}
        return ("plus pass@1" if "plus" in table else "base pass@1"), part.get("pass@1", 0.0)
    if name == "LiveCodeBench":
        return "pass@1", table["pass@1"]
    return "mean reward (all)", table.get("mean_reward", 0.0)

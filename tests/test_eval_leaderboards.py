"""The leaderboards' own aggregations, against tables computed by hand (missing categories included)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from lopd_train.evaluation import leaderboards as lb


def rec(task_id, category, success, sample=0, reward=None, score=None, meta=None, order=0):
    return {"task_id": task_id, "category": category, "success": success, "sample": sample,
            "reward": float(success) if reward is None else reward, "score": score or {}, "meta": meta or {},
            "order": order}


# ----------------------------------------------------------------------------------------------- BFCL-v3

def test_bfcl_v3_leaderboard_hand_computed_with_missing_categories():
    scores = {"simple": {"accuracy": 0.5, "total_count": 400}, "java": {"accuracy": 0.2, "total_count": 100},
              "multiple": {"accuracy": 0.6, "total_count": 200}, "parallel": {"accuracy": 0.3, "total_count": 200},
              "parallel_multiple": {"accuracy": 0.1, "total_count": 200},
              "irrelevance": {"accuracy": 0.9, "total_count": 240},
              "live_simple": {"accuracy": 0.5, "total_count": 100},  # a --limit run: its own count weighs
              "live_multiple": {"accuracy": 0.25, "total_count": 200},
              "multi_turn_base": {"accuracy": 0.2, "total_count": 200}}
    t = lb.bfcl_v3_leaderboard(scores)
    simple = (0.5 + 0.2 + 0.0) / 3  # javascript missing: 0
    assert t["non_live"]["simple_ast"]["accuracy"] == pytest.approx(simple)
    assert t["non_live"]["summary_ast"]["accuracy"] == pytest.approx((simple + 0.6 + 0.3 + 0.1) / 4)
    assert t["non_live"]["overall"]["accuracy"] == pytest.approx((simple + 0.6 + 0.3 + 0.1 + 0.9) / 5)
    # missing live categories count 0 with their full sizes: 16 + 24 + 882 + 18
    live = (0.5 * 100 + 0.25 * 200) / (100 + 200 + 16 + 24 + 882 + 18)
    assert t["live"]["overall"]["accuracy"] == pytest.approx(live)
    assert t["live"]["summary_ast"]["accuracy"] == pytest.approx(100 / (100 + 200 + 16 + 24))
    assert t["multi_turn"]["overall"]["accuracy"] == pytest.approx(0.2 / 4)
    assert t["overall"]["accuracy"] == pytest.approx((live + (simple + 1.9) / 5 + 0.05) / 3)
    assert t["irrelevance"]["accuracy"] == pytest.approx(0.9 / 2)
    assert set(t["missing_categories"]) == {"javascript", "live_parallel", "live_parallel_multiple",
                                            "live_irrelevance", "live_relevance", "multi_turn_miss_func",
                                            "multi_turn_miss_param", "multi_turn_long_context"}
    assert t["overall"]["missing"] and not t["categories"]["simple"]["missing"]


def test_bfcl_v3_leaderboard_complete_and_perfect_is_one():
    t = lb.bfcl_v3_leaderboard({c: {"accuracy": 1.0, "total_count": n} for c, n in lb.BFCL_V3_SIZES.items()})
    assert t["overall"]["accuracy"] == pytest.approx(1.0)
    assert t["missing_categories"] == [] and not t["overall"]["missing"]


def test_bfcl_v3_leaderboard_rejects_unknown_category():
    with pytest.raises(ValueError, match="unknown categories"):
        lb.bfcl_v3_leaderboard({"simple_python": {"accuracy": 1.0, "total_count": 1}})


def test_bfcl_from_records_averages_the_table_over_samples():
    records = [rec("simple_0", "simple", True, 0), rec("simple_1", "simple", True, 0),
               rec("simple_0", "simple", False, 1), rec("simple_1", "simple", True, 1)]
    t = lb.bfcl_v3_from_records(records)
    assert t["categories"]["simple"]["accuracy"] == pytest.approx(0.75)
    assert t["overall"]["accuracy"] == pytest.approx(0.75 / 3 / 5 / 3)


# ----------------------------------------------------------------------------------------------- ACEBench

def test_acebench_summary_hand_computed_with_missing_categories():
    records = [rec("special_incomplete_0", "special_incomplete", True, score={"valid": True}),
               rec("special_incomplete_1", "special_incomplete", False, score={"valid": False}),
               *[rec(f"normal_atom_bool_{i}", "normal_atom_bool", ok, score={"valid": ok})
                 for i, ok in enumerate([True, True, False])],
               rec("agent_multi_step_0", "agent_multi_step", True,
                   score={"end_to_end": True, "process_accuracy": 0.5})]
    t = lb.acebench_from_records(records)
    assert t["categories"]["special_incomplete"]["accuracy"] == pytest.approx(0.5)  # special: unrounded
    assert t["categories"]["normal_atom_bool"]["accuracy"] == pytest.approx(0.667)  # normal: 3 places
    assert t["categories"]["agent_multi_step"]["process_accuracy"] == pytest.approx(0.5)
    assert t["special"] == pytest.approx(0.167)  # round(0.5 / 3, 3)
    assert t["normal"] == pytest.approx(0.056)  # round(0.667 / 12, 3)
    assert t["agent"] == pytest.approx(0.5)
    assert t["summary"] == pytest.approx(round(0.2676 * 0.167 + 0.578 * 0.056 + 0.1545 * 0.5, 3))
    assert t["summary"] == pytest.approx(0.154)


# ----------------------------------------------------------------------------------------------- pass@k

@pytest.mark.parametrize("n,c,k,expected", [(5, 2, 1, 0.4), (5, 2, 2, 0.7), (5, 0, 3, 0.0), (5, 4, 2, 1.0),
                                            (1, 1, 1, 1.0)])
def test_pass_at_k_hand_computed(n, c, k, expected):
    assert lb.pass_at_k(n, c, k) == pytest.approx(expected)


@given(st.integers(1, 60).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n), st.integers(1, n))))
def test_pass_at_k_is_the_binomial_formula(nck):
    n, c, k = nck
    assert lb.pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), abs=1e-9)


def test_pass_at_k_is_evalplus_own_estimator(monkeypatch):
    import evalplus.eval

    calls = []

    def estimator(samples, correct, k):
        calls.append((list(samples), list(correct), k))
        return np.array([0.25, 0.75])
    monkeypatch.setattr(evalplus.eval, "estimate_pass_at_k", estimator)
    assert lb.mean_pass_at_k([(5, 1), (5, 4)], ks=(1, 10)) == {"pass@1": 0.5}  # k=10 > 5 samples: left out
    assert calls == [([5, 5], [1, 4], 1)]


def test_pass_at_k_rejects_impossible_counts():
    with pytest.raises(ValueError):
        lb.pass_at_k(3, 4, 1)
    with pytest.raises(ValueError):
        lb.pass_at_k(3, 1, 4)


def test_evalplus_base_and_plus_pass_at_k():
    ok = {"base_status": "pass", "plus_status": "pass"}
    base_only = {"base_status": "pass", "plus_status": "fail"}
    bad = {"base_status": "fail", "plus_status": "fail"}
    records = [rec("HumanEval/0", "plus", True, 0, score=ok), rec("HumanEval/0", "plus", False, 1, score=base_only),
               rec("HumanEval/1", "plus", False, 0, score=bad), rec("HumanEval/1", "plus", False, 1, score=bad)]
    t = lb.evalplus_from_records(records)
    assert t["base"] == {"pass@1": pytest.approx(0.5)}  # no pass@10: only 2 samples per task
    assert t["plus"] == {"pass@1": pytest.approx(0.25)}


def test_evalplus_base_category_reports_no_plus():
    records = [rec("Mbpp/2", "base", True, score={"base_status": "pass", "plus_status": None})]
    t = lb.evalplus_from_records(records)
    assert t["base"]["pass@1"] == 1.0 and "plus" not in t


# ----------------------------------------------------------------------------------------------- LCB, EnvScaler

def test_livecodebench_pass_at_1_by_difficulty():
    records = [rec("p1", "stdin", True, 0, meta={"difficulty": "easy"}),
               rec("p1", "stdin", False, 1, meta={"difficulty": "easy"}),
               rec("p2", "functional", True, 0, meta={"difficulty": "easy"}),
               rec("p2", "functional", True, 1, meta={"difficulty": "easy"}),
               rec("p3", "stdin", False, 0, meta={"difficulty": "medium"}),
               rec("p3", "stdin", False, 1, meta={"difficulty": "medium"})]
    t = lb.livecodebench_from_records(records)
    assert t["by_difficulty"]["easy"]["pass@1"] == pytest.approx(0.75)
    assert t["by_difficulty"]["medium"]["pass@1"] == 0.0
    assert t["pass@1"] == pytest.approx(0.5)


def test_envscaler_mean_reward_and_full_pass_rate():
    records = [rec("env_1_0", "conversation", True, reward=1.0), rec("env_2_0", "conversation", False, reward=0.5),
               rec("env_3_0", "non_conversation", False, reward=0.0),
               rec("env_4_0", "non_conversation", True, reward=1.0)]
    t = lb.envscaler_from_records(records)
    assert t["mean_reward"] == pytest.approx(0.625) and t["full_pass_rate"] == pytest.approx(0.5)
    assert t["categories"]["conversation"] == {"mean_reward": 0.75, "full_pass_rate": 0.5, "n": 2}


def test_headline_names_each_benchmarks_number():
    assert lb.benchmark_name("lopd/HumanEvalPlus-v0") == "HumanEvalPlus"
    t = lb.leaderboard("lopd/LiveCodeBench-v0", [rec("p", "stdin", True, meta={"difficulty": "hard"})])
    assert lb.headline("lopd/LiveCodeBench-v0", t) == ("pass@1", 1.0)


def test_markdown_marks_bfcl_groups_that_count_missing_categories_as_zero():
    """A simple-only run: its "live" and "multi-turn" are not evaluated and its "overall" is partial; the
    table must say so on those rows and on no other."""
    from lopd_train.evaluation import report

    records = [{"category": "simple", "success": i < 3, "sample": 0, "task_id": f"simple_{i}"} for i in range(4)]
    table = lb.bfcl_v3_from_records(records)
    results = {"model": {"spec": "m"}, "backend": {"backend": "hf"}, "sampling": {"temperature": 0.0},
               "samples": 1, "envs": {"lopd/BFCLv3-v0": {"leaderboard": table, "n_records": 4}}}
    notes = {metric: note for _, metric, _, _, note in report.rows(results)}
    assert notes["live"].startswith("not run") and notes["multi-turn"].startswith("not run")
    assert notes["overall"] == "partial (1 of 17 categories run): the others count 0, bfcl-eval's rule"
    assert notes["non-live"] == "partial (1 of 7 categories run): the others count 0, bfcl-eval's rule"
    assert notes["simple"] == ""
    md = report.markdown(results)
    assert "| lopd/BFCLv3-v0 | live | not run | 0 | not run: no category of this group was evaluated |" in md
    assert "| lopd/BFCLv3-v0 | multi-turn | not run | 0 |" in md
    assert "| lopd/BFCLv3-v0 | non-live | 0.0500 | 4 | partial (1 of 7" in md  # (0.75 + 0 + 0) / 3, then / 5
    assert "| lopd/BFCLv3-v0 | overall | 0.0167 | 4 | partial (1 of 17" in md  # then / 3
    assert "| lopd/BFCLv3-v0 | simple | 0.7500 | 4 |  |" in md
    assert "0.0000" not in md


def test_markdown_marks_acebench_groups_that_count_missing_categories_as_zero():
    """A run of `normal` only (the issue's ACEBench en normal eval): `special` and `agent` are not
    evaluated, so the weighted summary is partial; a category row counts its own records."""
    from lopd_envs.suites.acebench.data import NORMAL
    from lopd_train.evaluation import report

    records = [rec(f"{c}_{i}", c, i == 0, score={"valid": i == 0}, order=k * 10 + i)
               for k, c in enumerate(NORMAL) if not c.startswith("normal_multi_turn") for i in range(2 + k % 2)]
    table = lb.acebench_from_records(records)
    results = {"model": {"spec": "m"}, "backend": {"backend": "hf"}, "sampling": {"temperature": 0.0},
               "samples": 1, "envs": {"lopd/ACEBench-v0": {"leaderboard": table, "n_records": len(records)}}}
    rows = {metric: (n, note) for _, metric, _, n, note in report.rows(results)}
    assert rows["special"] == (0, report.NOT_RUN) and rows["agent"] == (0, report.NOT_RUN)
    assert rows["summary"][1].startswith("partial") and rows["summary"][1].endswith("ACEBench's rule")
    assert rows["normal"][1].startswith("partial")  # the two multi-turn subsets are left out here
    assert rows["normal_atom_bool"] == (2, "") and rows["normal_atom_enum"][0] in (2, 3)
    assert sum(n for m, (n, _) in rows.items() if m.startswith("normal_")) == len(records)
    full = [rec(f"{c}_0", c, True, score={"valid": True, "conversation": 0}, order=k) for k, c in enumerate(NORMAL)]
    notes = {m: note for _, m, _, _, note in report.rows(
        {**results, "envs": {"lopd/ACEBench-v0": {"leaderboard": lb.acebench_from_records(full), "n_records": 12}}})}
    assert notes["normal"] == "" and notes["summary"].startswith("partial")

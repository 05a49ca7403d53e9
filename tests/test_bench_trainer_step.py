"""benchmarks/trainer_step.py: all six algorithms update on the same batch in rotating order, every one of
them gets a teacher signal where it should (OPSD's reference answer included), the split by section accounts
for the update without counting a nested section twice and leaves every wrapped method as it was, and the
ratios are paired per round against GRPO. Runs the timing worker in-process on the tiny random model;
nothing is asserted about how long anything took."""

from __future__ import annotations

import argparse
import json

import pytest

from tests.bench_loader import load_benchmark

bench = load_benchmark("trainer_step")


def worker_args(**kw) -> list[str]:
    args = ["--model", "tiny-random", "--reps", "1", "--prompt-tokens", "64", "--completion-tokens", "8",
            "--bank-size", "4", "--experience-tokens", "32"]
    for k, v in kw.items():
        args += [f"--{k.replace('_', '-')}", *([v] if isinstance(v, str) else v)]
    return args


@pytest.fixture(scope="module")
def timing():
    import io
    from contextlib import redirect_stdout

    buf = io.StringIO()
    with redirect_stdout(buf):
        assert bench.main(["--worker", "timing", *worker_args()]) == 0
    line = next(x for x in buf.getvalue().splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_every_algorithm_is_timed_in_rotating_order(timing):
    assert list(timing["algos"]) == list(bench.ALGOS)
    for name, t in timing["algos"].items():
        assert len(t["times"]) == len(t["cpu_times"]) == len(t["sections"]) == 1, name
    assert timing["orders"] == [[*bench.ALGOS[1:], "grpo"]]  # round 1 starts one further than the warm-up
    assert len(timing["rollout_times"]) == 1 and len(timing["load_1min"]) == 1


def test_each_teacher_sees_its_context(timing):
    """OPSD reads the stand-in env's reference answer; SDPO another success of the task; SDFT and LOPD the
    bank. Skill-SD's skills come from the tiny model's summaries, which may be empty: not asserted."""
    for name in ("lopd", "opsd", "sdpo", "sdft"):
        assert timing["algos"][name]["supervised"] == 1.0, name


def test_sections_split_the_update_without_double_counting(timing):
    for name, t in timing["algos"].items():
        (split,) = t["sections"]
        assert split["rest"]["wall"] > -0.05, (name, split)  # nested sections are charged once
        assert sum(v["wall"] for v in split.values()) >= t["times"][0] - 1e-3, name
    assert {"student forward", "student backward"} <= set(timing["algos"]["grpo"]["sections"][0])
    assert "teacher forward" not in timing["algos"]["grpo"]["sections"][0]
    lopd = timing["algos"]["lopd"]["sections"][0]
    assert {"compose (encoder + Q-Former)", "teacher forward", "composer backward", "student forward"} <= set(lopd)
    # the probe NLL is a diagnostic the trainer asks for every --probe-every steps, not part of the update
    assert "probe NLL (no graph)" not in lopd
    assert "teacher forward" in timing["algos"]["opsd"]["sections"][0]
    assert "prepare (Skill-SD summaries)" in timing["algos"]["skill_sd"]["sections"][0]


def test_section_timer_restores_what_it_wrapped():
    import torch

    from lopd_train.algorithms import distill, grpo, lopd
    from lopd_train.algorithms.base import Algorithm

    before = (lopd.LOPD.compose, lopd.score_group, grpo.score_group, distill.score_group,
              Algorithm.step_optimizer, torch.Tensor.backward, distill.SelfDistillation.teacher_logits)
    with bench.SectionTimer() as timer:
        assert lopd.LOPD.compose is not before[0]
        x = torch.ones(2, requires_grad=True)
        (x * 2).sum().backward()
    after = (lopd.LOPD.compose, lopd.score_group, grpo.score_group, distill.score_group,
             Algorithm.step_optimizer, torch.Tensor.backward, distill.SelfDistillation.teacher_logits)
    assert after == before
    assert "other backward" in timer.seconds and "rest" in timer.faults


def test_summary_pairs_each_round_with_grpos():
    timing = {"algos": {
        "grpo": {"times": [1.0, 4.0], "cpu_times": [1.0, 2.0], "sections": [{}, {}], "supervised": 1.0},
        "lopd": {"times": [2.0, 8.0], "cpu_times": [3.0, 6.0], "sections": [
            {"student forward": {"wall": 1.0, "cpu": 1.0, "faults": 10}},
            {"student forward": {"wall": 3.0, "cpu": 2.0, "faults": 30}}], "supervised": 0.5}},
        "rollout_times": [10.0, 10.0], "rollout_top_m_times": [], "orders": [], "load_1min": [1.0, 2.0]}
    mem = {"grpo": {"peak_mb": 100.0, "increase_mb": 10.0, "device": "cpu", "tokens": 8, "sequence_tokens": 80},
           "lopd": {"peak_mb": 150.0, "increase_mb": 30.0, "device": "cpu", "tokens": 8, "sequence_tokens": 80}}
    args = argparse.Namespace(model="m", tasks=1, group=4, reps=2, threads=1, kl_support="teacher")
    s = bench.summarise(args, timing, mem)
    lopd = s["algorithms"]["lopd"]
    assert lopd["vs_grpo"] == {"median": 2.0, "min": 2.0, "max": 2.0}  # paired: the load moved both alike
    assert lopd["cpu_vs_grpo"]["median"] == 3.0
    assert lopd["whole_step_vs_grpo"] == pytest.approx((10 + 5) / (10 + 2.5))
    assert lopd["peak_memory_vs_grpo"] == 1.5 and lopd["update_memory_vs_grpo"] == 3.0
    assert lopd["sections"]["student forward"] == {"wall": 2.0, "cpu": 1.5, "faults": 20}
    assert s["time_ratio_median"] == 2.0 and s["lopd_sections_median"] == {"student forward": 2.0}


def test_grpo_is_required():
    with pytest.raises(SystemExit):
        bench.main(["--algos", "lopd", "opsd", "--model", "tiny-random"])


def test_profile_prints_each_algorithms_most_expensive_operators(capsys):
    """``--profile N``: one more update of each algorithm under torch.profiler, its N costliest operators printed
    (the GPU check reads them to see where LOPD's many small passes spend their time)."""
    assert bench.main(["--worker", "timing", *worker_args(algos=["grpo", "lopd"], profile="3")]) == 0
    err = capsys.readouterr().err
    for name in ("grpo", "lopd"):
        (block,) = [b for b in err.split("profile of one ")[1:] if b.startswith(f"{name} update")]
        assert "top 3 by self_cpu_time_total" in block and "aten::" in block


def test_memory_worker_reports_resident_and_in_use_per_section(capsys):
    """The memory worker runs under the trainer's allocator and gives, for the whole update and per section,
    the resident set beside the C heap's bytes in use (glibc's mallinfo2 here)."""
    assert bench.main(["--worker", "lopd", *worker_args()]) == 0
    out = capsys.readouterr().out
    mem = json.loads(next(x for x in out.splitlines() if x.startswith("RESULT "))[len("RESULT "):])
    assert mem["allocator"] == "system" and mem["device"] == "cpu"
    assert mem["peak_in_use_mb"] is not None and mem["peak_in_use_mb"] > 0 and mem["peak_mb"] > 0
    assert {"student forward", "compose (encoder + Q-Former)", "teacher forward", "rest"} <= set(mem["sections"])
    for name, sec in mem["sections"].items():
        assert 0 < sec["in_use_mb"] <= mem["peak_in_use_mb"] + 1e-6, name
        assert 0 < sec["resident_mb"] <= mem["peak_mb"] + 1e-6, name


@pytest.mark.parametrize("flag", [False, True])
def test_memory_workers_use_the_trainers_allocator_unless_asked(monkeypatch, flag):
    import subprocess

    seen = {}

    def fake_run(cmd, env, **kw):
        seen.update(env=env, mode=cmd[cmd.index("--worker") + 1])
        return subprocess.CompletedProcess(cmd, 0, stdout='RESULT {"ok": 1}\n', stderr="")
    monkeypatch.setattr(bench.subprocess, "run", fake_run)
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    assert bench.run_worker("lopd", [], flag) == {"ok": 1}
    assert ("MALLOC_MMAP_THRESHOLD_" in seen["env"]) is flag
    bench.run_worker("lopd", [])  # the default: the trainer's allocator
    assert "MALLOC_MMAP_THRESHOLD_" not in seen["env"]


def test_summary_prints_resident_beside_in_use_per_section(capsys):
    timing = {"algos": {n: {"times": [1.0], "cpu_times": [1.0], "sections": [
        {"student forward": {"wall": 0.5, "cpu": 0.5, "faults": 1}}], "supervised": 1.0} for n in ("grpo", "lopd")},
        "rollout_times": [1.0], "rollout_top_m_times": [], "orders": [["grpo", "lopd"]], "load_1min": [1.0]}
    mem = {n: {"peak_mb": 100.0 * k, "increase_mb": 10.0, "peak_in_use_mb": 40.0 * k, "in_use_increase_mb": 5.0,
               "device": "cpu", "tokens": 8, "sequence_tokens": 80, "allocator": "system",
               "sections": {"student forward": {"resident_mb": 90.0 * k, "in_use_mb": 33.0 * k}}}
           for k, n in ((1, "grpo"), (2, "lopd"))}
    args = argparse.Namespace(model="m", tasks=1, group=4, reps=1, threads=1, kl_support="teacher")
    s = bench.summarise(args, timing, mem)
    assert s["algorithms"]["lopd"]["in_use_vs_grpo"] == 2.0 and s["allocator"] == "system"
    s.update(benchmark_wall_seconds=1.0, command="x")
    bench.print_summary(s)
    out = capsys.readouterr().out
    assert "RSS beside in use (glibc mallinfo2: uordblks + hblkhd)" in out and "allocator: system" in out
    lopd = next(x for x in out.splitlines() if x.startswith("lopd "))
    assert lopd.split()[-7:-1] == ["200", "2.00x", "10", "80", "2.00x", "5"]
    assert "update by section, peak MB RSS / in use" in out
    row = next(x for x in out.splitlines() if "student forward" in x and "/" in x)
    assert row.split()[-6:] == ["90", "/", "33", "180", "/", "66"]

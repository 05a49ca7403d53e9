"""The baselines under two data-parallel processes (gloo, CPU): vanilla, OPSD, SDPO, SDFT and Skill-SD each
train 2 steps in one ``accelerate launch`` (``launch_runs``), and both ranks end with identical weights: the
student, the EMA teacher of ``--teacher ema`` (SDPO and Skill-SD here), and for Skill-SD one skill bank that
rank 0 wrote, each summary once. Skill-SD's summaries are stubbed (``--stub-skills`` in the launched script:
a tiny random model's greedy summary is blank) by texts that name the rank that produced them, so the test
sees whose summaries reached the one skill bank. ``tests/test_distributed.py`` covers LOPD and GRPO."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import torch

from tests.test_distributed import accelerate_available, launch_runs, ranks

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not accelerate_available(), reason="accelerate's launcher is not installed "
                                 "(pip install accelerate): the baselines under data-parallel NOT tested")]

STEPS = ["--steps", "2", "--minibatches", "2"]
RUNS = {"vanilla": ["--algo", "vanilla", *STEPS],
        "opsd": ["--algo", "opsd", *STEPS],
        "sdpo": ["--algo", "sdpo", "--teacher", "ema", "--ema-decay", "0.5", *STEPS],
        "sdft": ["--algo", "sdft", "--distill-loss", "sampled", *STEPS],
        "skill_sd": ["--algo", "skill_sd", "--teacher", "ema", "--ema-decay", "0.5", "--stub-skills", *STEPS]}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ddp-baselines")
    seconds = launch_runs(out, RUNS, timeout=900)
    print(f"two-process baselines, {len(RUNS)} runs x 2 steps: {seconds:.0f} s")
    return out


def train_rows(out: Path) -> list[dict]:
    return [r for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()) if r.get("phase") == "train"]


def changed(dump: dict, part: str) -> bool:
    return any(not torch.equal(w, dump["initial"][n]) for n, w in dump["weights"].items() if f".{part}." in n)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_both_ranks_end_identical(runs, name):
    r0, r1 = ranks(runs / name)
    assert r0["weights"].keys() == r1["weights"].keys()
    for n in r0["weights"]:
        assert torch.equal(r0["weights"][n], r1["weights"][n]), n
    assert r0["tasks"] != r1["tasks"]  # each rank its own rollouts
    rows = train_rows(runs / name)
    assert [r["step"] for r in rows] == [1, 2]
    if name == "vanilla":
        assert not changed(r0, "student")  # never updated, on either rank
        return
    supervised = any(r.get("context_fraction", 0) > 0 for r in rows)
    assert supervised, f"{name}: no rollout got a teacher context in 2 steps; the test proves nothing"
    assert changed(r0, "student")  # it trained, and both ranks took the same steps
    if "--teacher" in RUNS[name]:
        assert any(".ema." in n for n in r0["weights"])
        assert changed(r0, "ema")  # the EMA teacher moved with the student, identically on both ranks


def test_skill_bank_written_once_by_rank_zero(runs):
    out = runs / "skill_sd"
    rows = train_rows(out)
    assert rows[-1]["skill_bank_size"] > 0
    with sqlite3.connect(out / "skills.sqlite") as db:
        skills = [(json.loads(t)["source"], text) for t, text in db.execute("SELECT trace, text FROM experiences")]
    assert len(skills) == rows[-1]["skill_bank_size"]
    sources = [s for s, _ in skills]
    assert len(sources) == len(set(sources))  # each experience summarised into one skill, not one per rank
    # only rank 0's summaries were written (the stub names the rank), and rank 1 trained on them: its weights
    # equal rank 0's (test_both_ranks_end_identical)
    assert all(text.startswith("skill from rank 0:") for _, text in skills)

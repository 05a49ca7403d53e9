"""Held-out evaluation inside the trainer: fixed rollout milestones, disjoint task pools, exact resume, and
no effect on training itself (the evaluation draws nothing from the trainer's random generators)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_train.config import TrainConfig
from lopd_train.training.heldout import disjoint_task_pools, milestones_due, read_points, summarise
from lopd_train.training.trainer import Trainer, train

HELD = "heads_3,tails_3"


def cfg(out: Path, **kw) -> TrainConfig:
    base = dict(model="tiny-random", env="lopd-test/Coin-v0", category="all", algo="grpo", steps=3,
                tasks_per_step=2, group_size=2, max_new_tokens=8, lora_r=4, lora_alpha=8, lr=1e-3, progress=False,
                export=False, tensorboard=False, output_dir=str(out), eval_every_rollouts=4, eval_tasks=HELD)
    base.update(kw)
    return TrainConfig(**base)


def points(out: Path) -> list[dict]:
    return read_points(out / "heldout.jsonl")


def metrics(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


# ------------------------------------------------------------------------------------------ pure parts

def test_milestones_due_counts_from_zero_and_skips_done():
    assert milestones_due(0, 96, set()) == [0]
    assert milestones_due(95, 96, {0}) == []
    assert milestones_due(200, 96, {0}) == [96, 192]
    assert milestones_due(200, 0, set()) == []


def test_default_pool_loses_the_heldout_tasks():
    assert disjoint_task_pools(["a", "b", "c"], ["b"], explicit_train=False) == ["a", "c"]


def test_explicit_overlap_is_an_error():
    with pytest.raises(ValueError, match="disjoint"):
        disjoint_task_pools(["a", "b"], ["b"], explicit_train=True)
    with pytest.raises(ValueError, match="no training task"):
        disjoint_task_pools(["b"], ["b"], explicit_train=False)


def test_summarise():
    recs = [{"task_id": "x", "reward": 1.0, "success": True}, {"task_id": "y", "reward": 0.5, "success": False}]
    assert summarise(recs) == {"mean_reward": 0.75, "success_rate": 0.5, "n": 2, "rewards": {"x": 1.0, "y": 0.5}}


# ------------------------------------------------------------------------------------------ in the trainer

def test_trainer_never_samples_a_heldout_task(tmp_path):
    t = Trainer(cfg(tmp_path / "run"))
    try:
        assert sorted(t.task_pool) == ["heads_0", "heads_1", "heads_2", "tails_0", "tails_1", "tails_2"]
        assert all(x not in HELD.split(",") for _ in range(20) for x in t.sample_tasks())
    finally:
        t.close()
    with pytest.raises(ValueError, match="disjoint"):
        Trainer(cfg(tmp_path / "bad", tasks="heads_0,heads_3"))


def test_points_at_every_milestone_until_the_rollout_budget(tmp_path):
    out = tmp_path / "run"
    res = train(cfg(out, steps=10, rollout_budget=8))
    assert res["rollouts"] == 8 and res["step"] == 2  # the budget, not --steps, ended the run
    got = points(out)
    assert [(p["milestone"], p["rollouts"], p["step"]) for p in got] == [(0, 0, 0), (4, 4, 1), (8, 8, 2)]
    for p in got:
        assert p["n"] == 2 and sorted(p["rewards"]) == sorted(HELD.split(","))
        assert p["mean_reward"] == pytest.approx(sum(p["rewards"].values()) / 2)


def test_a_run_that_ends_between_milestones_still_evaluates_its_last_student(tmp_path):
    out = tmp_path / "run"
    res = train(cfg(out, steps=3, eval_every_rollouts=8))
    assert res["rollouts"] == 12
    got = points(out)
    assert [(p["milestone"], p["rollouts"], p.get("final", False)) for p in got] == [(0, 0, False), (8, 8, False),
                                                                                     (12, 12, True)]
    # a run ending on a milestone gets no second point for the same student
    out2 = tmp_path / "on"
    train(cfg(out2, steps=2, eval_every_rollouts=8))
    assert [p["rollouts"] for p in points(out2)] == [0, 8]


def test_eval_does_not_change_training(tmp_path):
    """Same seed with and without held-out evaluation: identical training rewards and losses."""
    train(cfg(tmp_path / "with", steps=2))
    train(cfg(tmp_path / "without", steps=2, eval_every_rollouts=0,
              tasks="heads_0,heads_1,heads_2,tails_0,tails_1,tails_2"))
    keys = ("rollouts", "reward_mean", "loss")
    a = [{k: r.get(k) for k in keys} for r in metrics(tmp_path / "with")]
    b = [{k: r.get(k) for k in keys} for r in metrics(tmp_path / "without")]
    assert len(a) == 2 and a == b
    assert not (tmp_path / "without" / "heldout.jsonl").exists()


def test_resume_keeps_written_points_and_drops_those_past_the_checkpoint(tmp_path):
    """Points up to the checkpoint are never redone; one written after it (a step that is run again after
    the resume, or a torn line from a kill) is dropped and evaluated again."""
    out = tmp_path / "run"
    train(cfg(out, steps=1))
    first = (out / "heldout.jsonl").read_text()
    assert [p["milestone"] for p in points(out)] == [0, 4]
    with open(out / "heldout.jsonl", "a") as f:
        f.write(json.dumps({"milestone": 8, "rollouts": 8, "step": 2, "mean_reward": 9.0}) + "\n")
        f.write('{"torn')
    train(cfg(out, steps=2), resume=True)
    text = (out / "heldout.jsonl").read_text()
    assert text.startswith(first)
    got = points(out)
    assert [p["milestone"] for p in got] == [0, 4, 8]
    assert got[-1]["mean_reward"] != 9.0 and "rewards" in got[-1]


def test_a_metrics_row_torn_by_a_kill_is_dropped_on_resume_and_corruption_before_it_is_refused(tmp_path):
    """``metrics.jsonl`` after ``kill -9`` mid-write ends in a torn row: resuming drops it (the step is run
    again) and keeps every complete row; a bad row *before* the last is corruption and stops the resume with
    the file and line named, leaving the file as it was."""
    out = tmp_path / "run"
    train(cfg(out, steps=1))
    before = metrics(out)
    with open(out / "metrics.jsonl", "a") as f:
        f.write('{"phase": "train", "step": 2, "rollo')
    train(cfg(out, steps=2), resume=True)
    rows = metrics(out)
    assert rows[:len(before)] == before and [r["step"] for r in rows if r.get("phase") == "train"] == [1, 2]
    broken = (out / "metrics.jsonl").read_text().replace('"step": 1', '"step": 1 oops', 1)
    (out / "metrics.jsonl").write_text(broken)
    with pytest.raises(ValueError, match=r"metrics.jsonl: line \d+ is not a JSON record"):
        train(cfg(out, steps=3), resume=True)
    assert (out / "metrics.jsonl").read_text() == broken


def test_eval_env_kwargs_pick_the_heldout_env_as_a_json_string_or_a_toml_table(tmp_path):
    """No eval_tasks: every task of the held-out env (here its `heads` category) is held out."""
    for k, extra in enumerate(('{"category": "heads"}', {"category": "heads"})):
        t = Trainer(cfg(tmp_path / f"run{k}", eval_tasks=None, eval_env_kwargs=extra))
        try:
            assert sorted(t.task_pool) == ["tails_0", "tails_1", "tails_2", "tails_3"]
            assert t.heldout.task_ids == ["heads_0", "heads_1", "heads_2", "heads_3"]
        finally:
            t.close()


def test_a_new_run_never_keeps_an_earlier_runs_points(tmp_path):
    """A run started afresh in a folder that holds another run's points (a crash before its first checkpoint,
    or a reused output dir) evaluates its own point 0 on the held-out tasks *and* the training pool: a stale
    point would otherwise mark milestone 0 as done and stand in for this run's student."""
    out = tmp_path / "run"
    out.mkdir()
    stale = {"milestone": 0, "rollouts": 0, "step": 0, "mean_reward": 9.0, "success_rate": 9.0, "n": 1,
             "rewards": {"x": 9.0}}
    for name in ("heldout.jsonl", "train_eval.jsonl"):
        (out / name).write_text(json.dumps(stale) + "\n")
    train(cfg(out, steps=1, eval_training_tasks=True))
    for name in ("heldout.jsonl", "train_eval.jsonl"):
        got = read_points(out / name)
        assert [p["milestone"] for p in got] == [0, 4], name
        assert all(p["mean_reward"] != 9.0 for p in got), name


# ------------------------------------------------------------------ --eval-start-from: one point 0 per setting

def _timeless(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if "seconds" not in k and k not in ("time", "seed")} for r in records]


def test_the_untrained_student_evaluates_the_same_whatever_its_seed_rank_or_algorithm(tmp_path):
    """What ``--eval-start-from`` rests on: before any update the student is the backbone (a fresh LoRA adds
    exactly zero) and a greedy evaluation of named tasks draws nothing from the seed, so two runs that differ
    in seed, LoRA rank and algorithm produce the very same episodes at 0 rollouts (text included)."""
    from lopd_train import models

    a = Trainer(cfg(tmp_path / "a", seed=0, lora_r=4, algo="grpo", eval_batch_size=2))
    b = Trainer(cfg(tmp_path / "b", seed=7, lora_r=8, lora_alpha=16, algo="opsd", eval_batch_size=2))
    try:
        ids = torch.arange(3, 40)[None]
        with torch.no_grad():
            for t in (a, b):  # the student adapter, as built, changes no logit at all
                with models.adapter(t.policy, "student"):
                    student = t.policy(input_ids=ids).logits
                with models.base_only(t.policy):
                    base = t.policy(input_ids=ids).logits
                assert torch.equal(student, base)
            first = a.heldout.evaluate(a.policy, a.tokenizer)
            second = b.heldout.evaluate(b.policy, b.tokenizer)
        assert len(first) == 2 and all(r["trace"]["steps"] for r in first)  # episodes with generated text
        assert _timeless(first) == _timeless(second)
    finally:
        a.close()
        b.close()


def test_eval_start_from_takes_the_source_runs_point_zero_and_evaluates_the_rest(tmp_path, capsys):
    """A new run with ``--eval-start-from`` writes the source's points at 0 rollouts (held-out and training
    tasks) as its own, marked ``copied_from``, evaluates every later milestone itself, and trains exactly as
    a run that evaluated its own point 0 (whose point 0 is the same)."""
    from lopd_train.cli import train_main

    source = tmp_path / "source"
    train(cfg(source, steps=1, eval_training_tasks=True))
    own = tmp_path / "own"
    train(cfg(own, steps=2, seed=3, eval_training_tasks=True))
    copied = tmp_path / "copied"
    train(cfg(copied, steps=2, seed=3, eval_training_tasks=True, eval_start_from=str(source)))
    assert "taken from" in capsys.readouterr().err
    for name in ("heldout.jsonl", "train_eval.jsonl"):
        src, mine, got = (read_points(d / name) for d in (source, own, copied))
        assert [p["milestone"] for p in got] == [0, 4, 8], name
        assert got[0]["copied_from"] == str(source) and got[0]["rewards"] == src[0]["rewards"] == mine[0]["rewards"]
        assert all("copied_from" not in p for p in got[1:])
        assert [p["rewards"] for p in got[1:]] == [p["rewards"] for p in mine[1:]], name
    keys = ("rollouts", "reward_mean", "loss")
    assert ([{k: r.get(k) for k in keys} for r in metrics(copied)]
            == [{k: r.get(k) for k in keys} for r in metrics(own)])

    # the same through the command line, and a source that has no point at 0 rollouts yet: evaluated here
    empty = tmp_path / "empty"
    train(cfg(empty, steps=1, eval_every_rollouts=0, tasks="heads_0,heads_1,tails_0,tails_1"))
    assert train_main(["--model", "tiny-random", "--env", "lopd-test/Coin-v0", "--category", "all", "--algo", "grpo",
                       "--steps", "1", "--tasks-per-step", "2", "--group-size", "2", "--max-new-tokens", "8",
                       "--lora-r", "4", "--lora-alpha", "8", "--no-progress", "--no-export", "--no-tensorboard",
                       "--eval-every-rollouts", "4", "--eval-tasks", HELD, "--output-dir", str(tmp_path / "cli"),
                       "--eval-start-from", str(empty)]) == 0
    assert "no point at 0 rollouts yet; evaluated here" in capsys.readouterr().err
    got = points(tmp_path / "cli")
    assert [p["milestone"] for p in got] == [0, 4] and "copied_from" not in got[0]


@pytest.mark.parametrize("change, named", [
    ({"max_new_tokens": 9}, "max_new_tokens 9 here, 8 there"),
    ({"eval_batch_size": 3}, "eval_batch_size"),
    ({"env_kwargs": '{"max_turns": 1}'}, "env_kwargs"),
    ({"eval_tasks": "heads_2,tails_3"}, "covers other tasks"),
])
def test_eval_start_from_refuses_a_run_of_other_evaluation_settings(tmp_path, change, named):
    """Any setting a greedy evaluation depends on, or another task set, makes the source's point 0 not this
    run's: refused with the difference named, before any step (the seed and the algorithm may differ)."""
    from lopd_train.training.heldout import StartPointError

    source = tmp_path / "source"
    train(cfg(source, steps=1))
    run = tmp_path / "run"
    with pytest.raises(StartPointError, match=named):
        train(cfg(run, steps=1, seed=5, eval_start_from=str(source), **change))
    assert not (run / "metrics.jsonl").exists() and not read_points(run / "heldout.jsonl")


def test_eval_start_from_a_run_not_started_yet_evaluates_here_and_a_damaged_one_is_refused(tmp_path, capsys):
    """A source that has not written its settings yet (a run of the same study starting beside this one: the
    folder is there, its config.json not yet) leaves this run to evaluate its own point 0, saying so; a
    damaged config.json is refused; and --init-from excludes --eval-start-from."""
    from lopd_train.training.heldout import StartPointError

    for source in (tmp_path / "nowhere", tmp_path / "starting"):
        if source.name == "starting":
            source.mkdir()
        out = tmp_path / f"run-{source.name}"
        train(cfg(out, steps=1, eval_start_from=str(source)))
        assert "holds no run yet (no config.json); evaluated here" in capsys.readouterr().err
        assert [p["milestone"] for p in points(out)] == [0, 4] and "copied_from" not in points(out)[0]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{not json")
    with pytest.raises(StartPointError, match="not readable JSON"):
        train(cfg(tmp_path / "run2", steps=1, eval_start_from=str(tmp_path / "bad")))
    with pytest.raises(ValueError, match="--init-from"):
        cfg(tmp_path / "run3", eval_start_from=str(tmp_path / "bad"), init_from=str(tmp_path / "x"))
    from lopd_train.cli import train_main

    with pytest.raises(SystemExit, match=r"^lopd-train: --eval-start-from .*not readable JSON"):  # one line
        train_main(["--model", "tiny-random", "--env", "lopd-test/Coin-v0", "--category", "all", "--steps", "1",
                    "--algo", "grpo", "--no-progress", "--no-export", "--no-tensorboard", "--eval-every-rollouts", "4",
                    "--eval-tasks", HELD, "--output-dir", str(tmp_path / "run4"),
                    "--eval-start-from", str(tmp_path / "bad")])


def test_a_run_records_its_software_at_each_start_and_point_zero_is_only_taken_from_the_same_stack(tmp_path,
                                                                                                   capsys):
    """``software.jsonl``: a line per start (the step it starts from, package versions, lopd's commit), another
    on resume; a run that starts over (no checkpoint) starts the file afresh. ``--eval-start-from`` takes point 0 only from a
    source whose first start ran on the same torch/transformers/peft/tokenizers/python; another stack, or one
    not recorded (an older run: taken, and said), is named."""
    from lopd_train import software

    source = tmp_path / "source"
    train(cfg(source, steps=1))
    rows = software.read(source)
    assert [r["step"] for r in rows] == [0] and rows[0]["packages"]["torch"] == torch.__version__
    assert rows[0]["packages"]["transformers"] and rows[0]["python"]
    train(cfg(source, steps=2), resume=True)
    rows = software.read(source)
    assert [r["step"] for r in rows] == [0, 1] and len(software.stacks(rows)) == 1

    other = dict(rows[0], packages=dict(rows[0]["packages"], transformers="0.0.1"))
    assert software.numeric_differences(rows[0], other) == {"transformers": (rows[0]["packages"]["transformers"],
                                                                             "0.0.1")}
    assert [s for s, _ in software.stacks([rows[0], other, other, rows[0]])] == [0, 0, 0]

    (source / software.FILE).write_text(json.dumps(other) + "\n")  # the source ran on another transformers
    run = tmp_path / "run"
    train(cfg(run, steps=1, seed=4, eval_start_from=str(source)))
    err = capsys.readouterr().err
    assert "on other software (transformers" in err and "0.0.1 there" in err and "evaluated here" in err
    assert "copied_from" not in points(run)[0]
    (source / software.FILE).unlink()  # an older run that recorded nothing: taken, and said
    run2 = tmp_path / "run2"
    train(cfg(run2, steps=1, seed=4, eval_start_from=str(source)))
    assert "software is not recorded" in capsys.readouterr().err and points(run2)[0]["copied_from"] == str(source)
    import shutil

    shutil.rmtree(run2 / "checkpoints")  # as a run that died before its first checkpoint: it starts over
    train(cfg(run2, steps=1, seed=4), resume=True)
    assert [r["step"] for r in software.read(run2)] == [0]


def test_the_same_cpu_model_on_another_kernel_level_is_another_stack():
    """Study v2 moved from an AVX2 EPYC to an AVX-512 one with the same model name, and a re-made cold start
    differed from step 1: the CPU's kernel level and bf16 hardware are part of the stack, so such a move shows
    in a run's stacks and ``--eval-start-from`` evaluates point 0 again. Older lines (no kernel level, or the
    model alone) keep what they recorded."""
    from lopd_train import software

    old = {"python": "3.11.7", "packages": {"torch": "2.13.0"}, "cpu": {"model": "AMD EPYC", "native_bf16": False}}
    new = dict(old, cpu={"model": "AMD EPYC", "native_bf16": True, "kernels": "AVX512"})
    assert software.cpu_label(old["cpu"]) == "AMD EPYC (no bf16 hardware)"
    assert software.cpu_label(new["cpu"]) == "AMD EPYC (AVX512, bf16 hardware)"
    assert software.cpu_label({"model": "AMD EPYC"}) == "AMD EPYC" and software.cpu_label(None) is None
    assert software.numeric_differences(old, new) == {"cpu": ("AMD EPYC (no bf16 hardware)",
                                                              "AMD EPYC (AVX512, bf16 hardware)")}
    assert [s for s, _ in software.stacks([dict(old, step=0), dict(new, step=20)])] == [0, 20]
    here = software.snapshot()["cpu"]
    assert here["kernels"] == str(torch.backends.cpu.get_cpu_capability())

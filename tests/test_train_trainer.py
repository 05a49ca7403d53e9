"""The training loop end to end with a tiny random model: every LOPD stage on a real env, exact resume,
and a run killed with SIGKILL that continues from its last checkpoint without losing experiences."""

from __future__ import annotations

import gc
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_train import statefile
from lopd_train.config import TrainConfig
from lopd_train.experience.bank import ExperienceBank
from lopd_train.training.trainer import Trainer, train

ROOT = Path(__file__).resolve().parents[1]
HE_TASKS = ["HumanEval/0", "HumanEval/2", "HumanEval/4"]


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def tiny_cfg(out: Path, **kw) -> TrainConfig:
    base = dict(model="tiny-random", steps=2, tasks_per_step=2, group_size=2, max_new_tokens=16,
                num_latents=4, qformer_dim=32, qformer_layers=1, experience_tokens=96, lora_r=4, lora_alpha=8,
                progress=False, output_dir=str(out), lr=1e-3, composer_lr=1e-3, cold_start_lr=1e-3, composer_lora_r=4,
                composer_lora_alpha=8, cold_start_steps=2, cold_start_batch_size=4, cold_start_min_successes=1,
                cold_start_max_batches=1, bank_mode="dynamic")  # these tests are about the dynamic bank's loop
    base.update(kw)
    return TrainConfig(**base)


def coin(out: Path, **kw) -> TrainConfig:
    """:func:`tiny_cfg` on the coin-flip test env, no export or TensorBoard: the run-folder and checkpoint tests'."""
    return tiny_cfg(out, **{"env": "lopd-test/Coin-v0", "category": "all", "export": False, "tensorboard": False, **kw})


@pytest.fixture(scope="module")
def humaneval_demos(tmp_path_factory):
    """Successful traces of HumanEval+ tasks (the canonical solutions), to seed the experience bank: a tiny
    random model never solves a task itself."""
    import gymnasium as gym

    import lopd_envs

    gym.register_envs(lopd_envs)
    try:
        env = gym.make("lopd/HumanEvalPlus-v0")
    except Exception as exc:  # noqa: BLE001 - data missing on this machine
        pytest.skip(f"HumanEval+ unavailable: {exc}")
    path = tmp_path_factory.mktemp("demos") / "demos.jsonl"
    lines = []
    for task in env.unwrapped.tasks:
        if task.task_id not in HE_TASKS:
            continue
        env.reset(options={"task_id": task.task_id})
        answer = "```python\n" + task.data["prompt"] + task.data["canonical_solution"] + "\n```"
        *_, info = env.step(answer)
        assert info["trace"].success, info.get("score")
        lines.append(info["trace"].to_json())
    path.write_text("\n".join(lines) + "\n")
    return path


def test_lopd_end_to_end_on_humaneval_plus_with_resume(tmp_path, humaneval_demos):
    out = tmp_path / "run"
    cfg = tiny_cfg(out, env="lopd/HumanEvalPlus-v0", category="plus", tasks=",".join(HE_TASKS),
                   init_bank=str(humaneval_demos), steps=2, export=False, cold_start_min_successes=3)
    first = train(cfg)
    assert first["step"] == 2 and first["rollouts"] == 2 * 4  # cold start on the replayed demos, no rollouts
    r = rows(out)
    curve = [x for x in r if x["phase"] == "cold_start" and "cold_start_nll" in x]
    assert [x["cold_start_step"] for x in curve] == [1, 2] and all(x["cold_start_batch"] == 3 for x in curve)
    train_rows = [x for x in r if x["phase"] == "train"]
    assert [x["step"] for x in train_rows] == [1, 2]
    assert all(x["context_fraction"] == 1.0 and x["skipped_no_context"] == 0.0 for x in train_rows)
    assert all(x["composer_grad_norm"] > 0 and x["grad_norm"] > 0 for x in train_rows)
    assert train_rows[0]["beta"] == pytest.approx(max(0.0, 0.5 * (0.05 - train_rows[0]["margin_delta"])))
    assert (out / "checkpoints" / "step-000002" / "student_adapter" / "adapter_config.json").exists()
    # resume to a longer run: it continues at step 3 with the saved beta, counts and bank
    more = train(tiny_cfg(out, env="lopd/HumanEvalPlus-v0", category="plus", tasks=",".join(HE_TASKS),
                          init_bank=str(humaneval_demos), steps=3, export=True, cold_start_min_successes=3),
                 resume=True)
    assert more["step"] == 3 and more["rollouts"] == 12
    r = [x for x in rows(out) if x["phase"] == "train"]
    assert [x["step"] for x in r] == [1, 2, 3]
    assert len(ExperienceBank(out / "bank.sqlite")) == len(HE_TASKS)
    assert (out / "reward_curve.png").stat().st_size > 1000
    assert list((out / "tb").glob("events.out.tfevents.*"))
    from transformers import AutoModelForCausalLM

    student = AutoModelForCausalLM.from_pretrained(out / "student")
    assert not any("lora" in n for n, _ in student.named_parameters())


def test_resume_continues_exactly(tmp_path):
    # probe_every=1: the probe NLL is logged at every step, so the shorter first run's last step (which logs
    # it as its final step) logs what the straight run logs there
    straight = tiny_cfg(tmp_path / "a", env="lopd-test/Coin-v0", category="all", steps=2, export=False,
                        tensorboard=False, probe_every=1)
    train(straight)
    train(tiny_cfg(tmp_path / "b", env="lopd-test/Coin-v0", category="all", steps=1, export=False,
                   tensorboard=False, probe_every=1))
    train(tiny_cfg(tmp_path / "b", env="lopd-test/Coin-v0", category="all", steps=2, export=False,
                   tensorboard=False, probe_every=1), resume=True)
    ra, rb = rows(tmp_path / "a"), rows(tmp_path / "b")
    drop = ("seconds", "rollout_seconds", "update_seconds")
    assert [{k: v for k, v in x.items() if k not in drop} for x in ra] == \
           [{k: v for k, v in x.items() if k not in drop} for x in rb]
    wa = statefile.load(tmp_path / "a/checkpoints/step-000002/trainer")
    wb = statefile.load(tmp_path / "b/checkpoints/step-000002/trainer")
    assert all(torch.equal(wa["lora"][k], wb["lora"][k]) for k in wa["lora"])
    assert wa["algo"]["beta"] == wb["algo"]["beta"]


def test_a_run_started_from_another_runs_cold_start_continues_it_exactly(tmp_path):
    """--init-from: ablations that differ only after the cold start share one (study v2). Forked with the
    same settings, the run is the source run: the same rows, the same weights."""
    kw = dict(env="lopd-test/Coin-v0", category="all", steps=2, export=False, tensorboard=False, keep_checkpoints=1)
    train(tiny_cfg(tmp_path / "a", **kw))
    source = tmp_path / "a/checkpoints/cold-start"
    assert (source / "state.json").exists()  # kept although only the newest step checkpoint is
    assert json.loads((source / "state.json").read_text())["step"] == 0
    (tmp_path / "a/pig_heldback.jsonl").write_text('{"task_id": "heads_0"}\n')  # as a bank that held back
    train(tiny_cfg(tmp_path / "b", init_from=str(source), **kw))
    assert (tmp_path / "b/pig_heldback.jsonl").read_text() == '{"task_id": "heads_0"}\n'  # PIG on the same ones
    ra, rb = rows(tmp_path / "a"), rows(tmp_path / "b")
    drop = ("seconds", "rollout_seconds", "update_seconds")
    assert [{k: v for k, v in x.items() if k not in drop} for x in ra] == \
           [{k: v for k, v in x.items() if k not in drop} for x in rb]
    assert any("cold_start_nll" in x for x in rb)  # the cold start's record came along
    wa = statefile.load(tmp_path / "a/checkpoints/step-000002/trainer")
    wb = statefile.load(tmp_path / "b/checkpoints/step-000002/trainer")
    assert all(torch.equal(wa["lora"][k], wb["lora"][k]) for k in wa["lora"])
    with pytest.raises(ValueError, match="checkpoint of --algo lopd, not grpo"):
        Trainer(tiny_cfg(tmp_path / "c", init_from=str(source), algo="grpo", **kw))
    with pytest.raises(FileNotFoundError, match="no complete checkpoint"):
        Trainer(tiny_cfg(tmp_path / "d", init_from=str(tmp_path / "nowhere"), **kw))


def test_a_run_without_resume_refuses_to_overwrite_checkpoints(tmp_path):
    train(tiny_cfg(tmp_path, env="lopd-test/Coin-v0", category="all", steps=1, export=False, algo="grpo"))
    with pytest.raises(FileExistsError):
        Trainer(tiny_cfg(tmp_path, env="lopd-test/Coin-v0", category="all", steps=2, algo="grpo"))


def test_kill_9_then_resume_loses_no_experience(tmp_path):
    out = tmp_path / "run"
    args = [sys.executable, "-m", "lopd_train.cli", "--env", "tests.coin_env:lopd-test/Coin-v0",
            "--category", "all", "--model", "tiny-random", "--steps", "8", "--tasks-per-step", "2",
            "--group-size", "2", "--max-new-tokens", "12", "--num-latents", "4", "--qformer-dim", "32",
            "--lora-r", "4", "--composer-lora-r", "4", "--experience-tokens", "64", "--cold-start-steps", "2",
            "--cold-start-batch-size", "4", "--cold-start-min-successes", "1", "--cold-start-max-batches", "1",
            "--bank-mode", "dynamic", "--no-progress", "--no-export", "--no-tensorboard", "--output-dir", str(out)]
    # one torch thread: beside the other pytest worker (and whatever else runs) two threads stall at every
    # kernel waiting for a core, and the resume once took > 360 s for 5 tiny steps (CI, 2026-12-05)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    latest = out / "checkpoints" / "latest"
    deadline = time.time() + 240
    while time.time() < deadline:
        if latest.exists() and latest.read_text().strip() >= "step-000003":
            break
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_at = json.loads((out / "checkpoints" / latest.read_text().strip() / "state.json").read_text())
    assert killed_at["step"] < 8
    before = {e.key for e in ExperienceBank(out / "bank.sqlite").all()}
    done = subprocess.run([*args[:3], "--output-dir", str(out), "--resume"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=360)
    assert done.returncode == 0, done.stderr[-2000:]
    state = json.loads((out / "checkpoints" / "step-000008" / "state.json").read_text())
    assert state["step"] == 8 and state["rollouts"] == 9 * 4  # the cold-start batch, then 8 steps
    after = {e.key for e in ExperienceBank(out / "bank.sqlite").all()}
    assert before <= after
    steps = [x["step"] for x in rows(out) if x["phase"] == "train"]
    assert steps == list(range(1, 9))  # rows of the interrupted step were dropped, then re-run once


@pytest.mark.parametrize("algo", ["grpo", "sdpo"])
def test_baselines_train_through_the_same_loop(tmp_path, algo):
    result = train(tiny_cfg(tmp_path, env="lopd-test/Coin-v0", category="all", steps=3, export=False,
                            tensorboard=False, algo=algo))
    assert result["step"] == 3
    assert not any(x["phase"] == "cold_start" for x in rows(tmp_path))  # no cold start without a composer
    r = [x for x in rows(tmp_path) if x["phase"] == "train"]
    assert len(r) == 3 and all(math.isfinite(x["grad_norm"]) for x in r)
    assert any(x["grad_norm"] > 0 for x in r)  # the student really received a gradient
    if algo == "sdpo":  # a group with a demonstration always differs from its teacher
        assert all((x["grad_norm"] > 0) == (x["context_fraction"] > 0) for x in r)
        assert any(x["context_fraction"] > 0 for x in r)


def test_lopd_train_logs_the_anchor_the_skipped_rollouts_and_the_cold_start_curve(tmp_path):
    """The tiny-model ``lopd-train`` run of issue 8: the NLL curve of cold start, ``skipped_no_context`` on
    every step, and a nonzero anchor once the composer has taken its first step."""
    from lopd_train import cli

    out = tmp_path / "run"
    assert cli.train_main(["--env", "tests.coin_env:lopd-test/Coin-v0", "--category", "all", "--model",
                           "tiny-random", "--steps", "3", "--tasks-per-step", "2", "--group-size", "2",
                           "--max-new-tokens", "12", "--num-latents", "4", "--qformer-dim", "32", "--lora-r", "4",
                           "--composer-lora-r", "4", "--experience-tokens", "64", "--cold-start-steps", "4",
                           "--cold-start-batch-size", "4", "--cold-start-min-successes", "2", "--lr", "1e-3",
                           "--composer-lr", "1e-3", "--cold-start-lr", "1e-3", "--bank-mode", "dynamic", "--no-progress", "--no-export",
                           "--no-tensorboard",
                           "--output-dir", str(out)]) == 0
    r = rows(out)
    curve = [x for x in r if x["phase"] == "cold_start" and "cold_start_nll" in x]
    assert [x["cold_start_step"] for x in curve] == [1, 2, 3, 4]
    assert all(math.isfinite(x["cold_start_nll"]) and x["cold_start_nll"] > 0 for x in curve)
    summary = [x for x in r if x["phase"] == "cold_start" and "cold_start_steps" in x]
    assert summary and summary[0]["cold_start_nll_last"] == curve[-1]["cold_start_nll"]
    train_rows = [x for x in r if x["phase"] == "train"]
    assert [x["step"] for x in train_rows] == [1, 2, 3]
    assert all(0.0 <= x["skipped_no_context"] <= 1.0 for x in train_rows)
    assert train_rows[0]["anchor"] < 1e-10  # the composer still equals its cold-start snapshot
    assert train_rows[0]["composer_grad_norm"] > 0 and all(x["anchor"] > 0 for x in train_rows[1:])


def test_zero_cold_start_steps_is_refused_unless_allowed_and_then_logged(tmp_path):
    from lopd_train.algorithms.lopd import ColdStartError

    with pytest.raises(ColdStartError, match=r"would run 0 of --cold-start-steps 0.*--allow-empty-cold-start"):
        train(tiny_cfg(tmp_path / "a", env="lopd-test/Coin-v0", category="all", steps=1, export=False,
                       tensorboard=False, cold_start_steps=0, cold_start_max_batches=3))
    result = train(tiny_cfg(tmp_path / "b", env="lopd-test/Coin-v0", category="all", steps=1, export=False,
                            tensorboard=False, cold_start_steps=0, cold_start_max_batches=3,
                            allow_empty_cold_start=True))
    assert result["rollouts"] == 4  # no rollout batch was spent looking for cold-start successes
    (summary,) = [x for x in rows(tmp_path / "b") if x["phase"] == "cold_start"]
    assert summary["cold_start_empty"] == 1 and summary["cold_start_steps"] == 0


def test_a_cold_start_with_too_few_pairs_stops_the_run_and_says_how_to_seed_the_bank(tmp_path):
    """Study v1's failure: successes existed but no (trajectory, experiences) pair did, and 0 steps ran."""
    from lopd_train.algorithms.lopd import ColdStartError

    with pytest.raises(ColdStartError, match=r"fewer than --cold-start-min-successes 99.*Seed the bank"):
        train(tiny_cfg(tmp_path, env="lopd-test/Coin-v0", category="all", steps=1, export=False, tensorboard=False,
                       cold_start_min_successes=99, cold_start_max_batches=1))
    logged = rows(tmp_path)
    assert not any(x["phase"] == "train" for x in logged)  # it stopped before any on-policy step
    (refusal,) = [x for x in logged if "cold_start_error" in x]  # and its run folder says why
    assert "Seed the bank" in refusal["cold_start_error"] and refusal["cold_start_steps"] == 0


def test_freeze_composer_refuses_an_untrained_composer(tmp_path, monkeypatch):
    from lopd_train.algorithms.lopd import ColdStartError

    with pytest.raises(ValueError, match=r"--freeze-composer.*random initialisation"):
        tiny_cfg(tmp_path, freeze_composer=True, cold_start_steps=0)
    # a cold start that finds nothing to train on: refused even when an empty cold start is allowed
    monkeypatch.setattr(Trainer, "cold_start_data", lambda self: [])
    with pytest.raises(ColdStartError, match="--freeze-composer would freeze an untrained"):
        train(tiny_cfg(tmp_path, env="lopd-test/Coin-v0", category="all", steps=1, export=False, tensorboard=False,
                       freeze_composer=True, allow_empty_cold_start=True))


def test_greedy_cold_start_decodes_one_greedy_rollout_per_distinct_task(tmp_path, monkeypatch):
    import lopd_train.training.trainer as trainer_mod

    calls = []
    real = trainer_mod.run_episodes

    def spy(policy, tokenizer, envs, tasks, sampling, **kw):
        calls.append((list(tasks), sampling.greedy, list(kw["groups"])))
        return real(policy, tokenizer, envs, tasks, sampling, **kw)

    monkeypatch.setattr(trainer_mod, "run_episodes", spy)
    result = train(tiny_cfg(tmp_path, env="lopd-test/Coin-v0", category="all", steps=1, export=False,
                            tensorboard=False, cold_start_greedy=True, cold_start_min_successes=99,
                            cold_start_max_batches=2, allow_empty_cold_start=True))
    assert result["rollouts"] == 2 * 4 + 4  # two greedy cold-start batches of 2 x 2 tasks, then one step
    (t1, g1, groups1), (_t2, g2, _), (t3, g3, groups3) = calls
    assert g1 and g2 and not g3  # only the cold start decodes greedily
    assert len(set(t1)) == len(t1) == 4 and groups1 == [0, 1, 2, 3]  # distinct tasks, a group each
    assert len(t3) == 4 and groups3 == [0, 0, 1, 1]  # on-policy steps keep tasks_per_step x group_size


@pytest.mark.parametrize("algo", ["lopd", "skill_sd"])
def test_a_finished_run_closes_its_banks_so_its_folder_no_longer_changes(tmp_path, algo):
    """The banks are WAL-mode SQLite files: while a connection is open the newest rows sit in ``*.sqlite-wal``,
    and whenever the connection is closed (by ``close`` or, later, by the garbage collector) they are folded into
    the ``.sqlite``. A run must do that before ``run`` returns, so that a tool reading the run folder in the
    same process (``benchmarks/pig_of_checkpoint.py``) sees it as final. The trainer is kept alive here, so the
    garbage collector cannot do the closing."""
    out = tmp_path / "run"
    own = (dict(bank_mode="reference", bank_samples=6, cold_start_batch_size=2,  # a sampled bank: cold-start pairs
                tasks="heads_0,heads_1,tails_0,tails_1") if algo == "lopd" else dict(skill_tokens=6))
    trainer = Trainer(tiny_cfg(out, algo=algo, env="lopd-test/Coin-v0", category="all", steps=1, max_new_tokens=8,
                               export=False, tensorboard=False, **own))
    trainer.run()
    banks = sorted(p.name for p in out.glob("*.sqlite"))
    assert "bank.sqlite" in banks and (algo != "skill_sd" or "skills.sqlite" in banks)
    assert not list(out.glob("*.sqlite-wal")) and not list(out.glob("*.sqlite-shm"))
    frozen = {p: p.read_bytes() for p in out.glob("*.sqlite")}
    del trainer
    gc.collect()
    assert {p: p.read_bytes() for p in out.glob("*.sqlite")} == frozen
    assert len(ExperienceBank(out / "bank.sqlite")) > 0

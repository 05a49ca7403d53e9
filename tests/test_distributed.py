"""Data-parallel training under ``accelerate launch`` with two CPU processes (gloo): both ranks end with the
same student and composer weights and the same β, the one experience bank holds every rank's successes
once, and ``--resume`` under two processes continues exactly like an uninterrupted two-process run.

The launches run this file as their script: :func:`rank_main` trains through ``lopd-train``'s own parser
and :class:`~lopd_train.training.trainer.Trainer`, and each rank then writes what it holds (weights, β, the
successes it sampled) to ``rank-<r>.pt``, which the tests compare.

On CPUs accelerate starts several processes only through its torchrun launcher (``--multi_gpu``; plain
``--cpu --num_processes N`` starts one process unless MPI is installed), and ``lopd_train.distributed`` then
picks gloo because no GPU is there; see examples/accelerate/README.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
TINY = ["--env", "tests.coin_env:lopd-test/Coin-v0", "--category", "all", "--model", "tiny-random",
        "--tasks-per-step", "2", "--group-size", "2", "--max-new-tokens", "10", "--num-latents", "4",
        "--qformer-dim", "32", "--qformer-layers", "1", "--lora-r", "4", "--composer-lora-r", "4",
        "--experience-tokens", "48", "--cold-start-steps", "2", "--cold-start-batch-size", "4",
        "--cold-start-min-successes", "1", "--cold-start-max-batches", "1", "--lr", "1e-3", "--composer-lr", "1e-3", "--cold-start-lr",
        "1e-3", "--no-progress", "--no-export", "--no-tensorboard", "--threads", "1",
        "--bank-mode", "dynamic"]  # the ranks' shared, growing bank is what these tests check


def accelerate_available() -> bool:
    return shutil.which("accelerate") is not None or (Path(sys.executable).parent / "accelerate").exists()


pytestmark = pytest.mark.skipif(not accelerate_available(), reason="accelerate's launcher is not installed "
                                "(pip install accelerate): data-parallel training NOT tested")


#: how the two processes are started: data-parallel, or sharded with the CPU FSDP example config
LAUNCHERS = {"ddp": ["--multi_gpu"],
             "fsdp": ["--config_file", str(ROOT / "examples/accelerate/fsdp_cpu_2proc.yaml")]}


def launch(out: Path, *args: str, timeout: int = 420, mode: str = "ddp") -> float:
    """``accelerate launch`` two processes of :func:`rank_main`; returns the wall time."""
    launcher = Path(sys.executable).parent / "accelerate"
    cmd = [str(launcher) if launcher.exists() else "accelerate", "launch", *LAUNCHERS[mode], "--num_processes", "2",
           "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port",
           str(29500 + os.getpid() % 1000), __file__, *TINY, "--output-dir", str(out), *args]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    t0 = time.time()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return time.time() - t0


def launch_runs(out: Path, runs: dict[str, list[str]], timeout: int = 600, mode: str = "ddp") -> float:
    """One launch of two processes that train each of ``runs`` (name -> its own arguments) in turn, each in
    ``out/<name>`` (one start-up for several short runs); returns the wall time."""
    return launch(out, "--runs", json.dumps(runs), timeout=timeout, mode=mode)


def ranks(out: Path) -> list[dict]:
    return [torch.load(out / f"rank-{r}.pt", weights_only=False) for r in (0, 1)]


def rows(out: Path) -> list[dict]:
    drop = ("seconds", "rollout_seconds", "update_seconds")
    return [{k: v for k, v in json.loads(line).items() if k not in drop}
            for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]


def assert_same_weights(a: dict, b: dict) -> None:
    assert a["weights"].keys() == b["weights"].keys()
    for name in a["weights"]:
        assert torch.equal(a["weights"][name], b["weights"][name]), name
    assert a["beta"] == b["beta"]


@pytest.fixture(scope="module")
def lopd_straight(tmp_path_factory):
    """An uninterrupted two-process LOPD run of 3 steps (cold start first)."""
    out = tmp_path_factory.mktemp("ddp") / "straight"
    seconds = launch(out, "--algo", "lopd", "--steps", "3")
    print(f"two-process LOPD, cold start + 3 steps: {seconds:.0f} s")
    return out


def test_lopd_two_ranks_agree_and_share_one_bank(lopd_straight):
    r0, r1 = ranks(lopd_straight)
    assert_same_weights(r0, r1)  # student LoRA, composer LoRA + Q-Former, anchor, and β: identical
    assert any("composer" in n for n in r0["weights"]) and any("compressor" in n for n in r0["weights"])
    assert any(not torch.equal(w, r0["initial"][n]) for n, w in r0["weights"].items())  # it did train
    assert r0["beta"] > 0  # the dual update moved β (the same on both ranks)
    assert r0["tasks"] != r1["tasks"]  # each rank sampled its own tasks and rollouts
    state = json.loads((lopd_straight / "checkpoints/step-000003/state.json").read_text())
    assert state["rollouts"] == 2 * 4 * 4  # two ranks x (the cold-start batch + 3 steps) x 4 rollouts
    from lopd_train.experience.bank import ExperienceBank

    bank = [e.key for e in ExperienceBank(lopd_straight / "bank.sqlite").all()]
    sampled = set(r0["successes"]) | set(r1["successes"])
    assert len(bank) == len(set(bank)) == len(sampled) and set(bank) == sampled  # each success, once
    assert set(r1["successes"]) - set(r0["successes"])  # rank 1's own successes reached the bank


@pytest.mark.slow
def test_lopd_resume_under_two_processes_continues_exactly(lopd_straight, tmp_path):
    resumed = tmp_path / "resumed"
    first = launch(resumed, "--algo", "lopd", "--steps", "2")
    second = launch(resumed, "--algo", "lopd", "--steps", "3", "--resume")
    q0, q1 = ranks(resumed)
    assert_same_weights(q0, q1)
    assert_same_weights(ranks(lopd_straight)[0], q0)  # interrupted after step 2, resumed: the straight run's end
    assert rows(lopd_straight) == rows(resumed)
    print(f"two-process LOPD resume: {first:.0f} s to step 2, {second:.0f} s resumed to step 3")


def test_grpo_two_ranks_agree(tmp_path):
    out = tmp_path / "grpo"
    seconds = launch(out, "--algo", "grpo", "--steps", "3")
    r0, r1 = ranks(out)
    assert_same_weights(r0, r1)
    assert any(not torch.equal(w, r0["initial"][n]) for n, w in r0["weights"].items())  # it did train
    assert r0["tasks"] != r1["tasks"]
    print(f"two-process GRPO: 3 steps in {seconds:.0f} s")


# ------------------------------------------------------------------------- what each launched rank runs

def rank_main(argv: list[str]) -> int:
    """Train as ``lopd-train`` would, then write this rank's weights, β and sampled successes."""
    from lopd_train.cli import config_from_args
    from lopd_train.experience.bank import trace_key
    from lopd_train.training.trainer import Trainer

    stub_skills = "--stub-skills" in argv  # Skill-SD: summaries that name the rank that wrote them (see below)
    cfg, args = config_from_args([a for a in argv if a != "--stub-skills"])
    trainer = Trainer(cfg, resume=args.resume)
    if stub_skills:  # a tiny random model's greedy summary is blank; these say which rank summarised what
        trainer.algo.summarise = lambda exps: [f"skill from rank {trainer.dist.rank}: {e.task_id}" for e in exps]
    tasks, successes = [], []
    rollout_batch = trainer.rollout_batch

    def recording_rollout_batch(**kw):
        trajs, added = rollout_batch(**kw)
        tasks.extend(t.task_id for t in trajs)
        successes.extend(trace_key(t.trace) for t in trajs if t.success and t.trace is not None)
        return trajs, added

    def weights() -> dict[str, torch.Tensor]:
        out = {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if "lora_" in n}
        for name in ("composer", "snapshot"):
            part = getattr(trainer.algo, name, None)
            if part is not None:
                out.update({f"{name}.compressor.{n}": p.detach().clone() for n, p in part.compressor.named_parameters()})
        return out

    def sharded_fraction() -> float:  # the share of the backbone this rank holds (1.0 unless FSDP shards it)
        held = full = 0
        for n, p in trainer.policy.named_parameters():
            if "lora_" not in n:
                held += p.to_local().numel() if hasattr(p, "to_local") else p.numel()
                full += p.numel()
        return held / full

    initial = weights()
    trainer.rollout_batch = recording_rollout_batch
    trainer.run()
    rank = trainer.dist.rank
    dump = {"weights": weights(), "initial": initial, "beta": getattr(trainer.algo, "beta", None),
            "tasks": tasks, "successes": successes, "sharded_fraction": sharded_fraction(),
            "dist": type(trainer.dist).__name__}
    if args.resume:  # the successes of the run's first launch, from its own dump
        earlier = Path(cfg.output_dir) / f"rank-{rank}.pt"
        if earlier.exists():
            dump["successes"] = torch.load(earlier, weights_only=False)["successes"] + successes
    torch.save(dump, Path(cfg.output_dir) / f"rank-{rank}.pt")
    return 0


def rank_runs(argv: list[str]) -> int:
    """``--runs JSON <arguments>``: :func:`rank_main` for each named run, in ``<--output-dir>/<name>``."""
    at = argv.index("--runs")
    runs, rest = json.loads(argv[at + 1]), argv[:at] + argv[at + 2:]
    out = Path(rest[rest.index("--output-dir") + 1])
    for name, extra in runs.items():
        rank_main([*rest, *extra, "--output-dir", str(out / name)])  # argparse: the last --output-dir wins
    return 0


if __name__ == "__main__":
    sys.exit(rank_runs(sys.argv[1:]) if "--runs" in sys.argv else rank_main(sys.argv[1:]))

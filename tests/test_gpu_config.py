"""The GPU configuration that mirrors the authors' LOPD setting (examples/study_v2/qwen3_4b_envscaler_lopd.toml)
parses, and one step of it runs on CPU with a tiny random model of the Qwen3 architecture: the same
algorithm, bank mode, sampling and loop; only the size, the device, the rollout engine (vLLM needs a GPU) and
the data source (lopd's own EnvScaler environments, offline) are swapped for the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lopd_train.cli import load_config_file
from lopd_train.config import TrainConfig
from lopd_train.training.trainer import train

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "examples" / "study_v2" / "qwen3_4b_envscaler_lopd.toml"


def test_the_gpu_config_parses_and_mirrors_the_reference():
    cfg = TrainConfig(**load_config_file(str(CONFIG)))
    assert (cfg.model, cfg.env, cfg.algo, cfg.rollout_backend) == ("Qwen/Qwen3-4B", "lopd/EnvScaler-v0", "lopd", "vllm")
    assert (cfg.tasks_per_step, cfg.group_size, cfg.steps, cfg.lr) == (32, 1, 100, 1e-5)
    assert (cfg.temperature, cfg.top_k, cfg.top_p) == (0.7, 20, 0.95)
    lopd = cfg.lopd
    assert (cfg.experience.top_j, lopd.num_latents, cfg.kl.top_m, lopd.margin, lopd.anchor_coef, lopd.beta_lr,
            lopd.beta_init) == (3, 32, 20, 0.05, 0.2, 0.5, 0.0)
    assert (cfg.experience.bank_mode, lopd.cold_start_steps, lopd.cold_start_batch_size) == ("reference", 1000, 8)


def tiny_qwen3(folder: Path) -> Path:
    """A randomly initialised two-layer Qwen3 with the byte tokenizer, saved as a plain model folder."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from lopd_train import models

    tok = models.byte_tokenizer()
    config = Qwen3Config(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=4096,
                         tie_word_embeddings=True, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                         pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def one_step(tmp_path: Path, **over) -> tuple[dict, list[dict]]:
    """One step of the GPU config, shrunk: a tiny random Qwen3, lopd's own EnvScaler environments (run
    unisolated on a machine without bubblewrap, e.g. the GPU tool's), small adapters and composer, a one-step
    cold start; ``over`` sets the device, the dtype and checkpointing. Returns the result and the metrics rows."""
    import shutil

    values = load_config_file(str(CONFIG))
    env_kwargs = {"source": "ours", "split": "rl", **({} if shutil.which("bwrap") else {"allow_unisolated": True})}
    values.update(model=str(tiny_qwen3(tmp_path / "tiny-qwen3")), rollout_backend="hf",
                  env_kwargs=json.dumps(env_kwargs), eval_env_kwargs="{}",
                  tasks_per_step=2, steps=1, max_new_tokens=16, max_sequence_tokens=4096, lora_r=4, lora_alpha=8,
                  qformer_layers=1, qformer_dim=32, qformer_heads=4, num_latents=4, experience_tokens=64,
                  bank_samples=1, cold_start_steps=1, cold_start_min_successes=1, allow_empty_cold_start=True,
                  pig_every=0, eval_every_rollouts=0, export=False, tensorboard=False, progress=False,
                  output_dir=str(tmp_path / "run"), env_workers=2, **over)
    result = train(TrainConfig(**values))
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return result, rows


def test_one_step_of_the_gpu_config_runs_on_cpu_with_a_tiny_qwen3(tmp_path):
    result, rows = one_step(tmp_path, dtype="float32", gradient_checkpointing=False)
    assert result["step"] == 1
    assert [r["phase"] for r in rows if r["phase"] in ("bank", "train")] == ["bank", "train"]
    (bank,) = [r for r in rows if r["phase"] == "bank"]
    assert result["rollouts"] == bank["bank_rollouts"] + 2  # the bank's rollouts, then 2 tasks x 1


# ------------------------------------------------------------------ on a GPU (benchmarks/gpu_check.sh runs these)
cuda = pytest.mark.skipif(not __import__("torch").cuda.is_available(),
                          reason="needs a CUDA device: benchmarks/gpu_check.sh runs it on the GPU machine")


@cuda
def test_one_step_of_the_gpu_config_runs_on_cuda_in_bf16(tmp_path):
    """The same step on the GPU, in the dtype the GPU config trains in (bf16) and with its gradient
    checkpointing, the backbone and both adapters on the device."""
    result, rows = one_step(tmp_path, device="cuda", dtype="bfloat16")
    assert result["step"] == 1
    (step,) = [r for r in rows if r["phase"] == "train"]
    assert all(v == v for k, v in step.items() if isinstance(v, float) and k.startswith(("student_kl", "beta")))


@cuda
@pytest.mark.parametrize("algo", ["lopd", "grpo", "opsd", "sdpo", "sdft", "skill_sd", "vanilla"])
def test_every_algorithm_trains_on_cuda_with_a_cold_start_and_pig(tmp_path, algo):
    """Every algorithm, two steps on the GPU in bf16 on the coin env (whose random policy succeeds, so LOPD's
    bank, cold start, probe NLL and PIG metric all have something to run on), then a resume from the
    checkpoint: nothing of the update may assume a CPU tensor."""
    import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)

    base = dict(model="tiny-random", env="lopd-test/Coin-v0", category="all", algo=algo, device="cuda",
                dtype="bfloat16", steps=2, tasks_per_step=2, group_size=2, max_new_tokens=8, num_latents=4,
                qformer_dim=32, qformer_layers=1, experience_tokens=64, lora_r=4, lora_alpha=8,
                composer_lora_r=4, composer_lora_alpha=8, progress=False, export=False, tensorboard=False,
                output_dir=str(tmp_path / "run"), tasks="heads_0,heads_1,tails_0,tails_1")
    if algo == "lopd":
        base.update(cold_start_steps=2, cold_start_batch_size=2, cold_start_min_successes=1, bank_samples=3,
                    pig_trajectories=1, pig_every=1)
    result = train(TrainConfig(**base))
    assert result["step"] == 2
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [r for r in rows if r["phase"] == "train"]
    assert len(steps) == 2
    if algo == "lopd":
        (summary,) = [r for r in rows if r["phase"] == "cold_start" and "cold_start_empty" in r]
        assert summary["cold_start_steps"] == 2
        assert "probe_teacher_nll" in steps[-1]
    resumed = train(TrainConfig(**{**base, "steps": 3}), resume=True)
    assert resumed["step"] == 3

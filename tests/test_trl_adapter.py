"""TRL's GRPOTrainer trains on a lopd env through lopd_train.integrations.trl: whole episodes as sampled
(the env's answers masked out of the loss), the env's own reward, a few real optimiser steps."""

from __future__ import annotations

import os

import pytest
import torch

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_train import models
from lopd_train.integrations.trl import LopdRollout, lopd_dataset, lopd_env_reward, lopd_grpo_inputs, task_of
from lopd_train.rollout.engine import SamplingConfig
from tests.test_vllm_backend import FakeLLM, fake_vllm  # noqa: F401  (the vLLM stand-in and its fixture)

COIN = "tests.coin_env:lopd-test/Coin-v0"


def trl_or_skip():
    try:
        import trl  # noqa: F401
    except ImportError as exc:  # loud: the adapter's training path was NOT tested
        pytest.skip(f"trl is not installed (pip install 'lopd[trl]'): the TRL adapter was NOT tested ({exc})")


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return models.load_backbone("tiny-random", torch.device("cpu"), "float32")


def test_the_dataset_carries_each_task_and_its_opening_messages():
    ds = lopd_dataset(COIN, category="all")
    assert ds["task_id"] == [f"{c}_{i}" for c in ("heads", "tails") for i in range(4)]
    first = ds[0]["prompt"]
    assert first[0]["role"] == "system" and first[1]["content"] == "Write a short note number 0 about heads."
    assert task_of(first) == "heads_0"
    with pytest.raises(ValueError, match="lopd_task_id"):
        task_of([{"role": "user", "content": "no id"}])


class FakeTrainer:
    def __init__(self, model):
        self.model = model


def test_the_rollout_keeps_the_episode_as_sampled_and_masks_the_env(tiny):
    model, tok = tiny
    rollout = LopdRollout(COIN, tok, SamplingConfig(max_new_tokens=8), category="all")
    prompts = lopd_dataset(COIN, ["heads_1", "tails_2"], category="all")["prompt"]
    out = rollout(prompts, FakeTrainer(model))
    assert len(out["completion_ids"]) == 2
    for ids, mask, lps, p_ids in zip(out["completion_ids"], out["env_mask"], out["logprobs"], out["prompt_ids"]):
        assert len(ids) == len(mask) == len(lps)
        env_text = tok.decode([i for i, m in zip(ids, mask) if m == 0])
        assert "noted" in env_text  # the tool result between the two turns: in the completion, masked
        assert all(lp < 0 for lp, m in zip(lps, mask) if m == 1)  # sampler log-probs of the sampled tokens
        assert "note number" in tok.decode(p_ids)
    # the reward is the env's: the Coin env scores an even total length of the two answers
    assert lopd_env_reward(out["completion_ids"], **{k: out[k] for k in ("lopd_reward",)}) == out["lopd_reward"]
    assert set(out["lopd_reward"]) <= {0.0, 1.0}
    rollout.close()


def test_grpo_trainer_trains_a_tiny_model_on_a_lopd_env(tiny, tmp_path):
    trl_or_skip()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from trl import GRPOConfig, GRPOTrainer

    model, tok = tiny
    inputs = lopd_grpo_inputs(COIN, tok, max_new_tokens=10, category="all")
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2, max_steps=3,
                      learning_rate=1e-2, logging_steps=1, report_to="none", use_cpu=True, save_strategy="no",
                      temperature=1.0, max_completion_length=64, bf16=False, beta=0.0, seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = GRPOTrainer(model=model, processing_class=tok, args=args, **inputs)
    trainer.train()
    steps = [h for h in trainer.state.log_history if "reward" in h]
    assert len(steps) == 3
    assert all(h["completions/mean_length"] <= 2 * 10 for h in steps)  # only the model's tokens count
    assert all(0.0 <= h["rewards/lopd_env_reward/mean"] <= 1.0 for h in steps)
    assert any(h["grad_norm"] > 0 for h in steps)  # a group with different rewards gave a gradient
    assert any(not torch.equal(before[n], p) for n, p in trainer.model.named_parameters())
    inputs["rollout_func"].close()


# ----------------------------------------------------------------------------- use_vllm: TRL's own engine

class NoHFGeneration(torch.nn.Module):
    """The trainer's model when use_vllm is on: sampling must not come here (TRL synced the engine instead)."""

    def __init__(self, model):
        super().__init__()
        self.inner = model

    def forward(self, *a, **k):
        raise AssertionError("use_vllm: the rollout sampled with the HF model instead of TRL's vLLM engine")

    generate = forward


class VLLMTrainer:
    def __init__(self, model, engine):
        self.model, self.use_vllm, self.vllm_generation = NoHFGeneration(model), True, engine


class FakeVLLMClient:
    """TRL's VLLMClient.generate contract: token-id prompts in; completion ids and, with logprobs=0, each
    step's sampled-token log-probability first."""

    def __init__(self, eos: int):
        self.eos, self.calls = eos, []

    def generate(self, prompts, **params):
        self.calls.append(params)
        completion = [11, 12, self.eos, 13]  # vLLM may run past EOS only without stop ids: cut at the first EOS
        return {"prompt_ids": prompts, "completion_ids": [completion for _ in prompts],
                "logprobs": [[[-0.5], [-0.25], [-0.125], [-1.0]] for _ in prompts]}


def test_use_vllm_server_mode_samples_on_trls_server(tiny):
    import types

    model, tok = tiny
    client = FakeVLLMClient(tok.eos_token_id)
    trainer = VLLMTrainer(model, types.SimpleNamespace(mode="server", vllm_client=client))
    rollout = LopdRollout(COIN, tok, SamplingConfig(max_new_tokens=8, temperature=0.7), category="all")
    out = rollout(lopd_dataset(COIN, ["heads_1"], category="all")["prompt"], trainer)
    assert client.calls and client.calls[0]["temperature"] == 0.7 and client.calls[0]["max_tokens"] == 8
    assert client.calls[0]["generation_kwargs"] == {"stop_token_ids": [tok.eos_token_id]}
    ids, mask, lps = out["completion_ids"][0], out["env_mask"][0], out["logprobs"][0]
    assert ids[:3] == [11, 12, tok.eos_token_id] and lps[:3] == [-0.5, -0.25, -0.125] and mask[:3] == [1, 1, 1]
    assert 13 not in [i for i, m in zip(ids, mask) if m == 1]  # nothing sampled after the EOS is kept


def test_use_vllm_colocate_mode_samples_in_trls_engine(tiny, fake_vllm):  # noqa: F811 - the imported fixture
    import types

    model, tok = tiny
    engine = FakeLLM(model="tiny-random", logprobs_mode="processed_logprobs")
    trainer = VLLMTrainer(model, types.SimpleNamespace(mode="colocate", llm=engine))
    rollout = LopdRollout(COIN, tok, SamplingConfig(max_new_tokens=6, temperature=0.7), category="all")
    out = rollout(lopd_dataset(COIN, ["tails_0", "heads_2"], category="all")["prompt"], trainer)
    assert engine.calls and all(lora is None for lora, _ in engine.calls)  # the synced weights, no adapter
    assert len(out["completion_ids"]) == 2 and all(len(i) == len(m) for i, m in zip(out["completion_ids"],
                                                                                     out["env_mask"]))

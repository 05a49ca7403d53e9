"""Time and peak memory of one LOPD update against one GRPO-style update (policy gradient only), on the same
batch and the same model. Prints the ratios (targets: time <= 1.5x, memory <= 1.3x).

    python benchmarks/trainer_step.py                       # SmolLM2-135M-Instruct, 2 tasks x 4 rollouts
    python benchmarks/trainer_step.py --model tiny-random --reps 2

Time: GRPO and LOPD updates alternate in one process on the same policy and batch (other jobs on a shared
machine then slow both alike); medians and best-of are reported. Memory: each algorithm alone in a fresh
process (so one cannot reuse the other's allocator pages). The batch is
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
2.85 s), whole step (rollout + update) 1.54x, peak memory 1.65x. The SmolLM2 re-measurement (default
arguments) and ``--sweep`` could not finish on that machine at load averages of 10-16; rerun them on a
quieter one. The script prints the load average beside its figures.

Where LOPD's extra time goes: the teacher's forward over [prompt with J*K latent tokens; continuations]
twice (once without gradient for the top-k support, once with it for the composer, whose gradient must
reach the latent tokens), and the composer's encoder (the backbone with its LoRA) over the retrieved
experiences, once without and once with its graph. The student's own pass is GRPO's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
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


def setup(args, algos: list[str], **overrides):
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
            r = timed_update(algo, trajectories, device)
            if rep:
                out[name]["times"].append(r["seconds"])
                out[name]["cpu_times"].append(r["cpu_seconds"])
                out[name]["rollout_times"].append(roll)
            if name == "lopd":
                out[name]["context_fraction"] = r["metrics"].get("context_fraction")
    tmp.cleanup()
    return out


def sweep_worker(args) -> dict:
    """The learning-rate measurement behind the defaults (``--sweep``): on one fixed batch, for each rate,
    (a) the student's KL to a fixed teacher (composer frozen) over ``--sweep-steps`` LOPD updates, and (b) the
    cold-start NLL over as many composer steps. Each rate starts from the same fresh adapters."""
    out: dict = {"student": {}, "composer": {}}
    for lr in args.sweep_lrs:
        _, trajectories, objs, tmp, _ = setup(args, ["lopd"], lr=lr, freeze_composer=True)
        out["student"][str(lr)] = [objs["lopd"].update(trajectories)["student_kl"] for _ in range(args.sweep_steps)]
        print(f"student lr {lr:g}: {out['student'][str(lr)]}", file=sys.stderr, flush=True)
        tmp.cleanup()
        _, trajectories, objs, tmp, _ = setup(args, ["lopd"], composer_lr=lr, cold_start_steps=args.sweep_steps,
                                              cold_start_batch_size=len(trajectories))
        for t in trajectories:
            t.success = True
        curve: list = []
        objs["lopd"].cold_start(trajectories, log=curve.append)
        out["composer"][str(lr)] = [row["cold_start_nll"] for row in curve]
        print(f"composer lr {lr:g}: {out['composer'][str(lr)]}", file=sys.stderr, flush=True)
        tmp.cleanup()
    return out


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
    p.add_argument("--tasks", type=int, default=2)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--prompt-tokens", type=int, default=384)
    p.add_argument("--completion-tokens", type=int, default=64)
    p.add_argument("--bank-size", type=int, default=12)
    p.add_argument("--experience-tokens", type=int, default=128)
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--reps", type=int, default=3, help="timed update pairs (GRPO, LOPD) after a warm-up pair")
    p.add_argument("--memory-reps", type=int, default=1, help="updates after a warm-up in each memory process")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--gradient-checkpointing", action="store_true")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--kl-support", default="teacher", choices=["teacher", "student"])
    p.add_argument("--sweep", action="store_true", help="measure the learning rates instead (see sweep_worker)")
    p.add_argument("--sweep-lrs", type=float, nargs="+", default=[1e-5, 1e-4, 1e-3])
    p.add_argument("--sweep-steps", type=int, default=3)
    p.add_argument("--worker", choices=["lopd", "grpo", "timing", "sweep"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        workers = {"timing": timing_worker, "sweep": sweep_worker}
        result = workers.get(args.worker, memory_worker)(args)
        print("RESULT " + json.dumps(result), flush=True)
        return 0
    if args.sweep:
        result = run_worker("sweep", [a for a in (argv if argv is not None else sys.argv[1:]) if a != "--sweep"])
        for part, what in (("student", "student KL per update (composer frozen)"),
                           ("composer", "cold-start NLL per step")):
            print(what)
            for lr, curve in result[part].items():
                drop = (curve[0] - curve[-1]) / abs(curve[0]) if curve and curve[0] else float("nan")
                print(f"  lr {float(lr):7.0e}: " + " ".join(f"{v:.5g}" for v in curve) + f"   ({drop:+.1%} drop)")
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=2))
        return 0
    argv = list(argv if argv is not None else sys.argv[1:])
    if "--json" in argv:
        i = argv.index("--json")
        del argv[i:i + 2]
    timing = run_worker("timing", argv)
    mem = {a: run_worker(a, argv) for a in ("grpo", "lopd")}
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
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

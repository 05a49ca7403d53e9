"""Time and peak memory of one update of each algorithm (GRPO, LOPD, OPSD, SDPO, SDFT, Skill-SD) on the same
batch and the same model, every ratio against GRPO's update measured in the same run (targets for LOPD, issue
23: update <= 2x GRPO's, whole step <= 1.5x).

    python benchmarks/trainer_step.py --threads 1 --reps 2 --explain   # the committed run (results README)
    python benchmarks/trainer_step.py            # SmolLM2-135M-Instruct, 1 task x 4 rollouts, all six algorithms
    python benchmarks/trainer_step.py --algos grpo lopd --reps 2      # GRPO and LOPD only (faster)
    python benchmarks/trainer_step.py --model tiny-random --reps 2
    python benchmarks/trainer_step.py --sweep --tasks 2 --group 2   # learning rates x LoRA ranks
    python benchmarks/trainer_step.py --algos grpo lopd --mmap-threshold-1mib   # memory as earlier revisions
    (results, with their commands and load averages, and the history of the figures:
    benchmarks/results/trainer_step/README.md)

This command line is stable: whoever changes an algorithm's update re-runs the first command and compares
its table with ``benchmarks/results/trainer_step/smollm2_default.txt``. ``--json FILE`` also writes every
figure (the LOPD/GRPO ratios under the keys the earlier revisions wrote: ``time_ratio_median``,
``step_ratio_median``, ``peak_memory_ratio``, ``update_memory_ratio``, ``lopd_sections_median``).

The defaults are small (one task group, 256-token prompts, 32 sampled tokens, a warm-up then ``--reps``
timed rounds, memory from one update) so that a run ends in minutes on a shared 2-core machine; pass
``--tasks 2 --prompt-tokens 384 --completion-tokens 64 --reps 3`` for the shape of the earliest figures.

The batch is synthetic but shaped like a BFCL rollout batch: ``--tasks`` tasks x ``--group`` rollouts, a chat
prompt of about ``--prompt-tokens`` tokens and ``--completion-tokens`` sampled tokens each, half of them
successful; a bank of successful traces (the batch's and ``--bank-size`` others) from which LOPD retrieves
J experiences per task, SDFT its demonstration and Skill-SD its skills; SDPO's hint is another success of the
same group; OPSD's reference answer comes from a stand-in env (:class:`BenchEnv`). Every algorithm runs with
the trainer's defaults (teacher = the frozen backbone, top-M reverse KL). Skill-SD's per-step work includes
summarising that step's new successes: before each timed Skill-SD update the batch's successes are marked
as not yet summarised (:func:`steady_state`), so every timed update summarises them, as a training step does.

Time: all the updates run in one process on the same policy and batch, in interleaved rounds whose order
rotates (round r starts with the r-th algorithm), so other jobs on a shared machine slow all of them alike;
a warm-up round is not counted. Each ratio is paired: an algorithm's update over GRPO's in the same round,
then the median and range (min-max) over rounds; the CPU time of the process is given beside the wall time
(less sensitive to other jobs). The whole step is the round's rollout of the batch (HF generate with the
student LoRA, at most ``--completion-tokens`` new tokens, temperature 1; ``benchmarks/generation.py``
measures rollout speed properly) plus the update.

Every process runs with the allocator as lopd-train has it (``lopd_train.training.allocator.configure``:
``LOPD_MALLOC``). Memory: each algorithm alone in a fresh process, two side by side, its peak over a warm-up
and ``--memory-reps`` updates, for the whole update and per section, two figures side by side
(:class:`MemoryMonitor`): on the CPU the resident set (RSS) and the bytes in use on the C heap (glibc
``mallinfo2``: ``uordblks + hblkhd``), each also as the increase over the start of the update; on CUDA torch's
peak reserved and allocated bytes. The resident set is what the machine must have, fragmentation and freed
memory the allocator keeps included; the bytes in use are what the update holds: the gap between them is the
allocator's. ``--mmap-threshold-1mib`` runs the memory workers with ``MALLOC_MMAP_THRESHOLD_=1MiB`` instead,
as earlier revisions measured (the resident set then tracks live memory, which hides the fragmentation the
trainer pays; see ``run_worker``).

Sections (:class:`SectionTimer`): each update split into student forward/backward, teacher forward,
compose, composer backward, Skill-SD's summaries, contexts, optimiser steps and the rest, with wall time,
CPU time and minor page faults per section (the timing process), and peak memory per section, resident and in
use (the memory processes).

Sweep (``--sweep``, see ``sweep_worker``): the learning-rate and LoRA-rank measurement behind the defaults in
``lopd_train/algorithms/lopd.py``'s knob table; it needs ``--tasks 2`` or more (the last task is held
back) and samples the batch's completions from the model itself.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the algorithms timed by default: GRPO (the baseline of every ratio), LOPD and the four text-context baselines
ALGOS = ("grpo", "lopd", "opsd", "sdpo", "sdft", "skill_sd")


def _mallinfo2():
    """glibc's ``mallinfo2`` (2.33 and later) through ctypes, or None elsewhere."""
    import ctypes
    import ctypes.util

    class Mallinfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                         "fsmblks", "uordblks", "fordblks", "keepcost")]
    name = ctypes.util.find_library("c")
    try:
        fn = ctypes.CDLL(name).mallinfo2 if name else None
    except (OSError, AttributeError):
        return None
    if fn is None:
        return None
    fn.restype = Mallinfo2
    return fn


class MemoryMonitor:
    """Peak memory of this process, two figures side by side, overall and per section of an update.

    On the CPU: the resident set (what the kernel charges: freed memory that the allocator keeps counts) and
    the bytes the C heap has handed out and not had back (glibc's ``mallinfo2``: ``uordblks + hblkhd``, the
    in-use heap and the mapped blocks; ``None`` where it is missing), sampled every 5 ms by a thread and at
    every section boundary. Side by side because either alone misleads: the resident set grows with
    fragmentation and with memory the allocator keeps for reuse, the bytes in use do not. On CUDA: torch's
    reserved (its caching allocator's share of the GPU) and allocated bytes, their peaks read and reset at
    every section boundary. Sections come from :class:`SectionTimer` (``switch``); time outside them is "rest"."""

    def __init__(self, cuda: bool = False, in_use: bool = True):
        self.cuda = cuda
        self.label = "rest"
        self.peaks: dict[str, dict[str, float]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()
        if not cuda:
            import psutil

            self._proc = psutil.Process()
            self._mallinfo = _mallinfo2() if in_use else None  # the timing worker leaves it out (arena locks)

    def read(self) -> tuple[float, float | None]:
        """(resident bytes, bytes in use) now: on CUDA the peaks since the last reset."""
        if self.cuda:
            import torch

            return float(torch.cuda.max_memory_reserved()), float(torch.cuda.max_memory_allocated())
        info = self._mallinfo() if self._mallinfo is not None else None
        return float(self._proc.memory_info().rss), None if info is None else float(info.uordblks + info.hblkhd)

    def _charge(self) -> None:
        resident, in_use = self.read()
        with self._lock:
            p = self.peaks.setdefault(self.label, {"resident": 0.0, "in_use": None})
            p["resident"] = max(p["resident"], resident)
            if in_use is not None:
                p["in_use"] = in_use if p["in_use"] is None else max(p["in_use"], in_use)

    def switch(self, label: str) -> None:
        """Charge what was measured so far to the current section, then measure for ``label``."""
        self._charge()
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            self._charge()
            torch.cuda.reset_peak_memory_stats()
        self.label = label

    def _run(self) -> None:
        while not self._stop.wait(0.005):
            self._charge()

    def __enter__(self):
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.start = self.read()
        if not self.cuda:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        if not self.cuda:
            self._stop.set()
            self._thread.join()
        self.switch("rest")

    @property
    def peak(self) -> dict[str, float | None]:
        """The peak over every section: resident and in use."""
        values = list(self.peaks.values())
        in_use = [v["in_use"] for v in values if v["in_use"] is not None]
        return {"resident": max(v["resident"] for v in values), "in_use": max(in_use) if in_use else None}


def synthetic_batch(tokenizer, args, rng):
    from lopd_envs.chat import TextTools
    from lopd_envs.trace import Trace
    from lopd_train import models
    from lopd_train.rollout.engine import Trajectory
    from lopd_train.rollout.replay import attach_transcript

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
            prompt = models.encode(tokenizer, models.render_chat(tokenizer, messages, tools, text_tools=TextTools(prompt="always")))
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


class BenchEnv:
    """What :meth:`Algorithm.attach_env` reads from an env: its tasks and a ``reference_answer`` hook, here a
    gold tool call of the synthetic task (OPSD's privileged text; the other algorithms never ask)."""

    def __init__(self, trajectories):
        from types import SimpleNamespace

        self.tasks = [SimpleNamespace(task_id=tid) for tid in dict.fromkeys(t.task_id for t in trajectories)]

    def reference_answer(self, task) -> str:
        call = {"name": "tool_0", "arguments": {"id": task.task_id, "limit": 10}}
        return f"<tool_call>\n{json.dumps(call)}\n</tool_call>\nThen list the orders it returns, newest first."


def sample_completions(policy, tokenizer, trajectories, args) -> None:
    """Replace the synthetic completions by the model's own samples (temperature 1, at most
    ``--completion-tokens``), so the batch is made of real rollouts of that model on the batch's prompts."""
    import torch

    from lopd_train import models
    from lopd_train.rollout.engine import SamplingConfig, generate
    from lopd_train.rollout.replay import attach_transcript

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
    from lopd_train.config import TrainConfig
    from lopd_train.experience.bank import ExperienceBank
    from lopd_train.experience.retriever import Retriever
    from lopd_train.scoring import student_logits
    from lopd_train.training import allocator

    allocator.configure()  # LOPD_MALLOC, as lopd-train (the memory workers' MALLOC_MMAP_THRESHOLD_ wins over keep)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = models.default_device() if args.device == "auto" else torch.device(args.device)
    global _CUDA_SYNC
    _CUDA_SYNC = device.type == "cuda"
    backbone, tok = models.load_backbone(args.model, device, args.dtype)
    cfg = TrainConfig(model=args.model, lora_r=args.lora_r, lora_alpha=2 * args.lora_r,
                      gradient_checkpointing=args.gradient_checkpointing, experience_tokens=args.experience_tokens,
                      kl_support=args.kl_support, tool_prompt="always", top_j=args.top_j,
                      experience_format=args.experience_format, **overrides)
    adapters = {"student": models.lora_config(cfg.lora_r, cfg.lora_alpha)}
    for a in algos:
        for name, (r, alpha) in ALGORITHMS[a].extra_adapters(cfg).items():
            adapters[name] = models.lora_config(r, alpha)
    policy = models.wrap_lora(backbone, adapters)
    if args.gradient_checkpointing:
        models.enable_gradient_checkpointing(policy)
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
            top = logp.topk(cfg.kl.top_m, -1)
            t.policy_logprobs, t.topm_ids, t.topm_logprobs = lp.cpu(), top.indices.cpu(), top.values.cpu()
    policy.train()
    objs = {a: ALGORITHMS[a](policy, tok, cfg, bank, retriever) for a in algos}
    for algo in objs.values():
        algo.attach_env(BenchEnv(trajectories))
    if "lopd" in objs:
        set_probes(objs["lopd"], trajectories)
    return device, trajectories, objs, tmp, (policy, tok, cfg)


def set_probes(lopd, trajectories) -> None:
    """Give LOPD the banked successes its cold start would have kept for ``probe_teacher_nll`` (the teacher's
    NLL with the current latents, computed after every composer update of a run): without them the timed
    update would leave out a pass that every training step of a cold-started run takes."""
    from lopd_train.algorithms.lopd import PROBES

    successes = [t for t in trajectories if t.success][:PROBES]
    lopd.probes = [(t, exps) for t, exps in zip(successes, lopd.retrieve([[t] for t in successes])) if exps]


def timed_rollout(policy, tok, cfg, trajectories, args, records_top_m: bool) -> float:
    """Wall time of sampling the batch's completions (HF ``generate`` over the batch's prompts, at most
    ``--completion-tokens`` new tokens each, the student adapter active, the same seed for every algorithm)
    and recording the top-M when the algorithm asks for it."""
    import torch

    from lopd_train import models
    from lopd_train.rollout.engine import SamplingConfig, generate

    policy.eval()
    prompts = [t.input_ids[:t.prompt_len] for t in trajectories]
    sampling = SamplingConfig(max_new_tokens=args.completion_tokens, top_m=cfg.kl.top_m if records_top_m else 0)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with models.adapter(policy, "student"):
        generate(policy, tok, prompts, sampling)
    elapsed = time.perf_counter() - t0
    policy.train()
    return elapsed


#: set when the policy is on a GPU: a section's wall time then waits for the kernels it queued
_CUDA_SYNC = False


def _usage() -> tuple[float, float, int]:
    """(wall, CPU of every thread of this process, minor page faults so far): what a section is charged."""
    import resource

    if _CUDA_SYNC:
        import torch

        torch.cuda.synchronize()
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), ru.ru_utime + ru.ru_stime, ru.ru_minflt


class SectionTimer:
    """Wall time, CPU time and minor page faults per section of one update, for every algorithm, by wrapping
    the methods each section calls and ``Tensor.backward`` (whose cost goes to the section that ran just
    before it: the student's forward, or the composer's anchor), so the split needs no timers inside
    ``lopd_train``. A method that is missing (an algorithm refactored) is skipped, never an error: its time
    then falls into "rest". Not used for the ratios.

    Sections: ``score_group`` as each algorithm module calls it (``teacher=True``: "teacher forward", else
    "student forward"), LOPD's ``compose``/``compose_many``/``teacher_logprobs``/``anchor_latents`` and its probe NLL after the
    composer step (``probe_nll``: its compose and teacher pass count there, not above), the text baselines'
    ``prepare`` (Skill-SD's summaries), ``contexts`` (retrieval and the text) and ``teacher_logits``, the
    optimiser steps, and "rest" (retrieval, tokenising, buckets and losses). Page faults are what a forward
    pays for memory the allocator hands out fresh: the figure that explains why the same forward costs more
    in one algorithm than in another."""

    def __init__(self):
        #: a :class:`MemoryMonitor` told of every section boundary (the memory workers set it), or None
        self.monitor: MemoryMonitor | None = None
        self.seconds: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.faults: dict[str, int] = {}
        self.last = "other"
        self.depth = 0
        self._undo: list = []

    def _charge(self, label: str, start: tuple[float, float, int]) -> None:
        end = _usage()
        self.seconds[label] = self.seconds.get(label, 0.0) + end[0] - start[0]
        self.cpu[label] = self.cpu.get(label, 0.0) + end[1] - start[1]
        self.faults[label] = self.faults.get(label, 0) + end[2] - start[2]

    def _wrap(self, owner, name, label):
        fn = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
        if fn is None:
            return
        timer = self

        def timed(*a, **k):
            if timer.depth:  # inside another timed section (the teacher's scorer, the snapshot's compose)
                return fn(*a, **k)
            lab = label(a, k) if callable(label) else label
            timer.depth += 1
            if timer.monitor is not None:
                timer.monitor.switch(lab)
            start = _usage()
            try:
                return fn(*a, **k)
            finally:
                timer._charge(lab, start)
                if timer.monitor is not None:
                    timer.monitor.switch("rest")
                timer.last, timer.depth = lab, timer.depth - 1
        setattr(owner, name, timed)
        self._undo.append((owner, name, fn))

    def __enter__(self):
        import torch

        from lopd_train.algorithms import distill, grpo, lopd
        from lopd_train.algorithms.base import Algorithm

        after = {"student forward": "student backward", "anchor (cached)": "composer backward"}
        self._wrap(lopd.LOPD, "compose", "compose (encoder + Q-Former)")
        self._wrap(lopd.LOPD, "compose_many", "compose (encoder + Q-Former)")  # a chunk's groups in one pass
        self._wrap(lopd.LOPD, "teacher_logprobs", "teacher forward")
        self._wrap(lopd.LOPD, "anchor_latents", "anchor (cached)")
        self._wrap(lopd.LOPD, "probe_nll", "probe NLL (no graph)")
        self._wrap(distill.SelfDistillation, "teacher_logits", "teacher forward")
        for cls in (distill.SelfDistillation, *distill.SelfDistillation.__subclasses__()):  # own definitions only
            self._wrap(cls, "prepare", "prepare (Skill-SD summaries)")
            self._wrap(cls, "contexts", "contexts (retrieve, text)")
        for module in (lopd, distill, grpo):
            self._wrap(module, "score_group",
                       lambda a, k: "teacher forward" if k.get("teacher") else "student forward")
            if hasattr(module, "score_groups"):  # several groups in one student pass (--score-batch)
                self._wrap(module, "score_groups", "student forward")
        self._wrap(Algorithm, "step_optimizer", "optimiser steps")
        self._wrap(torch.Tensor, "backward", lambda a, k: after.get(self.last, "other backward"))
        self.start = _usage()
        return self

    def __exit__(self, *exc):
        for owner, name, fn in reversed(self._undo):
            setattr(owner, name, fn)
        end = _usage()
        self.seconds["rest"] = end[0] - self.start[0] - sum(self.seconds.values())
        self.cpu["rest"] = end[1] - self.start[1] - sum(self.cpu.values())
        self.faults["rest"] = end[2] - self.start[2] - sum(self.faults.values())


def timed_update(algo, trajectories, device, sections: SectionTimer | None = None, in_use: bool = True) -> dict:
    """One update: wall and CPU time, and peak memory (:class:`MemoryMonitor`): resident and in use, their
    increase over the start of the update, and (``sections`` given: the memory workers) per section."""
    import torch

    cuda = device.type == "cuda"
    with MemoryMonitor(cuda, in_use=in_use) as mem:
        if sections is not None:
            sections.monitor = mem
        t0, c0 = time.perf_counter(), time.process_time()
        metrics = algo.update(trajectories)
        if cuda:
            torch.cuda.synchronize()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    if sections is not None:
        sections.monitor = None
    mb = lambda x: None if x is None else x / 2**20  # noqa: E731
    peak, (start_resident, start_in_use) = mem.peak, mem.start
    return {"seconds": elapsed, "cpu_seconds": cpu, "peak_mb": mb(peak["resident"]),
            "increase_mb": mb(peak["resident"] - start_resident), "peak_in_use_mb": mb(peak["in_use"]),
            "in_use_increase_mb": None if peak["in_use"] is None or start_in_use is None
            else mb(peak["in_use"] - start_in_use),
            "section_memory": {k: {"resident_mb": mb(v["resident"]), "in_use_mb": mb(v["in_use"])}
                               for k, v in mem.peaks.items()},
            "metrics": metrics}


def memory_worker(args) -> dict:
    """One algorithm alone in this process: its peak memory over a warm-up and ``--memory-reps`` updates, resident
    and in use, for the whole update and per section (the largest over the updates)."""
    from lopd_train.training import allocator

    device, trajectories, objs, tmp, _ = setup(args, [args.worker])
    runs = []
    for _ in range(1 + args.memory_reps):
        steady_state(objs[args.worker], trajectories)
        with SectionTimer() as sections:
            runs.append(timed_update(objs[args.worker], trajectories, device, sections))
    tmp.cleanup()

    def most(key, rows):
        values = [r[key] for r in rows if r.get(key) is not None]
        return max(values) if values else None
    sections_mb = {k: {f: most(f, [r["section_memory"].get(k, {}) for r in runs]) for f in ("resident_mb", "in_use_mb")}
                   for k in dict.fromkeys(k for r in runs for k in r["section_memory"])}
    return {"algo": args.worker, "peak_mb": most("peak_mb", runs), "increase_mb": most("increase_mb", runs),
            "peak_in_use_mb": most("peak_in_use_mb", runs), "in_use_increase_mb": most("in_use_increase_mb", runs),
            "sections": sections_mb, "device": str(device),
            "allocator": allocator.configure() + (f", MALLOC_MMAP_THRESHOLD_={os.environ['MALLOC_MMAP_THRESHOLD_']}"
                                                  if "MALLOC_MMAP_THRESHOLD_" in os.environ else ""),
            "tokens": sum(t.n_actions for t in trajectories),
            "sequence_tokens": sum(len(t.input_ids) for t in trajectories)}


def steady_state(algo, trajectories) -> None:
    """Make an update do what it does in every step of a run, not only the first. Skill-SD summarises the
    bank's experiences it has not summarised yet: the first (warm-up) update summarises the whole synthetic
    bank, and a later one would summarise nothing; in a run each step summarises that step's new successes.
    So before each timed Skill-SD update the batch's own successes are marked as not yet summarised
    (``attempted``, its public record of what it summarised), and the update summarises them again."""
    from lopd_train.experience.bank import trace_key

    attempted = getattr(algo, "attempted", None)
    if isinstance(attempted, set):
        attempted.difference_update(trace_key(t.trace) for t in trajectories if t.success and t.trace is not None)


def timing_worker(args) -> dict:
    """Every algorithm's update in one process on the same policy and batch, in interleaved rounds: round r
    runs them in the order rotated by r, so that other jobs on a shared machine slow all of them alike and
    none always runs right after the same neighbour; round 0 is a warm-up, not counted. Each round also times
    one rollout of the batch's prompts (the same for every algorithm: the sampler does not depend on it;
    with the top-M recorded as well when an algorithm asks for it). Per update: wall and CPU time, the split
    by :class:`SectionTimer`, and the share of rollouts that got a teacher signal."""
    device, trajectories, objs, tmp, (policy, tok, cfg) = setup(args, args.algos)
    names = list(objs)
    top_m = any(type(a).records_top_m(cfg) for a in objs.values())
    out: dict = {"algos": {a: {"times": [], "cpu_times": [], "sections": [], "supervised": None} for a in names},
                 "rollout_times": [], "rollout_top_m_times": [], "orders": [], "load_1min": []}
    for rep in range(args.reps + 1):
        load = os.getloadavg()[0]
        roll = timed_rollout(policy, tok, cfg, trajectories, args, False)
        roll_top_m = timed_rollout(policy, tok, cfg, trajectories, args, True) if top_m else None
        order = names[rep % len(names):] + names[:rep % len(names)]
        for name in order:
            algo = objs[name]
            if rep:
                steady_state(algo, trajectories)
            with SectionTimer() as sections:
                r = timed_update(algo, trajectories, device, in_use=False)
            out["algos"][name]["supervised"] = r["metrics"].get("context_fraction", 1.0)
            if rep:  # also printed as it comes: a run stopped before its summary keeps the split (the GPU check)
                print(f"  {name}: update {r['seconds']:.2f} s, peak {r['peak_mb']:.0f} MB; " + ", ".join(
                    f"{k} {v:.2f}" for k, v in sorted(sections.seconds.items(), key=lambda kv: -kv[1])),
                    file=sys.stderr, flush=True)
                entry = out["algos"][name]
                entry["times"].append(r["seconds"])
                entry["cpu_times"].append(r["cpu_seconds"])
                entry["sections"].append({k: {"wall": sections.seconds[k], "cpu": sections.cpu[k],
                                              "faults": sections.faults[k]} for k in sections.seconds})
        if rep:
            out["rollout_times"].append(roll)
            if roll_top_m is not None:
                out["rollout_top_m_times"].append(roll_top_m)
            out["orders"].append(order)
            out["load_1min"].append(round(load, 2))
        print(f"round {rep}/{args.reps}{' (warm-up)' if not rep else ''}, load {load:.1f}, rollout {roll:.1f} s: " + ", ".join(
            f"{n} {out['algos'][n]['times'][-1]:.1f} s" if rep else n for n in order), file=sys.stderr, flush=True)
    if args.profile:
        profile_updates(objs, trajectories, device, args.profile)
    tmp.cleanup()
    return out


def profile_updates(objs: dict, trajectories, device, top: int) -> None:
    """One more update of each algorithm under torch.profiler; its ``top`` operators by self time (CUDA time
    on a GPU), printed to stderr. Not counted in any figure."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    gpu = device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    # on a GPU both: the kernels' own time, and the host's (launches, Python, syncs), which many small passes pay
    keys = ["self_device_time_total", "self_cpu_time_total"] if gpu else ["self_cpu_time_total"]
    for name, algo in objs.items():
        steady_state(algo, trajectories)
        with profile(activities=activities) as prof:
            algo.update(trajectories)
            if gpu:
                torch.cuda.synchronize()
        ops = prof.key_averages()
        for key in keys:
            try:
                table = ops.table(sort_by=key, row_limit=top)
            except (KeyError, AttributeError, ValueError) as e:  # an older torch names the device column otherwise
                table = f"(no table by {key}: {e})"
            print(f"profile of one {name} update ({len(ops)} operators; top {top} by {key}):\n{table}",
                  file=sys.stderr, flush=True)


def held_back_student_kl(algo, trajectories) -> float:
    """The student loss of an LOPD update (reverse KL on the teacher's top-M + tail, token mean) on
    ``trajectories``, without a step: the same sections as ``LOPD.update`` steps 1-4."""
    import torch

    from lopd_train.algorithms import losses
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
            idx = losses.kl_support(None, lt, algo.cfg.kl.top_m, "teacher")
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

        def fresh_lopd(policy=policy, fresh=fresh, tok=tok, cfg=cfg, bank=bank, retriever=retriever, **kw):
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
            algo = fresh_lopd(lr=lr, composer_lr=lr, cold_start_lr=lr, cold_start_steps=args.sweep_steps,
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
                values = [*curve, b, a]
                stable = all(math.isfinite(v) for v in values) and not row["skipped_steps"] and a <= b
                drop = (b - a) / abs(b) if b else float("nan")
                print(f"  {r:>3s} {float(lr):7.0e}  {' '.join(f'{v:.4g}' for v in curve):<40s} "
                      f"{b:.5g} -> {a:.5g}{'':<8s} {drop:+7.1%} {'yes' if stable else 'NO'}")


def run_worker(mode: str, passthrough: list[str], mmap_threshold: bool | None = None) -> dict:
    """Run ``mode`` in a fresh process and return its ``RESULT`` line. Every worker runs with the allocator as
    lopd-train has it (``lopd_train.training.allocator.configure``, which ``setup`` calls: ``LOPD_MALLOC``).
    ``mmap_threshold`` (``--mmap-threshold-1mib`` for the memory workers; the sweep's default) sets glibc's
    ``MALLOC_MMAP_THRESHOLD_`` to 1 MiB instead: blocks that size or larger that the heap cannot serve are
    mapped fresh and unmapped when freed, so the resident set tracks live memory. It is not how the trainer
    runs: it hides the fragmentation the trainer's resident set pays, and it changes timings (with LOPD's
    encoder and teacher graphs alive the heap has no room left, so every large activation of the student's
    forward becomes a fresh mapping whose pages fault on first touch; ``--explain`` measures it). Kept for
    comparison with the figures measured that way."""
    if mmap_threshold is None:
        mmap_threshold = mode == "sweep"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(x for x in (str(ROOT), os.environ.get("PYTHONPATH")) if x)}
    if mmap_threshold:
        env = {"MALLOC_MMAP_THRESHOLD_": str(1 << 20), **env}
    else:
        env.pop("MALLOC_MMAP_THRESHOLD_", None)
    # the timing worker's progress (one line per round) goes straight to this process's stderr
    quiet = mode in ALGOS or mode == "sweep"
    proc = subprocess.run([sys.executable, __file__, "--worker", mode, *passthrough], cwd=ROOT, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE if quiet else None, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
    if proc.returncode != 0 or line is None:
        raise SystemExit(f"trainer_step worker {mode!r} failed (exit {proc.returncode})"
                         + (f": {proc.stderr[-3000:]}" if proc.stderr else ""))
    return json.loads(line[len("RESULT "):])


def explain_worker(args) -> dict:
    """Why LOPD's "student forward" section costs more than GRPO's: the same call (``score_group`` of the
    student on the group's sequences, then its backward) timed in two conditions, interleaved over
    ``--reps`` rounds after a warm-up: alone, as in GRPO's update, and with the composer's encoder graph and
    the teacher's graph of the same group alive (``compose`` and ``teacher_logprobs`` with gradients, kept),
    as in LOPD's update, where the student's step runs between the teacher's pass and the composer's
    backward. Per condition: median wall, CPU, system CPU and minor page faults of the forward and of the
    backward. ``main --explain`` runs it twice: with the trainer's allocator and with the memory workers'
    ``MALLOC_MMAP_THRESHOLD_``."""
    import torch

    from lopd_train.algorithms.base import Batch
    from lopd_train.scoring import score_group

    _, trajectories, objs, tmp, (policy, _, _) = setup(args, ["grpo", "lopd"])
    lopd = objs["lopd"]
    members = Batch(trajectories).groups_of()[0]
    (experiences,) = lopd.retrieve([members])
    g = lopd.group(members, experiences)

    def measure(fn) -> dict:
        a = _usage()
        out = fn()
        b = _usage()
        return out, {"wall": b[0] - a[0], "cpu": b[1] - a[1], "faults": b[2] - a[2]}

    conditions = ("alone (GRPO's update)", "LOPD's encoder and teacher graphs alive (LOPD's update)")
    rows: dict = {c: [] for c in conditions}
    for rep in range(args.reps + 1):
        for cond in (conditions if rep % 2 == 0 else conditions[::-1]):
            keep = None
            if cond != conditions[0]:
                z = lopd.compose(g.task, g.experiences)
                keep = (z, lopd.teacher_logprobs(g, z))
            logits, fwd = measure(lambda: score_group(policy, g.seqs, g.masks, share_prefix=lopd.share_prompt))
            loss = sum(torch.log_softmax(x.float(), -1).gather(-1, y[:, None]).sum() for x, y in zip(logits, g.targets))
            _, bwd = measure(loss.backward)
            policy.zero_grad(set_to_none=True)
            del keep, logits, loss
            if rep:
                rows[cond].append({"forward": fwd, "backward": bwd})
    tmp.cleanup()
    return {c: {part: {k: statistics.median(r[part][k] for r in rs) for k in ("wall", "cpu", "faults")}
                for part in ("forward", "backward")} for c, rs in rows.items()}


def print_explain(results: dict) -> None:
    print("the student's forward (and backward) on the same group, alone or with LOPD's graphs alive; median wall s "
          "(CPU s, thousand minor page faults):")
    for allocator, res in results.items():
        for cond, r in res.items():
            f, b = r["forward"], r["backward"]
            print(f"  {allocator:34s} {cond:58s} forward {f['wall']:.2f} ({f['cpu']:.2f}, {f['faults'] / 1000:.0f}k)  "
                  f"backward {b['wall']:.2f} ({b['cpu']:.2f}, {b['faults'] / 1000:.0f}k)")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--tasks", type=int, default=1)
    p.add_argument("--group", type=int, default=4)
    p.add_argument("--prompt-tokens", type=int, default=256)
    p.add_argument("--completion-tokens", type=int, default=32)
    p.add_argument("--bank-size", type=int, default=12)
    p.add_argument("--experience-tokens", type=int, default=128)
    p.add_argument("--top-j", type=int, default=3, help="J, experiences per task for LOPD (the authors' 3)")
    p.add_argument("--experience-format", default="chat", choices=["chat", "trace"],
                   help="how an experience is rendered for the composer and the text teachers")
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
    p.add_argument("--algos", nargs="+", default=list(ALGOS), choices=ALGOS,
                   help="algorithms timed on the batch (grpo, the baseline of every ratio, is required)")
    p.add_argument("--profile", type=int, default=0, metavar="N",
                   help="after the timed rounds, profile one more update of each algorithm with torch.profiler and "
                        "print its N most expensive operators (self time; on a GPU, by CUDA time): where the time "
                        "of many small passes goes, which the sections cannot show")
    p.add_argument("--explain", action="store_true",
                   help="also time the student's forward alone and with LOPD's graphs alive, under the trainer's "
                        "allocator and the memory workers' (see explain_worker)")
    p.add_argument("--mmap-threshold-1mib", action="store_true",
                   help="run the memory workers with MALLOC_MMAP_THRESHOLD_=1MiB (how earlier revisions measured "
                        "memory: the resident set then tracks live memory, but it is not the trainer's allocator)")
    p.add_argument("--worker", choices=[*ALGOS, "timing", "sweep", "explain"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        workers = {"timing": timing_worker, "sweep": sweep_worker, "explain": explain_worker}
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
    if "grpo" not in args.algos:
        p.error("--algos must include grpo: every ratio is against GRPO's update in the same run")
    started = time.perf_counter()
    timing = run_worker("timing", argv)
    with ThreadPoolExecutor(2) as pool:  # one process each, two side by side (memory does not depend on timing)
        mem = dict(zip(args.algos, pool.map(lambda a: run_worker(a, argv, args.mmap_threshold_1mib), args.algos)))
    summary = summarise(args, timing, mem)
    if args.explain:
        explain_argv = [a for a in argv if a != "--explain"]
        summary["explain"] = {
            "trainer's allocator (timing worker)": run_worker("explain", explain_argv, mmap_threshold=False),
            "MALLOC_MMAP_THRESHOLD_=1MiB (memory)": run_worker("explain", explain_argv, mmap_threshold=True)}
    summary["benchmark_wall_seconds"] = time.perf_counter() - started
    summary["command"] = "python benchmarks/trainer_step.py " + " ".join(argv)
    print_summary(summary)
    if args.json:
        Path(args.json).write_text(json.dumps(summary, indent=2))
    return 0


def spread(values) -> dict:
    """Median, min and max over the timed rounds."""
    values = list(values)
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def summarise(args, timing: dict, mem: dict) -> dict:
    """Per algorithm: update time (median, range), its ratio to GRPO's update of the same round (median,
    range), CPU time, whole step (the round's rollout + update) against GRPO's, peak memory and its ratio, the
    supervised share, and the median split by section; and the figures the earlier revisions printed for
    LOPD (``time_ratio_median``...), under the same keys."""
    algos = timing["algos"]
    g = algos["grpo"]
    roll = statistics.median(timing["rollout_times"])
    roll_top_m = statistics.median(timing["rollout_top_m_times"]) if timing["rollout_top_m_times"] else roll
    rows = {}
    for name, t in algos.items():
        records = roll_top_m if name == "lopd" and args.kl_support == "student" else roll
        sections = {}
        for k in dict.fromkeys(k for r in t["sections"] for k in r):
            sections[k] = {f: statistics.median(r.get(k, {}).get(f, 0) for r in t["sections"])
                           for f in ("wall", "cpu", "faults")}
        rows[name] = {
            "update_s": spread(t["times"]), "cpu_s": spread(t["cpu_times"]),
            "vs_grpo": spread(x / y for x, y in zip(t["times"], g["times"])),
            "cpu_vs_grpo": spread(x / y for x, y in zip(t["cpu_times"], g["cpu_times"])),
            "whole_step_vs_grpo": (records + statistics.median(t["times"])) / (roll + statistics.median(g["times"])),
            "peak_mb": mem[name]["peak_mb"], "increase_mb": mem[name]["increase_mb"],
            "peak_in_use_mb": mem[name].get("peak_in_use_mb"), "in_use_increase_mb": mem[name].get("in_use_increase_mb"),
            "peak_memory_vs_grpo": mem[name]["peak_mb"] / mem["grpo"]["peak_mb"],
            "update_memory_vs_grpo": mem[name]["increase_mb"] / max(mem["grpo"]["increase_mb"], 1e-9),
            "in_use_vs_grpo": (mem[name]["peak_in_use_mb"] / mem["grpo"]["peak_in_use_mb"]
                               if mem[name].get("peak_in_use_mb") and mem["grpo"].get("peak_in_use_mb") else None),
            "supervised": t["supervised"], "sections": sections, "section_memory": mem[name].get("sections", {})}
    summary = {
        "model": args.model, "device": mem["grpo"]["device"],
        "batch": f"{args.tasks} tasks x {args.group} rollouts, {mem['grpo']['sequence_tokens']} sequence tokens, "
                 f"{mem['grpo']['tokens']} sampled",
        "reps": args.reps, "threads": args.threads, "rollout_seconds_median": roll, "algorithms": rows,
        "allocator": mem["grpo"].get("allocator"),
        "orders": timing["orders"], "load_1min_per_round": timing["load_1min"], "load_average": os.getloadavg(),
        "timing": timing, "memory": mem}
    if "lopd" in rows:
        lo, lt = rows["lopd"], algos["lopd"]
        summary.update(time_ratio_median=lo["vs_grpo"]["median"], step_ratio_median=lo["whole_step_vs_grpo"],
                       time_ratio_min=min(lt["times"]) / min(g["times"]),
                       cpu_time_ratio_median=lo["cpu_vs_grpo"]["median"],
                       peak_memory_ratio=lo["peak_memory_vs_grpo"], update_memory_ratio=lo["update_memory_vs_grpo"],
                       lopd_sections_median={k: v["wall"] for k, v in lo["sections"].items()})
    return summary


def print_summary(summary: dict) -> None:
    """The table of every algorithm against GRPO, then the split of each update by section."""
    def f(d, spec=".2f"):
        return f"{d['median']:{spec}} ({d['min']:{spec}}-{d['max']:{spec}})"
    rows = summary["algorithms"]
    print(f"model {summary['model']} on {summary['device']}; batch: {summary['batch']}; {summary['reps']} timed "
          f"round(s) after a warm-up, algorithms in rotating order; median (min-max); ratios per round against GRPO")
    def mb(x, spec="8.0f"):
        width = spec.split(".")[0]
        return format(x, spec) if x is not None else format("n/a", f">{width}" if width else "")
    cpu = summary["device"].startswith("cpu")
    resident, in_use = ("RSS", "in use") if cpu else ("reserved", "allocated")
    print(f"memory: peak MB of the update, {resident} beside {in_use} "
          + ("(glibc mallinfo2: uordblks + hblkhd)" if cpu else "(torch.cuda max memory reserved / allocated)")
          + f", +MB over the start of the update; each algorithm alone in a process; allocator: {summary.get('allocator')}")
    print(f"{'algo':9s} {'update s':>20s} {'vs GRPO':>19s} {'CPU vs GRPO':>19s} {'step vs GRPO':>12s} "
          f"{resident + ' MB':>9s} {'vs GRPO':>7s} {'+MB':>6s} {in_use + ' MB':>13s} {'vs GRPO':>7s} {'+MB':>6s} "
          f"{'supervised':>10s}")
    for name, r in rows.items():
        vs_in_use = f"{r['in_use_vs_grpo']:6.2f}x" if r.get("in_use_vs_grpo") is not None else f"{'n/a':>7s}"
        print(f"{name:9s} {f(r['update_s']):>20s} {f(r['vs_grpo']) + 'x':>19s} {f(r['cpu_vs_grpo']) + 'x':>19s} "
              f"{r['whole_step_vs_grpo']:11.2f}x {r['peak_mb']:9.0f} {r['peak_memory_vs_grpo']:6.2f}x "
              f"{r['increase_mb']:6.0f} {mb(r.get('peak_in_use_mb'), '13.0f')} {vs_in_use} "
              f"{mb(r.get('in_use_increase_mb'), '6.0f')} {r['supervised']:10.0%}")
    print(f"rollout of the batch (HF generate, student LoRA): {summary['rollout_seconds_median']:.2f} s median; whole "
          f"step = that rollout + the update; load 1-min per round {summary['load_1min_per_round']}, now "
          + " ".join(f"{x:.1f}" for x in summary["load_average"]))
    names = list(rows)
    sections = list(dict.fromkeys(k for r in rows.values() for k in r["sections"]))
    print("update by section, median wall s (CPU s, thousand minor page faults):")
    print(f"  {'section':30s} " + " ".join(f"{n:>22s}" for n in names))
    for k in sections:
        cells = []
        for n in names:
            v = rows[n]["sections"].get(k)
            cells.append(f"{v['wall']:.2f} ({v['cpu']:.2f}, {v['faults'] / 1000:.0f}k)" if v else "")
        print(f"  {k:30s} " + " ".join(f"{c:>22s}" for c in cells))
    print(f"update by section, peak MB {resident} / {in_use} (the memory workers' updates):")
    print(f"  {'section':30s} " + " ".join(f"{n:>22s}" for n in names))
    for k in list(dict.fromkeys(k for r in rows.values() for k in r.get("section_memory", {}))):
        cells = []
        for n in names:
            v = rows[n].get("section_memory", {}).get(k)
            cells.append(f"{mb(v['resident_mb'], '.0f')} / {mb(v['in_use_mb'], '.0f')}" if v else "")
        print(f"  {k:30s} " + " ".join(f"{c:>22s}" for c in cells))
    if summary.get("explain"):
        print_explain(summary["explain"])
    print(f"benchmark wall time {summary['benchmark_wall_seconds']:.0f} s; command: {summary['command']}")


if __name__ == "__main__":
    sys.exit(main())

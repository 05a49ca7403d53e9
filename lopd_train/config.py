"""One typed configuration for ``lopd-train`` and ``lopd-eval``: dataclass sections, parsed by transformers'
``HfArgumentParser`` (flags, ``--help`` grouped by section, choices from ``Literal`` types), with a TOML or
JSON file (``--config``) under the flags.

Why one tree: the two commands used to read settings differently (comma strings here, lists there; a TOML list
crashed one, a string silently became a set of characters in the other; a misspelt algorithm failed only after
the model had loaded). Now:

* every setting is a field of a section below, with its help text; ``TrainConfig`` (here) is the union of the
  training sections, ``EvalConfig`` (``lopd_train/evaluation``) of the evaluation ones;
* lists are written the same way everywhere: several values after the flag (``--tasks simple_0 simple_1``) or a
  TOML array (``tasks = ["simple_0", "simple_1"]``); a comma-separated string is still read, so older configs
  parse unchanged;
* choices (``Literal`` fields) are checked when the config is built, from flags, a file or Python, before any
  model or data is loaded, and a bad value names the accepted ones;
* precedence: a resumed run's saved ``config.json``, then ``--config FILE``, then the flags.

Which section a training setting lives in, and how code reads it (a test holds lopd_train and the benchmarks
to it):

* a setting every run reads, whatever its algorithm (the env, the model, the optimiser, sampling, held-out
  evaluation, logging, engines), lives in a shared section and is read flat: ``cfg.lr``, ``cfg.temperature``;
* a setting only some algorithms read lives in a section of its own (:data:`VIEWS`) and is read through that
  section's view, never flat: one algorithm's own (``cfg.lopd.margin``, ``cfg.grpo.clip_low``,
  ``cfg.baselines.teacher``), or what several share: the experience bank and its retrieval
  (``cfg.experience.top_j``: LOPD and the baselines that read a bank) and the top-M reverse KL (``cfg.kl.top_m``:
  LOPD and the baselines' ``topk`` loss). A misplaced read is an ``AttributeError``, not a silent one.

The sections are only a grouping: the fields stay flat on ``TrainConfig``, so flags (``--margin``), file keys
(``margin = 0.1``), ``TrainConfig(margin=0.1)`` and a run's saved ``config.json`` name them as they always did.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lopd_envs.chat import TextTools
from lopd_envs.options import check_choice
from lopd_train import textforms, tracking
from lopd_train.sampling import Sampling

DEFAULT_MODEL = "smollm2-135m-instruct"  # lopd_train.models.DEFAULT_MODEL (not imported: it pulls in torch)
AlgorithmName = Literal["lopd", "grpo", "opsd", "sdpo", "sdft", "skill_sd", "vanilla"]  # lopd_train.algorithms.ALGORITHMS
ALGORITHM_NAMES: tuple[str, ...] = typing.get_args(AlgorithmName)
LIST_HELP = "; several: values after the flag, or a TOML list"


def knob(default: Any, help: str, **kw: Any):
    """A setting: its default and help text; ``kw`` go to argparse (``HfArgumentParser`` passes metadata on)."""
    return field(default=default, metadata={"help": help, **kw})


def listed(default: Any, help: str):
    """A list setting, held as a list: several values on the command line, a list or a comma-separated string in
    a file (:func:`normalise` reads the string once). A string default (``"all-linear"``) is a keyword that
    stands alone instead of a list."""
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help + LIST_HELP, "nargs": "+"})
    return knob(default, help + LIST_HELP, nargs="+")


def table(help: str):
    """A table setting (``gym.make`` arguments ...), held as a dict: JSON text on the command line or in an
    older file, a table in a TOML file."""
    return field(default_factory=dict, metadata={"help": help})


@typing.dataclass_transform(field_specifiers=(dataclasses.field,))
def section(group: str):
    """A section of settings: a dataclass whose fields ``--help`` lists under ``group`` (transformers'
    ``HfArgumentParser`` reads it from ``_argument_group_name``)."""

    def make(cls):
        cls._argument_group_name = group
        return dataclass(cls)

    return make


@section('env')
class EnvSection:
    """What to train on: the lopd env, its categories and tasks."""

    env: str = knob("lopd/BFCLv3-v0", "gymnasium id of the lopd env to train on")
    category: list[str] = listed(["simple"], "benchmark category (or 'all')")
    data_dir: str | None = knob(None, "benchmark data folder (default: $LOPD_DATA_DIR, then the cache)")
    env_kwargs: dict[str, Any] = table("extra gym.make keyword arguments, as a JSON object")
    max_turns: int | None = knob(None, "turn limit per episode (default: the benchmark's own)")
    tasks: list[str] | None = listed(None, "task ids to train on (default: every task of the categories)")


@section('model')
class ModelSection:
    """The policy: the backbone and the student's LoRA adapter."""

    model: str = knob(DEFAULT_MODEL, "model: 'smollm2-135m-instruct', 'tiny-random', a .gguf file, a folder "
                                            "or a Hugging Face id")
    device: str = knob("auto", "torch device ('auto': cuda when available, else cpu)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = knob(
        "auto", "weights dtype: auto (bf16 on GPUs, fp32 on CPU), float32, bfloat16")
    lora_r: int = knob(16, "LoRA rank of the student adapter")
    lora_alpha: int = knob(32, "LoRA alpha of the student adapter")
    lora_targets: list[str] | str = listed("all-linear", "LoRA target modules ('all-linear' or module names)")
    gradient_checkpointing: bool = knob(False, "recompute activations in backward (less memory, more time)")
    share_prompt: bool = knob(True, "score a group's shared prompt once and reuse its key/value cache for every "
                                    "rollout of the group (exact; off with gradient checkpointing)")
    score_batch: int = knob(8, "rollouts (whole groups) scored in one student pass, so that the prompts' common "
                               "prefix (system prompt, tools, demonstrations) runs once for all of them (exact); "
                               "lower it if memory runs out, 1 scores one group at a time")


@section('algorithm')
class AlgorithmSection:
    """The algorithm and its optimiser."""

    algo: AlgorithmName = knob(
        "lopd", "algorithm: lopd, grpo, opsd, sdpo, sdft, skill_sd or vanilla (see the list below)")
    steps: int = knob(10, "training steps (one rollout batch and one update each)")
    tasks_per_step: int = knob(4, "distinct tasks per step")
    group_size: int = knob(2, "rollouts per task (a GRPO group)")
    lr: float = knob(1e-4, "student learning rate (AdamW; the reference fine-tunes all weights at 1e-5, a LoRA "
                           "student needs a larger step: see benchmarks/trainer_step.py --sweep)")
    weight_decay: float = knob(0.0, "student weight decay")
    max_grad_norm: float = knob(1.0, "gradient clipping norm (student and composer separately)")
    minibatches: int = knob(1, "optimiser steps per rollout batch (trajectories split round-robin)")


@section('sampling')
class SamplingSection:
    """How training rollouts are sampled."""

    max_new_tokens: int = knob(128, "tokens generated per turn at most")
    temperature: float = knob(0.7, "sampling temperature of training rollouts (the authors' LOPD: 0.7)")
    top_k: int = knob(20, "sample among the top-k tokens only (the authors': 20; 0: all). The recorded log-probs are "
                          "the untruncated policy's")
    top_p: float = knob(0.95, "nucleus sampling mass (the authors': 0.95; 1: all)")
    max_sequence_tokens: int = knob(2048, "an episode stops (unscored) when its token sequence would exceed this")
    tool_syntax: Literal["hermes", "python"] = knob(
        "hermes", "tool-call syntax asked for in the system prompt: hermes or python")
    tool_prompt: Literal["auto", "always", "never"] = knob(
        "auto", "list the tools in our system prompt when the chat template ignores tools=: "
                                    "auto (unless the env's prompt already lists them), always, never")


@section('experience bank (lopd, and the baselines that read one)')
class ExperienceSection:
    """The experience bank and its retrieval: shared by LOPD and the baselines that read a bank (SDPO, SDFT and
    Skill-SD; OPSD and the others under ``--baseline-semantics v2`` too)."""

    top_j: int = knob(3, "J: experiences retrieved per task (skill_sd: skills)")
    experience_tokens: int = knob(256, "an experience is cut to its last this-many tokens for the encoder")
    experience_format: Literal["chat", "trace"] = knob(
        "chat", "how the encoder reads an experience: chat (its full chat transcript, "
                                          "the authors' rendering) or trace (our compact action-result trace)")
    bank_mode: Literal["reference", "dynamic"] = knob(
        "reference", "experience bank: reference (the authors' semantics: a fixed bank built before "
                                       "training by sampling the base model --bank-samples times on each training "
                                       "task, keyed and queried by the task instruction, same-task retrieval allowed, "
                                       "never the trajectory being scored; its rollouts count in the budget) or "
                                       "dynamic (study v1: the run's own successes, keyed by their trace, the task's "
                                       "own rollouts excluded)")
    bank: str | None = knob(None, "reference mode: a bank built by `lopd bank build` (default: build one into the run "
                                  "folder at the start)")
    bank_samples: int = knob(4, "reference mode, bank built in the run: samples of the base model per training task")
    bank_keep_failures: bool = knob(False, "reference mode, bank built in the run: keep failed samples too (the "
                                           "authors' build_memory_bank.py keeps every trajectory by default)")
    init_bank: str | None = knob(None, "dynamic mode: seed the bank of a new run from a bank.sqlite or a JSONL of "
                                       "traces (Trace.to_json per line; failures are skipped)")


@section('top-M reverse KL (lopd; the baselines\' topk loss)')
class KLSection:
    """The top-M reverse KL: LOPD's distillation loss, and the baselines' ``--distill-loss topk``."""

    top_m: int = knob(20, "M: top-M tokens of the reverse KL's support (plus one tail bucket)")
    kl_support: Literal["teacher", "student"] = knob(
        "teacher", "whose top-M tokens are the KL support: teacher (the authors' code) or "
                                      "student (TRL's GKD-style variant, from the sampler's recorded top-M)")


@section('LOPD')
class LopdSection:
    """LOPD's own: the composer, the margin and its dual variable, the anchor, the cold start, the PIG metric."""

    num_latents: int = knob(32, "K: latent tokens per experience (Q-Former queries)")
    composer_lora_r: int = knob(8, "LoRA rank of the composer's encoder adapter (the reference's r=8)")
    composer_lora_alpha: int = knob(16, "LoRA alpha of the composer's encoder adapter (the reference's 16)")
    margin: float = knob(0.05, "m: the privileged margin the teacher must keep (delta >= m)")
    beta_init: float = knob(0.0, "beta_0: initial dual variable of the margin constraint")
    beta_lr: float = knob(0.5, "eta_beta: dual ascent step, beta <- max(0, beta + eta (m - mean delta))")
    anchor_coef: float = knob(0.2, "lambda: weight of the anchor (MSE of the latents to the cold-started "
                                    "composer's latents)")
    composer_weighting: Literal["sequence", "token"] = knob(
        "sequence", "how rollouts weigh in the composer loss: sequence (each the same, "
                                               "the authors' code) or token (by their number of sampled tokens)")
    anchor_norm: Literal["relative", "absolute"] = knob(
        "relative", "the anchor's scale: relative (MSE to the cold-started latents divided by their mean square, "
                    "so lambda weighs a given relative drift as the authors' anchor does on their LayerNorm "
                    "latents of RMS ~1) or absolute (the raw MSE: at the token-embedding scale of a Q-Former, "
                    "0.136 for SmolLM2, ~54x weaker; study v2)")
    composer_lr: float = knob(1e-5, "on-policy composer learning rate, encoder LoRA and compressor (the authors' "
                                    "lr_phi 1e-5; study v2 ran 1e-4)")
    composer: Literal["qformer", "perceiver"] = knob(
        "qformer", "the compressor: perceiver (the authors': a Perceiver resampler at the model's width, one "
                   "shared attention + feed-forward block applied --perceiver-depth times, LayerNorm output) or "
                   "qformer (study v2's 2-layer Q-Former of width --qformer-dim, at the embeddings' scale)")
    perceiver_depth: int = knob(8, "perceiver: times its shared block is applied (the authors' 8)")
    qformer_dim: int = knob(256, "qformer: width")
    qformer_layers: int = knob(2, "qformer: layers (self-attention, cross-attention, FFN)")
    qformer_heads: int = knob(4, "qformer: attention heads")
    cold_start_steps: int = knob(100, "cold start: composer steps (NLL of successful trajectories under the "
                                      "teacher) before on-policy training (the reference: 1000); 0 skips it")
    cold_start_batch_size: int = knob(8, "cold start: successful trajectories per step (the reference's 8)")
    cold_start_retrieval: Literal["auto", "self", "exclude"] = knob(
        "auto", "cold start: how each successful trajectory retrieves its top-J experiences: self (the authors' "
                "allow_self_retrieval: by its own instruction, its own bank row allowed, so the same task's "
                "experiences come first), exclude (its own bank row never: study v2's, where a bank of one row per "
                "task made every pair cross-task; kept as the control); auto: self with a reference bank, "
                "exclude with a dynamic one")
    cold_start_lr: float = knob(1e-5, "cold start: learning rate of the composer (the authors' 1e-5; AdamW "
                                      "weight decay 0.01 as theirs)")
    cold_start_compressor_clip: float = knob(30.0, "cold start: gradient-norm clip of the compressor (the "
                                                   "authors' 30)")
    cold_start_lora_clip: float = knob(3.0, "cold start: gradient-norm clip of the encoder LoRA (the authors' 3)")
    cold_start_save_every: int = knob(25, "cold start: checkpoint every N composer steps, so a killed run resumes "
                                          "inside its cold start (0: only when it ends)")
    cold_start_min_successes: int = knob(8, "cold start: sample rollout batches until this many successes exist "
                                            "(with the --init-bank traces)")
    cold_start_max_batches: int = knob(4, "cold start: at most this many rollout batches to find them")
    cold_start_greedy: bool = knob(False, "cold start: its rollout batches decode greedily, one rollout for each of "
                                          "tasks_per_step x group_size distinct tasks (a small model's greedy "
                                          "answer succeeds more often than its samples)")
    allow_empty_cold_start: bool = knob(False, "let a cold start that finds fewer successful pairs than "
                                               "--cold-start-min-successes, or runs 0 steps, go on (logged as "
                                               "cold_start_empty); without it the run stops and says why")
    freeze_composer: bool = knob(False, "ablation: keep the cold-started composer fixed during on-policy training "
                                        "(refused when the cold start did not train it)")
    use_margin: bool = knob(True, "use the privileged-margin constraint; --no-use-margin is --margin-ablation "
                                  "eta-zero")
    margin_ablation: Literal["none", "no-composer-phase", "eta-zero"] = knob(
        "none", "the two 'no margin' ablations: no-composer-phase (the authors' constraint.enabled=false: the "
                "composer phase is skipped, so the cold-started composer stays frozen, no margin, no anchor; "
                "the same computation as --freeze-composer) or eta-zero (study v2's --no-use-margin: beta stays "
                "0, eta = 0, and the composer keeps training on KL + anchor)")
    probe_every: int = knob(10, "LOPD: the composer's probe NLL (the teacher's NLL of a few banked successes "
                                "with the current latents: a diagnostic) every N composer steps and at the last "
                                "step; 0: only at the last step")
    beta_max: float = knob(0.0, "runaway guard: cap on the dual variable beta (0: off, the authors' semantics). With "
                                "mostly failed rollouts a growing beta lets the composer widen delta by making the "
                                "teacher rate the student's own tokens lower (study v1's lopd-m0.1-s0)")
    pig_every: int = knob(0, "every N steps, log the privileged-information gain (teacher NLL without and with its "
                             "context on held-back successful trajectories; lopd_train/latent/diagnostics.py); "
                             "0: never")
    pig_trajectories: int = knob(8, "held-back successful trajectories for the PIG metric (never in the bank)")
    pig_per_task: int = knob(1, "held-back successes per task at most (a task keeps at least one in the bank)")


@section('baselines (opsd, sdpo, sdft, skill_sd)')
class BaselinesSection:
    """The text-context self-distillation baselines: each its reference's method by default (issue 56; the
    reference and every remaining deviation are in each algorithm's module docstring and ``--help``)."""

    baseline_semantics: Literal["reference", "v2"] = knob(
        "reference", "reference: each baseline as its reference runs it (SDPO: lasgroup/SDPO 0e6d510; OPSD, SDFT: "
                     "TRL); v2: lopd's study-v2 variants (frozen-base teacher, reverse KL over the teacher's top-M "
                     "at T=1, bank and retriever contexts before the task), to reproduce those runs")
    teacher: Literal["auto", "base", "ema", "ema-factors"] = knob(
        "auto", "their teacher: auto (the reference's: SDPO ema, OPSD/SDFT/Skill-SD base; v2: base), base (the "
                "frozen backbone, LoRA off), ema (EMA of the student's effective weight W + s*BA), ema-factors "
                "(v2's EMA of the LoRA factors A and B apart, which is not the EMA of BA)")
    ema_decay: float | None = knob(None, "decay d of the EMA teacher: ema <- d*ema + (1-d)*student per optimiser step "
                                         "(default: 0.95, the references' rate 0.05; v2: 0.99)")
    distill_loss: Literal["auto", "jsd", "forward_kl", "topk", "sampled"] = knob(
        "auto", "their student loss: auto (the reference's: SDPO/SDFT jsd, OPSD forward_kl; v2: topk), jsd "
                "(alpha-divergence --distill-alpha over the student's top --distill-topk, at the sampling "
                "temperature), forward_kl (over the whole vocabulary, each entry clipped at --kl-entry-clip), topk "
                "(v2: reverse KL over --kl-support's top-M + tail at T=1) or sampled (sampled-token reverse KL)")
    distill_alpha: float = knob(0.5, "jsd: 0 forward KL, 1 reverse KL, between: generalised JSD (SDPO, SDFT: 0.5)")
    distill_topk: int = knob(100, "jsd: the student's top-k tokens the divergence runs over (SDPO, SDFT: 100)")
    distill_tail: bool | None = knob(None, "jsd: add a tail bucket with the rest of the mass (default: the "
                                           "reference's: SDPO yes, SDFT no, the top-k renormalised)")
    kl_entry_clip: float = knob(0.05, "forward_kl: clip of each vocabulary entry's term before the sum (OPSD: 0.05)")
    importance_clip: float = knob(2.0, "clip of the per-token importance ratio p_student/p_sampler (the references' "
                                       "is_clip; v2: Skill-SD only)")
    sdpo_feedback: bool = knob(True, "sdpo: give the environment's feedback on a failed rollout when its group has no "
                                     "other success (the reference's default; its tool-use runs turn it off)")
    skill_tokens: int = knob(64, "skill_sd: tokens of one greedy skill summary at most")
    skill_summariser: str = knob("student", "skill_sd: who summarises successes into skills: student (v2), base (the "
                                            "frozen backbone) or a model name or path (a separate, stronger model)")


@section('GRPO')
class GrpoSection:
    """The policy-gradient baseline."""

    grpo_kl_coef: float = knob(0.0, "GRPO: weight of the k3 KL to the reference (the base model, LoRA off); 0: none")
    clip_low: float = knob(0.2, "GRPO: lower clip of the ratio (1 - eps_low)")
    clip_high: float = knob(0.2, "GRPO: upper clip of the ratio (1 + eps_high)")
    grpo_scale_rewards: bool = knob(True, "GRPO: divide group-centred rewards by the group std")
    grpo_std: Literal["unbiased", "population"] = knob(
        "unbiased", "GRPO: the group std: unbiased (n-1, TRL's) or population (n, v2's)")
    grpo_eps: float = knob(1e-4, "GRPO: added to the group std before dividing (TRL: 1e-4; v2: 1e-6)")
    grpo_loss_type: Literal["dapo", "bnpo", "grpo", "dr_grpo"] = knob(
        "dapo", "GRPO: TRL's loss_type: dapo (TRL's default) or bnpo (token mean over the step), grpo (token mean "
                "per rollout, then mean), dr_grpo (token sum over rollouts x --max-new-tokens)")


@section('held-out evaluation')
class HeldoutSection:
    """Greedy evaluation on tasks never trained on, at fixed rollout counts (lopd_train/training/heldout.py)."""

    eval_every_rollouts: int = knob(0, "evaluate the student on the held-out tasks at rollouts 0, N, 2N, ... "
                                       "(heldout.jsonl); 0: never")
    eval_tasks: list[str] | None = listed(None, "held-out task ids (default: every task of the eval env); "
                                        "removed from the default training pool, an error in an explicit --tasks")
    eval_env_kwargs: dict[str, Any] = table("gym.make keyword arguments of the held-out env over the training "
                                            "env's, as a JSON object (e.g. {\"split\": \"eval\"} for EnvScaler)")
    eval_training_tasks: bool = knob(False, "also evaluate the student greedily on its training tasks at the same "
                                            "rollout counts (train_eval.jsonl): the reward RL optimises, beside the "
                                            "held-out reward")
    eval_batch_size: int = knob(8, "held-out episodes generated together")
    eval_start_from: str | None = knob(None, "a run folder whose points at 0 rollouts (held-out and training tasks) "
                                             "a new run takes instead of evaluating its untrained student again: "
                                             "at 0 rollouts every run's student is the backbone (a fresh LoRA adds "
                                             "exactly zero) and a greedy evaluation of named tasks ignores the "
                                             "seed. Refused when the evaluation settings or tasks differ; a source "
                                             "without that point yet leaves the run to evaluate its own")
    rollout_budget: int = knob(0, "stop once this many rollouts are spent (cold start included), even before "
                                  "--steps; 0: no limit")


@section('logging')
class LoggingSection:
    """The run folder, checkpoints, export and experiment tracking."""

    output_dir: str = knob("runs/lopd", "run folder (logs, checkpoints, bank, curve, exported student)")
    seed: int = knob(0, "seed of task sampling, generation and initialisation")
    save_every: int = knob(1, "checkpoint every N steps (and always at the end)")
    keep_checkpoints: int = knob(2, "checkpoints kept on disk")
    init_from: str | None = knob(None, "start from another run's checkpoint folder, e.g. a LOPD run's "
                                       "checkpoints/cold-start (kept after every cold start): its weights, composer, "
                                       "bank, counters and random state, then this run's own settings; its records "
                                       "up to that step are copied. Ablations that differ only after the cold start "
                                       "(margin, eta, a frozen composer) share one this way")
    export: bool = knob(True, "export the merged student at the end (plain transformers folder)")
    tensorboard: bool = knob(True, "write TensorBoard events")
    progress: bool = knob(True, "show progress bars")
    report_to: list[str] = listed(["tensorboard"], "accelerate's trackers of every metric and of the rollout tables, "
                                                   f"several at once: {', '.join(tracking.REPORT_TO)} (all: every one "
                                                   "installed; lopd_train/tracking.py)")
    push_to_hub: str | None = knob(None, "upload the exported student (weights, tokenizer, model card) to this Hugging "
                                         "Face hub model repository at the end (lopd-export does it later)")
    rollout_table_every: int = knob(0, "every N steps, log a table of that step's rollouts (prompt tail, completion, "
                                       "reward, retrieved experiences, delta, teacher-student KL); 0: never")


@section('distributed and engines')
class DistributedSection:
    """Who samples (HF or a colocated vLLM engine) and how many threads work (data-parallel ranks come from
    ``accelerate launch``)."""

    rollout_backend: Literal["hf", "vllm"] = knob(
        "hf", "who samples the rollouts: hf (transformers generate) or vllm (a colocated "
                                      "vLLM engine, pip install 'lopd[vllm]'; the LoRA is synced after each update)")
    vllm_gpu_memory_utilization: float = knob(0.3, "vllm: the engine's share of the GPU memory (the trainer's "
                                                   "update keeps the rest)")
    vllm_sleep_mode: bool = knob(False, "vllm: the engine sleeps between rollout batches (weights offloaded, KV "
                                        "cache freed) so the update has the GPU")
    env_workers: int = knob(8, "threads stepping envs in parallel")
    threads: int = knob(0, "torch CPU threads (0: torch's default)")


TRAIN_SECTIONS = (EnvSection, ModelSection, AlgorithmSection, SamplingSection, ExperienceSection, KLSection,
                  LopdSection, BaselinesSection, GrpoSection, HeldoutSection, LoggingSection, DistributedSection)

class SectionView:
    """One section's settings read (and set) through a config's flat fields: ``cfg.lopd.margin`` is
    ``cfg.margin``. Flags, file keys and saved run configs stay flat and unchanged; an algorithm reads its
    sections through their views, and a name from another section is an ``AttributeError``, not a silent read."""

    __slots__ = ("_cfg", "_names", "_section")

    def __init__(self, cfg: Any, section: type) -> None:
        object.__setattr__(self, "_cfg", cfg)
        object.__setattr__(self, "_section", section)
        object.__setattr__(self, "_names", frozenset(f.name for f in dataclasses.fields(section)))

    def __getattr__(self, name: str) -> Any:
        if name in self._names:
            return getattr(self._cfg, name)
        raise AttributeError(f"{self._section.__name__} has no setting {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in self._names:
            raise AttributeError(f"{self._section.__name__} has no setting {name!r}")
        setattr(self._cfg, name, value)

    def __repr__(self) -> str:
        return f"{self._section.__name__}({', '.join(f'{n}={getattr(self._cfg, n)!r}' for n in sorted(self._names))})"


Section = typing.TypeVar("Section")


class View(typing.Generic[Section]):
    """A class attribute of a config: ``cfg.<name>`` is the :class:`SectionView` of ``section`` over ``cfg``,
    typed as the section for readers and checkers."""

    def __init__(self, section: type[Section]) -> None:
        self.section = section

    def __get__(self, cfg: Any, owner: type | None = None) -> Section:
        return typing.cast(Section, self if cfg is None else SectionView(cfg, self.section))


@dataclass
class TrainConfig(DistributedSection, LoggingSection, HeldoutSection, GrpoSection, BaselinesSection, LopdSection,
                  KLSection, ExperienceSection, SamplingSection, AlgorithmSection, ModelSection, EnvSection):
    """Every setting of a training run: the union of the sections above (where each field, its default and help
    text live), checked when it is built."""

    # the views of the sections that not every algorithm reads (VIEWS)
    experience = View(ExperienceSection)
    kl = View(KLSection)
    lopd = View(LopdSection)
    baselines = View(BaselinesSection)
    grpo = View(GrpoSection)

    @property
    def text_tools(self) -> TextTools:
        """How the prompt tells a model about its tools (one value for the sampler, the teacher and replays)."""
        return TextTools(self.tool_syntax, self.tool_prompt)

    def sampling(self, records_top_m: bool = False) -> Sampling:
        return Sampling(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_k=self.top_k,
                        top_p=self.top_p, max_sequence_tokens=self.max_sequence_tokens, tool_syntax=self.tool_syntax,
                        tool_prompt=self.tool_prompt, top_m=self.kl.top_m if records_top_m else 0)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def __post_init__(self) -> None:
        normalise(self)
        check_values(self)  # choices and types, from flags, a file or Python alike
        tracking.parse_report_to(self.report_to)
        if self.push_to_hub and not self.export:
            raise ValueError("--push-to-hub uploads the exported student: it needs --export")
        lopd = self.lopd
        if lopd.margin_ablation == "none" and not lopd.use_margin:
            lopd.margin_ablation = "eta-zero"
        if lopd.margin_ablation == "eta-zero":
            lopd.use_margin = False
        elif lopd.margin_ablation == "no-composer-phase":
            lopd.freeze_composer, lopd.use_margin = True, False
        if lopd.cold_start_retrieval == "auto":
            lopd.cold_start_retrieval = "self" if self.experience.bank_mode == "reference" else "exclude"
        if lopd.freeze_composer and lopd.cold_start_steps <= 0:
            raise ValueError("--freeze-composer keeps the cold-started composer fixed, but --cold-start-steps is 0: "
                             "the composer would stay at its random initialisation")
        if self.eval_start_from and self.init_from:
            raise ValueError("--eval-start-from and --init-from: a run started from another run's checkpoint "
                             "already copies that run's evaluation points")
        if self.experience.bank_samples < 1:
            raise ValueError("--bank-samples must be at least 1")


#: the sections that not every algorithm reads, each by the name of its view on a ``TrainConfig``
#: (``cfg.lopd.margin``): their settings are read through the view, never flat (see the module docstring)
VIEWS: dict[str, type] = {name: v.section for name, v in vars(TrainConfig).items() if isinstance(v, View)}


# ------------------------------------------------------------------------------------------ lopd-eval


@section("model")
class EvalModelSection:
    """What is scored: a checkpoint, a run, or a served model."""

    model: str = knob("", "HF id or folder, LoRA adapter folder, .gguf, the smollm2-135m-instruct alias, or a "
                          "lopd-train run folder (its student/ or latest checkpoint); with --backend openai: the "
                          "served model name (required)")
    adapter: str | None = knob(None, "a LoRA adapter folder to apply (vllm: through LoRARequest; hf: merged)")
    device: str = knob("auto", "torch device (hf)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = knob("auto", "weights dtype (hf, vllm)")


@section("env")
class EvalEnvSection:
    """The envs and tasks scored."""

    env: list[str] = knob(None, "env ids (lopd/BFCLv3-v0 ...): --env A B, or --env A --env B, or a TOML list",
                          action="extend")
    category: list[str] = listed(["all"], "benchmark category (or 'all')")
    language: str | None = knob(None, "benchmark language where the env has several (ACEBench: en, zh)")
    data_dir: str | None = knob(None, "benchmark data folder")
    env_kwargs: dict[str, Any] = knob(None, "gym.make keyword arguments (JSON): for every env, or per env under "
                                            "its id ({\"lopd/EnvScaler-v0\": {\"source\": \"ours\"}})")
    limit: int | None = knob(None, "first N tasks per env (the benchmark's order)")
    tasks: list[str] | None = knob(None, "task ids to score (several: values after the flag, or a TOML list)")


@section("sampling")
class EvalSamplingSection:
    """How answers are generated."""

    samples: int = knob(1, "samples per task (pass@k with evalplus's unbiased estimator); needs --temperature")
    temperature: float = knob(0.0, "sampling temperature (0: greedy)")
    max_new_tokens: int = knob(256, "tokens per turn at most")
    max_sequence_tokens: int = knob(4096, "episode token budget (hf, vllm)")
    batch_size: int = knob(8, "episodes in lockstep: one batched generate, or that many concurrent requests")
    tool_syntax: Literal["hermes", "python"] = knob("hermes", "tool-call syntax asked for in the text tool prompt")
    tool_prompt: Literal["auto", "always", "never"] = knob(
        "auto", "list the tools in our system prompt: auto (unless the env's prompt lists them), always, never")
    seed: int = knob(0, "base seed (each task and sample gets its own)")


@section("backend")
class EvalBackendSection:
    """Who generates: transformers, vLLM, or an OpenAI-compatible server."""

    backend: Literal["hf", "vllm", "openai"] = knob("hf", "generation backend")
    base_url: str | None = knob(None, "OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (--backend openai)")
    api_key_env: str | None = knob(None, "environment variable holding the server's API key")
    served_model: str | None = knob(None, "model name to send to the server (default: --model)")
    concurrency: int = knob(8, "concurrent requests (openai)")
    request_timeout: float = knob(120.0, "seconds one request may take in all, retries, headers and the whole reply included (openai); replies over 4 MiB are refused")
    max_retries: int = knob(5, "retries with exponential backoff (openai, the SDK's)")
    request_extra: dict[str, Any] = knob(None, "extra JSON fields of every request (openai), e.g. "
                                               "{\"repeat_penalty\": 1.0} for llama.cpp")
    tool_mode: Literal["auto", "native", "text"] = knob("auto", "openai: native tools=, our text tool prompt, or auto "
                                                                 "(native; a request whose tools are refused is sent "
                                                                 "again as text, counted in results.json)")


@section("output")
class EvalOutputSection:
    """Where results go."""

    output: str = knob("eval", "output folder (records.jsonl, results.json, results.md, results.png)")
    resume: bool = knob(False, "skip records already in --output/records.jsonl (same settings)")
    progress: bool = knob(True, "show a progress bar")
    report_to: list[str] = listed(["none"], "trackers of the results and a table of the episodes, as lopd-train's "
                                    f"--report-to (accelerate's, need torch): {', '.join(tracking.REPORT_TO)}, "
                                    "several at once (lopd_train/evaluation/tracking.py)")


EVAL_SECTIONS = (EvalModelSection, EvalEnvSection, EvalSamplingSection, EvalBackendSection, EvalOutputSection)


# ------------------------------------------------------------------------------------------ the machinery


@dataclass(frozen=True)
class Range:
    """The values a numeric setting accepts: between ``low`` and ``high`` (None: unbounded), each end included
    unless ``open_low``/``open_high``; floats must also be finite."""

    low: float | None = None
    high: float | None = None
    open_low: bool = False
    open_high: bool = False

    def holds(self, v: float) -> bool:
        if isinstance(v, float) and not math.isfinite(v):
            return False
        if self.low is not None and (v <= self.low if self.open_low else v < self.low):
            return False
        return self.high is None or (v < self.high if self.open_high else v <= self.high)

    def __str__(self) -> str:
        def num(x: float) -> str:
            return str(int(x)) if float(x).is_integer() else repr(x)

        lo = None if self.low is None else f"{'above' if self.open_low else 'at least'} {num(self.low)}"
        hi = None if self.high is None else f"{'below' if self.open_high else 'at most'} {num(self.high)}"
        return " and ".join(x for x in (lo, hi) if x) or "a finite number"


AT_LEAST_1, AT_LEAST_0, POSITIVE = Range(1), Range(0), Range(0, open_low=True)
FRACTION = Range(0, 1)  # a probability or share, both ends included
#: the range of every numeric setting of both commands (a test checks none is missing): refused when the config
#: is built, before any model or data loads, naming the setting, the value and the range
RANGES: dict[str, Range] = {
    # lopd-train
    "max_turns": AT_LEAST_1, "lora_r": AT_LEAST_1, "lora_alpha": POSITIVE, "composer_lora_r": AT_LEAST_1,
    "composer_lora_alpha": POSITIVE, "score_batch": AT_LEAST_1, "steps": AT_LEAST_0, "tasks_per_step": AT_LEAST_1,
    "group_size": AT_LEAST_1, "lr": POSITIVE, "weight_decay": AT_LEAST_0, "max_grad_norm": POSITIVE,
    "minibatches": AT_LEAST_1, "max_new_tokens": AT_LEAST_1, "temperature": AT_LEAST_0, "top_k": AT_LEAST_0,
    "top_p": Range(0, 1, open_low=True), "max_sequence_tokens": AT_LEAST_1, "top_j": AT_LEAST_1,
    "num_latents": AT_LEAST_1, "top_m": AT_LEAST_1, "margin": Range(), "beta_init": AT_LEAST_0,
    "beta_lr": AT_LEAST_0, "anchor_coef": AT_LEAST_0, "composer_lr": POSITIVE, "perceiver_depth": AT_LEAST_1,
    "qformer_dim": AT_LEAST_1, "qformer_layers": AT_LEAST_1, "qformer_heads": AT_LEAST_1,
    "experience_tokens": AT_LEAST_1, "bank_samples": AT_LEAST_1, "cold_start_steps": AT_LEAST_0,
    "cold_start_batch_size": AT_LEAST_1, "cold_start_lr": POSITIVE, "cold_start_compressor_clip": POSITIVE,
    "cold_start_lora_clip": POSITIVE, "cold_start_save_every": AT_LEAST_0, "cold_start_min_successes": AT_LEAST_0,
    "cold_start_max_batches": AT_LEAST_0, "probe_every": AT_LEAST_0, "beta_max": AT_LEAST_0,
    "pig_every": AT_LEAST_0, "pig_trajectories": AT_LEAST_0, "pig_per_task": AT_LEAST_1, "ema_decay": FRACTION,
    "skill_tokens": AT_LEAST_1, "importance_clip": POSITIVE, "grpo_kl_coef": AT_LEAST_0,
    "distill_alpha": FRACTION, "distill_topk": AT_LEAST_1, "kl_entry_clip": POSITIVE, "grpo_eps": POSITIVE,
    "clip_low": Range(0, 1, open_high=True), "clip_high": AT_LEAST_0, "eval_every_rollouts": AT_LEAST_0,
    "eval_batch_size": AT_LEAST_1, "rollout_budget": AT_LEAST_0, "seed": Range(0, 2**32 - 1),
    "save_every": AT_LEAST_1, "keep_checkpoints": AT_LEAST_1, "rollout_table_every": AT_LEAST_0,
    "vllm_gpu_memory_utilization": Range(0, 1, open_low=True), "env_workers": AT_LEAST_1, "threads": AT_LEAST_0,
    # lopd-eval
    "limit": AT_LEAST_1, "samples": AT_LEAST_1, "batch_size": AT_LEAST_1, "concurrency": AT_LEAST_1,
    "request_timeout": POSITIVE, "max_retries": AT_LEAST_0,
}


def check_range(name: str, v: Any) -> None:
    """Refuse a numeric setting outside its :data:`RANGES` entry, naming the setting, the value and the range."""
    rng = RANGES.get(name)
    if rng is not None and v is not None and not isinstance(v, bool) and not rng.holds(v):
        finite = "" if not isinstance(v, float) or math.isfinite(v) else ", a finite number"
        raise ValueError(f"{name} = {v!r} is out of range: it must be {rng}{finite}")


def field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _is_list(typ: Any) -> bool:
    """``list[...]`` or ``list[...] | None``."""
    return typing.get_origin(typ) is list or any(typing.get_origin(t) is list for t in typing.get_args(typ))


def _is_table(typ: Any) -> bool:
    """``dict[...]`` or ``dict[...] | None``."""
    return typing.get_origin(typ) is dict or any(typing.get_origin(t) is dict for t in typing.get_args(typ))


def _held(f: dataclasses.Field, typ: Any, v: Any) -> Any:
    """A setting's value in the form the config holds it: a list setting as a list (a comma-separated string
    split; a string keyword default such as ``"all-linear"`` kept alone; None kept: the setting's default
    meaning), a table setting as a dict (JSON text loaded and checked; None: {}); anything else as it is."""
    if _is_list(typ):
        if v is None and f.metadata.get("action") != "extend":
            return None
        items = textforms.as_list(v)
        keyword = f.default if isinstance(f.default, str) else None
        return keyword if keyword is not None and items in ([], [keyword]) else items
    if _is_table(typ):
        return textforms.as_table(v, f.name)
    return v


def normalise(obj: Any) -> None:
    """In place, once, when a config is built: every list and table setting in its held form (:func:`_held`),
    however it was written (flags, a TOML list or table, a comma string or JSON text of an older file)."""
    types = field_types(type(obj))
    for f in dataclasses.fields(obj):
        setattr(obj, f.name, _held(f, types[f.name], getattr(obj, f.name)))


def normalised_settings(cls: type, settings: dict[str, Any]) -> dict[str, Any]:
    """A saved settings dict (a run folder's ``config.json`` or ``run.json``, perhaps of an older lopd with
    comma strings and JSON text) with its list and table settings in the form ``cls`` holds them, so two runs'
    settings compare equal whatever form each was saved in. Unknown keys and unreadable text are kept as they
    are."""
    types, fields = field_types(cls), {f.name: f for f in dataclasses.fields(cls)}
    out = dict(settings)
    for key, v in settings.items():
        if key in fields:
            try:
                out[key] = _held(fields[key], types[key], v)
            except ValueError:
                pass  # compared as saved
    return out


def check_values(obj: Any) -> None:
    """Every ``Literal`` setting holds one of its values, and numbers, flags and text have their types (a value
    from a file is not converted by argparse) and their ranges (:data:`RANGES`): a ``ValueError`` naming the
    setting and what it accepts."""
    for name, typ in field_types(type(obj)).items():
        v = getattr(obj, name)
        options = typing.get_args(typ) if typing.get_origin(typ) is Literal else None
        if options is not None:
            check_choice(name, v, options)
            continue
        members = typing.get_args(typ) if typing.get_origin(typ) in (typing.Union, types.UnionType) else (typ,)
        if not all(t in (int, float, bool, str, type(None)) for t in members):
            continue  # lists and dicts: normalised, not type-checked here
        allowed = tuple(members)
        if float in allowed and int not in allowed:
            allowed += (int,)
        if not isinstance(v, allowed) or (isinstance(v, bool) and bool not in allowed):
            raise ValueError(f"{name} must be {' or '.join(t.__name__ for t in allowed)}, got {v!r}")
        check_range(name, v)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """The epilog's examples kept as written; each option's default after its help, unless the help already
    says what the default is or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, "", argparse.SUPPRESS) or not action.option_strings:
            return text
        return text + " (default: %(default)s)"


def build_parser(sections: Sequence[type], prog: str, description: str, epilog: str = ""):
    """The command's parser: one group per section (``--help`` grouped), every field a flag
    (``--name``/``--na-me``), choices from ``Literal`` types."""
    from transformers import HfArgumentParser
    from transformers.hf_argparser import DataClassType

    tables = {name for cls in sections for name, typ in field_types(cls).items() if _is_table(typ)}
    parser = HfArgumentParser([DataClassType(cls) for cls in sections], prog=prog, description=description, epilog=epilog,
                              formatter_class=HelpFormatter, usage=f"{prog} [--config FILE] [options]")
    for action in parser._actions:
        if action.dest in tables:  # JSON text on the command line, read (and refused, said why) by normalise
            action.type = str
        # the dashed spelling first (--max-new-tokens); the underscored one still works
        action.option_strings = sorted(action.option_strings, key=lambda o: ("_" in o, o.startswith("--no_")))
    parser.add_argument("--config", metavar="FILE", help="TOML or JSON file of settings (keys: the option names); "
                                                         "flags override it")
    return parser


def _given(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """Only the flags present in ``argv`` (every default suppressed), so that a file's values stay unless a flag
    names them."""
    saved = {a.dest: a.default for a in parser._actions}
    try:
        for action in parser._actions:
            if action.dest != "help":
                action.default = argparse.SUPPRESS
        return parser.parse_args(argv)
    finally:
        for action in parser._actions:
            action.default = saved[action.dest]


def load_settings(path: str | Path, cls: type) -> dict[str, Any]:
    """A TOML or JSON settings file; keys are field names (dashes read as underscores). An unknown key is an
    error naming it and the closest known one."""
    import difflib

    text = Path(path).read_text()
    if str(path).endswith(".json"):
        data = json.loads(text)
    else:
        import tomllib

        data = tomllib.loads(text)
    known = [f.name for f in dataclasses.fields(cls)]
    out = {}
    for k, v in data.items():
        key = k.replace("-", "_")
        if key not in known:
            close = difflib.get_close_matches(key, known, n=1)
            raise ValueError(f"{path}: unknown setting {k!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        out[key] = v
    return out


def parse(cls: type, parser: argparse.ArgumentParser, argv: Sequence[str] | None,
          base: dict[str, Any] | None = None) -> tuple[Any, argparse.Namespace]:
    """``cls`` from ``base`` (e.g. a resumed run's saved settings), then ``--config``, then the flags given;
    returns it (checked by its ``__post_init__``) and the namespace of everything parsed."""
    full = parser.parse_args(argv)  # --help, and argparse's own errors (unknown flags, bad choices), first
    given = vars(_given(parser, argv))
    names = {f.name for f in dataclasses.fields(cls)}
    values = dict(base or {})
    if full.config:
        values.update(load_settings(full.config, cls))
    values.update({k: v for k, v in given.items() if k in names})
    return cls(**{k: v for k, v in values.items() if k in names}), full

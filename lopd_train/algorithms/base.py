"""What every algorithm shares: the student, its optimiser, per-trajectory micro-batches, token-mean
normalisation over the whole batch, gradient clipping, and the state that goes into a checkpoint."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lopd_train import models
from lopd_train.distributed import LOCAL
from lopd_train.latent.context import context_prompt
from lopd_train.rollout.engine import Trajectory


@dataclass
class Batch:
    trajectories: list[Trajectory]

    @property
    def n_tokens(self) -> int:
        return max(1, sum(t.n_actions for t in self.trajectories))

    def groups_of(self) -> list[list[Trajectory]]:
        """The trajectories of each task (GRPO group), in order of first appearance."""
        out: dict[int, list[Trajectory]] = {}
        for t in self.trajectories:
            out.setdefault(t.group, []).append(t)
        return list(out.values())

    def rewards(self) -> torch.Tensor:
        return torch.tensor([t.reward for t in self.trajectories], dtype=torch.float32)

    def groups(self) -> torch.Tensor:
        return torch.tensor([t.group for t in self.trajectories], dtype=torch.long)


def sequence_tensors(t: Trajectory, device: torch.device):
    """``input_ids``, ``action_mask``, and the sampled tokens with their sampler log-probs."""
    ids = torch.tensor(t.input_ids, dtype=torch.long, device=device)
    mask = torch.tensor(t.action_mask, dtype=torch.long, device=device)
    sel = mask.bool()
    old = torch.tensor(t.sample_logprobs, dtype=torch.float32, device=device)[sel]
    return ids, mask, ids[sel], old


class Algorithm:
    """Base: a student LoRA trained from on-policy trajectories. Subclasses implement :meth:`update`.

    What the trainer needs to know about an algorithm is declared here, as class attributes (and class methods
    of the run's settings), so the loop never asks which algorithm it runs:"""

    name = ""
    #: one line for ``lopd-train --help``: what this algorithm's teacher sees
    teacher_sees = ""
    #: needs the experience bank and the retriever
    uses_bank = False
    #: runs a cold-start phase (:meth:`cold_start`) before on-policy training
    has_cold_start = False
    #: scalar attributes written into each checkpoint's ``state.json`` (for people reading a run folder)
    state_fields: tuple[str, ...] = ()
    student_adapter = "student"

    def __init__(self, policy, tokenizer, cfg, bank=None, retriever=None):
        self.policy = policy
        self.tokenizer = tokenizer
        self.cfg = cfg
        self.bank = bank
        self.retriever = retriever
        self.device = next(policy.parameters()).device
        self.student_params = models.adapter_parameters(policy, self.student_adapter)
        self.student_opt = torch.optim.AdamW(self.student_params, lr=cfg.lr, weight_decay=cfg.weight_decay,
                                             betas=(0.9, 0.99))
        self.skipped_steps = 0  # optimiser steps skipped for a non-finite gradient norm
        self.dist = LOCAL  # the trainer's data-parallel ranks (lopd_train.distributed), one process by default
        self._tasks: dict[str, Any] = {}
        self._env = None

    def attach_env(self, env, run_dir=None) -> None:
        """The env the rollouts come from, for algorithms that read a task's privileged data
        (:meth:`reference_answer`) or replay traces in it (LOPD's PIG metric), and the run folder (where a
        built bank's held-back successes are). Every algorithm is given them; most never look."""
        self.env = env
        self.run_dir = run_dir
        self._env = getattr(env, "unwrapped", env)
        self._tasks = {t.task_id: t for t in getattr(self._env, "tasks", None) or []}

    def reference_answer(self, task_id: str) -> str | None:
        """The task's reference answer as text, from the suite's ``reference_answer(task)`` hook (gold calls,
        the canonical solution, a scripted solution); ``None`` where the suite has none for this task."""
        hook = getattr(self._env, "reference_answer", None)
        task = self._tasks.get(task_id)
        return hook(task) if hook is not None and task is not None else None

    @classmethod
    def needs_bank(cls, cfg) -> bool:
        """Whether a run of this algorithm with these settings reads the experience bank: only then does the
        trainer open one (and, in reference mode, spend rollouts of the budget building it)."""
        return cls.uses_bank

    @classmethod
    def extra_adapters(cls, cfg) -> dict[str, tuple[int, int]]:
        """LoRA adapters on the one backbone besides the student's: name -> (rank, alpha) under these settings."""
        return {}

    @classmethod
    def records_top_m(cls, cfg) -> bool:
        """Whether the sampler should record the student's top-M tokens and log-probs at each sampled token."""
        return False

    # ------------------------------------------------------------------ the algorithm
    def cold_start(self, trajectories: list[Trajectory], log=None, progress: bool = False, start: int = 0,
                   on_step=None) -> dict[str, float]:
        return {}

    def update(self, trajectories: list[Trajectory]) -> dict[str, float]:
        raise NotImplementedError

    def diagnostics(self, step: int, final: bool = False) -> dict[str, float]:
        """Metrics that are not part of the update (diagnostics an algorithm measures every few steps: after
        ``step`` updates; ``final``: the run's last update). None by default."""
        return {}

    def close(self) -> None:
        """Release what the algorithm opened itself (Skill-SD's skill bank); the trainer's ``close`` calls it."""

    @property
    def share_prompt(self) -> bool:
        return bool(self.cfg.share_prompt) and not self.cfg.gradient_checkpointing

    def chunks(self, groups: list[Any]) -> list[list[Any]]:
        """Consecutive groups in chunks of at most ``--score-batch`` rollouts (at least one group each), each
        chunk scored in one student pass (:func:`lopd_train.scoring.score_group` over its rollouts:
        the prompts' common prefix, e.g. a few-shot prompt, once per chunk instead of once per group). A group is
        a list of trajectories or anything with ``members``."""
        out: list[list[Any]] = []
        size = 0
        for g in groups:
            n = len(getattr(g, "members", g))
            if out and size + n <= max(1, self.cfg.score_batch):
                out[-1].append(g)
                size += n
            else:
                out.append([g])
                size = n
        return out

    def tensors(self, members: list[Trajectory]):
        parts = [sequence_tensors(t, self.device) for t in members]
        return [p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts], [p[3] for p in parts]

    def context_view(self, members: list[Trajectory], n_latent: int = 0, text: str | None = None,
                     framing: tuple[str, str] | None = None):
        """The group's sequences as a teacher with privileged context sees them: the context block (``n_latent``
        placeholders or ``text``, between ``framing``, default LOPD's) at the start of the task's user turn
        (:func:`lopd_train.latent.context.context_prompt`), every other id as sampled. Returns ``(positions, seqs,
        masks)``: the placeholder positions (empty for text) and the teacher's ids and action masks, as tensors."""
        first = members[0]
        extra = {"framing": framing} if framing is not None else {}
        cp = context_prompt(self.tokenizer, first.input_ids[:first.prompt_len], first.messages, first.tools,
                            n_latent=n_latent, text=text, text_tools=self.cfg.text_tools,
                            **extra)
        views = [cp.sequence(t.input_ids, t.action_mask) for t in members]
        seqs = [torch.tensor(ids, dtype=torch.long, device=self.device) for ids, _ in views]
        masks = [torch.tensor(mask, dtype=torch.long, device=self.device) for _, mask in views]
        return cp.positions, seqs, masks

    def minibatches(self, trajectories: list[Trajectory]) -> list[Batch]:
        trainable = [t for t in trajectories if t.n_actions > 0]
        groups = Batch(trainable).groups_of()
        n = self.dist.max_int(max(1, min(self.cfg.minibatches, len(groups))))  # whole groups stay together
        # data-parallel ranks take the same number of optimiser steps, so none drops an empty minibatch
        return [Batch([t for g in groups[i::n] for t in g]) for i in range(n)
                if groups[i::n] or self.dist.world_size > 1]

    def step_optimizer(self, opt: torch.optim.Optimizer, params: Sequence[torch.Tensor],
                       clips: Sequence[tuple[Sequence[torch.Tensor], float]] | None = None) -> float:
        """Clip to ``max_grad_norm`` and step; a gradient whose norm is not finite skips the step (the
        gradient is dropped, weights and optimiser state stay as they were). Returns the norm (NaN/inf when
        skipped; ``self.skipped_steps`` counts them). ``clips``: instead, each (parameters, max norm) part
        clipped on its own (the authors' cold start clips the compressor and the encoder LoRA apart); the
        returned norm is then the norm over all of them."""
        self.dist.sync_gradients(params)  # averaged over the ranks first: one clip, one verdict, one step
        if clips is None:
            norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        else:
            parts = [torch.nn.utils.clip_grad_norm_(ps, limit) for ps, limit in clips if ps]
            norm = torch.stack(parts).pow(2).sum().sqrt() if parts else torch.zeros(())
        if torch.isfinite(norm):
            opt.step()
        else:
            self.skipped_steps += 1
        opt.zero_grad(set_to_none=True)
        return float(norm)

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self) -> dict[str, Any]:
        return {"student_opt": self.student_opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.student_opt.load_state_dict(state["student_opt"])

"""What every algorithm shares: the student, its optimiser, per-trajectory micro-batches, token-mean
normalisation over the whole batch, gradient clipping, and the state that goes into a checkpoint."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from lopd_train import models
from lopd_train.rollout import Trajectory


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
    """Base: a student LoRA trained from on-policy trajectories. Subclasses implement :meth:`update`."""

    name = ""
    uses_bank = False  # needs the experience bank and retriever
    student_only = True  # False: also a "composer" LoRA adapter on the backbone
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

    # ------------------------------------------------------------------ the algorithm
    def cold_start(self, trajectories: list[Trajectory]) -> dict[str, float]:
        return {}

    def update(self, trajectories: list[Trajectory]) -> dict[str, float]:
        raise NotImplementedError

    @property
    def share_prompt(self) -> bool:
        return bool(self.cfg.share_prompt) and not self.cfg.gradient_checkpointing

    def tensors(self, members: list[Trajectory]):
        parts = [sequence_tensors(t, self.device) for t in members]
        return [p[0] for p in parts], [p[1] for p in parts], [p[2] for p in parts], [p[3] for p in parts]

    def minibatches(self, trajectories: list[Trajectory]) -> list[Batch]:
        trainable = [t for t in trajectories if t.n_actions > 0]
        groups = Batch(trainable).groups_of()
        n = max(1, min(self.cfg.minibatches, len(groups)))  # whole groups stay together
        return [Batch([t for g in groups[i::n] for t in g]) for i in range(n) if groups[i::n]]

    def step_optimizer(self, opt: torch.optim.Optimizer, params: list[torch.Tensor]) -> float:
        norm = torch.nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return float(norm)

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self) -> dict[str, Any]:
        return {"student_opt": self.student_opt.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.student_opt.load_state_dict(state["student_opt"])

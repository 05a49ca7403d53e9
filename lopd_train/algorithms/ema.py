"""The EMA teacher shared by the self-distillation baselines (``--teacher ema``).

A second LoRA adapter, ``ema``, on the same backbone: it starts equal to the student and after each student
optimiser step moves to ``decay · ema + (1 - decay) · student``, so the teacher is a slowly trailing copy of
the student (a stable target that still improves), at the cost of one adapter's weights. Being a LoRA
adapter of the policy, its weights are in every checkpoint's ``lora`` state like the student's, and resume
restores them exactly; nothing else needs saving.
"""

from __future__ import annotations

import copy

import torch

from lopd_train import models

EMA_ADAPTER = "ema"


class EMATeacher:
    def __init__(self, policy, student: str = "student", decay: float = 0.99):
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"--ema-decay must lie in [0, 1], got {decay}")
        self.policy, self.student, self.decay = policy, student, float(decay)
        active = policy.active_adapter
        if EMA_ADAPTER not in policy.peft_config:
            policy.add_adapter(EMA_ADAPTER, copy.deepcopy(policy.peft_config[student]))
        models.activate(policy, active)  # peft freezes the other adapters when it adds one
        named = dict(policy.named_parameters())
        self.pairs = [(named[n.replace(f".{student}.", f".{EMA_ADAPTER}.")], p)
                      for n, p in named.items() if "lora_" in n and f".{student}." in n]
        for ema, _ in self.pairs:
            ema.requires_grad_(False)
        self.reset()

    @torch.no_grad()
    def reset(self) -> None:
        """Make the teacher equal to the student (at the start of a run)."""
        for ema, s in self.pairs:
            ema.copy_(s)

    @torch.no_grad()
    def update(self) -> None:
        """One EMA step after a student step: ``ema <- decay · ema + (1 - decay) · student``."""
        for ema, s in self.pairs:
            ema.mul_(self.decay).add_(s.detach(), alpha=1.0 - self.decay)

    def scoring(self):
        """Context in which ``score_group(..., teacher=False)`` scores with the EMA adapter."""
        return models.adapter(self.policy, EMA_ADAPTER)

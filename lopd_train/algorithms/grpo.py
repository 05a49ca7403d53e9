"""GRPO: group-relative advantages and the clipped policy-gradient surrogate, no privileged context.

The baseline LOPD is measured against (``benchmarks/trainer_step.py``): one student forward and backward
per trajectory, nothing else. Old log-probs are the sampler's own (one update per rollout batch)."""

from __future__ import annotations

import torch

from lopd_train import losses
from lopd_train.algorithms.base import Algorithm, sequence_tensors
from lopd_train.composer import student_logits


class GRPO(Algorithm):
    name = "grpo"

    def update(self, trajectories):
        metrics = {"loss": 0.0, "grad_norm": 0.0, "clip_frac": 0.0}
        batches = self.minibatches(trajectories)
        for batch in batches:
            adv = losses.group_advantages(batch.rewards(), batch.groups(), scale=self.cfg.grpo_scale_rewards)
            for t, a in zip(batch.trajectories, adv):
                ids, mask, targets, old = sequence_tensors(t, self.device)
                logits = student_logits(self.policy, ids, mask) / self.cfg.temperature
                logp = losses.token_logprobs(logits, targets)
                loss = losses.grpo_clip_loss(logp, old, a.to(self.device).reshape(1), None,
                                             self.cfg.clip_low, self.cfg.clip_high) * (len(targets) / batch.n_tokens)
                loss.backward()
                metrics["loss"] += float(loss) / len(batches)
                ratio = torch.exp(logp.detach() - old)
                clipped = (ratio < 1 - self.cfg.clip_low) | (ratio > 1 + self.cfg.clip_high)
                metrics["clip_frac"] += float(clipped.float().sum()) / batch.n_tokens / len(batches)
            metrics["grad_norm"] += self.step_optimizer(self.student_opt, self.student_params) / len(batches)
        return metrics

"""GRPO: group-relative advantages and the clipped policy-gradient surrogate, no privileged context.

The baseline LOPD is measured against (``benchmarks/trainer_step.py``): the student's forward and backward
over the batch's rollouts, ``--score-batch`` at a time (each prompt once for its group, or the groups'
common prefix once when that is cheaper: ``scoring.score_groups``), nothing else. Old log-probs are the sampler's
own (one update per rollout batch).

**Reference**: TRL's ``GRPOTrainer`` (TRL 1.10.0.dev0, ``trl/trainer/grpo_trainer.py``, f2cd577). As there:
advantages are the group-centred rewards divided by the group's **unbiased** std plus 1e-4 (``scale_rewards=
"group"``; ``--grpo-std population --grpo-eps 1e-6`` is study v2's, a factor sqrt(2) at group size 2); the loss is
aggregated by ``--grpo-loss-type`` (TRL's ``loss_type``: ``dapo``, its default, ``bnpo``, ``grpo``, ``dr_grpo``;
:func:`lopd_train.algorithms.losses.grpo_token_weight`); clipped ratio 0.2/0.2; ``beta`` 0. Remaining deviations:
TRL's ``scale_rewards="batch"`` and its other loss types (cispo, sapo, luspo, vespo) are not offered; ``dr_grpo``'s
``max_completion_length`` is ``--max-new-tokens`` (per turn here); a group of one has advantage 0 (TRL: NaN std).

``--grpo-kl-coef c > 0`` adds ``c`` times the k3 estimate of ``KL(π_θ || π_ref)`` per token
(:func:`lopd_train.algorithms.losses.k3_kl`), the reference being the frozen base model (LoRA disabled), scored on the
same tokens without gradient; 0 (the default, as in DAPO/Dr. GRPO) leaves it out and skips that pass.

A group whose rollouts all scored alike has advantage 0 on every token, so its surrogate and its gradient are
exactly zero: without the KL term its forward and backward are skipped (``zero_advantage_groups`` logs the
share; with group size 2 about half of the study's steps had nothing else). The optimiser still steps with a
zero gradient where nothing was scored, as it would have after a backward of zeros (AdamW's moments move on),
so skipping changes the time of a step, not its result."""

from __future__ import annotations

import torch

from lopd_train.algorithms import losses
from lopd_train.algorithms.base import Algorithm
from lopd_train.scoring import score_group, score_groups, split


class GRPO(Algorithm):
    name = "grpo"
    teacher_sees = ("no teacher (TRL GRPOTrainer): group-relative advantages (unbiased std + 1e-4), clipped ratio, "
                    "--grpo-loss-type (TRL default dapo), optional KL to the base model")

    def update(self, trajectories):
        cfg, grpo = self.cfg, self.cfg.grpo  # the shared settings, GRPO's own
        metrics = {"loss": 0.0, "grad_norm": 0.0, "clip_frac": 0.0, "kl_ref": 0.0, "zero_advantage_groups": 0.0}
        batches = self.minibatches(trajectories)
        for batch in batches:
            adv = losses.group_advantages(batch.rewards(), batch.groups(), eps=grpo.grpo_eps,
                                          scale=grpo.grpo_scale_rewards, unbiased=grpo.grpo_std == "unbiased")
            advantage = {id(t): a for t, a in zip(batch.trajectories, adv)}
            groups = batch.groups_of()
            if grpo.grpo_kl_coef == 0:  # a zero-advantage group adds exactly nothing to the loss or its gradient
                live = [g for g in groups if any(float(advantage[id(t)]) != 0.0 for t in g)]
                metrics["zero_advantage_groups"] += (len(groups) - len(live)) / len(groups) / len(batches)
                groups = live
            for chunk in self.chunks(groups):  # several groups, one backward (one pass if cheaper)
                members = [t for g in chunk for t in g]
                seqs, masks, targets, old = self.tensors(members)
                sizes = [len(g) for g in chunk]
                logits = score_groups(self.policy, split(seqs, sizes), split(masks, sizes),
                                      share_prefix=self.share_prompt)
                refs = [None] * len(members)
                if grpo.grpo_kl_coef > 0:
                    with torch.no_grad():
                        refs = score_group(self.policy, seqs, masks, teacher=True, share_prefix=self.share_prompt)
                loss = 0.0
                for t, lg, y, o, ref in zip(members, logits, targets, old, refs):
                    logp = losses.token_logprobs(lg / cfg.temperature, y)
                    a = advantage[id(t)].to(self.device).reshape(1)
                    w = losses.grpo_token_weight(len(y), grpo.grpo_loss_type, len(batch.trajectories),
                                                 batch.n_tokens, cfg.max_new_tokens)
                    loss = loss + losses.grpo_clip_loss(logp, o, a, None, grpo.clip_low, grpo.clip_high) * (len(y) * w)
                    if ref is not None:
                        kl = losses.k3_kl(logp, losses.token_logprobs(ref / cfg.temperature, y)).sum() / batch.n_tokens
                        loss = loss + grpo.grpo_kl_coef * kl
                        metrics["kl_ref"] += float(kl.detach()) / len(batches)
                    ratio = torch.exp(logp.detach() - o)
                    clipped = (ratio < 1 - grpo.clip_low) | (ratio > 1 + grpo.clip_high)
                    metrics["clip_frac"] += float(clipped.float().sum()) / batch.n_tokens / len(batches)
                assert isinstance(loss, torch.Tensor)  # a chunk's groups have members: the sum is a tensor
                loss.backward()
                metrics["loss"] += float(loss.detach()) / len(batches)
            for p in self.student_params:  # what was not scored has the zero gradient a backward would have given
                if p.grad is None:
                    p.grad = torch.zeros_like(p)
            metrics["grad_norm"] += self.step_optimizer(self.student_opt, self.student_params) / len(batches)
        return metrics

"""What the text-context self-distillation baselines (OPSD, SDPO, SDFT, Skill-SD) share.

Each is the same on-policy distillation step and differs only in the privileged text its teacher reads
(:meth:`SelfDistillation.contexts`): the student samples; the teacher is the same backbone given that text
inside the task's user turn (``lopd_train.latent.context``, the place LOPD puts its latents), re-scoring the
student's own tokens without gradient; the student minimises the reverse KL to it. Knobs:

* ``--teacher base`` (the frozen backbone, adapters off: a fixed teacher) or ``ema`` (an EMA copy of the
  student, :mod:`lopd_train.algorithms.ema`, updated after every student step);
* ``--distill-loss topk`` (reverse KL over the top-M tokens + tail, ``--kl-support``, as LOPD) or
  ``sampled`` (the sampled-token estimate, :func:`lopd_train.algorithms.losses.sampled_token_kl`).

Rollouts with no context get no supervision; the loss is a token mean over the supervised tokens of each
minibatch. Rollouts of one task that get the same context share one teacher prompt (scored once).
"""

from __future__ import annotations

import torch

from lopd_train import models
from lopd_train.algorithms import losses
from lopd_train.algorithms.base import Algorithm
from lopd_train.algorithms.ema import EMATeacher
from lopd_train.algorithms.scoring import score_group
from lopd_train.rollout.engine import Trajectory

TEACHERS = ("base", "ema")
DISTILL_LOSSES = ("topk", "sampled")


class SelfDistillation(Algorithm):
    uses_bank = True
    #: text around the context inside the task's user turn (``lopd_train.latent.context.context_prompt``)
    framing: tuple[str, str] = ("", "")
    #: when a context is longer than ``--experience-tokens``, keep its end (trajectories: the actions and
    #: results) rather than its start (answers, skills)
    keep_end = False

    def __init__(self, policy, tokenizer, cfg, bank=None, retriever=None):
        super().__init__(policy, tokenizer, cfg, bank, retriever)
        if cfg.teacher not in TEACHERS or cfg.distill_loss not in DISTILL_LOSSES:
            raise ValueError(f"--teacher must be one of {TEACHERS} and --distill-loss one of {DISTILL_LOSSES}")
        self.ema = EMATeacher(policy, self.student_adapter, cfg.ema_decay) if cfg.teacher == "ema" else None

    # ------------------------------------------------------------------ what a subclass says
    def contexts(self, members: list[Trajectory]) -> list[str | None]:
        """The privileged text for each rollout of one task's group (``None``: that rollout is not supervised),
        its long parts cut with :meth:`clip`."""
        raise NotImplementedError

    def prepare(self, trajectories: list[Trajectory]) -> dict[str, float]:
        """Called once per update before any context is built (Skill-SD summarises new successes here)."""
        return {}

    def token_loss(self, s_logits: torch.Tensor, t_logits: torch.Tensor, y: torch.Tensor,
                   sampler_logp: torch.Tensor) -> torch.Tensor:
        """Per-token student loss ``[T]`` (``s_logits`` carry the gradient; ``t_logits`` do not)."""
        cfg = self.cfg
        if cfg.distill_loss == "sampled":
            return losses.sampled_token_kl(losses.token_logprobs(s_logits, y), losses.token_logprobs(t_logits, y))
        return losses.reverse_kl_topm(s_logits, t_logits, cfg.top_m, reduce=False, support=cfg.kl_support)

    # ------------------------------------------------------------------ the shared pieces
    def clip(self, text: str) -> str:
        """``text`` cut to ``--experience-tokens`` tokens (its end or its start, see :attr:`keep_end`)."""
        ids = models.encode(self.tokenizer, text)
        n = self.cfg.experience_tokens
        if len(ids) <= n:
            return text
        return self.tokenizer.decode(ids[-n:] if self.keep_end else ids[:n])

    def teacher_view(self, members: list[Trajectory], text: str):
        """``(seqs, masks)``: the rollouts as the teacher reads them, ``text`` in the task's user turn."""
        _, seqs, masks = self.context_view(members, text=text, framing=self.framing)
        return seqs, masks

    @torch.no_grad()
    def teacher_logits(self, seqs: list[torch.Tensor], masks: list[torch.Tensor]) -> list[torch.Tensor]:
        if self.ema is not None:
            with self.ema.scoring():
                return score_group(self.policy, seqs, masks, share_prefix=self.share_prompt)
        return score_group(self.policy, seqs, masks, teacher=True, share_prefix=self.share_prompt)

    # ------------------------------------------------------------------ one update
    def update(self, trajectories: list[Trajectory]) -> dict[str, float]:
        m = {"student_loss": 0.0, "grad_norm": 0.0, **self.prepare(trajectories)}
        batches = self.minibatches(trajectories)
        n_all, n_supervised = sum(len(b.trajectories) for b in batches), 0
        for batch in batches:
            # the privileged context of each rollout; rollouts of a task with the same context share a prompt
            jobs: list[tuple[str, list[Trajectory]]] = []
            for members in batch.groups_of():
                same: dict[str, list[Trajectory]] = {}
                for t, text in zip(members, self.contexts(members)):
                    if text is not None:
                        same.setdefault(text, []).append(t)
                jobs += list(same.items())
            n_tokens = sum(t.n_actions for _, ms in jobs for t in ms)
            if not jobs and self.dist.world_size == 1:
                continue  # nothing to supervise (data-parallel ranks still step together, below)
            for text, ms in jobs:
                t_all = self.teacher_logits(*self.teacher_view(ms, text))
                seqs, masks, targets, old = self.tensors(ms)
                s_all = score_group(self.policy, seqs, masks, share_prefix=self.share_prompt)
                loss = sum(self.token_loss(s, t, y, o).sum() for s, t, y, o in zip(s_all, t_all, targets, old))
                loss = loss / n_tokens
                loss.backward()
                m["student_loss"] += float(loss.detach()) / len(batches)
                n_supervised += len(ms)
                del t_all, s_all, loss
            m["grad_norm"] += self.step_optimizer(self.student_opt, self.student_params) / len(batches)
            if self.ema is not None:
                self.ema.update()
        m["context_fraction"] = n_supervised / max(n_all, 1)
        return m

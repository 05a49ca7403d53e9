"""SDPO-style self-distillation baseline: the teacher is the current policy itself (no gradient) re-prompted
with a successful attempt at the task as plain text, placed where LOPD puts its latent context (inside the
first user turn, between the same framing texts: ``lopd_train.context``); the student minimises the same
reverse KL over the top-M tokens + tail as in LOPD (support from ``--kl-support``). The successful attempt comes from
the same group when one succeeded, otherwise from the experience bank (top-1 for the task, never the
trajectory itself). Groups with neither give no signal.

It differs from LOPD only in the privileged context: explicit text (long, re-read every step) instead of
J·K latent tokens from a trained composer, and no margin constraint.
"""

from __future__ import annotations

import torch

from lopd_train import losses, models
from lopd_train.algorithms.base import Algorithm
from lopd_train.context import experience_text
from lopd_train.experience import trace_key
from lopd_train.scoring import score_group


class SDPO(Algorithm):
    name = "sdpo"
    uses_bank = True

    def _demonstration(self, members) -> str | None:
        for t in members:
            if t.success and t.trace is not None:
                return t.trace.render()
        if self.retriever is None:
            return None
        own = [e.id for e in (self.bank.get_by_key(trace_key(t.trace)) for t in members if t.trace is not None) if e]
        (hits,) = self.retriever.retrieve([members[0].task], k=1, exclude=[own])
        return experience_text(hits[0], self.cfg.experience_format) if hits else None

    def _clip(self, text: str) -> str:
        """The demonstration cut to ``experience_tokens`` tokens, keeping its end (the actions and results)."""
        ids = models.encode(self.tokenizer, text)
        return self.tokenizer.decode(ids[-self.cfg.experience_tokens:]) if len(ids) > self.cfg.experience_tokens else text

    def update(self, trajectories):
        cfg = self.cfg
        m = {"student_kl": 0.0, "grad_norm": 0.0, "context_fraction": 0.0}
        batches = self.minibatches(trajectories)
        for batch in batches:
            for members in batch.groups_of():
                demo = self._demonstration(members)
                if demo is None:
                    continue
                seqs, masks, targets, _ = self.tensors(members)
                _, t_seqs, t_masks = self.context_view(members, text=self._clip(demo))
                with torch.no_grad():
                    t_all = score_group(self.policy, t_seqs, t_masks, share_prefix=self.share_prompt)
                s_all = score_group(self.policy, seqs, masks, share_prefix=self.share_prompt)
                loss = sum(losses.reverse_kl_topm(s, t, cfg.top_m, support=cfg.kl_support) * (len(y) / batch.n_tokens)
                           for s, t, y in zip(s_all, t_all, targets))
                loss.backward()
                m["student_kl"] += float(loss.detach()) / len(batches)
                m["context_fraction"] += len(members) / len(trajectories)
            m["grad_norm"] += self.step_optimizer(self.student_opt, self.student_params) / len(batches)
        return m

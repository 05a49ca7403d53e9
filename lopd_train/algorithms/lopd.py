"""LOPD: Latent On-Policy Self-Distillation (DESIGN.md section 7).

Per rollout batch (the trainer has already sampled it and put its successes into the experience bank):

1. retrieve the top-J experiences for each task, never the trajectory itself (nor its group);
2. the composer turns each retrieved experience into K latent tokens (encoded once per batch);
3. the teacher (frozen backbone, student adapter off) re-scores the student's sequence with the J·K latent
   tokens in front, in one forward pass;
4. student loss: reverse KL(p̂_S || p̂_T) over the student's top-M tokens + tail, teacher detached;
5. composer loss: the same KL with the student detached, plus β (m - g) with the privileged margin
   g = mean A(τ) (log p_T - log p_S) and A = 2r - 1, plus λ L_anchor; student and composer step together;
6. dual ascent on β.

Trajectories are processed one task group at a time (gradient accumulation; the group's prompt is scored
once, see ``composer.score_group``): the latent tokens are a detached leaf during the per-group backward
passes and their accumulated gradient flows into the composer once per optimiser step.
"""

from __future__ import annotations

from typing import Any

import torch

from lopd_train import losses
from lopd_train.algorithms.base import Algorithm, Batch
from lopd_train.composer import Composer, score_group
from lopd_train.experience import trace_key


class LOPD(Algorithm):
    name = "lopd"
    uses_bank = True
    student_only = False

    def __init__(self, policy, tokenizer, cfg, bank=None, retriever=None):
        super().__init__(policy, tokenizer, cfg, bank, retriever)
        self.composer = Composer(policy, tokenizer, "composer", num_queries=cfg.num_latents, dim=cfg.qformer_dim,
                                 layers=cfg.qformer_layers, heads=cfg.qformer_heads,
                                 max_tokens=cfg.experience_tokens)
        self.composer_params = self.composer.trainable_parameters()
        self.composer_init = [p.detach().clone() for p in self.composer_params]
        self.composer_opt = torch.optim.AdamW(self.composer_params, lr=cfg.composer_lr, weight_decay=0.0,
                                              betas=(0.9, 0.99))
        self.beta = float(cfg.beta_init)

    # ------------------------------------------------------------------ privileged context
    def _own_id(self, t) -> int | None:
        if t.trace is None or not t.success:
            return None
        exp = self.bank.get_by_key(trace_key(t.trace))
        return exp.id if exp else None

    def contexts(self, groups) -> tuple[torch.Tensor | None, list[list[int]]]:
        """Latent tokens ``[U, K, d]`` of the unique experiences retrieved for the groups (one task each), and
        each group's rows. A group's own trajectories are never retrieved for it (so neither is any
        trajectory for itself), and every rollout of a task shares one privileged context."""
        own = [[i for i in (self._own_id(t) for t in members) if i is not None] for members in groups]
        hits = self.retriever.retrieve([members[0].task for members in groups], k=self.cfg.top_j, exclude=own)
        order: dict[int, Any] = {}
        for hs in hits:
            for e in hs:
                order.setdefault(e.id, e)
        if not order:
            return None, [[] for _ in groups]
        row = {eid: k for k, eid in enumerate(order)}
        latents = self.composer.encode([e.text for e in order.values()])
        return latents, [[row[e.id] for e in hs] for hs in hits]

    @staticmethod
    def _context(leaf: torch.Tensor | None, rows: list[int]) -> torch.Tensor | None:
        if leaf is None or not rows:
            return None
        return leaf[rows].reshape(-1, leaf.shape[-1])

    def _finish_composer(self, latents: torch.Tensor | None, leaf: torch.Tensor | None) -> tuple[float, float]:
        """Anchor term, push the latent gradients into the composer, step it. Returns (anchor, grad norm)."""
        anchor = losses.anchor_loss(self.composer_params, self.composer_init)
        if self.cfg.freeze_composer:
            self.composer_opt.zero_grad(set_to_none=True)
            return float(anchor.detach()), 0.0
        (self.cfg.anchor_coef * anchor).backward()
        if latents is not None and leaf is not None and leaf.grad is not None:
            latents.backward(leaf.grad)
        return float(anchor.detach()), self.step_optimizer(self.composer_opt, self.composer_params)

    # ------------------------------------------------------------------ cold start
    def cold_start(self, trajectories) -> dict[str, float]:
        """Fit the composer by the NLL of successful trajectories under the teacher with their retrieved
        latent context (student untouched)."""
        good = Batch([t for t in trajectories if t.success and t.n_actions > 0]).groups_of()
        empty = {"cold_start_nll": float("nan"), "cold_start_trajectories": 0}
        if not good:
            return empty
        latents, rows = self.contexts(good)
        used = [(members, r) for members, r in zip(good, rows) if r]
        if latents is None or not used:
            return empty
        leaf = latents.detach().requires_grad_(True)
        n_tokens = sum(t.n_actions for members, _ in used for t in members)
        total = 0.0
        for members, r in used:
            seqs, masks, targets, _ = self.tensors(members)
            logits = score_group(self.policy, seqs, masks, self._context(leaf, r), teacher=True,
                                 share_prefix=self.share_prompt)
            loss = sum(losses.nll_loss(lg, y) * (len(y) / n_tokens) for lg, y in zip(logits, targets))
            loss.backward()
            total += float(loss.detach())
        anchor, norm = self._finish_composer(latents, leaf)
        self.student_opt.zero_grad(set_to_none=True)
        return {"cold_start_nll": total, "cold_start_trajectories": sum(len(m) for m, _ in used),
                "cold_start_grad_norm": norm}

    # ------------------------------------------------------------------ one update
    def update(self, trajectories) -> dict[str, float]:
        cfg = self.cfg
        m: dict[str, float] = {"student_kl": 0.0, "composer_kl": 0.0, "margin_g": 0.0, "anchor": 0.0,
                               "grad_norm": 0.0, "composer_grad_norm": 0.0, "context_fraction": 0.0}
        batches = self.minibatches(trajectories)
        g_sum, g_tokens = 0.0, 0
        for batch in batches:
            groups = batch.groups_of()
            latents, rows = self.contexts(groups)
            leaf = latents.detach().requires_grad_(True) if latents is not None else None
            ctx_tokens = max(1, sum(t.n_actions for members, r in zip(groups, rows) if r for t in members))
            for members, r in zip(groups, rows):
                seqs, masks, targets, _ = self.tensors(members)
                context = self._context(leaf, r)
                s_all = score_group(self.policy, seqs, masks, share_prefix=self.share_prompt)
                t_all = score_group(self.policy, seqs, masks, context, teacher=True, share_prefix=self.share_prompt)
                loss = 0.0
                for t, s_logits, t_logits, y in zip(members, s_all, t_all, targets):
                    n = len(y)
                    kl_s = losses.reverse_kl_topm(s_logits, t_logits.detach(), cfg.top_m) * (n / batch.n_tokens)
                    loss = loss + kl_s
                    m["student_kl"] += float(kl_s.detach()) / len(batches)
                    if context is None:
                        continue
                    advantage = losses.outcome_advantage(torch.tensor([t.reward], device=self.device))
                    g = losses.privileged_margin(losses.token_logprobs(t_logits, y),
                                                 losses.token_logprobs(s_logits.detach(), y),
                                                 advantage, None) * (n / ctx_tokens)
                    kl_c = losses.reverse_kl_topm(s_logits.detach(), t_logits, cfg.top_m) * (n / ctx_tokens)
                    loss = loss + kl_c
                    if cfg.use_margin:
                        loss = loss - self.beta * g  # the gradient of beta (m - g); beta m is a constant
                    m["composer_kl"] += float(kl_c.detach()) / len(batches)
                    g_sum += float(g.detach()) * ctx_tokens
                    g_tokens += n
                    m["context_fraction"] += 1.0 / len(trajectories)
                loss.backward()
            m["grad_norm"] += self.step_optimizer(self.student_opt, self.student_params) / len(batches)
            anchor, cnorm = self._finish_composer(latents, leaf)
            m["anchor"] += anchor / len(batches)
            m["composer_grad_norm"] += cnorm / len(batches)
        if g_tokens:
            g = g_sum / g_tokens
            m["margin_g"] = g
            if cfg.use_margin:
                self.beta = losses.dual_update(self.beta, g, cfg.margin, cfg.beta_lr)
        m["beta"] = self.beta
        return m

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "qformer": self.composer.qformer.state_dict(),
                "composer_opt": self.composer_opt.state_dict(), "beta": self.beta,
                "composer_init": [p.cpu() for p in self.composer_init]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.composer.qformer.load_state_dict(state["qformer"])
        self.composer_opt.load_state_dict(state["composer_opt"])
        self.beta = float(state["beta"])
        self.composer_init = [p.to(self.device) for p in state["composer_init"]]

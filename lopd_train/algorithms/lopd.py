"""LOPD: Latent On-Policy Self-Distillation (DESIGN.md section 7).

Per rollout batch (the trainer has already sampled it and put its successes into the experience bank):

1. retrieve the top-J experiences for each trajectory's task, never the trajectory itself;
2. the composer turns each retrieved experience into K latent tokens (encoded once per batch);
3. the teacher (frozen backbone, student adapter off) re-scores the student's sequence with the J·K latent
   tokens in front, in one forward pass;
4. student loss: reverse KL(p̂_S || p̂_T) over the student's top-M tokens + tail, teacher detached;
5. composer loss: the same KL with the student detached, plus β (m - g) with the privileged margin
   g = mean A(τ) (log p_T - log p_S) and A = 2r - 1, plus λ L_anchor; student and composer step together;
6. dual ascent on β.

Trajectories are processed one at a time (gradient accumulation): the latent tokens are a detached leaf
during the per-trajectory backward passes and their accumulated gradient flows into the composer once.
"""

from __future__ import annotations

from typing import Any

import torch

from lopd_train import losses
from lopd_train.algorithms.base import Algorithm, sequence_tensors
from lopd_train.composer import Composer, student_logits, teacher_logits
from lopd_train.experience import trace_key


class LOPD(Algorithm):
    name = "lopd"
    uses_bank = True

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

    def contexts(self, trajectories) -> tuple[torch.Tensor | None, list[list[int]]]:
        """Latent tokens ``[U, K, d]`` for the unique retrieved experiences, and each trajectory's rows."""
        own = [self._own_id(t) for t in trajectories]
        hits = self.retriever.retrieve([t.task for t in trajectories], k=self.cfg.top_j,
                                       exclude=[[o] if o is not None else [] for o in own])
        order: dict[int, Any] = {}
        for hs in hits:
            for e in hs:
                order.setdefault(e.id, e)
        if not order:
            return None, [[] for _ in trajectories]
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
            return float(anchor), 0.0
        (self.cfg.anchor_coef * anchor).backward()
        if latents is not None and leaf is not None and leaf.grad is not None:
            latents.backward(leaf.grad)
        return float(anchor), self.step_optimizer(self.composer_opt, self.composer_params)

    # ------------------------------------------------------------------ cold start
    def cold_start(self, trajectories) -> dict[str, float]:
        """Fit the composer by the NLL of successful trajectories under the teacher with their retrieved
        latent context (student untouched)."""
        good = [t for t in trajectories if t.success and t.n_actions > 0]
        if not good:
            return {"cold_start_nll": float("nan"), "cold_start_trajectories": 0}
        latents, rows = self.contexts(good)
        used = [(t, r) for t, r in zip(good, rows) if r]
        if latents is None or not used:
            return {"cold_start_nll": float("nan"), "cold_start_trajectories": 0}
        leaf = latents.detach().requires_grad_(True)
        n_tokens = sum(t.n_actions for t, _ in used)
        total = 0.0
        for t, r in used:
            ids, mask, targets, _ = sequence_tensors(t, self.device)
            logits = teacher_logits(self.policy, ids, mask, self._context(leaf, r))
            loss = losses.nll_loss(logits, targets) * (len(targets) / n_tokens)
            loss.backward()
            total += float(loss)
        anchor, norm = self._finish_composer(latents, leaf)
        self.student_opt.zero_grad(set_to_none=True)
        return {"cold_start_nll": total, "cold_start_trajectories": len(used), "cold_start_grad_norm": norm}

    # ------------------------------------------------------------------ one update
    def update(self, trajectories) -> dict[str, float]:
        cfg = self.cfg
        m: dict[str, float] = {"student_kl": 0.0, "composer_kl": 0.0, "margin_g": 0.0, "anchor": 0.0,
                               "grad_norm": 0.0, "composer_grad_norm": 0.0, "context_fraction": 0.0}
        batches = self.minibatches(trajectories)
        g_sum, g_tokens = 0.0, 0
        for batch in batches:
            latents, rows = self.contexts(batch.trajectories)
            leaf = latents.detach().requires_grad_(True) if latents is not None else None
            ctx_tokens = max(1, sum(t.n_actions for t, r in zip(batch.trajectories, rows) if r))
            for t, r in zip(batch.trajectories, rows):
                ids, mask, targets, _ = sequence_tensors(t, self.device)
                s_logits = student_logits(self.policy, ids, mask)
                context = self._context(leaf, r)
                t_logits = teacher_logits(self.policy, ids, mask, context)
                n = len(targets)
                loss = losses.reverse_kl_topm(s_logits, t_logits.detach(), cfg.top_m) * (n / batch.n_tokens)
                m["student_kl"] += float(loss.detach()) / len(batches)
                if context is not None:
                    advantage = losses.outcome_advantage(torch.tensor([t.reward], device=self.device))
                    g = losses.privileged_margin(losses.token_logprobs(t_logits, targets),
                                                 losses.token_logprobs(s_logits.detach(), targets),
                                                 advantage, None) * (n / ctx_tokens)
                    kl_c = losses.reverse_kl_topm(s_logits.detach(), t_logits, cfg.top_m) * (n / ctx_tokens)
                    loss = loss + kl_c
                    if cfg.use_margin:
                        loss = loss - self.beta * g  # the gradient of β (m - g); β m is a constant
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

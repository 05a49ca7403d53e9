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
once, see ``composer.score_group``). The student's top-M buckets and sampled-token log-probs come from the
sampler (recorded during the rollout, temperature 1), so the teacher/composer pass and the student pass run
one after the other and their graphs never coexist.
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

    def retrieve(self, groups) -> list[list[Any]]:
        """The top-J experiences for each group (one task each). A group's own trajectories are never
        retrieved for it (so neither is any trajectory for itself); all rollouts of a task share them."""
        own = [[i for i in (self._own_id(t) for t in members) if i is not None] for members in groups]
        return self.retriever.retrieve([members[0].task for members in groups], k=self.cfg.top_j, exclude=own)

    def latent_context(self, experiences) -> torch.Tensor | None:
        """The J·K latent tokens ``[J*K, d]`` the composer makes of the experiences (None without any)."""
        if not experiences:
            return None
        latents = self.composer.encode([e.text for e in experiences])
        return latents.reshape(-1, latents.shape[-1])

    def student_stats(self, members, seqs, masks):
        """Per trajectory, detached: the student's top-M token ids, its bucket log-probs (top-M + tail) and
        the log-prob of each sampled token, all at temperature 1. The sampler recorded them while it
        generated; trajectories without them are scored once without gradient."""
        if all(t.topm_ids is not None for t in members):
            return [(t.topm_ids.to(self.device), losses.topm_from_logprobs(t.topm_logprobs.to(self.device)),
                     t.policy_logprobs.to(self.device)) for t in members]
        out = []
        targets = [seq[mask.bool()] for seq, mask in zip(seqs, masks)]
        with torch.no_grad():
            for s, y in zip(score_group(self.policy, seqs, masks, share_prefix=self.share_prompt), targets):
                logp = torch.log_softmax(s.float(), -1)
                idx = logp.topk(min(self.cfg.top_m, logp.shape[-1]), -1).indices
                out.append((idx, losses.topm_tail_logprobs(logp, idx), logp.gather(-1, y.unsqueeze(-1)).squeeze(-1)))
        return out

    def _finish_composer(self) -> tuple[float, float]:
        """Anchor term, then one composer step. Returns (anchor, grad norm)."""
        anchor = losses.anchor_loss(self.composer_params, self.composer_init)
        if self.cfg.freeze_composer:
            self.composer_opt.zero_grad(set_to_none=True)
            return float(anchor.detach()), 0.0
        (self.cfg.anchor_coef * anchor).backward()
        return float(anchor.detach()), self.step_optimizer(self.composer_opt, self.composer_params)

    # ------------------------------------------------------------------ cold start
    def cold_start(self, trajectories) -> dict[str, float]:
        """Fit the composer by the NLL of successful trajectories under the teacher with their retrieved
        latent context (student untouched)."""
        groups = Batch([t for t in trajectories if t.success and t.n_actions > 0]).groups_of()
        hits = self.retrieve(groups) if groups else []
        used = [(members, h) for members, h in zip(groups, hits) if h]
        if not used:
            return {"cold_start_nll": None, "cold_start_trajectories": 0}
        n_tokens = sum(t.n_actions for members, _ in used for t in members)
        total = 0.0
        for members, exps in used:
            seqs, masks, targets, _ = self.tensors(members)
            logits = score_group(self.policy, seqs, masks, self.latent_context(exps), teacher=True,
                                 share_prefix=self.share_prompt)
            loss = sum(losses.nll_loss(lg, y) * (len(y) / n_tokens) for lg, y in zip(logits, targets))
            loss.backward()
            total += float(loss.detach())
        _, norm = self._finish_composer()
        self.student_opt.zero_grad(set_to_none=True)
        return {"cold_start_nll": total, "cold_start_trajectories": sum(len(m) for m, _ in used),
                "cold_start_grad_norm": norm}

    # ------------------------------------------------------------------ one update
    def update(self, trajectories) -> dict[str, float]:
        """The batch's unique retrieved experiences are encoded once into latent tokens (a leaf tensor). Per
        task group: (1) teacher forward with the group's latent context, the composer's loss against the
        student's recorded top-M distribution, backward into the latents (the teacher's graph is freed);
        (2) the student's forward and its reverse KL to the detached teacher buckets, backward. The two
        graphs never coexist. Finally the latents' gradient flows through the encoder (re-run with its
        graph, in chunks, when ``recompute_encoder``), and student and composer take their steps."""
        cfg = self.cfg
        m: dict[str, float] = {"student_kl": 0.0, "composer_kl": 0.0, "margin_g": 0.0, "anchor": 0.0,
                               "grad_norm": 0.0, "composer_grad_norm": 0.0, "context_fraction": 0.0}
        batches = self.minibatches(trajectories)
        g_sum, g_tokens = 0.0, 0
        for batch in batches:
            groups = batch.groups_of()
            hits = self.retrieve(groups)
            ctx_tokens = max(1, sum(t.n_actions for members, h in zip(groups, hits) if h for t in members))
            # the batch's unique experiences, encoded once (shared by every group that retrieved them)
            unique: dict[int, Any] = {}
            for h in hits:
                for e in h:
                    unique.setdefault(e.id, e)
            row = {eid: k for k, eid in enumerate(unique)}
            train_composer = bool(unique) and not cfg.freeze_composer
            latents = leaf = None
            if unique:
                texts = [e.text for e in unique.values()]
                if cfg.recompute_encoder or not train_composer:
                    with torch.no_grad():  # the encoder's graph is rebuilt for its backward, chunk by chunk
                        latents = self.composer.encode(texts)
                else:
                    latents = self.composer.encode(texts)
                leaf = latents.detach().requires_grad_(train_composer)
            for members, exps in zip(groups, hits):
                seqs, masks, targets, _ = self.tensors(members)
                stats = self.student_stats(members, seqs, masks)
                with torch.enable_grad() if train_composer and exps else torch.no_grad():
                    context = leaf[[row[e.id] for e in exps]].reshape(-1, leaf.shape[-1]) if exps else None
                    t_all = score_group(self.policy, seqs, masks, context, teacher=True,
                                        share_prefix=self.share_prompt)
                    composer_loss, q_teacher = 0.0, []
                    for t, t_logits, y, (idx, q_s, lp_y) in zip(members, t_all, targets, stats):
                        logp_t = torch.log_softmax(t_logits.float(), -1)
                        q_t = losses.topm_tail_logprobs(logp_t, idx)
                        q_teacher.append(q_t.detach())
                        if context is None:
                            continue
                        n = len(y)
                        advantage = losses.outcome_advantage(torch.tensor([t.reward], device=self.device))
                        g = losses.privileged_margin(logp_t.gather(-1, y.unsqueeze(-1)).squeeze(-1), lp_y,
                                                     advantage, None) * (n / ctx_tokens)
                        kl_c = losses.bucket_kl(q_s, q_t).mean() * (n / ctx_tokens)
                        composer_loss = composer_loss + kl_c
                        if cfg.use_margin:
                            composer_loss = composer_loss - self.beta * g  # gradient of beta (m - g)
                        m["composer_kl"] += float(kl_c.detach()) / len(batches)
                        g_sum += float(g.detach()) * ctx_tokens
                        g_tokens += n
                        m["context_fraction"] += 1.0 / len(trajectories)
                    if train_composer and exps:
                        composer_loss.backward()  # into the latent tokens (leaf); the teacher's graph is freed
                    del t_all, composer_loss, context
                s_all = score_group(self.policy, seqs, masks, share_prefix=self.share_prompt)
                student_loss = 0.0
                for s_logits, y, (idx, _, _), q_t in zip(s_all, targets, stats, q_teacher):
                    q_s = losses.topm_tail_logprobs(torch.log_softmax(s_logits.float(), -1), idx)
                    student_loss = student_loss + losses.bucket_kl(q_s, q_t).mean() * (len(y) / batch.n_tokens)
                student_loss.backward()
                m["student_kl"] += float(student_loss.detach()) / len(batches)
            if train_composer and leaf.grad is not None:  # the latent gradient into the composer
                if cfg.recompute_encoder:
                    texts = [e.text for e in unique.values()]
                    step = max(1, cfg.encoder_batch)
                    for i in range(0, len(texts), step):
                        self.composer.encode(texts[i:i + step]).backward(leaf.grad[i:i + step])
                else:
                    latents.backward(leaf.grad)
            del latents, leaf
            m["grad_norm"] += self.step_optimizer(self.student_opt, self.student_params) / len(batches)
            anchor, cnorm = self._finish_composer()
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

"""LOPD: Latent On-Policy Self-Distillation (docs/design.md section 7), as the authors' code does it.

One update, top to bottom (:meth:`LOPD.update`), per minibatch of whole task groups:

1. **retrieve** the top-J experiences for each task (never the scored rollout itself); a rollout for which
   nothing was retrieved gets no supervision at all (``skipped_no_context``);
2. **compose**: the composer encodes "task to solve + experience" for each retrieved experience into K latent
   tokens (every pair of a ``--score-batch`` chunk of groups in one encoder pass, :meth:`LOPD.compose_many`);
   the J·K latents replace a run of placeholder ids inside the task's user turn (``lopd_train.latent.context``);
3. **teacher top-k**: the frozen backbone re-scores the student's tokens with that context; its top-M ids
   are the KL support (``--kl-support teacher``; the student's top-M with ``student``) and its buckets (top-M
   + precise tail), detached, the student's target. One pass per group serves both steps: the composer step
   backpropagates through it (the student's step cannot change it: the teacher is the frozen backbone), and
   the prompt before the latents runs without a graph;
4. **student step**: reverse KL(p̂_S || p̂_T) on the support, token mean over the supervised tokens, AdamW;
5. **composer step**: per rollout ``KL + β (m - δ) + λ L_anchor`` (``losses.composer_objective``), each
   supervised rollout weighing the same, its own AdamW; the anchor pulls the latents toward those of the
   cold-started composer (a frozen snapshot, cached per task and experience), divided by their mean square
   (``--anchor-norm relative``); the latents' drift from them, relative to their RMS, is logged
   (``latent_drift``);
6. **dual update** ``β <- max(0, β + η (m - δ̄))`` with δ̄ token-weighted; the loss above used the old β.

Gradient norms are clipped to ``max_grad_norm``; a step whose norm is not finite is skipped. **Cold start**
(:meth:`LOPD.cold_start`, before on-policy training) fits the composer alone by the NLL of successful
trajectories under the teacher with their retrieved latent context, each trajectory retrieving by its own
instruction with its own bank row allowed (the authors' pairing: what the composer is fitted on is what it
reads on-policy, the task's own experiences first); its result is the anchor's reference and what
``--freeze-composer`` (and ``--margin-ablation no-composer-phase``, the authors' "no margin") keeps.

Knobs, the reference's value (bingreeky/LOPD @ 50c3d7f, ``configs/training/lopd_qwen3_4b_envscaler.yaml`` and
``compressor_sft_qwen3_4b_envscaler.yaml``) and ours:

====================  ======================  ======================  ==============================================
knob                  reference               ours (default)          why
====================  ======================  ======================  ==============================================
``--kl-support``      teacher top-20 + tail   ``teacher``             same; ``student`` is TRL's variant
``--top-m``           20                      20                      same
``--top-j``           3                       3                       same
``--num-latents``     K = 32                  32                      same
``--margin``          m = 0.05                0.05                    same
``--anchor-coef``     λ = 0.2                 0.2                     same (anchor on latents, toward cold start)
``--beta-lr``         η = 0.5                 0.5                     same
``--beta-init``       β₀ = 0                  0.0                     same
``--composer-weighting``  per rollout         ``sequence``            same; ``token`` weighs rollouts by length
``--max-grad-norm``   1.0                     1.0                     same (cold start: ref. clips Q-Former 30 and
                                                                      LoRA 3; we clip the composer at 1.0)
``--lr`` (student)    1e-5, full fine-tune    1e-4, LoRA r=16         LoRA needs a larger step than full fine-tuning;
                                                                      measured on SmolLM2-135M (see below)
``--composer-lr``     1e-5                    1e-5                    same (study v2 ran 1e-4: see below)
``--anchor-norm``     LayerNorm latents, RMS 1  ``relative``          same strength for a relative drift (study
                                                                      v2: absolute MSE at RMS 0.136, ~54x weaker)
``--composer-lora-r`` r = 8, α = 16           8 / 16                  same
``--cold-start-steps``  1,000 at batch 8      100 at batch 8          CPU budget; the main job uses a few steps
``--cold-start-lr``   1e-5, AdamW defaults    1e-5, wd 0.01           same (its own optimiser, not the on-policy one)
cold-start clips      Q-Former 30, LoRA 3     30 / 3                  same
``--cold-start-retrieval``  own query, self   ``auto`` (``self`` with   same; ``exclude`` (study v2) is the control,
                      retrieval allowed       a reference bank)       the default with a dynamic bank
``--temperature``     0.7, top-p .95, top-k 20  0.7, 0.95, 20         same (configurable; the recorded log-probs
                                                                      are the untruncated policy's)
``--experience-format``  full chat transcript  ``chat``               same; ``trace`` is our compact trace
``--experience-tokens``  whole trajectory      256 (tail kept)        CPU budget
``--bank-mode``       fixed bank, built first  ``reference``          same: sampled before training, keyed and
                      (same task retrievable)                         queried by the instruction, same-task
                                                                      experiences retrieved, never the scored
                                                                      trajectory; ``dynamic`` is study v1's bank
``--composer``        Perceiver resampler,    ``qformer`` (2 layers,  ``perceiver`` is theirs (model width, heads
                      one block x 8, shared   width 256)              as the backbone's, ff x4, LayerNorm output);
                                                                      the default stays until the decisive test
                                                                      (benchmarks/results/decisive_test) decides
====================  ======================  ======================  ==============================================

The student's learning rate is the one place where the reference's value does not carry over: its student is
fully fine-tuned, ours is a LoRA, whose updates need a larger step. (Study v2 also ran the composer at 1e-4 on
the measurement below; with the authors' pairing and scale restored the composer runs at their 1e-5.) ``python benchmarks/trainer_step.py --threads 1
--sweep --tasks 2 --group 2`` (SmolLM2-135M, one training task of 2 sampled rollouts, one held-back task,
3 steps from the same fresh adapters; ``benchmarks/results/trainer_step/smollm2_sweep.txt``, 2026-12-01,
load average ~9) measured:

==========  =========================================  ==============================================
lr          student: held-back KL drop, r=8 / r=16     composer cold start: training NLL after 3 steps
==========  =========================================  ==============================================
1e-5 (ref)  1.8% / 3.5%                                3.793 (from 3.835)
5e-5        8.5% / 15.8%                               3.763
1e-4        16.1% / **26.6%**                          **3.720** (held back +0.1%, the least of all)
3e-4        31.0% / 31.4%                              4.113: diverges at step 3
==========  =========================================  ==============================================

So: at the reference's 1e-5 a LoRA student barely moves in the few hundred rollouts a CPU run affords;
the student is stable up to 3e-4 over these 3 steps, but the composer diverges there, and 1e-4 is the
largest rate at which both are stable. 1e-4 for both, with the student at r=16 (which at 1e-4 moves the
held-back KL 1.7x as far as r=8). What this does not show: stability over hundreds of steps, and the
composer's held-back NLL rises slightly at every rate (one batch of 2 rollouts is overfitted in 3 steps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from lopd_train.algorithms import losses
from lopd_train.algorithms.base import Algorithm
from lopd_train.latent.composer import Composer
from lopd_train.latent.context import experience_text
from lopd_train.rollout.engine import Trajectory
from lopd_train.scoring import score_group, score_groups

PROBES = 4  # banked successes whose teacher NLL is logged after each composer update (probe_teacher_nll)


class ColdStartError(RuntimeError):
    """The cold start has too little to train on (and was not allowed to be empty)."""


@dataclass
class Group:
    """One task's rollouts in a step, with what the update computes for them along the way."""

    members: list[Trajectory]
    experiences: list[Any]
    positions: list[int]  # placeholder positions in the teacher's prompt
    teacher_seqs: list[torch.Tensor]
    teacher_masks: list[torch.Tensor]
    seqs: list[torch.Tensor]  # the student's own sequences
    masks: list[torch.Tensor]
    targets: list[torch.Tensor]  # the sampled tokens
    support: list[torch.Tensor] = field(default_factory=list)  # [T, M] bucket ids per rollout
    q_teacher: list[torch.Tensor] = field(default_factory=list)  # [T, M+1], no gradient
    teacher_logp_y: list[torch.Tensor] = field(default_factory=list)  # [T], no gradient
    q_student: list[torch.Tensor] = field(default_factory=list)  # [T, M+1], detached
    student_logp_y: list[torch.Tensor] = field(default_factory=list)  # [T], detached

    @property
    def task(self) -> str:
        return self.members[0].task

    @property
    def n_tokens(self) -> int:
        return sum(len(y) for y in self.targets)


def prompt_key(t: Trajectory) -> tuple:
    return (t.task_id, tuple(t.input_ids[:t.prompt_len]))


def same_prompt_groups(trajectories: list[Trajectory]) -> list[list[Trajectory]]:
    """Trajectories grouped by task and prompt (cold start mixes rollout batches, whose group numbers repeat)."""
    out: dict[tuple, list[Trajectory]] = {}
    for t in trajectories:
        out.setdefault(prompt_key(t), []).append(t)
    return list(out.values())


def cold_start_pairs(retriever, trajectories: list[Trajectory], k: int, mode: str) -> list[tuple[Trajectory, list[Any]]]:
    """(trajectory, its top-``k`` experiences) for the cold start, retrieved by each trajectory's instruction:
    ``self`` lets a banked trajectory's own row come back (the authors'), ``exclude`` never (the control).
    Trajectories that retrieve nothing are left out."""
    if mode not in ("self", "exclude"):
        raise ValueError(f"cold-start retrieval must be self or exclude, got {mode!r}")
    if not trajectories:
        return []
    exclude = [[t.bank_id] if mode == "exclude" and t.bank_id is not None else [] for t in trajectories]
    hits = retriever.retrieve([t.task for t in trajectories], k=k, exclude=exclude)
    return [(t, exps) for t, exps in zip(trajectories, hits) if exps]


def pairing_stats(pool: list[tuple[Trajectory, list[Any]]]) -> dict[str, float]:
    """What the cold start is fitted on: the fraction of retrieved experiences of the trajectory's own task
    (over all experiences of all pairs), and the fraction of pairs whose own bank row came back."""
    n_exp = sum(len(exps) for _, exps in pool)
    same = sum(e.task_id == t.task_id for t, exps in pool for e in exps)
    own = sum(t.bank_id is not None and any(e.id == t.bank_id for e in exps) for t, exps in pool)
    return {"cold_start_same_task_fraction": same / n_exp if n_exp else 0.0,
            "cold_start_own_row_fraction": own / len(pool) if pool else 0.0}


class LOPD(Algorithm):
    name = "lopd"
    teacher_sees = "J*K latent tokens composed from the top-J retrieved experiences"
    uses_bank = True
    has_cold_start = True
    state_fields = ("beta",)

    @classmethod
    def extra_adapters(cls, cfg) -> dict[str, tuple[int, int]]:
        """The composer's encoder LoRA, and its cold-start snapshot (the anchor), of one shape."""
        return dict.fromkeys(("composer", "anchor"), (cfg.lopd.composer_lora_r, cfg.lopd.composer_lora_alpha))

    @classmethod
    def records_top_m(cls, cfg) -> bool:
        return cfg.kl.kl_support == "student"  # only the student support reads the sampler's top-M

    def __init__(self, policy, tokenizer, cfg, bank=None, retriever=None):
        super().__init__(policy, tokenizer, cfg, bank, retriever)
        lopd = cfg.lopd
        kw = dict(num_queries=lopd.num_latents, dim=lopd.qformer_dim, layers=lopd.qformer_layers,
                  heads=lopd.qformer_heads, max_tokens=cfg.experience.experience_tokens, kind=lopd.composer,
                  depth=lopd.perceiver_depth)
        self.composer = Composer(policy, tokenizer, "composer", **kw)
        self.snapshot = Composer(policy, tokenizer, "anchor", **kw)  # the cold-started composer, frozen
        self.snapshot.compressor.requires_grad_(False)
        self.snapshot.copy_from(self.composer)
        #: groups per encoder pass in a cold-start step: one on a CPU, all (None) elsewhere (cold_start_step)
        self.compose_per_pass: int | None = 1 if self.device.type == "cpu" else None
        self._pig = None  # the PIG metric (--pig-every), built on first use
        self.composer_params = self.composer.trainable_parameters()
        self.composer_opt = torch.optim.AdamW(self.composer_params, lr=lopd.composer_lr, weight_decay=0.0,
                                              betas=(0.9, 0.99))
        # the cold start's own optimiser, as the authors' SFT: AdamW at its defaults (betas 0.9/0.999, weight
        # decay 0.01), the compressor and the encoder LoRA clipped apart (30 and 3)
        self.cold_start_opt = torch.optim.AdamW(self.composer_params, lr=lopd.cold_start_lr, weight_decay=0.01)
        self.cold_start_clips = [(self.composer.lora_parameters(), lopd.cold_start_lora_clip),
                                 (list(self.composer.compressor.parameters()), lopd.cold_start_compressor_clip)]
        self.beta = float(lopd.beta_init)
        self._anchor_cache: dict[tuple[str, int], torch.Tensor] = {}
        self.probes: list[tuple[Trajectory, list[Any]]] = []  # banked successes for probe_nll (set by cold start)

    # ------------------------------------------------------------------ the pieces a step is made of
    def retrieve(self, groups: list[list[Trajectory]]) -> list[list[Any]]:
        """The top-J experiences for each group (one task each; all its rollouts share them). A trajectory that
        is itself a bank row (``bank_id``: a dynamic bank's fresh successes, a cold start's banked ones) is
        never retrieved for its group; experiences of the same task are (a reference bank's point)."""
        exclude = [[t.bank_id for t in members if t.bank_id is not None] for members in groups]
        assert self.retriever is not None, "LOPD reads the bank (uses_bank): the trainer gives it a retriever"
        return self.retriever.retrieve([members[0].task for members in groups], k=self.cfg.experience.top_j,
                                       exclude=exclude)

    def group(self, members: list[Trajectory], experiences: list[Any]) -> Group:
        positions, t_seqs, t_masks = self.context_view(members, n_latent=len(experiences) * self.cfg.lopd.num_latents)
        seqs, masks, targets, _ = self.tensors(members)
        return Group(members, experiences, positions, t_seqs, t_masks, seqs, masks, targets)

    def compose(self, task: str, experiences: list[Any], composer: Composer | None = None) -> torch.Tensor:
        """The latent context ``[J*K, d]`` for a task: each experience encoded together with the task."""
        return self.compose_many([(task, experiences)], composer)[0]

    def compose_many(self, contexts: list[tuple[str, list[Any]]], composer: Composer | None = None) -> list[torch.Tensor]:
        """:meth:`compose` for several ``(task, experiences)`` at once: every (task, experience) pair of all of
        them in one encoder pass (one padded batch, masked: each pair's latents are what it gets alone), then
        cut back into one ``[J*K, d]`` context each. One pass instead of one per group is the point: on a GPU
        a group's pass is a few hundred small kernels, and a step composes for every group and every probe."""
        composer = composer or self.composer
        fmt = self.cfg.experience.experience_format
        pairs = [(task, experience_text(e, fmt)) for task, exps in contexts for e in exps]
        if not pairs:
            return [torch.empty(0) for _ in contexts]
        latents = composer.encode(pairs)
        out, i = [], 0
        for _, exps in contexts:
            out.append(latents[i:i + len(exps)].reshape(-1, latents.shape[-1]))
            i += len(exps)
        return out

    @torch.no_grad()
    def anchor_latents(self, g: Group) -> torch.Tensor:
        """The cold-started composer's latents for the group's (task, experience) pairs, cached: the snapshot
        never changes during on-policy training (and a resumed run recomputes exactly the same values)."""
        for e in g.experiences:  # one at a time: a cached value must not depend on what it was batched with
            if (g.task, e.id) not in self._anchor_cache:
                self._anchor_cache[(g.task, e.id)] = self.compose(g.task, [e], self.snapshot)
        return torch.cat([self._anchor_cache[(g.task, e.id)] for e in g.experiences])

    def teacher_logprobs(self, g: Group, latents: torch.Tensor, checkpoint: bool = False) -> list[torch.Tensor]:
        """``[T, V]`` teacher log-probabilities per rollout, latents injected at the placeholders. ``checkpoint``:
        keep only the pass's inputs and outputs for the composer's backward, which comes after the student's step
        (same values and gradients; see :func:`lopd_train.scoring.score_group`)."""
        logits = score_group(self.policy, g.teacher_seqs, g.teacher_masks, (g.positions, latents), teacher=True,
                             share_prefix=self.share_prompt, checkpoint_teacher=True if checkpoint else None)
        return [torch.log_softmax(x.float(), -1) for x in logits]

    @torch.no_grad()
    def student_support(self, g: Group, stale: bool) -> list[torch.Tensor]:
        """The student's top-M ids per rollout (``--kl-support student``): as the sampler recorded them, or
        re-scored when the recording is missing or stale (an earlier minibatch already moved the student)."""
        if not stale and all(t.topm_ids is not None for t in g.members):
            return [t.topm_ids.to(self.device) for t in g.members if t.topm_ids is not None]
        logits = score_group(self.policy, g.seqs, g.masks, share_prefix=self.share_prompt)
        return [losses.kl_support(torch.log_softmax(x.float(), -1), None, self.cfg.kl.top_m, "student")
                for x in logits]

    # ------------------------------------------------------------------ one update
    def update(self, trajectories: list[Trajectory]) -> dict[str, float]:
        lopd, topm = self.cfg.lopd, self.cfg.kl  # LOPD's own settings, and its top-M KL's
        beta = self.beta if lopd.use_margin else 0.0  # the loss uses the dual variable from before this step
        metrics = {"student_kl": 0.0, "composer_kl": 0.0, "anchor": 0.0, "grad_norm": 0.0, "composer_grad_norm": 0.0}
        delta_sum, delta_tokens, n_total, n_skipped = 0.0, 0, 0, 0
        split = {True: [0.0, 0], False: [0.0, 0]}  # δ token sums and counts on successful / failed rollouts
        batches = self.minibatches(trajectories)
        for i, batch in enumerate(batches):
            # 1. retrieve: top-J experiences per task group; a group with none gets no supervision at all
            members_of = batch.groups_of()
            groups = [self.group(ms, exps) for ms, exps in zip(members_of, self.retrieve(members_of)) if exps]
            n_total += len(batch.trajectories)
            n_skipped += len(batch.trajectories) - sum(len(g.members) for g in groups)
            if not groups:
                self.idle_steps()
                continue
            n_rollouts, n_tokens = sum(len(g.members) for g in groups), sum(g.n_tokens for g in groups)

            # one pass of the composer and the teacher per group: the student step needs the teacher's values
            # (detached), the composer step backpropagates through the same pass (the student's step cannot change
            # it: the teacher is the frozen backbone and the composer has its own adapter); each optimiser steps
            # once its gradients over all groups are in, the student's first
            train_composer = not lopd.freeze_composer
            for chunk in self.chunks(groups):  # --score-batch rollouts: one student pass for the whole chunk
                live = []  # per group: latents, teacher buckets and log-probs of the sampled tokens, with graph
                with torch.set_grad_enabled(train_composer):
                    # 2. compose: J·K latent tokens from (task, experience) pairs, for the placeholders; the
                    # chunk's pairs in one encoder pass
                    z_of = self.compose_many([(g.task, g.experiences) for g in chunk])
                for g, z in zip(chunk, z_of):
                    with torch.set_grad_enabled(train_composer):
                        # 3. teacher top-k: the KL support and the teacher's buckets (top-M + tail) on it
                        t_logp = self.teacher_logprobs(g, z, checkpoint=train_composer)
                        g.support = (self.student_support(g, stale=i > 0) if topm.kl_support == "student" else
                                     [losses.kl_support(None, lp, topm.top_m, "teacher") for lp in t_logp])
                        q_t = [losses.topm_tail_logprobs(lp, idx) for lp, idx in zip(t_logp, g.support)]
                        t_logp_y = [lp.gather(-1, y[:, None])[:, 0] for lp, y in zip(t_logp, g.targets)]
                        del t_logp
                    g.q_teacher = [q.detach() for q in q_t]
                    g.teacher_logp_y = [lp.detach() for lp in t_logp_y]
                    live.append((z, q_t, t_logp_y))

                # 4. student step: reverse KL(q_S || q_T) on the support, token mean over the supervised tokens;
                # the chunk's rollouts, one backward (one pass when their common prefix makes it cheaper)
                s_logits = score_groups(self.policy, [g.seqs for g in chunk], [g.masks for g in chunk],
                                        share_prefix=self.share_prompt)
                loss, kl_of = 0.0, []
                for g in chunk:
                    s_logp = [torch.log_softmax(x.float(), -1) for x in s_logits[:len(g.members)]]
                    s_logits = s_logits[len(g.members):]
                    q_s = [losses.topm_tail_logprobs(lp, idx) for lp, idx in zip(s_logp, g.support)]
                    kl_per = [losses.bucket_kl(q, qt) for q, qt in zip(q_s, g.q_teacher)]  # [T] per rollout
                    loss = loss + sum(k.sum() for k in kl_per) / n_tokens
                    g.q_student = [q.detach() for q in q_s]
                    g.student_logp_y = [lp.detach().gather(-1, y[:, None])[:, 0] for lp, y in zip(s_logp, g.targets)]
                    kl_of.append([float(k.detach().mean()) for k in kl_per])
                    del s_logp, q_s, kl_per
                assert isinstance(loss, torch.Tensor)  # a chunk is never empty: the sum is a tensor
                loss.backward()
                metrics["student_kl"] += float(loss.detach()) / len(batches)
                del s_logits, loss
                for g, kls in zip(chunk, kl_of):
                    for t, lt, ls, kl in zip(g.members, g.teacher_logp_y, g.student_logp_y, kls):  # δ, for the dual update
                        d = float(losses.privileged_margin(lt, ls, t.reward)) * len(lt)
                        delta_sum, delta_tokens = delta_sum + d, delta_tokens + len(lt)
                        split[bool(t.success)][0] += d
                        split[bool(t.success)][1] += len(lt)
                        # for the tracker's rollout table (--rollout-table-every)
                        t.table_notes = {"experience_ids": [e.id for e in g.experiences],
                                         "delta": d / max(len(lt), 1), "teacher_student_kl": kl}

                # 5. composer step: KL + β (m - δ) + λ·anchor per rollout, each supervised rollout weighing the same;
                # one backward for the chunk (its groups share the encoder pass)
                loss = 0.0
                for g, (z, q_t, t_logp_y) in zip(chunk, live):
                    if not train_composer:
                        break
                    z0 = self.anchor_latents(g)
                    drift = losses.relative_drift(z.detach(), z0)
                    metrics["latent_drift"] = metrics.get("latent_drift", 0.0) + drift * len(g.members) / n_rollouts / len(batches)
                    scale = float(z0.float().pow(2).mean()) if lopd.anchor_norm == "relative" else 1.0
                    for k, t in enumerate(g.members):
                        terms = losses.composer_objective(g.q_student[k], q_t[k], g.student_logp_y[k], t_logp_y[k],
                                                          t.reward, beta, lopd.margin, z, z0, lopd.anchor_coef,
                                                          anchor_scale=scale)
                        weight = 1.0 / n_rollouts if lopd.composer_weighting == "sequence" else len(g.targets[k]) / n_tokens
                        loss = loss + terms.loss * weight
                        metrics["composer_kl"] += terms.kl / n_rollouts / len(batches)
                        metrics["anchor"] += terms.anchor / n_rollouts / len(batches)
                if train_composer:
                    assert isinstance(loss, torch.Tensor)  # the composer trains on a non-empty chunk: a tensor sum
                    loss.backward()
                del live, loss
            metrics["grad_norm"] += self.step_optimizer(self.student_opt, self.student_params) / len(batches)
            if train_composer:
                metrics["composer_grad_norm"] += self.step_optimizer(self.composer_opt, self.composer_params) / len(batches)

        # 6. dual update: β <- max(0, β + η (m - δ̄)), δ̄ the token-weighted margin of this step
        delta_sum, delta_tokens = self.dist.sum(delta_sum, delta_tokens)  # every rank's rollouts: one β for all
        metrics["margin_delta"] = delta_sum / delta_tokens if delta_tokens else 0.0
        for ok, name in ((True, "margin_delta_success"), (False, "margin_delta_failure")):
            s, n = self.dist.sum(*split[ok])
            if n:  # absent: no such rollout had a context this step
                metrics[name] = s / n
        if lopd.use_margin and delta_tokens:
            self.beta = losses.dual_update(self.beta, metrics["margin_delta"], lopd.margin, lopd.beta_lr)
            if lopd.beta_max > 0:  # the runaway guard (off by default: the authors' semantics)
                self.beta = min(self.beta, lopd.beta_max)
        metrics.update(beta=self.beta, beta_used=beta, skipped_no_context=n_skipped / max(n_total, 1),
                 context_fraction=1.0 - n_skipped / max(n_total, 1), skipped_steps=self.skipped_steps)
        return metrics

    def diagnostics(self, step: int, final: bool = False) -> dict[str, float]:
        """The probe NLL (:meth:`probe_nll`) every ``--probe-every`` steps and at the last one, when the composer
        trains, and the PIG metric every ``--pig-every`` steps (:class:`~lopd_train.latent.diagnostics.PIGMetric`):
        diagnostics, kept off the update (each composes and scores again)."""
        out = {}
        every = self.cfg.lopd.probe_every
        if not self.cfg.lopd.freeze_composer and self.probes and (final or (every and step % every == 0)):
            out["probe_teacher_nll"] = self.probe_nll()
        if self.cfg.lopd.pig_every and step % self.cfg.lopd.pig_every == 0:  # --pig-every: the PIG metric
            from lopd_train.latent.diagnostics import PIGMetric

            if self._pig is None:
                self._pig = PIGMetric(self)
            out.update(self._pig.measure())
        return out

    @torch.no_grad()
    def probe_nll(self) -> float:
        """The teacher's NLL per token, with the current composer's latents, on a few banked successes (kept
        from the cold start, with their retrieved experiences): after a composer update it shows whether the
        composer still helps the teacher on what it was fitted to, or is breaking it to widen δ. NaN
        without probes (then the metric is left out)."""
        if not self.probes:
            return float("nan")
        total, n = 0.0, 0
        groups = [self.group([t], exps) for t, exps in self.probes]
        for g, z in zip(groups, self.compose_many([(g.task, g.experiences) for g in groups])):
            (lp,) = self.teacher_logprobs(g, z)
            total += float(-lp.gather(-1, g.targets[0][:, None]).sum())
            n += len(g.targets[0])
        return total / max(n, 1)

    def idle_steps(self) -> None:
        """Nothing to supervise in this minibatch: in a data-parallel run this rank still takes the student's and
        the composer's optimiser steps with the other ranks' averaged gradients (``lopd_train.distributed``);
        in one process there is no step to take."""
        if self.dist.world_size > 1:
            self.step_optimizer(self.student_opt, self.student_params)
            if not self.cfg.lopd.freeze_composer:
                self.step_optimizer(self.composer_opt, self.composer_params)

    # ------------------------------------------------------------------ cold start
    def cold_start(self, trajectories: list[Trajectory], log=None, progress: bool = False, start: int = 0,
                   on_step=None) -> dict[str, float]:
        """``cfg.lopd.cold_start_steps`` composer steps (encoder LoRA + Q-Former; the student is untouched) on
        minibatches of ``cfg.lopd.cold_start_batch_size`` successful trajectories: NLL of their sampled tokens under
        the teacher with their retrieved latent context, token mean, no anchor. Each trajectory retrieves its
        top-J by its own instruction (``--cold-start-retrieval``): ``self``, the authors' ``allow_self_retrieval``,
        lets its own bank row come back, so the composer is fitted on (task, the same task's experiences)
        pairs, which is what it reads on-policy; ``exclude`` skips its own row, and with a bank of one row per
        task (identical successes are deduplicated) every pair is then cross-task. The summary logs the
        fraction of pairs whose experiences are of the trajectory's task and whose own row came back.
        ``log`` receives one row per step (the NLL curve). Afterwards the snapshot (the anchor's reference) is
        the cold-started composer. The cold start has its own optimiser (:attr:`cold_start_opt`, the authors'
        settings), not the on-policy one.

        Resumable: ``start`` steps were already taken (a checkpoint holds the composer after them), so their
        batches are drawn again from the same generator but not trained on, and the run goes on with the very
        batches it would have had; ``on_step(n)`` is called after each step (the trainer checkpoints there).

        It cannot be silently empty (study v1 ran 0 steps in every LOPD run and nothing said so): fewer
        (trajectory, experiences) pairs than ``cfg.lopd.cold_start_min_successes``, or no step at all, raises
        :class:`ColdStartError` saying why and how to seed the bank, unless ``cfg.lopd.allow_empty_cold_start``,
        which goes on and logs ``cold_start_empty``; ``--freeze-composer`` refuses a composer no step trained."""
        cfg, lopd = self.cfg, self.cfg.lopd
        ok = [t for t in trajectories if t.success and t.n_actions > 0]
        pool = cold_start_pairs(self.retriever, ok, cfg.experience.top_j, lopd.cold_start_retrieval)
        n_pairs = int(self.dist.sum(len(pool))[0])
        planned = lopd.cold_start_steps if n_pairs else 0
        summary: dict[str, float] = {"cold_start_trajectories": n_pairs, "cold_start_successes": len(ok),
                                     "cold_start_steps": 0, "cold_start_empty": 0,
                                     **pairing_stats(pool), "cold_start_self_retrieval": float(lopd.cold_start_retrieval == "self")}
        if planned == 0 or n_pairs < lopd.cold_start_min_successes:
            why = (f"the cold start found {n_pairs} (successful trajectory, retrieved experiences) pairs "
                   f"({len(ok)} successes, bank of {len(self.bank) if self.bank is not None else 0}), fewer than "
                   f"--cold-start-min-successes {lopd.cold_start_min_successes}, and would run {planned} of "
                   f"--cold-start-steps {lopd.cold_start_steps} composer steps")
            refusal = None
            if lopd.freeze_composer and planned == 0:
                refusal = why + ": --freeze-composer would freeze an untrained (random) composer"
            elif not lopd.allow_empty_cold_start:
                refusal = (why + ". Seed the bank: --bank-mode reference with more --bank-samples per "
                           "training task or more training tasks (lopd bank build), --init-bank FILE "
                           "in dynamic mode, or more --cold-start-max-batches; or pass "
                           "--allow-empty-cold-start to go on with what there is (logged as cold_start_empty)")
            if refusal is not None:
                if log is not None:  # the run folder keeps why it stopped
                    log({**summary, "cold_start_error": refusal})
                raise ColdStartError(refusal)
            summary["cold_start_empty"] = 1
            import logging

            logging.getLogger(__name__).warning("%s; going on (--allow-empty-cold-start)", why)
        rng = np.random.default_rng(cfg.seed)
        order: list[int] = []
        curve = []
        for step in tqdm(range(planned), desc="cold start", unit="step", disable=not progress):
            if len(order) < lopd.cold_start_batch_size:  # reshuffle per pass over the pool
                order += [int(j) for j in rng.permutation(len(pool))]
            take, order = order[:lopd.cold_start_batch_size], order[lopd.cold_start_batch_size:]
            if step < start:
                continue  # taken before the checkpoint this run resumed from
            nll = self.cold_start_step([pool[j] for j in take])
            curve.append(nll)
            if log is not None:
                log({"cold_start_step": step + 1, "cold_start_nll": nll, "cold_start_batch": len(take)})
            if on_step is not None:
                on_step(step + 1)
        self.snapshot.copy_from(self.composer)
        self._anchor_cache.clear()
        self.student_opt.zero_grad(set_to_none=True)
        self.probes = pool[:PROBES]
        if curve:
            summary.update(cold_start_steps=start + len(curve), cold_start_nll_last=curve[-1],
                           **({"cold_start_nll_first": curve[0]} if start == 0 else {"cold_start_resumed_at": start}))
        elif lopd.freeze_composer:
            raise ColdStartError("--freeze-composer: the cold start trained the composer for 0 steps")
        return summary

    def cold_start_step(self, items: list[tuple[Trajectory, list[Any]]]) -> float:
        """One composer step on ``items`` (trajectory, its retrieved experiences); returns the NLL. Items with
        the same prompt and the same experiences share one teacher prompt."""
        by_group: dict[tuple, list[tuple[Trajectory, list[Any]]]] = {}
        for t, exps in items:
            by_group.setdefault((prompt_key(t), tuple(e.id for e in exps)), []).append((t, exps))
        groups = [self.group([t for t, _ in its], its[0][1]) for its in by_group.values()]
        n_tokens = sum(g.n_tokens for g in groups)
        # The gradient is a sum over groups, so it is taken a part at a time: the encoder over ``per_pass`` groups
        # (its graph kept), each group's teacher graph backpropagated into its latents alone, then the encoder's
        # backward from their gradients. The same gradient as one backward of the summed loss, with far less
        # alive at once: the encoder's graph of a batch (24 sequences at J = 3, every layer's activations with
        # LoRA) is ~10 GB for a 135M model. On a CPU one group a pass costs nothing (no launch overhead to
        # amortise); on an accelerator the whole batch goes in one pass.
        per_pass = self.compose_per_pass or len(groups)
        nll = 0.0
        for i in range(0, len(groups), per_pass):
            part = groups[i:i + per_pass]
            zs = self.compose_many([(g.task, g.experiences) for g in part])
            leaves = [z.detach().requires_grad_() for z in zs]
            for g, z in zip(part, leaves):
                t_logp = self.teacher_logprobs(g, z)
                loss = sum(-lp.gather(-1, y[:, None]).sum() for lp, y in zip(t_logp, g.targets)) / n_tokens
                del t_logp
                assert isinstance(loss, torch.Tensor)  # a group has rollouts: the sum is a tensor
                loss.backward()
                nll += float(loss.detach())
                del loss
            torch.autograd.backward(zs, [z.grad if z.grad is not None else torch.zeros_like(z) for z in leaves])
            del zs, leaves
        self.step_optimizer(self.cold_start_opt, self.composer_params, clips=self.cold_start_clips)
        return nll


    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self) -> dict[str, Any]:
        from lopd_train.experience import plain

        return {**super().state_dict(), "composer": self.composer.kind,
                "compressor": self.composer.compressor.state_dict(),
                "snapshot_compressor": self.snapshot.compressor.state_dict(),
                "composer_opt": self.composer_opt.state_dict(), "cold_start_opt": self.cold_start_opt.state_dict(),
                "beta": self.beta,
                # so a resumed run logs the same probe_teacher_nll; plain data, as everything a checkpoint holds
                "probes": plain.probes_to_plain(self.probes)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        from lopd_train.experience import plain

        kind = state.get("composer", "qformer")  # checkpoints before --composer held a Q-Former under "qformer"
        if kind != self.composer.kind:
            raise ValueError(f"the checkpoint's composer is a {kind}, this run's --composer is {self.composer.kind}")
        super().load_state_dict(state)
        self.composer.compressor.load_state_dict(state["compressor" if "compressor" in state else "qformer"])
        self.snapshot.compressor.load_state_dict(
            state["snapshot_compressor" if "snapshot_compressor" in state else "snapshot_qformer"])
        self.composer_opt.load_state_dict(state["composer_opt"])
        if "cold_start_opt" in state:
            self.cold_start_opt.load_state_dict(state["cold_start_opt"])
        self.beta = float(state["beta"])
        self.probes = plain.probes_from_plain(state.get("probes", []))
        self._anchor_cache.clear()

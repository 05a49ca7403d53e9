"""The losses of LOPD and its baselines, as pure functions of tensors (docs/design.md section 7).

Nothing here knows about models, adapters or environments: each function takes logits / log-probabilities,
masks and scalars and returns a tensor, so every term can be checked against a brute-force reference on
small tensors (``tests/test_train_losses.py``). Conventions:

* ``logits`` are ``[..., V]`` un-normalised scores at the positions that predict the sampled tokens;
* ``mask`` is ``[...]`` with 1 for tokens the student sampled (the only ones that are trained);
* token means are taken over all masked tokens of the batch (token-level averaging).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

#: log-probabilities are floored here so that an empty tail bucket (``1 - sum(top-M) == 0``) stays finite.
LOG_FLOOR = -80.0


def masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``values`` over the positions where ``mask`` is 1 (0 when nothing is masked in)."""
    if mask is None:
        return values.mean()
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def topm_tail_logprobs(logp: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Coarse distribution over ``M + 1`` buckets: the ``M`` tokens in ``index`` and one tail bucket.

    ``logp`` is ``[..., V]`` log-probabilities, ``index`` ``[..., M]`` token ids. Returns ``[..., M + 1]``
    log-probabilities whose exponentials sum to 1: ``log p(top_i)`` and the tail ``log sum_{j not in top}
    p(j)``. With the full distribution at hand the tail is a log-sum-exp over the other ids, which is exact
    even when the top-M hold nearly all the mass (where ``log(1 - sum top)`` in fp32 rounds to ``log 0``).
    Floored at :data:`LOG_FLOOR` (an empty tail when M covers the vocabulary).
    """
    top = logp.gather(-1, index)
    rest = logp.scatter(-1, index, torch.finfo(logp.dtype).min)  # finite: no NaN gradient when M covers V
    tail = torch.logsumexp(rest, dim=-1, keepdim=True)
    return torch.cat([top, tail], dim=-1).clamp_min(LOG_FLOOR)


def kl_support(student_logp: torch.Tensor | None, teacher_logp: torch.Tensor | None, top_m: int,
               support: str = "teacher") -> torch.Tensor:
    """The token ids of the buckets (no gradient): the teacher's top-M (the authors' code, the default) or
    the student's top-M (TRL's GKD-style variant). ``[..., V] -> [..., M]``."""
    if support not in KL_SUPPORTS:
        raise ValueError(f"unknown KL support {support!r}; choose from {KL_SUPPORTS}")
    logp = teacher_logp if support == "teacher" else student_logp
    if logp is None:
        raise ValueError(f"the {support}'s log-probabilities are needed to pick its top-{top_m}")
    return logp.detach().topk(min(top_m, logp.shape[-1]), dim=-1).indices


KL_SUPPORTS = ("teacher", "student")


def reverse_kl_topm(student_logits: torch.Tensor, teacher_logits: torch.Tensor, top_m: int = 20,
                    mask: torch.Tensor | None = None, reduce: bool = True, support: str = "teacher") -> torch.Tensor:
    """Reverse KL ``KL(p̂_S || p̂_T)`` over ``support``'s top-M tokens plus a tail bucket, per token.

    No gradient flows through the choice of buckets. Pass detached logits on either side to decide which
    model the gradient reaches. Returns the masked token mean, or per-token values ``[...]`` with
    ``reduce=False``.
    """
    logp_s = torch.log_softmax(student_logits.float(), dim=-1)
    logp_t = torch.log_softmax(teacher_logits.float(), dim=-1)
    index = kl_support(logp_s, logp_t, top_m, support)
    kl = bucket_kl(topm_tail_logprobs(logp_s, index), topm_tail_logprobs(logp_t, index))
    return masked_mean(kl, mask) if reduce else kl


def bucket_kl(q_student: torch.Tensor, q_teacher: torch.Tensor) -> torch.Tensor:
    """``KL(q_S || q_T) = sum_b q_S(b) (log q_S(b) - log q_T(b))`` over the last axis of two bucket
    log-distributions (as made by :func:`topm_tail_logprobs`), per token."""
    return (q_student.exp() * (q_student - q_teacher)).sum(-1)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log p(tokens)`` under ``logits`` (``[..., V]`` and ``[...]`` -> ``[...]``)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def privileged_margin(teacher_logp_y: torch.Tensor, student_logp_y: torch.Tensor, reward: float) -> torch.Tensor:
    """``δ(τ) = A(τ) · mean_t (log p_T(y_t) - log p_S(y_t))`` with ``A = 2r - 1``, one number per rollout.

    ``*_logp_y`` are ``[T]`` log-probabilities of the sampled tokens. The teacher keeps its privileged
    information useful when ``δ >= m``: it must rate successful trajectories above the student does and failed
    ones below."""
    advantage = 2.0 * float(reward) - 1.0
    return advantage * (teacher_logp_y - student_logp_y).mean()


def margin_penalty(delta: torch.Tensor, beta: float, margin: float = 0.05) -> torch.Tensor:
    """The Lagrangian term ``β · (m - δ)`` of the constraint ``δ >= m``."""
    return beta * (margin - delta)


def dual_update(beta: float, delta: float, margin: float = 0.05, lr: float = 0.5) -> float:
    """Projected dual ascent ``β <- max(0, β + η (m - δ̄))`` (``delta`` = δ̄, the token-weighted mean margin of the
    step): β grows while the constraint is violated, and never goes below 0."""
    return max(0.0, float(beta) + float(lr) * (float(margin) - float(delta)))


def anchor_loss(latents: torch.Tensor, anchor_latents: torch.Tensor) -> torch.Tensor:
    """``L_anchor``: mean squared distance between the composer's latent tokens and those the cold-started
    composer (a frozen snapshot) makes of the same experiences for the same task. It keeps the latent context
    near what cold start taught the teacher to read; exactly zero right after cold start."""
    return (latents.float() - anchor_latents.detach().float()).pow(2).mean()


def relative_drift(latents: torch.Tensor, anchor_latents: torch.Tensor) -> float:
    """RMS of the latents' distance to the cold-started ones over the cold-started latents' RMS: how far the
    composer moved, comparable across latent scales (0 right after the cold start)."""
    ref = anchor_latents.detach().float().pow(2).mean().sqrt()
    gap = (latents.detach().float() - anchor_latents.detach().float()).pow(2).mean().sqrt()
    return float(gap / ref) if ref > 0 else float("nan")


@dataclass
class ComposerTerms:
    """One rollout's composer objective and its parts (detached copies for logging)."""

    loss: torch.Tensor
    kl: float
    delta: float
    anchor: float


def composer_objective(q_student: torch.Tensor, q_teacher: torch.Tensor, student_logp_y: torch.Tensor,
                       teacher_logp_y: torch.Tensor, reward: float, beta: float, margin: float = 0.05,
                       latents: torch.Tensor | None = None, anchor_latents: torch.Tensor | None = None,
                       anchor_coef: float = 0.2, anchor_scale: float = 1.0) -> ComposerTerms:
    """The composer's loss for one rollout: ``KL + β (m - δ) + λ L_anchor`` (docs/design.md section 7, step 7).

    * ``KL``: token mean of ``KL(q_S || q_T)`` over the buckets (``q_student`` detached, ``[T, M+1]``);
    * ``δ = (2r - 1) · mean_t (log p_T(y_t) - log p_S(y_t))``, one number per rollout: the teacher's
      advantage-weighted edge on the sampled tokens, which the constraint ``δ >= m`` keeps useful;
    * ``L_anchor``: :func:`anchor_loss` of this rollout's latent context (skipped when no snapshot is given),
      divided by ``anchor_scale`` (the cold-started latents' mean square for ``--anchor-norm relative``: then λ
      weighs a relative drift, as the authors' anchor does on latents of RMS about 1).

    ``beta`` is the dual variable *before* this step's dual update. The caller weighs rollouts (per
    sequence by default: ``loss / number of supervised rollouts``)."""
    kl = bucket_kl(q_student.detach(), q_teacher).mean()
    delta = privileged_margin(teacher_logp_y, student_logp_y.detach(), reward)
    loss = kl + margin_penalty(delta, beta, margin)
    anchor = torch.zeros((), device=kl.device)
    if latents is not None and anchor_latents is not None:
        anchor = anchor_loss(latents, anchor_latents) / anchor_scale
        loss = loss + anchor_coef * anchor
    return ComposerTerms(loss, float(kl.detach()), float(delta.detach()), float(anchor.detach()))


def group_advantages(rewards: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6,
                     scale: bool = True, unbiased: bool = False) -> torch.Tensor:
    """GRPO advantages: each reward minus its group's mean, divided by ``std + eps`` when ``scale``. ``unbiased``:
    the sample std (Bessel's n - 1, TRL's ``nanstd``; at group size 2 it is sqrt(2) times the population std);
    else the population std (n). A group of one has advantage 0."""
    adv = torch.empty_like(rewards, dtype=torch.float32)
    for g in groups.unique():
        sel = groups == g
        r = rewards[sel].float()
        centred = r - r.mean()
        if scale:
            std = r.std(unbiased=unbiased) if r.numel() > 1 else torch.zeros(())
            centred = centred / (std + eps)
        adv[sel] = centred
    return adv


def grpo_clip_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantage: torch.Tensor,
                   mask: torch.Tensor | None = None, clip_low: float = 0.2, clip_high: float = 0.2) -> torch.Tensor:
    """PPO/GRPO clipped surrogate ``-min(ρ A, clip(ρ, 1-ε_l, 1+ε_h) A)`` with ``ρ = exp(logp - old_logp)``,
    as a masked token mean. ``advantage`` is ``[B]`` and broadcast over tokens."""
    ratio = torch.exp(logp - old_logp)
    adv = advantage.unsqueeze(-1)
    surrogate = torch.minimum(ratio * adv, ratio.clamp(1.0 - clip_low, 1.0 + clip_high) * adv)
    return -masked_mean(surrogate, mask)


GRPO_LOSS_TYPES = ("dapo", "bnpo", "grpo", "dr_grpo")


def grpo_token_weight(n_rollout_tokens: int, loss_type: str, n_rollouts: int, n_tokens: int,
                      max_completion_length: int) -> float:
    """The weight of each token of one rollout (``n_rollout_tokens`` long) in a step's loss over ``n_rollouts``
    rollouts holding ``n_tokens`` tokens, as TRL's ``GRPOTrainer`` ``loss_type`` aggregates (TRL 1.10.0.dev0,
    ``trl/trainer/grpo_trainer.py``), so that a step's loss is ``sum_i weight_i · sum_t loss_it`` and can be built
    one chunk of rollouts at a time:

    * ``dapo`` (TRL's default) and ``bnpo``: ``1 / n_tokens``, a token mean over the step; they differ in TRL only
      across gradient-accumulation steps and processes, which one optimiser step over one minibatch lacks;
    * ``grpo``: ``1 / (n_rollout_tokens · n_rollouts)``: each rollout's token mean, then the mean over rollouts;
    * ``dr_grpo``: ``1 / (n_rollouts · max_completion_length)``, a constant."""
    if loss_type not in GRPO_LOSS_TYPES:
        raise ValueError(f"unknown GRPO loss type {loss_type!r}; choose from {GRPO_LOSS_TYPES}")
    if loss_type == "grpo":
        return 1.0 / (max(1, n_rollout_tokens) * max(1, n_rollouts))
    if loss_type == "dr_grpo":
        return 1.0 / (max(1, n_rollouts) * max(1, int(max_completion_length)))
    return 1.0 / max(1, n_tokens)


# ----------------------------------------------------------------------------------- baselines' extra terms

def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of ``KL(π_θ || π_ref)`` on tokens sampled from π_θ (Schulman's k3, as GRPO uses it):
    ``exp(ref - logp) - (ref - logp) - 1``; never negative, zero exactly where the two log-probs agree, and
    its expectation under π_θ is the true KL. ``ref_logp`` is treated as a constant."""
    diff = ref_logp.detach() - logp
    return torch.exp(diff) - diff - 1.0


def sampled_token_kl(student_logp_y: torch.Tensor, teacher_logp_y: torch.Tensor) -> torch.Tensor:
    """Per-token surrogate of the reverse KL from the sampled tokens alone (on-policy distillation with the
    teacher's log-ratio as a per-token reward): ``sg(log p_S(y) - log p_T(y)) · log p_S(y)``. Its gradient is
    the score-function estimate of ``∇ KL(p_S || p_T)`` on student samples; its value is not the KL (log
    ``student_logp_y - teacher_logp_y`` for that)."""
    return (student_logp_y - teacher_logp_y).detach() * student_logp_y


# ----------------------------------------------------------------------------------- the self-distillation divergences
#
# One family covers what the references of the text-context baselines use (issue 56):
#
# * SDPO, the authors' code (lasgroup/SDPO 0e6d510, ``verl/trainer/ppo/core_algos.py``
#   ``compute_self_distillation_loss``): JSD with α = 0.5 over the **student's** top-100 plus a tail bucket, both
#   distributions at the sampling temperature, times a clipped importance ratio (``is_clip`` 2);
# * SDFT, TRL 1.10.0.dev0 ``trl/experimental/sdft/loss_utils.py`` (``SDFTConfig``): the same JSD over the student's
#   top-100, renormalised (``distillation_add_tail=False``), importance clip 2;
# * OPSD, TRL's OPSD trainer (huggingface/trl PR #5990, ``trl/experimental/opsd/loss_utils.py`` at 55c3a9e16, never
#   released: TRL folded it into SDFT): forward KL (α = 0) over the full vocabulary with each vocabulary entry's term
#   clipped at 0.05 before the sum, importance clip 2;
# * our reverse KL over the teacher's top-M + tail (:func:`reverse_kl_topm`), LOPD's and the v2 baselines' loss.
#
# α follows the references' convention: 0 is the forward KL ``KL(p_T || p_S)``, 1 the reverse KL
# ``KL(p_S || p_T)``, and in between the generalised Jensen-Shannon divergence with the mixture
# ``m = (1 - α) p_S + α p_T``: ``(1 - α) KL(p_S || m) + α KL(p_T || m)`` (at α = 0.5 bounded by log 2 a token).

DIVERGENCE_SUPPORTS = ("student", "teacher", "full")


def divergence_terms(logp_s: torch.Tensor, logp_t: torch.Tensor, alpha: float) -> torch.Tensor:
    """The per-entry terms ``[..., K]`` of the α-divergence between two log-distributions over the same ``K``
    entries (tokens or buckets): their sum over the last axis is the divergence (see the section comment).

    The per-entry form is what OPSD clips (:func:`self_distillation_divergence` ``entry_clip``)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"the divergence's alpha must lie in [0, 1], got {alpha}")
    if alpha == 0.0:
        return logp_t.exp() * (logp_t - logp_s)
    if alpha == 1.0:
        return logp_s.exp() * (logp_s - logp_t)
    a = torch.tensor(float(alpha), dtype=logp_s.dtype, device=logp_s.device)
    mix = torch.logsumexp(torch.stack([logp_s + torch.log1p(-a), logp_t + torch.log(a)]), dim=0)
    return (1.0 - a) * logp_s.exp() * (logp_s - mix) + a * logp_t.exp() * (logp_t - mix)


def renormalised(logp: torch.Tensor) -> torch.Tensor:
    """Log-probabilities over a subset renormalised to sum to 1 (a top-k support without its tail)."""
    return logp - torch.logsumexp(logp, dim=-1, keepdim=True)


def self_distillation_divergence(student_logits: torch.Tensor, teacher_logits: torch.Tensor, *, alpha: float,
                                 top_k: int | None = None, support: str = "student", tail: bool = True,
                                 entry_clip: float | None = None, temperature: float = 1.0) -> torch.Tensor:
    """Per-token divergence ``[...]`` between the student's and the teacher's next-token distributions.

    * both logits are divided by ``temperature`` first (the references score at the sampling temperature);
    * ``support``: ``full`` (every vocabulary entry; ``top_k`` ignored), or the top-``top_k`` ids of the
      ``student`` (SDPO, SDFT) or the ``teacher`` (LOPD's reverse KL), chosen without gradient; on a top-k support
      ``tail`` adds one bucket with the rest of each distribution's mass, else the top-k are renormalised;
    * ``alpha``: 0 forward KL, 1 reverse KL, between the two the generalised JSD (:func:`divergence_terms`);
    * ``entry_clip``: each entry's term is clipped from above before the sum (OPSD's 0.05).

    Pass detached logits on the side that should get no gradient (the teacher)."""
    if support not in DIVERGENCE_SUPPORTS:
        raise ValueError(f"unknown divergence support {support!r}; choose from {DIVERGENCE_SUPPORTS}")
    t = float(temperature) if temperature and temperature > 0 else 1.0
    dtype = torch.promote_types(student_logits.dtype, torch.float32)  # fp32 at least (float64 stays)
    logp_s = torch.log_softmax(student_logits.to(dtype) / t, dim=-1)
    logp_t = torch.log_softmax(teacher_logits.to(dtype) / t, dim=-1)
    if support != "full":
        if top_k is None:
            raise ValueError("a top-k support needs top_k")
        index = (logp_s if support == "student" else logp_t).detach().topk(min(int(top_k), logp_s.shape[-1]), -1).indices
        if tail:
            logp_s, logp_t = topm_tail_logprobs(logp_s, index), topm_tail_logprobs(logp_t, index)
        else:
            logp_s, logp_t = renormalised(logp_s.gather(-1, index)), renormalised(logp_t.gather(-1, index))
    terms = divergence_terms(logp_s, logp_t, alpha)
    if entry_clip is not None:
        terms = terms.clamp(max=float(entry_clip))
    return terms.sum(-1)


def clipped_importance_ratio(student_logp_y: torch.Tensor, old_logp_y: torch.Tensor,
                             clip: float | None = 2.0) -> torch.Tensor:
    """The references' per-token importance ratio ``min(exp(clamp(log p_S(y) - log p_old(y), -20, 20)), clip)``,
    detached (SDPO's ``is_clip``, TRL's ``distillation_is_clip``): weighs each token's divergence by how much more
    likely the current student makes it than the policy that sampled it, bounded above; ``None``: no weighting
    (ones)."""
    if clip is None:
        return torch.ones_like(student_logp_y)
    if clip <= 0:
        raise ValueError(f"the importance-ratio clip must be positive, got {clip}")
    log_ratio = (student_logp_y.detach() - old_logp_y.detach()).clamp(-20.0, 20.0)
    return log_ratio.exp().clamp(max=float(clip))

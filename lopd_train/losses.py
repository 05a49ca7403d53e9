"""The losses of LOPD and its baselines, as pure functions of tensors (DESIGN.md section 7).

Nothing here knows about models, adapters or environments: each function takes logits / log-probabilities,
masks and scalars and returns a tensor, so every term can be checked against a brute-force reference on
small tensors (``tests/test_train_losses.py``). Conventions:

* ``logits`` are ``[..., V]`` un-normalised scores at the positions that predict the sampled tokens;
* ``mask`` is ``[...]`` with 1 for tokens the student sampled (the only ones that are trained);
* token means are taken over all masked tokens of the batch (token-level averaging).
"""

from __future__ import annotations

import math

import torch

#: log-probabilities are floored here so that an empty tail bucket (``1 - sum(top-M) == 0``) stays finite.
LOG_FLOOR = -80.0


def masked_mean(values: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Mean of ``values`` over the positions where ``mask`` is 1 (0 when nothing is masked in)."""
    if mask is None:
        return values.mean()
    mask = mask.to(values.dtype)
    return (values * mask).sum() / mask.sum().clamp_min(1.0)


def log1mexp(x: torch.Tensor) -> torch.Tensor:
    """``log(1 - exp(x))`` for ``x <= 0``, stable at both ends (Mächler 2012)."""
    x = x.clamp(max=-1e-12)
    return torch.where(x > -math.log(2.0), torch.log(-torch.expm1(x)), torch.log1p(-torch.exp(x)))


def topm_tail_logprobs(logp: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """Coarse distribution over ``M + 1`` buckets: the ``M`` tokens in ``index`` and one tail bucket.

    ``logp`` is ``[..., V]`` log-probabilities, ``index`` ``[..., M]`` token ids. Returns ``[..., M + 1]``
    log-probabilities whose exponentials sum to 1: ``log p(top_i)`` and ``log(1 - sum_i p(top_i))``,
    computed in log space (floored at :data:`LOG_FLOOR`).
    """
    top = logp.gather(-1, index)
    tail = log1mexp(torch.logsumexp(top, dim=-1, keepdim=True))
    return torch.cat([top, tail], dim=-1).clamp_min(LOG_FLOOR)


def reverse_kl_topm(student_logits: torch.Tensor, teacher_logits: torch.Tensor, top_m: int = 20,
                    mask: torch.Tensor | None = None, reduce: bool = True) -> torch.Tensor:
    """Reverse KL ``KL(p̂_S || p̂_T)`` over the student's top-M tokens plus a tail bucket, per token.

    The buckets are chosen from the student's distribution (no gradient flows through the choice). Pass
    detached logits on either side to decide which model the gradient reaches: the student loss uses a
    detached teacher, the composer loss a detached student. Returns the masked token mean, or per-token
    values ``[...]`` with ``reduce=False``.
    """
    logp_s = torch.log_softmax(student_logits.float(), dim=-1)
    logp_t = torch.log_softmax(teacher_logits.float(), dim=-1)
    index = logp_s.detach().topk(min(top_m, logp_s.shape[-1]), dim=-1).indices
    kl = bucket_kl(topm_tail_logprobs(logp_s, index), topm_tail_logprobs(logp_t, index))
    return masked_mean(kl, mask) if reduce else kl


def bucket_kl(q_student: torch.Tensor, q_teacher: torch.Tensor) -> torch.Tensor:
    """``KL(q_S || q_T) = sum_b q_S(b) (log q_S(b) - log q_T(b))`` over the last axis of two bucket
    log-distributions (as made by :func:`topm_tail_logprobs`), per token."""
    return (q_student.exp() * (q_student - q_teacher)).sum(-1)


def topm_from_logprobs(topm_logprobs: torch.Tensor) -> torch.Tensor:
    """Buckets (top-M + tail) from the log-probabilities of the top-M tokens alone (as a sampler records
    them): ``[..., M] -> [..., M + 1]``."""
    tail = log1mexp(torch.logsumexp(topm_logprobs, dim=-1, keepdim=True))
    return torch.cat([topm_logprobs, tail], dim=-1).clamp_min(LOG_FLOOR)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``log p(tokens)`` under ``logits`` (``[..., V]`` and ``[...]`` -> ``[...]``)."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def outcome_advantage(reward: torch.Tensor) -> torch.Tensor:
    """The paper's trajectory advantage ``A(τ) = 2 r(τ) - 1``: +1 for success, -1 for failure."""
    return 2.0 * reward - 1.0


def privileged_margin(teacher_logp: torch.Tensor, student_logp: torch.Tensor, advantage: torch.Tensor,
                      mask: torch.Tensor | None = None) -> torch.Tensor:
    """``g = mean_t A(τ) · (log p_T(y_t) - log p_S(y_t))``, the teacher's advantage-weighted edge.

    ``teacher_logp``/``student_logp`` are ``[B, T]`` log-probabilities of the sampled tokens, ``advantage``
    ``[B]`` (broadcast over tokens). The teacher keeps its privileged information useful when ``g >= m``:
    it must rate successful trajectories above the student does and failed ones below.
    """
    delta = teacher_logp - student_logp
    return masked_mean(advantage.unsqueeze(-1) * delta, mask)


def margin_penalty(g: torch.Tensor, beta: float, margin: float = 0.05) -> torch.Tensor:
    """The Lagrangian term ``β · (m - g)`` of the constraint ``g >= m``."""
    return beta * (margin - g)


def dual_update(beta: float, g: float, margin: float = 0.05, lr: float = 0.01) -> float:
    """Projected dual ascent ``β <- max(0, β + η (m - g))``: β grows while the constraint is violated."""
    return max(0.0, float(beta) + float(lr) * (float(margin) - float(g)))


def anchor_loss(params: list[torch.Tensor], init_params: list[torch.Tensor]) -> torch.Tensor:
    """Mean squared distance of the composer's parameters from their initial values.

    The composer's latent tokens are a function of its parameters, so anchoring the parameters keeps the
    latent context near the map it started from (an L2-SP anchor); it is exactly zero at initialisation.
    """
    total = sum(((p - p0.to(p.dtype)) ** 2).sum() for p, p0 in zip(params, init_params))
    count = sum(p.numel() for p in params)
    return total / max(count, 1)


def nll_loss(logits: torch.Tensor, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Cold-start objective: negative log-likelihood of the tokens (masked token mean)."""
    return -masked_mean(token_logprobs(logits, tokens), mask)


def group_advantages(rewards: torch.Tensor, groups: torch.Tensor, eps: float = 1e-6,
                     scale: bool = True) -> torch.Tensor:
    """GRPO advantages: each reward minus its group's mean, divided by the group's std when ``scale``."""
    adv = torch.empty_like(rewards, dtype=torch.float32)
    for g in groups.unique():
        sel = groups == g
        r = rewards[sel].float()
        centred = r - r.mean()
        if scale:
            std = r.std(unbiased=False) if r.numel() > 1 else torch.zeros(())
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

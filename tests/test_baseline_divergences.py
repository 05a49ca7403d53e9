"""The self-distillation divergences of issue 56, each against a direct computation of its reference's formula.

The direct computations below use plain Python floats in double precision, token by token, written from the
formulas as the references state them (lasgroup/SDPO 0e6d510 ``compute_self_distillation_loss``; TRL 1.10.0.dev0
``trl/experimental/sdft/loss_utils.py``; TRL PR #5990 ``trl/experimental/opsd/loss_utils.py``; TRL's
``GRPOTrainer`` loss types), never from ``losses.py``: each number is checked on fixed logits."""

from __future__ import annotations

import math

import pytest
import torch

from lopd_train.algorithms import losses

V, T = 12, 5  # vocabulary, tokens


def fixed_logits(seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(T, V, generator=g, dtype=torch.float64) * 2.0


S, TE = fixed_logits(0), fixed_logits(1)


def softmax(row: list[float], temperature: float = 1.0) -> list[float]:
    z = [x / temperature for x in row]
    top = max(z)
    e = [math.exp(x - top) for x in z]
    return [x / sum(e) for x in e]


def kl(p: list[float], q: list[float]) -> float:
    return sum(a * math.log(a / b) for a, b in zip(p, q) if a > 0 and b > 0)  # an empty tail: both 0


def jsd(p_s: list[float], p_t: list[float], alpha: float) -> float:
    """The references' generalised JSD: 0 forward KL(T||S), 1 reverse KL(S||T), else (1-a)KL(S||M) + a KL(T||M)
    with M = (1-a) S + a T."""
    if alpha == 0.0:
        return kl(p_t, p_s)
    if alpha == 1.0:
        return kl(p_s, p_t)
    m = [(1 - alpha) * a + alpha * b for a, b in zip(p_s, p_t)]
    return (1 - alpha) * kl(p_s, m) + alpha * kl(p_t, m)


def top_ids(p: list[float], k: int) -> list[int]:
    return sorted(range(len(p)), key=lambda i: -p[i])[:k]


def buckets(p: list[float], ids: list[int], tail: bool) -> list[float]:
    top = [p[i] for i in ids]
    return [*top, max(0.0, 1.0 - sum(top))] if tail else [x / sum(top) for x in top]


def direct(alpha: float, k: int | None, support: str, tail: bool, temperature: float = 1.0,
           entry_clip: float | None = None) -> list[float]:
    out = []
    for s_row, t_row in zip(S.tolist(), TE.tolist()):
        p_s, p_t = softmax(s_row, temperature), softmax(t_row, temperature)
        if support != "full":
            ids = top_ids(p_s if support == "student" else p_t, k)
            p_s, p_t = buckets(p_s, ids, tail), buckets(p_t, ids, tail)
        if entry_clip is None:
            out.append(jsd(p_s, p_t, alpha))
        else:  # OPSD: forward KL, each vocabulary entry's term clipped before the sum
            assert alpha == 0.0
            out.append(sum(min(b * math.log(b / a), entry_clip) for a, b in zip(p_s, p_t)))
    return out


def ours(**kw) -> list[float]:
    return losses.self_distillation_divergence(S, TE, **kw).tolist()


@pytest.mark.parametrize("support", ["teacher", "student"])
@pytest.mark.parametrize("k", [1, 4, V])
def test_reverse_kl_with_a_tail_on_either_sides_top_k(support, k):
    want = direct(1.0, k, support, tail=True)
    assert ours(alpha=1.0, top_k=k, support=support, tail=True) == pytest.approx(want, rel=1e-9, abs=1e-12)
    # and the existing LOPD helper computes the same quantity
    assert losses.reverse_kl_topm(S, TE, k, reduce=False, support=support).tolist() == pytest.approx(
        want, rel=1e-5, abs=1e-6)


def test_sdpo_jsd_over_the_students_top_k_plus_tail_at_the_sampling_temperature():
    want = direct(0.5, 4, "student", tail=True, temperature=0.7)
    got = ours(alpha=0.5, top_k=4, support="student", tail=True, temperature=0.7)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    assert got != pytest.approx(direct(0.5, 4, "student", tail=True, temperature=1.0), rel=1e-3)
    assert max(got) <= math.log(2) + 1e-12  # JSD at alpha 0.5 is bounded by log 2 a token


@pytest.mark.parametrize("alpha", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_sdft_jsd_over_the_students_top_k_renormalised(alpha):
    want = direct(alpha, 5, "student", tail=False)
    assert ours(alpha=alpha, top_k=5, support="student", tail=False) == pytest.approx(want, rel=1e-9, abs=1e-12)


def test_opsd_forward_kl_over_the_vocabulary_with_a_per_entry_clip():
    want = direct(0.0, None, "full", tail=False, entry_clip=0.05)
    got = ours(alpha=0.0, support="full", entry_clip=0.05)
    assert got == pytest.approx(want, rel=1e-9, abs=1e-12)
    unclipped = ours(alpha=0.0, support="full")
    assert unclipped == pytest.approx(direct(0.0, None, "full", tail=False), rel=1e-9)
    assert all(c < u for c, u in zip(got, unclipped))  # these logits differ enough that the clip bites


def test_divergences_vanish_for_equal_distributions_and_alpha_is_checked():
    for alpha in (0.0, 0.5, 1.0):
        zero = losses.self_distillation_divergence(S, S.clone(), alpha=alpha, top_k=3)
        assert zero.abs().max() < 1e-12
    with pytest.raises(ValueError, match="alpha"):
        losses.self_distillation_divergence(S, TE, alpha=1.5, top_k=3)
    with pytest.raises(ValueError, match="support"):
        losses.self_distillation_divergence(S, TE, alpha=0.5, top_k=3, support="both")


def test_the_gradient_reaches_the_student_only_and_matches_finite_differences():
    s = S.clone().requires_grad_(True)
    losses.self_distillation_divergence(s, TE.detach(), alpha=0.5, top_k=4).sum().backward()
    eps, (i, j) = 1e-6, (2, 3)
    up, down = S.clone(), S.clone()
    up[i, j] += eps
    down[i, j] -= eps
    num = (losses.self_distillation_divergence(up, TE, alpha=0.5, top_k=4).sum()
           - losses.self_distillation_divergence(down, TE, alpha=0.5, top_k=4).sum()) / (2 * eps)
    assert float(s.grad[i, j]) == pytest.approx(float(num), rel=1e-4, abs=1e-8)


def test_importance_ratio_is_the_references_clamped_exp_clipped_above():
    student = torch.tensor([-1.0, -0.5, -3.0, 0.0, -40.0])
    old = torch.tensor([-1.0, -2.0, -0.5, -30.0, -1.0])
    want = [min(math.exp(max(-20.0, min(20.0, s - o))), 2.0) for s, o in zip(student.tolist(), old.tolist())]
    got = losses.clipped_importance_ratio(student.requires_grad_(True), old, 2.0)
    assert got.tolist() == pytest.approx(want, rel=1e-6)
    assert not got.requires_grad
    assert losses.clipped_importance_ratio(student, old, None).tolist() == [1.0] * 5
    with pytest.raises(ValueError):
        losses.clipped_importance_ratio(student, old, 0.0)


def grpo_aggregate(token_losses: list[torch.Tensor], loss_type: str = "dapo", max_completion_length: int = 1):
    """A step's loss from its rollouts' per-token losses, weighted as GRPO weighs them."""
    n_tokens = sum(x.numel() for x in token_losses)
    return sum(x.sum() * losses.grpo_token_weight(x.numel(), loss_type, len(token_losses), n_tokens,
                                                  max_completion_length) for x in token_losses)


def test_grpo_loss_types_aggregate_as_trl_does():
    rows = [torch.tensor([1.0, 2.0, 3.0]), torch.tensor([4.0]), torch.tensor([-1.0, 5.0])]
    flat = [x for r in rows for x in r.tolist()]
    assert float(grpo_aggregate(rows, "dapo")) == pytest.approx(sum(flat) / len(flat))
    assert float(grpo_aggregate(rows, "bnpo")) == pytest.approx(sum(flat) / len(flat))
    assert float(grpo_aggregate(rows, "grpo")) == pytest.approx(
        sum(sum(r.tolist()) / len(r) for r in rows) / len(rows))
    assert float(grpo_aggregate(rows, "dr_grpo", max_completion_length=8)) == pytest.approx(
        sum(flat) / (len(rows) * 8))
    with pytest.raises(ValueError):
        grpo_aggregate(rows, "sapo")


def test_group_std_unbiased_is_trls_and_population_is_the_old_one():
    rewards, groups = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0, 0.0]), torch.tensor([0, 0, 1, 1, 1, 1])
    trl = losses.group_advantages(rewards, groups, eps=1e-4, unbiased=True)
    old = losses.group_advantages(rewards, groups)
    # group 0 (size 2): TRL's std is sqrt(0.5), the population std 0.5: the advantages differ by sqrt(2)
    assert float(trl[0]) == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-4))
    assert float(old[0]) == pytest.approx(0.5 / (0.5 + 1e-6))
    g1 = [1.0, 1.0, 0.0, 0.0]
    sd = math.sqrt(sum((x - 0.5) ** 2 for x in g1) / 3)
    assert trl[2:].tolist() == pytest.approx([(x - 0.5) / (sd + 1e-4) for x in g1])

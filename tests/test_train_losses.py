"""The LOPD and baseline losses against brute-force references on small tensors."""

from __future__ import annotations

import math

import pytest
import torch

from lopd_train.algorithms import losses


def brute_reverse_kl(student_logits, teacher_logits, m, support="teacher"):
    """Python loops: softmax, pick the support's top-m, add the tail bucket, sum p_s log(p_s/p_t)."""
    out = []
    for s_row, t_row in zip(student_logits.tolist(), teacher_logits.tolist()):
        zs = sum(math.exp(x) for x in s_row)
        zt = sum(math.exp(x) for x in t_row)
        ps = [math.exp(x) / zs for x in s_row]
        pt = [math.exp(x) / zt for x in t_row]
        ref = pt if support == "teacher" else ps
        top = sorted(range(len(ps)), key=lambda i: -ref[i])[:m]
        qs = [ps[i] for i in top] + [1 - sum(ps[i] for i in top)]
        qt = [pt[i] for i in top] + [1 - sum(pt[i] for i in top)]
        out.append(sum(a * math.log(a / b) for a, b in zip(qs, qt) if a > 0))
    return torch.tensor(out, dtype=torch.float64)


@pytest.mark.parametrize("support", ["teacher", "student"])
@pytest.mark.parametrize("m", [1, 3, 7])
def test_reverse_kl_topm_equals_brute_force(m, support):
    g = torch.Generator().manual_seed(m)
    s = torch.randn(6, 11, generator=g, dtype=torch.float64) * 2
    t = torch.randn(6, 11, generator=g, dtype=torch.float64) * 2
    got = losses.reverse_kl_topm(s, t, top_m=m, reduce=False, support=support).double()
    assert torch.allclose(got, brute_reverse_kl(s, t, m, support), atol=1e-5)
    other = brute_reverse_kl(s, t, m, "student" if support == "teacher" else "teacher")
    assert not torch.allclose(got, other, atol=1e-3)  # the support matters on these logits


def test_reverse_kl_masked_mean_counts_only_sampled_tokens():
    s, t = torch.randn(2, 5, 9), torch.randn(2, 5, 9)
    mask = torch.tensor([[1, 1, 0, 0, 0], [0, 1, 1, 1, 0]])
    per = losses.reverse_kl_topm(s, t, 4, reduce=False)
    assert torch.allclose(losses.reverse_kl_topm(s, t, 4, mask), per[mask.bool()].mean())


def test_reverse_kl_is_zero_for_equal_distributions_and_positive_otherwise():
    s = torch.randn(4, 30)
    assert torch.allclose(losses.reverse_kl_topm(s, s.clone(), 20), torch.tensor(0.0), atol=1e-6)
    assert losses.reverse_kl_topm(s, torch.randn(4, 30), 20) > 0


def test_tail_bucket_is_stable_when_top_m_holds_all_mass():
    # the student puts all its mass on one token: the tail is log(0); the KL must stay finite
    s = torch.tensor([[80.0, -80.0, -80.0, -80.0]])
    t = torch.tensor([[0.0, 0.0, 0.0, 0.0]])
    kl = losses.reverse_kl_topm(s, t, 1, support="student")
    assert torch.isfinite(kl) and abs(float(kl) - math.log(4)) < 1e-4
    # M equal to the vocabulary: no tail at all
    s5 = torch.randn(3, 5, requires_grad=True)
    kl = losses.reverse_kl_topm(s5, torch.randn(3, 5), 5)
    kl.backward()
    assert torch.isfinite(kl) and torch.isfinite(s5.grad).all()


def test_reverse_kl_gradients_reach_only_the_undetached_side():
    s = torch.randn(3, 8, requires_grad=True)
    t = torch.randn(3, 8, requires_grad=True)
    losses.reverse_kl_topm(s, t.detach(), 3).backward()
    assert s.grad is not None and s.grad.abs().sum() > 0 and t.grad is None


def test_topm_tail_logprobs_sum_to_one():
    logp = torch.log_softmax(torch.randn(5, 12), -1)
    idx = logp.topk(4, -1).indices
    q = losses.topm_tail_logprobs(logp, idx)
    assert q.shape == (5, 5)
    assert torch.allclose(q.exp().sum(-1), torch.ones(5), atol=1e-5)


def test_privileged_margin_equals_brute_force():
    lt = torch.tensor([-1.0, -2.0, -0.5])
    ls = torch.tensor([-1.5, -2.5, -0.5])
    assert math.isclose(float(losses.privileged_margin(lt, ls, 1.0)), (0.5 + 0.5 + 0.0) / 3, rel_tol=1e-6)
    assert math.isclose(float(losses.privileged_margin(lt, ls, 0.0)), -(0.5 + 0.5 + 0.0) / 3, rel_tol=1e-6)
    assert float(losses.privileged_margin(lt, ls, 0.5)) == 0.0  # A = 2r - 1 = 0


def test_dual_update_raises_beta_while_the_margin_is_violated_and_lowers_it_otherwise():
    m = 0.05
    beta = 1.0
    up = losses.dual_update(beta, delta=-0.2, margin=m, lr=0.1)  # δ < m: violated
    assert up > beta and math.isclose(up, 1.0 + 0.1 * 0.25)
    down = losses.dual_update(beta, delta=0.5, margin=m, lr=0.1)  # δ > m: satisfied
    assert down < beta
    assert losses.dual_update(0.01, delta=5.0, margin=m, lr=0.1) == 0.0  # projected onto beta >= 0


def test_margin_penalty_gradient_pushes_delta_up():
    delta = torch.tensor(0.0, requires_grad=True)
    losses.margin_penalty(delta, beta=2.0, margin=0.05).backward()
    assert float(delta.grad) == -2.0  # descending the loss increases δ


def test_anchor_loss_is_the_mean_squared_distance_of_the_latents_to_the_snapshot():
    z = torch.randn(4, 3)
    assert float(losses.anchor_loss(z, z.clone())) == 0.0
    assert math.isclose(float(losses.anchor_loss(z + 1.0, z)), 1.0, rel_tol=1e-6)
    moved = z.clone()
    moved[0, 0] += 2.0
    assert math.isclose(float(losses.anchor_loss(moved, z)), 4.0 / 12.0, rel_tol=1e-6)


def test_grpo_clip_loss_equals_brute_force():
    logp = torch.tensor([[-1.0, -0.5, -2.0]])
    old = torch.tensor([[-1.5, -0.5, -1.0]])
    for a in (1.0, -1.0):
        ref = []
        for x, y in zip(logp[0].tolist(), old[0].tolist()):
            r = math.exp(x - y)
            ref.append(-min(r * a, min(max(r, 0.8), 1.2) * a))
        got = losses.grpo_clip_loss(logp, old, torch.tensor([a]), None, 0.2, 0.2)
        assert math.isclose(float(got), sum(ref) / 3, rel_tol=1e-6)


def test_group_advantages_centre_and_scale_within_groups():
    r = torch.tensor([1.0, 0.0, 1.0, 1.0])
    g = torch.tensor([0, 0, 1, 1])
    adv = losses.group_advantages(r, g)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, 0.0, 0.0]), atol=1e-4)


def test_a_bucket_distribution_has_zero_kl_to_itself():
    logp = torch.log_softmax(torch.randn(4, 30), -1)
    top = logp.topk(5, -1)
    q = losses.topm_tail_logprobs(logp, top.indices)
    assert torch.allclose(losses.bucket_kl(q, q), torch.zeros(4), atol=1e-7)

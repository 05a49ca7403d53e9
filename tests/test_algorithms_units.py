"""The distinctive parts of the baselines and of the LOPD ablations, each in the smallest case where it could
fail: the pure loss terms against brute force, GRPO's advantages and reference KL inside its update, the EMA
teacher's update, and the margin flags."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from lopd_train.algorithms import losses
from tests.test_algorithms_context import algo_setup

# --------------------------------------------------------------------------------- pure losses

def test_k3_kl_equals_brute_force_and_its_mean_estimates_the_kl():
    logp = torch.tensor([-0.5, -1.0, -2.0])
    ref = torch.tensor([-0.7, -1.0, -0.1])
    want = [math.exp(r - lp) - (r - lp) - 1 for lp, r in zip(logp.tolist(), ref.tolist())]
    assert torch.allclose(losses.k3_kl(logp, ref), torch.tensor(want))
    assert losses.k3_kl(logp, ref)[1] == 0.0
    # on samples from p, mean k3 -> KL(p || q)
    torch.manual_seed(0)
    p = torch.softmax(torch.tensor([2.0, 0.5, -1.0, 0.0]), -1)
    q = torch.softmax(torch.tensor([0.0, 1.0, 0.5, -0.5]), -1)
    y = torch.multinomial(p, 200_000, replacement=True)
    est = losses.k3_kl(p.log()[y], q.log()[y]).mean()
    exact = (p * (p.log() - q.log())).sum()
    assert float(est) == pytest.approx(float(exact), rel=0.02)


def test_sampled_token_kl_has_the_score_function_gradient():
    logits = torch.tensor([[1.0, 0.0, -1.0], [0.5, 0.5, 0.0]], requires_grad=True)
    teacher = torch.log_softmax(torch.tensor([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]), -1)
    y = torch.tensor([0, 2])
    ls = losses.token_logprobs(logits, y)
    lt = teacher.gather(-1, y[:, None])[:, 0]
    losses.sampled_token_kl(ls, lt).sum().backward()
    with torch.no_grad():
        logp = torch.log_softmax(logits, -1)
        grad_logp = torch.nn.functional.one_hot(y, 3) - logp.exp()  # d log p(y) / d logits
        want = (logp.gather(-1, y[:, None]) - lt[:, None]) * grad_logp
    assert torch.allclose(logits.grad, want)


# --------------------------------------------------------------------------------- GRPO

def test_group_advantages_of_a_known_batch():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0])
    g = torch.tensor([0, 0, 0, 0, 1, 1])
    adv = losses.group_advantages(r, g)
    assert torch.allclose(adv, torch.tensor([1.0, -1.0, -1.0, 1.0, 0.0, 0.0]), atol=1e-5)
    raw = losses.group_advantages(r, g, scale=False)
    assert torch.allclose(raw, torch.tensor([0.5, -0.5, -0.5, 0.5, 0.0, 0.0]))


def test_grpo_update_loss_is_minus_the_token_weighted_advantage_on_policy(tmp_path):
    """At the sampling policy the ratio is 1, so the clipped surrogate is -Σ A_i n_i / N exactly."""
    _, _, _cfg, trajs, algo = algo_setup(tmp_path, "grpo", successes=(True, False, False, True, True, False))
    adv = losses.group_advantages(torch.tensor([t.reward for t in trajs]), torch.tensor([t.group for t in trajs]),
                                  eps=1e-4, unbiased=True)  # TRL's group std, the default (issue 56)
    n = torch.tensor([t.n_actions for t in trajs], dtype=torch.float32)
    want = float(-(adv * n).sum() / n.sum())
    metrics = algo.update(trajs)
    assert metrics["loss"] == pytest.approx(want, abs=1e-3)
    assert abs(want) > 1e-2 and metrics["clip_frac"] == 0.0 and metrics["kl_ref"] == 0.0


def test_grpo_kl_to_the_reference_is_zero_at_the_base_model_and_grows_as_the_student_moves(tmp_path):
    _, _, _cfg, trajs, algo = algo_setup(tmp_path, "grpo", successes=(True, False, False, True, True, False),
                                        grpo_kl_coef=0.5, lr=3e-2)
    first = algo.update(trajs)
    assert first["kl_ref"] == pytest.approx(0.0, abs=1e-6)  # the fresh LoRA student is the base model
    second = algo.update(trajs)
    assert second["kl_ref"] > 1e-6


def _grpo_two_updates(tmp_path, monkeypatch, skip: bool):
    """A mixed batch (group 0: one success of three; group 1: all three succeed), then the same rollouts all
    failed; the student's weights after each update and the number of sequences each update scored."""
    from lopd_train.algorithms import grpo
    from lopd_train.scoring import score_groups as real

    _, _, _cfg, trajs, algo = algo_setup(tmp_path, "grpo", successes=(True, False, False, True, True, True), lr=3e-2)
    scored: list[int] = []

    def spy(policy, seqs, masks, **kw):
        scored[-1] += sum(len(s) for s in seqs)
        return real(policy, seqs, masks, **kw)

    monkeypatch.setattr(grpo, "score_groups", spy)
    if not skip:  # the reference: any KL term turns the skipping off (1e-30 x k3 changes no weight)
        algo.cfg.grpo.grpo_kl_coef = 1e-30
    weights, metrics = [], []
    for failed in (False, True):
        batch = copy.deepcopy(trajs)
        if failed:
            for t in batch:
                t.success = t.trace.success = False
                t.reward = t.trace.reward = 0.0
        scored.append(0)
        metrics.append(algo.update(batch))
        weights.append([p.detach().clone() for p in algo.student_params])
    return scored, weights, metrics


def test_grpo_skips_zero_advantage_groups_and_ends_with_the_same_weights(tmp_path, monkeypatch):
    """A group whose rollouts all scored alike is not scored (its gradient is exactly zero), and the weights
    after each update are those of the run that scored everything, including after a batch with nothing to
    learn, where AdamW's momentum still moves them (a skipped backward must leave a zero gradient, not none)."""
    scored, weights, metrics = _grpo_two_updates(tmp_path / "skip", monkeypatch, skip=True)
    ref_scored, ref_weights, _ = _grpo_two_updates(tmp_path / "all", monkeypatch, skip=False)
    assert ref_scored == [6, 6] and scored == [3, 0]
    assert metrics[0]["zero_advantage_groups"] == 0.5 and metrics[1]["zero_advantage_groups"] == 1.0
    assert metrics[1]["loss"] == 0.0
    for w, ref in zip(weights, ref_weights):
        assert all(torch.allclose(a, b, atol=1e-6) for a, b in zip(w, ref))
    moved = max(float((a - b).abs().max()) for a, b in zip(weights[1], weights[0]))
    assert moved > 1e-4  # the second, all-failed update still stepped (momentum)


# --------------------------------------------------------------------------------- EMA teacher

def test_ema_teacher_starts_as_the_student_and_follows_the_ema_rule(tmp_path):
    _policy, _, _cfg, trajs, algo = algo_setup(tmp_path, "sdpo", teacher="ema-factors", ema_decay=0.9, lr=1e-2)
    assert all(torch.equal(e, s) for e, s in algo.ema.pairs)
    ema_before = [e.detach().clone() for e, _ in algo.ema.pairs]
    metrics = algo.update(trajs)  # one minibatch: one student step, then one EMA step
    assert metrics["grad_norm"] > 0
    moved = False
    for (e, s), e0 in zip(algo.ema.pairs, ema_before):
        assert torch.allclose(e, 0.9 * e0 + 0.1 * s, atol=1e-7)
        moved |= not torch.equal(e, e0)
    assert moved


def test_ema_teacher_scores_with_the_ema_weights_not_the_base_model(tmp_path):
    from lopd_train.scoring import score_group

    policy, _, _cfg, trajs, algo = algo_setup(tmp_path, "opsd", teacher="ema", ema_decay=0.0, lr=3e-2)
    algo.update(trajs)  # decay 0: the EMA teacher is now exactly the updated student
    seqs, masks, *_ = algo.tensors(trajs[:1])
    ema = algo.teacher_logits(seqs, masks)[0]
    with torch.no_grad():
        student = score_group(policy, seqs, masks)[0]
        base = score_group(policy, seqs, masks, teacher=True)[0]
    assert torch.allclose(ema, student, atol=1e-5) and not torch.allclose(ema, base, atol=1e-4)


def test_the_ema_weights_go_into_checkpoints_with_the_other_lora_weights(tmp_path):
    policy, *_ , algo = algo_setup(tmp_path, "sdft", teacher="ema-factors")
    names = [n for n, _ in policy.named_parameters() if "lora_" in n and ".ema." in n]
    assert names and len(names) == len(algo.ema.pairs)
    assert all(".ema." not in n for n, p in policy.named_parameters() if any(p is q for q in algo.student_params))


# --------------------------------------------------------------------------------- LOPD ablation flags

def test_margin_flags_parse():
    from lopd_train.cli import config_from_args

    cfg, _ = config_from_args(["--no-use-margin", "--margin", "0.1", "--freeze-composer"])
    assert (cfg.lopd.use_margin, cfg.lopd.margin, cfg.lopd.freeze_composer) == (False, 0.1, True)
    cfg, _ = config_from_args([])
    assert (cfg.lopd.use_margin, cfg.lopd.margin, cfg.lopd.freeze_composer) == (True, 0.05, False)


@pytest.mark.parametrize("use_margin", [True, False])
def test_no_use_margin_drops_the_margin_term_and_freezes_beta_and_margin_sets_m(tmp_path, use_margin):
    from tests.test_train_composer import lopd_setup

    *_, trajs, algo = lopd_setup(tmp_path, use_margin=use_margin, beta_init=1.0, margin=0.3)
    m = algo.update(trajs)
    if use_margin:  # the loss used β₀ = 1, and the dual update used m = 0.3 (not the default 0.05)
        assert m["beta_used"] == 1.0
        assert m["beta"] == pytest.approx(losses.dual_update(1.0, m["margin_delta"], 0.3, 0.5))
        assert m["beta"] != pytest.approx(losses.dual_update(1.0, m["margin_delta"], 0.05, 0.5))
    else:  # no margin term in the composer loss, and β never moves
        assert m["beta_used"] == 0.0 and m["beta"] == 1.0

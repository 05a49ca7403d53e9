"""LOPD as the authors' code (bingreeky/LOPD @ 50c3d7f) does it: one test per acceptance item of issue 8.

Each test builds the smallest case in which the property could fail: a tiny random Llama on the coin-flip
env, a real experience bank and retriever, and the update or cold start as the trainer runs it."""

from __future__ import annotations

import copy
import itertools
import math

import pytest
import torch

from lopd_envs.chat import TextTools
from lopd_train import models
from lopd_train.algorithms import losses
from lopd_train.latent import context
from lopd_train.scoring import score_group, teacher_logits
from tests.test_train_composer import lopd_setup

# --------------------------------------------------------------------------------- KL support and tail

def expected_student_kl(algo, trajs, support: str) -> float:
    """The student loss recomputed from scratch: teacher (latents at the placeholder) and student logits,
    then the bucket KL on the chosen support (the teacher's top-M, or the student's top-M as the sampler
    recorded it), token mean over all supervised tokens."""
    from lopd_train.algorithms.base import Batch

    members_of = Batch(trajs).groups_of()
    total, n_tokens = 0.0, sum(t.n_actions for t in trajs)
    with torch.no_grad():
        for members, exps in zip(members_of, algo.retrieve(members_of)):
            g = algo.group(members, exps)
            z = algo.compose(g.task, exps)
            for k in range(len(members)):
                t = teacher_logits(algo.policy, g.teacher_seqs[k], g.teacher_masks[k], (g.positions, z))
                s = score_group(algo.policy, [g.seqs[k]], [g.masks[k]])[0]
                lp_s, lp_t = s.float().log_softmax(-1), t.float().log_softmax(-1)
                idx = members[k].topm_ids if support == "student" else lp_t.topk(algo.cfg.kl.top_m, -1).indices
                q_s, q_t = losses.topm_tail_logprobs(lp_s, idx), losses.topm_tail_logprobs(lp_t, idx)
                total += float(losses.bucket_kl(q_s, q_t).sum())
    return total / n_tokens


@pytest.mark.parametrize("support", ["teacher", "student"])
def test_the_kl_support_follows_the_flag(tmp_path, support):
    *_, trajs, algo = lopd_setup(tmp_path, kl_support=support)
    want = expected_student_kl(algo, trajs, support)
    other = expected_student_kl(algo, trajs, "student" if support == "teacher" else "teacher")
    assert abs(want - other) > 2e-2 * abs(want)  # the two supports really differ on this batch (by ~6%)
    metrics = algo.update(trajs)
    # shared-prompt scoring (the teacher's pre-latent prompt cached apart, exact in float64: tests/test_scoring.py):
    # fp32 noise only, ~5e-8 on a KL of ~2e-5
    assert metrics["student_kl"] == pytest.approx(want, rel=5e-3)


def test_kl_support_picks_the_teacher_top_m_by_default():
    s = torch.log_softmax(torch.tensor([[3.0, 2.0, 1.0, 0.0, -1.0]]), -1)
    t = torch.log_softmax(torch.tensor([[-1.0, 0.0, 1.0, 2.0, 3.0]]), -1)
    assert sorted(losses.kl_support(s, t, 2).tolist()[0]) == [3, 4]
    assert sorted(losses.kl_support(s, t, 2, "student").tolist()[0]) == [0, 1]
    with pytest.raises(ValueError):
        losses.kl_support(s, t, 2, "both")


def test_tail_equals_a_float64_brute_force_when_the_top_k_hold_almost_all_mass():
    # 20 top tokens hold all but ~1e-9 of the mass: in fp32, 1 - sum(top) rounds to 0 (or to noise)
    logits = torch.full((3, 1000), -30.0)
    logits[:, :20] = torch.linspace(0.0, 2.0, 20)
    logits[1, 20:] = torch.linspace(-40.0, -25.0, 980)
    logp32 = torch.log_softmax(logits, -1)
    idx = logp32.topk(20, -1).indices
    got = losses.topm_tail_logprobs(logp32, idx)[:, -1].double()
    logp64 = torch.log_softmax(logits.double(), -1)
    p = logp64.exp()
    brute = torch.tensor([math.log(sum(p[r, j].item() for j in range(1000) if j not in set(idx[r].tolist())))
                          for r in range(3)], dtype=torch.float64)
    assert brute.max() < -18  # the regime the issue names: the tail is tiny
    assert torch.allclose(got, brute, rtol=1e-5, atol=0)
    naive = torch.log1p(-logp32.gather(-1, idx).exp().sum(-1))  # what 1 - sum(top) in fp32 gives
    assert not torch.allclose(naive.double(), brute, rtol=1e-2)


# --------------------------------------------------------------------------------- latent placement

def test_latent_positions_lie_inside_the_task_user_turn_and_every_other_id_is_unchanged():
    _, tok = models.tiny_model()
    tools = [{"type": "function", "function": {"name": "note", "description": "Write.", "parameters": {}}}]
    messages = [{"role": "system", "content": "You are a test agent."},
                {"role": "user", "content": "Write a note about heads."}]
    prompt = models.encode(tok, models.render_chat(tok, messages, tools, text_tools=TextTools(prompt="always")))
    cp = context.context_prompt(tok, prompt, messages, tools, n_latent=7, text_tools=TextTools(prompt="always"))
    # the placeholders: one contiguous run of dummy ids
    assert len(cp.positions) == 7 and cp.positions == list(range(cp.positions[0], cp.positions[0] + 7))
    assert {cp.input_ids[p] for p in cp.positions} == {context.placeholder_id(tok)}
    # ... inside the task's user turn: after the system prompt and tool listing, before the task
    before = tok.decode(cp.input_ids[:cp.positions[0]])
    after = tok.decode(cp.input_ids[cp.positions[-1] + 1:])
    assert before.endswith("<|im_start|>user\n" + context.FRAMING_BEFORE)
    assert "You are a test agent." in before and "note" in before and before.count("<|im_start|>user") == 1
    assert after.startswith(context.FRAMING_AFTER + "Write a note about heads.<|im_end|>")
    # every other id is the prompt's, in order
    block = range(cp.insert_at, cp.insert_at + cp.block_len)
    assert [i for k, i in enumerate(cp.input_ids) if k not in block] == prompt
    # a rollout's continuation (sampled tokens, observations) is kept exactly, and only it is trained
    rollout = [*prompt, 70, 71, 2, 10, 11, 1, 72]
    mask = [0] * len(prompt) + [1, 1, 1, 0, 0, 0, 1]
    ids, m = cp.sequence(rollout, mask)
    assert ids[len(cp.input_ids):] == rollout[len(prompt):] and m[len(cp.input_ids):] == mask[len(prompt):]
    assert sum(m) == sum(mask) and not any(m[:len(cp.input_ids)])
    with pytest.raises(ValueError):
        cp.sequence([5, *rollout[1:]], mask)


def test_latents_replace_the_placeholder_embeddings_and_nothing_else(tmp_path):
    *_, trajs, algo = lopd_setup(tmp_path)
    from lopd_train.algorithms.base import Batch

    members = Batch(trajs).groups_of()[0]
    g = algo.group(members, algo.retrieve([members])[0])
    z = torch.randn(len(g.positions), algo.policy.get_base_model().config.hidden_size)
    with torch.no_grad():
        with_z = teacher_logits(algo.policy, g.teacher_seqs[0], g.teacher_masks[0], (g.positions, z))
        plain = teacher_logits(algo.policy, g.teacher_seqs[0], g.teacher_masks[0], None)
        shared = score_group(algo.policy, g.teacher_seqs, g.teacher_masks, (g.positions, z), teacher=True)[0]
    assert not torch.allclose(with_z, plain, atol=1e-4)  # the latents are read
    assert torch.allclose(with_z, shared, atol=1e-4)  # the shared-prompt scorer injects them the same way


# --------------------------------------------------------------------------------- composer objective

def test_anchor_gradient_on_the_latents_is_two_lambda_times_the_distance_over_n():
    torch.manual_seed(0)
    z = torch.randn(6, 8, requires_grad=True)
    z0 = torch.randn(6, 8)
    q_s = torch.log_softmax(torch.randn(5, 4), -1)
    q_t = torch.log_softmax(torch.randn(5, 4), -1)  # independent of z: only the anchor depends on it
    lp_s, lp_t = torch.randn(5), torch.randn(5)
    terms = losses.composer_objective(q_s, q_t, lp_s, lp_t, reward=1.0, beta=0.7, margin=0.05, latents=z,
                                      anchor_latents=z0, anchor_coef=0.2)
    terms.loss.backward()
    assert torch.allclose(z.grad, 2 * 0.2 * (z.detach() - z0) / z.numel(), atol=1e-7)
    # and the value is KL + beta (m - delta) + lambda anchor
    kl = float(losses.bucket_kl(q_s, q_t).mean())
    delta = float((lp_t - lp_s).mean())
    anchor = float(((z.detach() - z0) ** 2).mean())
    assert float(terms.loss) == pytest.approx(kl + 0.7 * (0.05 - delta) + 0.2 * anchor, rel=1e-6)
    assert (terms.kl, terms.delta, terms.anchor) == pytest.approx((kl, delta, anchor), rel=1e-6)


def test_margin_sign_follows_the_outcome():
    lp_s, lp_t = torch.tensor([-2.0, -1.0]), torch.tensor([-1.0, -1.0])
    assert float(losses.privileged_margin(lp_t, lp_s, reward=1.0)) == pytest.approx(0.5)
    assert float(losses.privileged_margin(lp_t, lp_s, reward=0.0)) == pytest.approx(-0.5)


def test_beta_follows_the_dual_update_from_zero_and_the_loss_uses_the_old_beta(tmp_path):
    _peft_model, _tok, cfg, trajs, algo = lopd_setup(tmp_path)
    assert (cfg.lopd.beta_init, cfg.lopd.beta_lr, cfg.lopd.margin) == (0.0, 0.5, 0.05)
    first = algo.update(trajs)
    assert first["beta_used"] == 0.0
    assert first["beta"] == pytest.approx(max(0.0, 0.0 + 0.5 * (0.05 - first["margin_delta"])))
    second = algo.update(trajs)
    assert second["beta_used"] == pytest.approx(first["beta"])
    assert second["beta"] == pytest.approx(losses.dual_update(first["beta"], second["margin_delta"], 0.05, 0.5))


def test_margin_delta_is_the_token_weighted_mean_of_the_per_rollout_deltas(tmp_path):
    from lopd_train.algorithms.base import Batch

    *_, trajs, algo = lopd_setup(tmp_path)
    num = den = 0.0
    members_of = Batch(trajs).groups_of()
    with torch.no_grad():
        for members, exps in zip(members_of, algo.retrieve(members_of)):
            g = algo.group(members, exps)
            z = algo.compose(g.task, exps)
            for k, t in enumerate(members):
                lt = losses.token_logprobs(teacher_logits(algo.policy, g.teacher_seqs[k], g.teacher_masks[k],
                                                          (g.positions, z)), g.targets[k])
                ls = losses.token_logprobs(score_group(algo.policy, [g.seqs[k]], [g.masks[k]])[0], g.targets[k])
                num += float(losses.privileged_margin(lt, ls, t.reward)) * len(lt)
                den += len(lt)
    assert algo.update(trajs)["margin_delta"] == pytest.approx(num / den, rel=1e-4, abs=1e-7)


# --------------------------------------------------------------------------------- what gets supervision

def test_a_rollout_with_nothing_retrieved_contributes_exactly_zero_gradient(tmp_path):
    """The batch {A with context, B without} updates student and composer exactly like {A} alone."""
    results = []
    for keep_b in (True, False):
        *_, trajs, algo = lopd_setup(tmp_path / str(keep_b))
        real = algo.retrieve
        algo.retrieve = lambda groups, real=real: [hits if g[0].group == 0 else [] for g, hits in zip(groups, real(groups))]
        batch = trajs if keep_b else [t for t in trajs if t.group == 0]
        metrics = algo.update(batch)
        results.append(([p.detach().clone() for p in algo.student_params + algo.composer_params], metrics))
    (with_b, m_with), (without_b, m_without) = results
    assert m_with["skipped_no_context"] == pytest.approx(0.5) and m_without["skipped_no_context"] == 0.0
    assert all(torch.allclose(a, b, atol=1e-7, rtol=0) for a, b in zip(with_b, without_b))


def test_no_context_anywhere_leaves_the_weights_untouched(tmp_path):
    *_, trajs, algo = lopd_setup(tmp_path)
    before = [p.detach().clone() for p in algo.student_params + algo.composer_params]
    algo.retrieve = lambda groups: [[] for _ in groups]
    metrics = algo.update(trajs)
    assert metrics["skipped_no_context"] == 1.0 and metrics["student_kl"] == 0.0
    assert all(torch.equal(a, p) for a, p in zip(before, algo.student_params + algo.composer_params))


def test_a_non_finite_gradient_skips_the_step(tmp_path):
    *_, _trajs, algo = lopd_setup(tmp_path)
    before = [p.detach().clone() for p in algo.student_params]
    state_before = copy.deepcopy(algo.student_opt.state_dict())
    for p in algo.student_params:
        p.grad = torch.full_like(p, float("nan"))
    norm = algo.step_optimizer(algo.student_opt, algo.student_params)
    assert not math.isfinite(norm) and algo.skipped_steps == 1
    assert all(torch.equal(a, p) for a, p in zip(before, algo.student_params))
    assert algo.student_opt.state_dict()["state"] == state_before["state"]  # AdamW moments not advanced
    assert all(p.grad is None for p in algo.student_params)
    # a finite gradient steps as usual
    for p in algo.student_params:
        p.grad = torch.ones_like(p)
    assert math.isfinite(algo.step_optimizer(algo.student_opt, algo.student_params))
    assert any(not torch.equal(a, p) for a, p in zip(before, algo.student_params))


def test_student_statistics_are_recomputed_when_a_minibatch_made_them_stale(tmp_path):
    *_, trajs, algo = lopd_setup(tmp_path, kl_support="student", minibatches=2)
    from lopd_train.algorithms.base import Batch

    members = Batch(trajs).groups_of()[1]
    g = algo.group(members, algo.retrieve([members])[0])
    for t in members:  # a recording that cannot be the current student's: token 0 everywhere
        t.topm_ids = torch.zeros_like(t.topm_ids)
    fresh = algo.student_support(g, stale=True)
    recorded = algo.student_support(g, stale=False)
    assert all(not torch.equal(f, r) and not r.any() for f, r in zip(fresh, recorded))
    with torch.no_grad():
        logits = score_group(algo.policy, g.seqs, g.masks)
    for f, lg in zip(fresh, logits):
        assert torch.equal(f, lg.float().log_softmax(-1).topk(algo.cfg.kl.top_m, -1).indices)
    calls = []
    real = algo.student_support
    algo.student_support = lambda g, stale: calls.append(stale) or real(g, stale)
    algo.update(trajs)
    assert calls == [False, True]  # the second minibatch re-scores the moved student


# --------------------------------------------------------------------------------- cold start

def test_cold_start_lowers_the_nll_of_a_fixed_batch(tmp_path):
    *_, trajs, algo = lopd_setup(tmp_path, cold_start_steps=6, cold_start_batch_size=64, cold_start_lr=3e-3)
    for t in trajs:
        t.success = True  # every rollout is a cold-start example: the batch is the whole (fixed) pool
    curve = []
    summary = algo.cold_start(trajs, log=curve.append)
    nll = [row["cold_start_nll"] for row in curve]
    assert summary["cold_start_steps"] == 6 and len(nll) == 6 and summary["cold_start_trajectories"] == len(trajs)
    assert nll[-1] < nll[0] - 1e-3 and sum(b < a for a, b in itertools.pairwise(nll)) >= 4


def test_after_cold_start_the_anchor_is_zero_and_the_frozen_composer_stays_the_snapshot(tmp_path):
    *_, trajs, algo = lopd_setup(tmp_path, cold_start_steps=2, cold_start_batch_size=4, cold_start_lr=3e-3,
                                 freeze_composer=True)
    init = [p.detach().clone() for p in algo.composer_params]
    for t in trajs:
        t.success = True
    algo.cold_start(trajs)
    trained = [p.detach().clone() for p in algo.composer_params]
    assert any(not torch.equal(a, b) for a, b in zip(init, trained))  # cold start moved the composer
    snap = algo.snapshot.trainable_parameters()
    assert all(torch.equal(a, b) for a, b in zip(trained, snap))  # ... and the snapshot is what it became
    from lopd_train.algorithms.base import Batch

    members = Batch(trajs).groups_of()[0]
    g = algo.group(members, algo.retrieve([members])[0])
    with torch.no_grad():
        anchor = losses.anchor_loss(algo.compose(g.task, g.experiences), algo.anchor_latents(g))
    assert float(anchor) < 1e-10
    for _ in range(2):
        metrics = algo.update(trajs)
    assert metrics["grad_norm"] > 0 and metrics["composer_grad_norm"] == 0.0
    assert all(torch.equal(a, b) for a, b in zip(algo.composer_params, snap))


def test_anchor_grows_once_the_composer_moves_away_from_the_snapshot(tmp_path):
    *_, trajs, algo = lopd_setup(tmp_path, composer_lr=3e-3, cold_start_lr=3e-3)
    first = algo.update(trajs)
    second = algo.update(trajs)
    assert first["anchor"] < 1e-10 < second["anchor"]
    assert second["composer_grad_norm"] > 0


# --------------------------------------------------------------------------------- sampler and trainer

def test_sampler_log_probs_ignore_the_model_generation_config():
    from lopd_train.rollout.engine import SamplingConfig, generate
    from lopd_train.scoring import student_logits

    model, tok = models.tiny_model()
    tok.padding_side = "left"
    model.eval()
    model.generation_config.repetition_penalty = 5.0  # what a downloaded model config may carry
    model.generation_config.no_repeat_ngram_size = 1
    model.generation_config.top_k = 3
    torch.manual_seed(0)
    prompt = models.encode(tok, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    (toks, lps, _, _), = generate(model, tok, [prompt], SamplingConfig(max_new_tokens=24))
    peft_model = models.wrap_lora(model, {"student": models.lora_config(4, 8)})
    ids = torch.tensor(prompt + toks)
    mask = torch.tensor([0] * len(prompt) + [1] * len(toks))
    with torch.no_grad():
        ref = losses.token_logprobs(student_logits(peft_model, ids, mask), ids[mask.bool()])
    assert torch.allclose(torch.tensor(lps), ref, atol=1e-4)
    assert model.generation_config.repetition_penalty == 5.0  # the model's own config is left as it was


def test_the_trainer_asks_algorithms_for_capabilities_not_names():
    from pathlib import Path

    from lopd_train.algorithms import ALGORITHMS
    from lopd_train.config import TrainConfig

    training = Path(__file__).resolve().parents[1] / "lopd_train" / "training"
    src = (training / "trainer.py").read_text() + (training / "checkpoints.py").read_text()
    assert 'algo == "' not in src and "getattr(self.algo, \"beta\"" not in src
    assert ALGORITHMS["lopd"].has_cold_start and not ALGORITHMS["grpo"].has_cold_start
    cfg = TrainConfig(composer_lora_r=4, composer_lora_alpha=8)
    assert ALGORITHMS["lopd"].extra_adapters(cfg) == {"composer": (4, 8), "anchor": (4, 8)}
    assert not ALGORITHMS["sdpo"].extra_adapters(cfg)
    assert ALGORITHMS["lopd"].state_fields == ("beta",)


@pytest.mark.parametrize("algo_name", ["lopd", "grpo"])
def test_scoring_several_groups_in_one_student_pass_changes_nothing(tmp_path, algo_name):
    """--score-batch: the chunk's rollouts share one pass (their common prompt prefix once); the gradients
    (student and composer) are those of scoring each group alone, up to fp32 noise. Compared before the
    optimiser step: Adam's first step turns a gradient of ~0 into +-lr whatever its rounding."""
    from lopd_train.algorithms import GRPO

    grads = {}
    for size in (1, 8):
        # without the anchor: before any composer step its z - z0 is only the fp32 rounding of the batched
        # compose, which --anchor-norm relative divides by the latents' mean square (~1/0.02 at the embedding
        # scale): ~0.5% of a first-step composer gradient, noise that says nothing about the scoring's batching
        peft_model, tok, cfg, trajs, algo = lopd_setup(tmp_path / str(size), score_batch=size, anchor_coef=0.0)
        if algo_name == "grpo":
            algo = GRPO(peft_model, tok, cfg)
        assert len(algo.chunks(algo.minibatches(trajs)[0].groups_of())) == (2 if size == 1 else 1)
        seen = grads[size] = {}
        step = algo.step_optimizer

        def recording(opt, params, step=step, seen=seen, names={id(p): n for n, p in peft_model.named_parameters()}):  # noqa: B006, B008 - the defaults bind this size's values
            seen.update({f"{names.get(id(p), 'qformer')}#{i}": p.grad.detach().clone()
                         for i, p in enumerate(params) if p.grad is not None})
            return step(opt, params)
        algo.step_optimizer = recording
        algo.update(trajs)
    g1, g8 = grads[1], grads[8]
    assert g1.keys() == g8.keys() and any("student" in n for n in g1)
    assert any("composer" in n or "qformer" in n for n in g1) == (algo_name == "lopd")
    scale = max(float(g.abs().max()) for g in g1.values())
    off = {n: float((g1[n] - g8[n]).abs().max()) for n in g1 if not torch.allclose(g1[n], g8[n], rtol=1e-4, atol=1e-6 * scale)}
    assert not off, off


def test_composing_several_contexts_in_one_encoder_pass_gives_each_its_own_latents(tmp_path):
    """``compose_many``: all (task, experience) pairs of several groups in one padded encoder pass; each
    context gets the ``[J*K, d]`` latents it gets alone (padding masked), in order, whatever the J of each.
    (The update's and the cold start's gradients through it: the --score-batch test above.)"""
    *_, trajs, algo = lopd_setup(tmp_path)
    members_of = [[t] for t in trajs[::3]]
    hits = algo.retrieve(members_of)
    contexts = [(members_of[0][0].task, hits[0][:1]), (members_of[1][0].task, hits[1][:2]),
                ("a task with a much longer instruction than the others " * 4, hits[0][:2])]
    assert [len(e) for _, e in contexts] == [1, 2, 2]
    with torch.no_grad():
        together = algo.compose_many(contexts)
        alone = [algo.compose(task, e) for task, e in contexts]
    assert [z.shape[0] for z in together] == [algo.cfg.lopd.num_latents * len(e) for _, e in contexts]
    for a, b in zip(together, alone):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)
    assert not torch.allclose(together[0], together[1][:algo.cfg.lopd.num_latents], atol=1e-3)  # not one context copied

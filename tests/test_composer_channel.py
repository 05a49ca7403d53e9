"""The composer trained as the authors train it (issue 57): its cold-start pairing, the authors' Perceiver
resampler, the anchor's scale, both "no margin" ablations and J = 3.

The constructed case: every task's answer is a secret letter the frozen (random) teacher cannot guess from the
task, and the task's banked experience holds it. Cold-started on the authors' pairing (its own row allowed), the
composer must carry the letter through the latents: the teacher's NLL of held-back copies falls (PIG > 0), and
the task's own latents beat another task's. Cold-started on cross-task pairs only (``exclude``, with one bank row
per task), it cannot learn which letter goes with which task."""

from __future__ import annotations

import pytest
import torch

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_train import models
from lopd_train.algorithms import losses
from lopd_train.algorithms.lopd import cold_start_pairs, pairing_stats
from lopd_train.latent.composer import Composer, PerceiverResampler

SECRETS = "QZXJKVWY"
REPEAT = 16  # the letter fills a good part of what the encoder reads


def channel(tmp_path, composer: str, retrieval: str, steps: int, top_j: int = 1, **kw):
    """A tiny LOPD on eight coin tasks whose one action is a secret letter; a reference bank of one row per task
    (the trajectories the cold start fits, with their bank ids) and held-back copies never in it."""
    from lopd_envs.trace import Trace
    from lopd_train.algorithms import LOPD
    from lopd_train.config import TrainConfig
    from lopd_train.experience.bank import ExperienceBank
    from lopd_train.experience.retriever import Retriever
    from lopd_train.rollout.engine import make_envs
    from lopd_train.rollout.replay import replay_trace

    torch.manual_seed(0)
    base, tok = models.tiny_model()
    with torch.no_grad():  # a random teacher with weights x5: its attention and logits are not flat, so it can
        for p in base.parameters():  # read a context at all (at the usual 0.02 its output barely depends on it)
            if p.dim() == 2:
                p.mul_(5.0)
    lora = models.lora_config(4, 8)
    peft_model = models.wrap_lora(base, {"student": lora, "composer": lora, "anchor": lora})
    settings = dict(model="tiny-random", num_latents=4, top_j=top_j, composer=composer, perceiver_depth=2,
                    qformer_dim=32, qformer_layers=1, top_m=5, lora_r=4, lora_alpha=8, composer_lora_r=4,
                    composer_lora_alpha=8, cold_start_lr=1e-2, cold_start_steps=steps, cold_start_batch_size=8,
                    cold_start_retrieval=retrieval, cold_start_min_successes=1, experience_tokens=48,
                    experience_format="trace", bank_mode="reference", seed=0)
    cfg = TrainConfig(**{**settings, **kw})
    (env,) = make_envs("lopd-test/Coin-v0", 1, category="all")
    tasks = list(env.unwrapped.tasks.values()) if isinstance(env.unwrapped.tasks, dict) else list(env.unwrapped.tasks)
    traces = []
    for task, secret in zip(tasks, SECRETS):
        tr = Trace(env_id="lopd-test/Coin-v0", task_id=task.task_id, task=task.instruction, category=task.category,
                   reward=1.0, success=True)
        tr.add({"text": secret * REPEAT})
        traces.append(tr)
    bank = ExperienceBank(tmp_path / f"bank-{composer}-{retrieval}.sqlite")
    bank.add(traces)
    rows = {e.task_id: e.id for e in bank.all()}
    retriever = Retriever(bank, key="instruction")
    trajs = [replay_trace(env, tok, tr, cfg.sampling(), group=-(k + 1)) for k, tr in enumerate(traces)]
    for t in trajs:
        t.bank_id = rows[t.task_id]
    held = [replay_trace(env, tok, tr, cfg.sampling()) for tr in traces]
    return LOPD(peft_model, tok, cfg, bank, retriever), trajs, held, retriever


def pig(algo, held, retriever):
    from lopd_train.latent import diagnostics

    exps = retriever.retrieve([t.task for t in held], k=algo.cfg.experience.top_j)
    others = diagnostics.other_task_experiences(held, exps)
    recs = diagnostics.teacher_nll(algo, held, exps, others, conditions=("none", "latent", "other"))
    return (diagnostics.bootstrap_gain(recs, "latent")["pig"],
            diagnostics.paired_gain(recs, "latent", "other", by_task=True)["pig"])


# ------------------------------------------------------------------------------------------ pairing

def test_self_pairs_are_same_task_and_exclude_pairs_are_not(tmp_path):
    _algo, trajs, _, retriever = channel(tmp_path, "qformer", "self", steps=1)
    mine = pairing_stats(cold_start_pairs(retriever, trajs, 1, "self"))
    assert mine == {"cold_start_same_task_fraction": 1.0, "cold_start_own_row_fraction": 1.0}
    theirs = pairing_stats(cold_start_pairs(retriever, trajs, 1, "exclude"))
    assert theirs == {"cold_start_same_task_fraction": 0.0, "cold_start_own_row_fraction": 0.0}
    # J = 3 over one row per task: the own row first, then two other tasks'
    pairs = cold_start_pairs(retriever, trajs, 3, "self")
    assert all(len(exps) == 3 and exps[0].task_id == t.task_id for t, exps in pairs)
    assert pairing_stats(pairs)["cold_start_same_task_fraction"] == pytest.approx(1 / 3)
    with pytest.raises(ValueError, match="self or exclude"):
        cold_start_pairs(retriever, trajs, 1, "both")


def test_the_cold_start_summary_says_what_it_was_fitted_on(tmp_path):
    for mode, same in (("self", 1.0), ("exclude", 0.0)):
        algo, trajs, _, _ = channel(tmp_path, "qformer", mode, steps=1)
        summary = algo.cold_start(trajs)
        assert summary["cold_start_same_task_fraction"] == same
        assert summary["cold_start_own_row_fraction"] == same
        assert summary["cold_start_self_retrieval"] == float(mode == "self")


def test_auto_pairing_is_the_authors_with_a_reference_bank_and_the_control_with_a_dynamic_one():
    from lopd_train.config import TrainConfig

    assert TrainConfig(bank_mode="reference").cold_start_retrieval == "self"
    assert TrainConfig(bank_mode="dynamic").cold_start_retrieval == "exclude"
    assert TrainConfig(bank_mode="reference", cold_start_retrieval="exclude").cold_start_retrieval == "exclude"


# ------------------------------------------------------------------------------------------ the channel

_TRAINED: dict = {}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """``(composer, pairing) -> (summary, PIG before, PIG after, own minus other after)``, each cold start run once."""
    def get(composer: str, retrieval: str):
        if (composer, retrieval) not in _TRAINED:
            algo, trajs, held, retriever = channel(tmp_path_factory.mktemp("channel"), composer, retrieval, steps=30)
            before, _ = pig(algo, held, retriever)
            summary = algo.cold_start(trajs)
            _TRAINED[composer, retrieval] = (summary, before, *pig(algo, held, retriever))
        return _TRAINED[composer, retrieval]
    return get


@pytest.mark.parametrize("composer", ["perceiver", "qformer"])
def test_the_cold_start_teaches_the_latents_a_token_the_teacher_cannot_guess(trained, composer):
    summary, before, after, own_minus_other = trained(composer, "self")
    assert summary["cold_start_nll_last"] < summary["cold_start_nll_first"] - 0.5
    assert after > max(before, 0.0) + 0.3  # nats per token, over the letters and the end of turn
    assert own_minus_other > 0.3  # the task's own latents, not just any latents


def test_cross_task_pairs_cannot_teach_which_letter_goes_with_which_task(trained):
    _, _, after, own_exclude = trained("perceiver", "exclude")
    *_, own_self = trained("perceiver", "self")
    assert after > 0.1  # it still learns what all tasks share (letters, then the end of turn)
    assert own_self > own_exclude + 0.3  # measured: 0.67 against 0.24


# ------------------------------------------------------------------------------------------ the Perceiver

@pytest.fixture()
def policy():
    torch.manual_seed(0)
    base, tok = models.tiny_model()
    peft_model = models.wrap_lora(base, {"student": models.lora_config(4, 8), "composer": models.lora_config(4, 8)})
    return peft_model, tok


def test_the_perceiver_is_the_authors_shape_at_the_model_width(policy):
    peft_model, tok = policy
    comp = Composer(peft_model, tok, num_queries=5, max_tokens=40, kind="perceiver", depth=3)
    cfg = peft_model.get_base_model().config
    res = comp.compressor
    assert isinstance(res, PerceiverResampler) and res.depth == 3 and res.num_queries == 5
    assert res.attn.heads == cfg.num_attention_heads and res.attn.dim_head * res.attn.heads == cfg.hidden_size
    assert res.ffn[1].out_features == 4 * cfg.hidden_size  # ff x4
    lat = comp.encode([("add 1 and 2", "1. call add({\"a\": 1})"), ("x", "short")])
    assert lat.shape == (2, 5, cfg.hidden_size)
    # the authors' scale: LayerNorm output, RMS ~1 whatever the embeddings' (here ~0.02)
    assert torch.allclose(lat.pow(2).mean(-1).sqrt(), torch.ones(2, 5), atol=0.05)
    alone = comp.encode([("x", "short")])  # padding changes nothing
    assert torch.allclose(alone[0], lat[1], atol=1e-5)


def test_the_perceivers_shared_block_is_applied_depth_times(policy):
    peft_model, tok = policy
    comp = Composer(peft_model, tok, num_queries=2, max_tokens=20, kind="perceiver", depth=4)
    calls = []
    comp.compressor.attn.register_forward_hook(lambda *a: calls.append(1))
    comp.encode([("x", "y")])
    assert len(calls) == 4
    assert sum(p.numel() for p in comp.compressor.parameters()) == sum(
        p.numel() for p in Composer(peft_model, tok, num_queries=2, kind="perceiver", depth=1).compressor.parameters())


def test_gradients_reach_the_encoder_lora_and_the_resampler(policy):
    from lopd_train.scoring import teacher_logits

    peft_model, tok = policy
    comp = Composer(peft_model, tok, num_queries=3, kind="perceiver", depth=2)
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_B" in n and ".composer." in n:
                p.normal_(0, 0.01)
    ids = torch.randint(3, 200, (12,))
    mask = torch.tensor([0] * 6 + [1] * 6)
    context = comp.encode([("x", "1. call f({})")]).reshape(-1, peft_model.get_base_model().config.hidden_size)
    ids[1:4] = 0
    teacher_logits(peft_model, ids, mask, ([1, 2, 3], context)).logsumexp(-1).sum().backward()
    res = comp.compressor
    for p in (res.latents, res.proj_in.weight, res.attn.to_q.weight, res.attn.to_kv.weight, res.ffn[1].weight,
              res.proj_out.weight, res.norm_out.weight):
        assert p.grad is not None and p.grad.abs().sum() > 0
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in comp.lora_parameters())
    assert all(p.grad is None for p in models.adapter_parameters(peft_model, "student"))


def test_a_perceiver_checkpoint_refuses_a_qformer_run(tmp_path):
    algo, *_ = channel(tmp_path, "perceiver", "self", steps=1)
    other, *_ = channel(tmp_path, "qformer", "self", steps=1)
    with pytest.raises(ValueError, match="perceiver"):
        other.load_state_dict(algo.state_dict())
    again, *_ = channel(tmp_path, "perceiver", "self", steps=1)
    again.load_state_dict(algo.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(again.composer.compressor.state_dict().values(),
                                                 algo.composer.compressor.state_dict().values()))


# ------------------------------------------------------------------------------------------ scale and rates

def test_the_relative_anchor_weighs_a_relative_drift_the_same_at_any_scale():
    torch.manual_seed(0)
    z0 = torch.randn(8, 16)
    z = z0 + 0.1 * torch.randn(8, 16)
    q = torch.log_softmax(torch.randn(3, 4), -1)
    lp = torch.zeros(3)
    terms = []
    for scale in (1.0, 0.136):
        a, a0 = z * scale, z0 * scale
        t = losses.composer_objective(q, q, lp, lp, 1.0, 0.0, 0.05, a, a0, 0.2,
                                      anchor_scale=float(a0.pow(2).mean()))
        terms.append(t.anchor)
        assert losses.relative_drift(a, a0) == pytest.approx(float((z - z0).pow(2).mean().sqrt() /
                                                                   z0.pow(2).mean().sqrt()), rel=1e-5)
    assert terms[0] == pytest.approx(terms[1], rel=1e-4)
    raw = losses.composer_objective(q, q, lp, lp, 1.0, 0.0, 0.05, z * 0.136, z0 * 0.136, 0.2)
    assert raw.anchor == pytest.approx(terms[1] * float((z0 * 0.136).pow(2).mean()), rel=1e-4)  # absolute: 54x weaker


def test_the_authors_rates_are_the_defaults():
    from lopd_train.config import TrainConfig

    cfg = TrainConfig()
    lopd = cfg.lopd
    assert (lopd.composer_lr, lopd.cold_start_lr, lopd.cold_start_compressor_clip, lopd.cold_start_lora_clip,
            lopd.anchor_norm, cfg.experience.top_j) == (1e-5, 1e-5, 30.0, 3.0, "relative", 3)


def test_the_cold_start_clips_the_compressor_and_the_lora_apart(tmp_path):
    algo, trajs, _, _ = channel(tmp_path, "perceiver", "self", steps=1, cold_start_lora_clip=1e-6,
                                cold_start_compressor_clip=1e6)
    lora0 = [p.detach().clone() for p in algo.composer.lora_parameters()]
    res0 = [p.detach().clone() for p in algo.composer.compressor.parameters()]
    seen = {}
    real = torch.nn.utils.clip_grad_norm_

    def spy(params, limit, *a, **k):
        params = list(params)
        norm = real(params, limit, *a, **k)
        seen[limit] = float(torch.stack([p.grad.norm() for p in params if p.grad is not None]).norm())
        return norm

    torch.nn.utils.clip_grad_norm_ = spy
    try:
        algo.cold_start(trajs)
    finally:
        torch.nn.utils.clip_grad_norm_ = real
    assert seen[1e-6] <= 1e-6 * 1.01 and seen[1e6] > 1e-3  # the LoRA clipped to its limit, the resampler not
    assert algo.cold_start_opt.param_groups[0]["weight_decay"] == 0.01
    assert algo.cold_start_opt.param_groups[0]["lr"] == 1e-2
    assert any(not torch.equal(a, b) for a, b in zip(res0, algo.composer.compressor.parameters()))
    assert lora0


# ------------------------------------------------------------------------------------------ the ablations

def test_both_no_margin_ablations_are_named_and_do_what_they_say():
    from lopd_train.config import TrainConfig

    authors = TrainConfig(margin_ablation="no-composer-phase")
    assert authors.freeze_composer and not authors.use_margin
    ours = TrainConfig(margin_ablation="eta-zero")
    assert not ours.freeze_composer and not ours.use_margin
    legacy = TrainConfig(use_margin=False)  # --no-use-margin is the eta-zero variant
    assert legacy.margin_ablation == "eta-zero" and not legacy.freeze_composer
    with pytest.raises(ValueError, match=r"margin_ablation|margin-ablation|choose|accepted"):
        TrainConfig(margin_ablation="off")


def test_the_help_names_both_ablations():
    import dataclasses

    from lopd_train.config import TrainConfig

    helps = {f.name: f.metadata["help"] for f in dataclasses.fields(TrainConfig)}
    assert "constraint.enabled=false" in helps["margin_ablation"] and "no-composer-phase" in helps["margin_ablation"]
    assert "eta-zero" in helps["margin_ablation"] and "eta-zero" in helps["use_margin"]


def test_eta_zero_keeps_training_the_composer_and_no_composer_phase_does_not(tmp_path):
    for ablation, moves in (("eta-zero", True), ("no-composer-phase", False)):
        algo, trajs, _, _ = channel(tmp_path, "qformer", "self", steps=1, margin_ablation=ablation, composer_lr=1e-2,
                                    beta_init=1.0)
        algo.cold_start(trajs)
        before = [p.detach().clone() for p in algo.composer.compressor.parameters()]
        for k, t in enumerate(trajs):
            t.group = k  # one task, one group
        m = algo.update(trajs)
        after = list(algo.composer.compressor.parameters())
        assert any(not torch.equal(a, b) for a, b in zip(before, after)) == moves, ablation
        assert m["beta_used"] == 0.0 and algo.beta == 1.0  # beta never used nor updated in either
        assert ("latent_drift" in m) == moves


def test_the_probe_nll_is_measured_every_n_steps_and_at_the_end(tmp_path):
    algo, trajs, _, _ = channel(tmp_path, "qformer", "self", steps=1, probe_every=3)
    algo.cold_start(trajs)
    got = [bool(algo.diagnostics(step, final=step == 7)) for step in range(1, 8)]
    assert got == [False, False, True, False, False, True, True]
    frozen, trajs, _, _ = channel(tmp_path, "qformer", "self", steps=1, probe_every=1, freeze_composer=True)
    frozen.cold_start(trajs)
    assert frozen.diagnostics(1, final=True) == {}


@pytest.mark.parametrize("composer", ["perceiver", "qformer"])
def test_j3_runs_the_cold_start_the_update_and_the_pig_measurement(tmp_path, composer):
    algo, trajs, held, retriever = channel(tmp_path, composer, "self", steps=2, top_j=3)
    summary = algo.cold_start(trajs)
    assert summary["cold_start_same_task_fraction"] == pytest.approx(1 / 3)
    for k, t in enumerate(trajs):
        t.group = k
    m = algo.update(trajs)
    assert m["context_fraction"] == 1.0 and m["latent_drift"] >= 0.0
    (exps,) = retriever.retrieve([held[0].task], k=3)
    assert algo.compose(held[0].task, exps).shape == (3 * algo.cfg.lopd.num_latents, algo.composer.compressor(
        torch.zeros(1, 1, algo.policy.get_base_model().config.hidden_size), torch.ones(1, 1)).shape[-1])
    before, own_minus_other = pig(algo, held, retriever)  # every condition measured with three experiences
    assert before == before and own_minus_other == own_minus_other  # finite, not NaN


@pytest.mark.parametrize("composer,per_pass", [("qformer", 1), ("qformer", None), ("perceiver", 1),
                                               ("perceiver", 2)])
def test_cold_start_step_gradient_is_the_summed_losses(tmp_path, composer, per_pass):
    """The cold start backpropagates one group's teacher graph at a time into the latents, then the encoder
    from their gradients, over ``per_pass`` groups an encoder pass (one on a CPU, the batch elsewhere): the
    gradient must be that of one backward of the batch's summed loss."""
    algo, trajs, _, retriever = channel(tmp_path, composer, "self", steps=0, top_j=2)
    algo.compose_per_pass = per_pass
    items = cold_start_pairs(retriever, trajs, 2, "self")[:5]
    params = [p for p in algo.composer_params if p.requires_grad]

    def reference() -> tuple[float, list[torch.Tensor]]:
        for p in params:
            p.grad = None
        by_group: dict = {}
        for t, exps in items:
            by_group.setdefault((tuple(t.input_ids[:t.prompt_len]), tuple(e.id for e in exps)), []).append((t, exps))
        groups = [algo.group([t for t, _ in its], its[0][1]) for its in by_group.values()]
        n = sum(g.n_tokens for g in groups)
        loss = 0.0
        for g, z in zip(groups, algo.compose_many([(g.task, g.experiences) for g in groups])):
            lps = algo.teacher_logprobs(g, z)
            loss = loss + sum(-lp.gather(-1, y[:, None]).sum() for lp, y in zip(lps, g.targets)) / n
        loss.backward()
        return float(loss.detach()), [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params]

    want_loss, want = reference()
    got: list[torch.Tensor] = []
    algo.step_optimizer = lambda opt, ps, clips=None: got.extend(
        p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in params)
    for p in params:
        p.grad = None
    loss = algo.cold_start_step(items)
    assert loss == pytest.approx(want_loss, rel=1e-5)
    assert sum(float(g.abs().sum()) for g in want) > 0  # the test can fail: the encoder gets a gradient
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)

"""The composer shares the backbone (second LoRA adapter, no second copy), emits K latent tokens per
(task, experience) at the embedding scale, and the teacher is the frozen base model reading them at its
placeholders."""

from __future__ import annotations

import pytest
import torch

from lopd_train import models
from lopd_train.latent.composer import Composer
from lopd_train.scoring import student_logits, teacher_logits


@pytest.fixture()
def policy():
    torch.manual_seed(0)
    base, tok = models.tiny_model()
    plain = {k: v.clone() for k, v in base.state_dict().items()}
    peft_model = models.wrap_lora(base, {"student": models.lora_config(4, 8), "composer": models.lora_config(4, 8)})
    return peft_model, tok, plain


def test_composer_adapter_shares_the_base_weights(policy):
    peft_model, _, plain = policy
    n_base = sum(v.numel() for v in plain.values())
    n_all = sum(p.numel() for p in peft_model.parameters())
    n_lora = sum(p.numel() for n, p in peft_model.named_parameters() if "lora_" in n)
    assert n_all - n_lora < n_base * 1.01  # one copy of the base (tied embeddings counted once)
    assert models.adapter_parameters(peft_model, "student") and models.adapter_parameters(peft_model, "composer")
    assert all(p.requires_grad for n, p in peft_model.named_parameters() if "lora_" in n)


def test_composer_emits_k_latents_per_experience_at_the_embedding_scale(policy):
    peft_model, tok, _ = policy
    comp = Composer(peft_model, tok, num_queries=5, dim=32, layers=2, heads=4, max_tokens=40)
    lat = comp.encode([("add 1 and 2", "Task: add 1 and 2\n1. call add({\"a\": 1})"), ("x", "short")])
    d = peft_model.get_base_model().config.hidden_size
    assert lat.shape == (2, 5, d)
    emb_rms = peft_model.get_base_model().get_input_embeddings().weight.pow(2).mean().sqrt()
    assert torch.allclose(lat.pow(2).mean(-1).sqrt(), emb_rms.expand(2, 5), rtol=1e-3)
    # padding does not change an experience's latents
    alone = comp.encode([("x", "short")])
    assert torch.allclose(alone[0], lat[1], atol=1e-5)
    # the task conditions them: the same experience for another task gives other latents
    other = comp.encode([("y", "short")])
    assert not torch.allclose(other[0], lat[1], atol=1e-4)


def test_encoder_input_is_task_then_trajectory_keeping_the_trajectory_end(policy):
    peft_model, tok, _ = policy
    comp = Composer(peft_model, tok, num_queries=2, dim=32, layers=1, heads=4, max_tokens=10)
    ids = comp.input_ids("sum two numbers", "0123456789ABCDEF")
    assert tok.decode(ids) == "Task to solve:\nsum two numbers\n\nReference past trajectory:\n6789ABCDEF"


def test_teacher_is_the_frozen_base_model_whatever_the_adapters_hold(policy):
    peft_model, _, plain = policy
    with torch.no_grad():  # make the student adapter non-trivial
        for p in models.adapter_parameters(peft_model, "student"):
            p.add_(0.5)
    ids = torch.randint(3, 200, (12,))
    mask = torch.tensor([0] * 6 + [1] * 6)
    base, _ = models.tiny_model()
    base.load_state_dict(plain)
    with torch.no_grad():
        ref = base(ids.unsqueeze(0)).logits[0, 5:11]
        got = teacher_logits(peft_model, ids, mask, None)
        student = student_logits(peft_model, ids, mask)
    assert torch.allclose(got, ref, atol=1e-5)
    assert not torch.allclose(student, ref, atol=1e-3)


def test_latent_context_changes_the_teacher_and_gradients_reach_the_composer(policy):
    peft_model, tok, _ = policy
    comp = Composer(peft_model, tok, num_queries=4, dim=32, layers=1, heads=4)
    # make the composer's LoRA non-trivial so its B matrices pass gradient to A as well
    with torch.no_grad():
        for n, p in peft_model.named_parameters():
            if "lora_B" in n and ".composer." in n:
                p.normal_(0, 0.01)
    ids = torch.randint(3, 200, (10,))
    mask = torch.tensor([0] * 4 + [1] * 6)
    lat = comp.encode([("x", "1. call f({})"), ("y", "say y")])
    context = lat.reshape(-1, lat.shape[-1])
    ids[1:1 + len(context)] = 0  # placeholders inside the prompt
    with_ctx = teacher_logits(peft_model, ids, mask, (list(range(1, 1 + len(context))), context))
    without = teacher_logits(peft_model, ids, mask, None)
    assert with_ctx.shape == without.shape == (6, len(tok))
    assert not torch.allclose(with_ctx, without, atol=1e-4)
    with_ctx.logsumexp(-1).sum().backward()
    assert comp.compressor.queries.grad is not None and comp.compressor.queries.grad.abs().sum() > 0
    lora_grads = [p.grad for p in comp.lora_parameters()]
    assert any(g is not None and g.abs().sum() > 0 for g in lora_grads)
    assert all(p.grad is None for p in models.adapter_parameters(peft_model, "student"))


@pytest.mark.parametrize("with_latents", [False, True])
def test_group_scoring_with_a_shared_prompt_equals_scoring_each_sequence(policy, with_latents):
    from lopd_train.scoring import score_group

    peft_model, _, _ = policy
    with torch.no_grad():
        for p in models.adapter_parameters(peft_model, "student"):
            p.add_(0.05)
    prompt = torch.randint(3, 200, (9,))
    seqs = [torch.cat([prompt, torch.randint(3, 200, (k,))]) for k in (5, 8, 3)]
    masks = [torch.tensor([0] * 9 + [1] * (len(s) - 9)) for s in seqs]
    masks[1][12:14] = 0  # an observation inside the continuation
    inject = ([2, 3, 4, 5, 6, 7], torch.randn(6, peft_model.get_base_model().config.hidden_size)) \
        if with_latents else None
    for teacher in (False, True):
        shared = score_group(peft_model, seqs, masks, inject if teacher else None, teacher=teacher)
        alone = score_group(peft_model, seqs, masks, inject if teacher else None, teacher=teacher,
                            share_prefix=False)
        for a, b in zip(shared, alone):
            assert a.shape == b.shape and torch.allclose(a, b, atol=1e-4)


def lopd_setup(tmp_path, **kw):
    """A tiny LOPD: random Llama with student, composer and anchor adapters, six coin-flip rollouts of two
    tasks (sampler top-M recorded), a bank holding them and three experiences of other tasks (so every
    group retrieves some), and the algorithm object. ``kw`` override ``TrainConfig`` fields."""
    import tests.coin_env  # noqa: F401
    from lopd_envs.trace import Trace
    from lopd_train.algorithms import LOPD
    from lopd_train.config import TrainConfig
    from lopd_train.experience.bank import ExperienceBank
    from lopd_train.experience.retriever import Retriever
    from lopd_train.rollout.engine import SamplingConfig, make_envs, run_episodes

    torch.manual_seed(0)
    base, tok = models.tiny_model()
    tok.padding_side = "left"
    lora = models.lora_config(4, 8)
    peft_model = models.wrap_lora(base, {"student": lora, "composer": lora, "anchor": lora})
    settings = dict(model="tiny-random", num_latents=3, qformer_dim=32, qformer_layers=1, top_m=5, top_j=2,
                    lora_r=4, lora_alpha=8, composer_lora_r=4, composer_lora_alpha=8, lr=1e-3, composer_lr=1e-3, cold_start_lr=1e-3,
                    cold_start_min_successes=1)
    cfg = TrainConfig(**{**settings, **kw})
    bank = ExperienceBank(tmp_path / "bank.sqlite")
    envs = make_envs("lopd-test/Coin-v0", 6, category="all")
    trajs = run_episodes(peft_model, tok, envs, ["heads_0"] * 3 + ["tails_1"] * 3, SamplingConfig(max_new_tokens=6,
                         top_m=5), groups=[0, 0, 0, 1, 1, 1])
    bank.add([t.trace for t in trajs])
    for i in range(3):  # experiences of other tasks, so every group retrieves some
        tr = Trace(env_id="x", task_id=f"o{i}", task=f"Write note {i}", reward=1.0, success=True)
        tr.add({"text": f"note {i}"})
        bank.add([tr])
    return peft_model, tok, cfg, trajs, LOPD(peft_model, tok, cfg, bank, Retriever(bank))

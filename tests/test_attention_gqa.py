"""Grouped-query attention without K/V copies (issue 53, item 2): every model lopd loads runs
:func:`lopd_train.models.gqa_sdpa_attention`, which gives a masked multi-query attention on CPU to the kernel's
own ``enable_gqa`` instead of transformers' ``repeat_kv`` copies, with the same outputs and gradients as
transformers' SDPA to float rounding."""

from __future__ import annotations

import pytest
import torch

from lopd_train import models
from lopd_train.scoring import score_group


@pytest.fixture()
def copies(monkeypatch) -> list[int]:
    """The group sizes of every ``repeat_kv`` copy transformers' SDPA path makes, as they happen."""
    from transformers.integrations import sdpa_attention

    seen: list[int] = []
    real = sdpa_attention.repeat_kv
    monkeypatch.setattr(sdpa_attention, "repeat_kv", lambda h, n: seen.append(n) or real(h, n))
    return seen


def padded_batch(vocab: int):
    """Three left-padded rows of different lengths: a mask that SDPA cannot replace by ``is_causal``."""
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(3, vocab, (3, 12), generator=g)
    attn = torch.ones_like(ids)
    attn[1, :4] = 0
    attn[2, :7] = 0
    return ids, attn


def test_lopd_loads_every_model_with_its_attention():
    model, _ = models.tiny_model()
    assert model.config._attn_implementation == models.ATTENTION
    assert model.config.num_attention_heads > model.config.num_key_value_heads  # the tiny model is GQA


def test_a_masked_batch_gives_the_sdpa_logits_and_gradients_without_copying_k_and_v(copies):
    results = []
    for implementation in (models.ATTENTION, "sdpa"):
        model, _ = models.tiny_model()
        model.set_attn_implementation(implementation)
        ids, attn = padded_batch(model.config.vocab_size)
        copies.clear()
        logits = model(input_ids=ids, attention_mask=attn).logits
        keep = attn.bool()
        logits[keep].logsumexp(-1).sum().backward()
        results.append((logits[keep].detach(), [p.grad for p in model.parameters()], list(copies)))
    (a, ga, ours), (b, gb, theirs) = results
    assert ours == [] and theirs  # transformers' own SDPA copies K/V here, for every layer
    assert torch.allclose(a, b, rtol=1e-5, atol=1e-5)
    assert all(torch.allclose(x, y, rtol=1e-4, atol=1e-6) for x, y in zip(ga, gb))


def test_the_shared_prompt_scorer_passes_masks_and_copies_no_k_or_v(copies):
    """``score_group`` runs a group's continuations over the prompt's cache with a mask (the case transformers
    expands K/V for): it now runs without a copy, and gives the logits of scoring each sequence alone."""
    torch.manual_seed(0)
    base, _ = models.tiny_model()
    policy = models.wrap_lora(base, {"student": models.lora_config(4, 8)})
    prompt = torch.randint(3, 200, (14,))
    seqs = [torch.cat([prompt, torch.randint(3, 200, (k,))]) for k in (6, 9, 4)]
    masks = [torch.tensor([0] * 14 + [1] * (len(s) - 14)) for s in seqs]
    shared = score_group(policy, seqs, masks)
    assert copies == []
    alone = score_group(policy, seqs, masks, share_prefix=False)
    assert all(torch.allclose(x, y, rtol=1e-5, atol=1e-5) for x, y in zip(shared, alone))


def test_other_cases_are_transformers_own(monkeypatch):
    """No mask, or one query: transformers' function (which already runs GQA without copies there)."""
    from transformers.integrations import sdpa_attention

    calls = []
    real = sdpa_attention.sdpa_attention_forward
    monkeypatch.setattr(sdpa_attention, "sdpa_attention_forward", lambda *a, **k: calls.append(1) or real(*a, **k))
    module = torch.nn.Module()
    module.num_key_value_groups, module.is_causal = 2, True
    q, k, v = torch.randn(1, 4, 5, 8), torch.randn(1, 2, 5, 8), torch.randn(1, 2, 5, 8)
    mask = torch.ones(1, 1, 5, 5, dtype=torch.bool).tril()
    out, _ = models.gqa_sdpa_attention(module, q, k, v, None)
    assert len(calls) == 1
    masked, _ = models.gqa_sdpa_attention(module, q, k, v, mask)
    assert len(calls) == 1 and torch.allclose(out, masked, atol=1e-6)  # a causal mask is is_causal
    models.gqa_sdpa_attention(module, q[:, :, :1], k, v, mask[:, :, :1])
    assert len(calls) == 2

"""The shared-prompt scorer gives a teacher with latent context the same logits *and the same gradient on the
latents* as scoring each sequence alone, although it runs the prompt before the first latent without a graph
(``lopd_train.scoring._prefix_states``). In float64, so that "the same" means far below fp32 noise."""

from __future__ import annotations

import pytest
import torch

from lopd_train import models
from lopd_train.scoring import score_group, teacher_logits


@pytest.fixture()
def prefix_budget(monkeypatch):
    """``FROZEN_PREFIXES`` with its default budget, whatever ``$LOPD_PREFIX_CACHE_MB`` said when it was built at
    import (a caller's ``LOPD_PREFIX_CACHE_MB=0`` would make every lookup a miss), and empty."""
    from lopd_train.scoring import FROZEN_PREFIXES, FrozenPrefixCache

    monkeypatch.delenv("LOPD_PREFIX_CACHE_MB", raising=False)
    monkeypatch.setattr(FROZEN_PREFIXES, "max_bytes", FrozenPrefixCache().max_bytes)
    FROZEN_PREFIXES.clear()
    return FROZEN_PREFIXES


def test_the_prefix_budget_comes_from_the_environment(monkeypatch):
    from lopd_train.scoring import FrozenPrefixCache

    monkeypatch.delenv("LOPD_PREFIX_CACHE_MB", raising=False)
    assert FrozenPrefixCache().max_bytes == 2**30
    monkeypatch.setenv("LOPD_PREFIX_CACHE_MB", "3")
    assert FrozenPrefixCache().max_bytes == 3 * 2**20 and FrozenPrefixCache(max_bytes=5).max_bytes == 5


@pytest.fixture()
def group():
    torch.manual_seed(0)
    base, _ = models.tiny_model()
    base = base.double()
    peft_model = models.wrap_lora(base, {"student": models.lora_config(4, 8)})
    prompt = torch.randint(3, 200, (14,))
    seqs = [torch.cat([prompt, torch.randint(3, 200, (k,))]) for k in (6, 9, 4)]
    masks = [torch.tensor([0] * 14 + [1] * (len(s) - 14)) for s in seqs]
    masks[1][17:19] = 0  # an observation inside the continuation
    return peft_model, seqs, masks


@pytest.mark.parametrize("start", [0, 5])  # latents at the very start (nothing to freeze) and after a prefix
def test_teacher_latent_gradient_with_a_shared_prompt_equals_scoring_each_sequence(group, start):
    peft_model, seqs, masks = group
    d = peft_model.get_base_model().config.hidden_size
    z0 = torch.randn(4, d, dtype=torch.float64)
    positions = list(range(start, start + 4))
    weights = [torch.randn(int(m.sum()), 1, dtype=torch.float64) for m in masks]  # a loss that weighs every logit differently

    def grad_of(shared: bool):
        z = z0.clone().requires_grad_(True)
        if shared:
            logits = score_group(peft_model, seqs, masks, (positions, z), teacher=True)
        else:
            logits = [teacher_logits(peft_model, s, m, (positions, z)) for s, m in zip(seqs, masks)]
        sum((lg.log_softmax(-1) * w).sum() for lg, w in zip(logits, weights)).backward()
        return [lg.detach() for lg in logits], z.grad

    shared_logits, shared_grad = grad_of(True)
    alone_logits, alone_grad = grad_of(False)
    for a, b in zip(shared_logits, alone_logits):
        assert a.shape == b.shape and torch.allclose(a, b, rtol=0, atol=1e-10)
    assert shared_grad.abs().sum() > 0
    # ~1e-7 relative either way (the rotary tables are built in fp32 even for a float64 model); a wrong position or
    # a lost gradient is off by orders of magnitude more
    assert torch.allclose(shared_grad, alone_grad, rtol=1e-6, atol=1e-7)
    # no trainable weight was reached through the teacher (all adapters off)
    assert all(p.grad is None for n, p in peft_model.named_parameters() if "lora_" in n)


def test_the_frozen_prefix_is_computed_once_and_every_later_group_gets_the_same_result(group, prefix_budget):
    """``FROZEN_PREFIXES``: the teacher's prompt up to the first latent, computed once per run (exact), with
    the same logits and latent gradient on a hit as on the miss; a trainable backbone is never cached."""
    from lopd_train.scoring import FROZEN_PREFIXES

    peft_model, seqs, masks = group
    d = peft_model.get_base_model().config.hidden_size
    FROZEN_PREFIXES.clear()
    hits, misses = FROZEN_PREFIXES.hits, FROZEN_PREFIXES.misses

    def run():
        z = torch.randn(4, d, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).requires_grad_(True)
        logits = score_group(peft_model, seqs, masks, (list(range(5, 9)), z), teacher=True)
        sum(lg.log_softmax(-1).sum() for lg in logits).backward()
        return [lg.detach() for lg in logits], z.grad

    first, g1 = run()
    second, g2 = run()
    assert (FROZEN_PREFIXES.hits - hits, FROZEN_PREFIXES.misses - misses) == (1, 1)
    assert all(torch.equal(a, b) for a, b in zip(first, second)) and torch.equal(g1, g2)
    other = [torch.cat([s[:3], s[3:4] + 1, s[4:]]) for s in seqs]  # another prompt head: its own entry
    score_group(peft_model, other, masks, (list(range(5, 9)), torch.zeros(4, d, dtype=torch.float64, requires_grad=True)),
                teacher=True)
    assert FROZEN_PREFIXES.misses - misses == 2
    assert len(FROZEN_PREFIXES._entries) == 2 and FROZEN_PREFIXES._bytes > 0
    budget = FROZEN_PREFIXES.max_bytes
    try:  # room for one entry: the least recently used goes
        FROZEN_PREFIXES.max_bytes = FROZEN_PREFIXES._bytes // 2 + 1
        third = [torch.cat([s[:3], s[3:4] + 2, s[4:]]) for s in seqs]
        score_group(peft_model, third, masks, (list(range(5, 9)), torch.zeros(4, d, dtype=torch.float64,
                                                                              requires_grad=True)), teacher=True)
        assert len(FROZEN_PREFIXES._entries) == 1 and FROZEN_PREFIXES._bytes <= FROZEN_PREFIXES.max_bytes
    finally:
        FROZEN_PREFIXES.max_bytes = budget
    hits, misses = FROZEN_PREFIXES.hits, FROZEN_PREFIXES.misses
    for p in peft_model.get_base_model().parameters():  # a full fine-tune: the backbone changes, nothing is cached
        p.requires_grad_(True)
    run()
    assert (FROZEN_PREFIXES.hits - hits, FROZEN_PREFIXES.misses - misses) == (0, 0)


def test_a_teacher_pass_without_a_graph_takes_the_cached_head_and_equals_the_full_pass(group, prefix_budget):
    """LOPD's probe NLL and the PIG measurements score the teacher under ``torch.no_grad``: those passes read the
    frozen head from ``FROZEN_PREFIXES`` too (a hit after one miss), with the logits of one pass over the whole
    sequence (:func:`teacher_logits`), and the same as a pass that records a graph."""
    from lopd_train.scoring import FROZEN_PREFIXES

    peft_model, seqs, masks = group
    d = peft_model.get_base_model().config.hidden_size
    z = torch.randn(4, d, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
    inject = (list(range(6, 10)), z)
    FROZEN_PREFIXES.clear()
    hits, misses = FROZEN_PREFIXES.hits, FROZEN_PREFIXES.misses
    with torch.no_grad():
        first = score_group(peft_model, seqs, masks, inject, teacher=True)
        second = score_group(peft_model, seqs, masks, inject, teacher=True)
        alone = [teacher_logits(peft_model, s, m, inject) for s, m in zip(seqs, masks)]
    assert (FROZEN_PREFIXES.hits - hits, FROZEN_PREFIXES.misses - misses) == (1, 1)
    with_graph = score_group(peft_model, seqs, masks, (inject[0], z.clone().requires_grad_(True)), teacher=True)
    assert FROZEN_PREFIXES.hits - hits == 2
    for a, b, c, e in zip(first, second, alone, with_graph):
        assert torch.equal(a, b) and torch.allclose(a, c, rtol=0, atol=1e-10) and torch.equal(a, e.detach())


def test_several_groups_share_one_pass_only_when_that_runs_fewer_tokens(group, monkeypatch):
    """``score_groups``: tasks whose prompts differ early (BFCL lists each task's tools in its system prompt) are
    scored a group at a time, tasks behind one long shared prompt in one pass; the logits are the same."""
    import lopd_train.scoring as scoring

    peft_model, seqs, masks = group
    calls = []
    real = scoring.score_group
    monkeypatch.setattr(scoring, "score_group", lambda *a, **k: calls.append(len(a[1])) or real(*a, **k))
    long_shared = [seqs[:2], seqs[2:]]  # one 14-token prompt for all three: one pass
    early_split = [[s.clone() for s in seqs[:2]], [torch.cat([s[:1] + 1, s[1:]]) for s in seqs[2:]]]  # differ at 0
    for groups, want in ((long_shared, [3]), (early_split, [2, 1])):
        calls.clear()
        got = scoring.score_groups(peft_model, groups, [masks[:2], masks[2:]])
        assert calls == want
        alone = [real(peft_model, [s], [m])[0] for g, ms in zip(groups, [masks[:2], masks[2:]]) for s, m in zip(g, ms)]
        assert all(torch.allclose(a, b, rtol=0, atol=1e-9) for a, b in zip(got, alone))

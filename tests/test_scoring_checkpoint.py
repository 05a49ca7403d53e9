"""The shared prompt, checkpointed (``lopd_train.scoring._run_prompt``: its activations recomputed in the
backward instead of kept), gives the same logits and the same gradients as the prompt kept whole, for the
student, for a teacher with latents (the part of the prompt after the first latent carries the graph), and for
several groups at once; it keeps less for the backward; and its recomputation runs in the adapter mode of the
forward, whichever adapter is active when the backward runs. In float64, so that "the same" means far below
fp32 noise."""

from __future__ import annotations

import pytest
import torch

from lopd_train import models, scoring
from lopd_train.scoring import score_group, score_groups


@pytest.fixture()
def group():
    torch.manual_seed(0)
    base, _ = models.tiny_model()
    base = base.double()
    peft_model = models.wrap_lora(base, {"student": models.lora_config(4, 8), "composer": models.lora_config(2, 4)})
    with torch.no_grad():  # LoRA B starts at zero: give every adapter an effect, so a wrong mode would show
        for n, p in peft_model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    prompt = torch.randint(3, 200, (20,))
    seqs = [torch.cat([prompt, torch.randint(3, 200, (k,))]) for k in (6, 9, 4)]
    masks = [torch.tensor([0] * 20 + [1] * (len(s) - 20)) for s in seqs]
    masks[1][23:25] = 0  # an observation inside the continuation
    scoring.FROZEN_PREFIXES.clear()
    return peft_model, seqs, masks


def lora_params(peft_model):
    return [(n, p) for n, p in peft_model.named_parameters() if "lora_" in n]


def run(peft_model, seqs, masks, checkpoint: bool, inject=None, teacher=False, backward_in=None):
    """Logits and the gradients of a loss that weighs every logit differently: LoRA weights and latents."""
    peft_model.zero_grad(set_to_none=True)
    torch.manual_seed(1)
    weights = [torch.randn(int(m.sum()), 1, dtype=torch.float64) for m in masks]
    z = None
    if inject is not None:
        z = inject[1].clone().requires_grad_(True)
        inject = (inject[0], z)
    logits = score_group(peft_model, seqs, masks, inject, teacher=teacher, checkpoint_prompt=checkpoint,
                         checkpoint_teacher=checkpoint)
    loss = sum((x * w).sum() for x, w in zip(logits, weights))
    if backward_in is not None:  # the backward runs with another adapter active than the forward did
        with models.adapter(peft_model, backward_in):
            loss.backward()
    else:
        loss.backward()
    grads = {n: None if p.grad is None else p.grad.clone() for n, p in lora_params(peft_model)}
    return [x.detach() for x in logits], grads, None if z is None else z.grad.clone()


def assert_same(a, b):
    logits_a, grads_a, z_a = a
    logits_b, grads_b, z_b = b
    assert all(torch.allclose(x, y, rtol=0, atol=1e-10) for x, y in zip(logits_a, logits_b, strict=True))
    assert grads_a.keys() == grads_b.keys()
    for n in grads_a:
        if grads_a[n] is None or grads_b[n] is None:
            assert grads_a[n] is None and grads_b[n] is None, n
        else:
            assert torch.allclose(grads_a[n], grads_b[n], rtol=1e-9, atol=1e-12), n
    if z_a is not None:
        assert torch.allclose(z_a, z_b, rtol=1e-9, atol=1e-12)


def test_the_student_gradient_is_the_same_with_the_prompt_checkpointed(group):
    peft_model, seqs, masks = group
    kept, checkpointed = run(peft_model, seqs, masks, False), run(peft_model, seqs, masks, True)
    assert any(g is not None and g.abs().sum() > 0 for g in kept[1].values())
    assert_same(kept, checkpointed)


@pytest.mark.parametrize("start", [0, 6])  # latents at the very start (nothing frozen) and after a frozen head
def test_the_teacher_latent_gradient_is_the_same_with_the_prompt_checkpointed(group, start):
    peft_model, seqs, masks = group
    d = peft_model.get_base_model().config.hidden_size
    inject = (list(range(start, start + 4)), torch.randn(4, d, dtype=torch.float64))
    kept = run(peft_model, seqs, masks, False, inject, teacher=True)
    checkpointed = run(peft_model, seqs, masks, True, inject, teacher=True)
    assert kept[2].abs().sum() > 0
    assert_same(kept, checkpointed)


def test_the_recomputation_runs_in_the_forward_adapter_mode(group):
    """LOPD's composer and teacher run their forward in one adapter mode and their backward later, with the
    student active: the recomputed prompt must be the composer's, not the student's."""
    peft_model, seqs, masks = group
    with models.adapter(peft_model, "composer"):
        kept = run(peft_model, seqs, masks, False, backward_in="student")
        checkpointed = run(peft_model, seqs, masks, True, backward_in="student")
    assert any(g is not None and g.abs().sum() > 0 for n, g in kept[1].items() if ".composer." in n)
    assert_same(kept, checkpointed)


def test_the_teacher_recomputation_runs_without_adapters(group):
    """LOPD's teacher (all adapters off) is backpropagated in the composer's backward, with the student active."""
    peft_model, seqs, masks = group
    d = peft_model.get_base_model().config.hidden_size
    inject = (list(range(6, 10)), torch.randn(4, d, dtype=torch.float64))
    kept = run(peft_model, seqs, masks, False, inject, teacher=True, backward_in="student")
    checkpointed = run(peft_model, seqs, masks, True, inject, teacher=True, backward_in="student")
    assert kept[2].abs().sum() > 0
    assert_same(kept, checkpointed)


def test_several_groups_are_the_same_with_the_prompt_checkpointed(group):
    peft_model, seqs, masks = group
    groups = [[s.clone() for s in seqs[:2]], [torch.cat([s[:1] + 1, s[1:]]) for s in seqs[2:]]]  # differ at 0

    def both(checkpoint):
        peft_model.zero_grad(set_to_none=True)
        logits = score_groups(peft_model, groups, [masks[:2], masks[2:]], checkpoint_prompt=checkpoint)
        sum(x.pow(2).sum() for x in logits).backward()
        return [x.detach() for x in logits], {n: p.grad.clone() for n, p in lora_params(peft_model)
                                              if p.grad is not None}, None
    assert_same(both(False), both(True))


def saved_bytes(fn) -> int:
    """Bytes of the tensors autograd keeps for the backward while ``fn`` runs its forward."""
    total = 0

    def pack(t):
        nonlocal total
        total += t.numel() * t.element_size()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


def test_a_checkpointed_prompt_keeps_less_for_the_backward(group):
    peft_model, seqs, masks = group
    head = torch.randint(3, 200, (300,))
    long = [torch.cat([head, s]) for s in seqs]  # a long prompt, as a BFCL one
    long_masks = [torch.cat([torch.zeros(300, dtype=m.dtype), m]) for m in masks]
    kept = saved_bytes(lambda: score_group(peft_model, long, long_masks, checkpoint_prompt=False))
    checkpointed = saved_bytes(lambda: score_group(peft_model, long, long_masks, checkpoint_prompt=True))
    assert checkpointed < 0.5 * kept


@pytest.mark.parametrize("start", [0, 250])
def test_a_checkpointed_teacher_keeps_only_its_inputs_and_outputs(group, start):
    peft_model, seqs, masks = group
    d = peft_model.get_base_model().config.hidden_size
    head = torch.randint(3, 200, (300,))
    long = [torch.cat([head, s]) for s in seqs]
    long_masks = [torch.cat([torch.zeros(300, dtype=m.dtype), m]) for m in masks]
    z = torch.randn(4, d, dtype=torch.float64, requires_grad=True)
    inject = (list(range(start, start + 4)), z)

    def teacher(checkpoint):
        return lambda: score_group(peft_model, long, long_masks, inject, teacher=True, checkpoint_prompt=checkpoint,
                                   checkpoint_teacher=checkpoint)
    kept, checkpointed = saved_bytes(teacher(False)), saved_bytes(teacher(True))
    assert checkpointed < 0.25 * kept


def test_no_checkpoint_without_a_graph_or_under_gradient_checkpointing(group, monkeypatch):
    """Nothing to recompute without a graph; with every layer already checkpointed a second checkpoint around
    them would only run the prompt's forward a third time."""
    peft_model, seqs, masks = group
    calls = []
    real = scoring._run_prompt
    monkeypatch.setattr(scoring, "_run_prompt", lambda *a, **k: calls.append(k["recompute"]) or real(*a, **k))
    with torch.no_grad():
        score_group(peft_model, seqs, masks, checkpoint_prompt=True)
    score_group(peft_model, seqs, masks, checkpoint_prompt=True)
    models.enable_gradient_checkpointing(peft_model)
    assert models.gradient_checkpointing_on(peft_model)
    peft_model.eval()  # in training mode transformers drops the cache under checkpointing (the algorithms then
    # score without a shared prompt: ``Algorithm.share_prompt``); the layers still recompute in eval mode
    score_group(peft_model, seqs, masks, checkpoint_prompt=True)
    assert [c is not None for c in calls] == [False, True, False]

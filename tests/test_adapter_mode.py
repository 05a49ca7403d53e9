"""Adapter switching (``models.adapter``, ``models.base_only``) sets exactly the state peft's own
``set_adapter`` / ``disable_adapter`` leave, without their walks over every module and their ``requires_grad``
changes: the same logits, every LoRA weight still trainable, the mode from before restored (also when
nested), an unknown adapter refused, and an adapter added later (wrapping more modules) switched too."""

from __future__ import annotations

import pytest
import torch

from lopd_train import models


@pytest.fixture()
def policy():
    backbone, _ = models.load_backbone("tiny-random", torch.device("cpu"), "float32")
    pm = models.wrap_lora(backbone, {"student": models.lora_config(4, 8), "composer": models.lora_config(8, 16)})
    with torch.no_grad():  # LoRA B starts at zero: give each adapter a visible effect
        for n, p in pm.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.2)
    return pm


def logits(pm, ids):
    with torch.no_grad():
        return pm(input_ids=ids).logits


def test_switching_gives_peft_s_own_logits_and_keeps_every_lora_weight_trainable(policy):
    ids = torch.randint(0, 200, (1, 12))
    student = logits(policy, ids)
    with models.adapter(policy, "composer"):
        composer = logits(policy, ids)
        with models.base_only(policy):  # nested: off, then back to the composer
            base = logits(policy, ids)
        assert torch.equal(logits(policy, ids), composer)
        assert policy.active_adapter == "composer"
    assert policy.active_adapter == "student" and torch.equal(logits(policy, ids), student)
    assert all(p.requires_grad for n, p in policy.named_parameters() if "lora_" in n)
    assert not torch.equal(student, composer) and not torch.equal(student, base)

    policy.set_adapter("composer")  # peft's own switches, for reference
    assert torch.equal(logits(policy, ids), composer)
    with policy.disable_adapter():
        assert torch.equal(logits(policy, ids), base)


def test_an_unknown_adapter_is_refused_and_the_mode_is_kept(policy):
    with pytest.raises(ValueError, match="nope"), models.adapter(policy, "nope"):
        pass
    assert models.adapter_mode(policy) == (["student"], False)


def test_an_adapter_added_later_on_more_modules_is_switched_too(policy):
    ids = torch.randint(0, 200, (1, 12))
    with models.adapter(policy, "composer"):  # fills the layer cache with the modules the first two wrap
        pass
    policy.add_adapter("head", models.lora_config(4, 8, targets=["lm_head"]))
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n and ".head." in n:
                p.normal_(0, 0.2)
    before = logits(policy, ids)
    with models.adapter(policy, "head"):
        head = logits(policy, ids)
    policy.set_adapter("head")
    assert torch.equal(logits(policy, ids), head) and not torch.equal(head, before)

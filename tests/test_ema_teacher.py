"""The EMA teacher of issue 56, item 2: the EMA of the LoRA student's effective weight ``W + s·BA``.

Checked against a direct computation: the dense update ``s·B A`` of every layer averaged step by step, and a
teacher that scores exactly as the backbone with ``W + EMA(ΔW)`` merged would; the v2 factor EMA is shown to be a
different teacher."""

from __future__ import annotations

import copy

import pytest
import torch

from lopd_train import models
from lopd_train.algorithms.ema import EMATeacher, FactorEMATeacher
from lopd_train.scoring import score_group


def tiny_policy():
    torch.manual_seed(0)
    base, tok = models.tiny_model()
    policy = models.wrap_lora(base, {"student": models.lora_config(4, 8)})
    return policy, tok


def perturb(policy, seed: int) -> None:
    """A 'student step': random LoRA factors (B non-zero, so the update s·BA is not zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in models.adapter_parameters(policy, "student"):
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)


def test_the_teacher_is_the_ema_of_the_effective_update_not_of_the_factors():
    policy, _ = tiny_policy()
    ema = EMATeacher(policy, "student", decay=0.7)
    layers = ema.layers
    assert layers and all(torch.count_nonzero(d) == 0 for d in ema.deltas.values())  # B = 0 at the start
    want = {n: torch.zeros_like(d) for n, d in ema.deltas.items()}
    factors = {n: (torch.zeros_like(m.lora_A["student"].weight), torch.zeros_like(m.lora_B["student"].weight))
               for n, m in layers.items()}
    for seed in (1, 2, 3):
        perturb(policy, seed)
        ema.update()
        for n, m in layers.items():
            a, b = m.lora_A["student"].weight.detach(), m.lora_B["student"].weight.detach()
            want[n] = 0.7 * want[n] + 0.3 * (b @ a) * m.scaling["student"]
            factors[n] = (0.7 * factors[n][0] + 0.3 * a, 0.7 * factors[n][1] + 0.3 * b)
    for n, m in layers.items():
        assert torch.allclose(ema.deltas[n], want[n], atol=1e-6)
        fa, fb = factors[n]
        assert not torch.allclose((fb @ fa) * m.scaling["student"], want[n], atol=1e-4)  # EMA(B)EMA(A) != EMA(BA)


def test_the_teacher_scores_as_the_backbone_with_the_ema_update_merged():
    policy, _ = tiny_policy()
    ema = EMATeacher(policy, "student", decay=0.5)
    perturb(policy, 1)
    ema.update()
    perturb(policy, 2)
    ema.update()
    seq = torch.randint(3, 200, (12,))
    mask = torch.tensor([0] * 6 + [1] * 6)
    with torch.no_grad(), ema.scoring():
        got = score_group(policy, [seq], [mask])[0]
    merged = copy.deepcopy(policy)
    with torch.no_grad():
        for n, m in dict(merged.named_modules()).items():
            if n in ema.deltas:
                m.get_base_layer().weight += ema.deltas[n].to(m.get_base_layer().weight.dtype)
        want = score_group(merged, [seq], [mask], teacher=True)[0]
        student = score_group(policy, [seq], [mask])[0]
    assert torch.allclose(got, want, atol=1e-5)
    assert not torch.allclose(got, student, atol=1e-4)  # the teacher trails the student
    assert models.adapter_mode(policy) == (["student"], False)  # the student's mode is back after scoring


def test_the_deltas_round_trip_through_the_state_and_a_mismatch_is_refused():
    policy, _ = tiny_policy()
    ema = EMATeacher(policy, "student", decay=0.9)
    perturb(policy, 4)
    ema.update()
    state = ema.state_dict()
    other = EMATeacher(policy, "student", decay=0.9)
    other.load_state_dict(state)
    assert all(torch.equal(other.deltas[n], ema.deltas[n]) for n in ema.deltas)
    with pytest.raises(ValueError, match="do not match"):
        other.load_state_dict(dict(list(state.items())[1:]))
    with pytest.raises(ValueError, match="decay"):
        EMATeacher(policy, "student", decay=1.5)


def test_the_v2_factor_ema_is_still_available_by_name():
    policy, _ = tiny_policy()
    f = FactorEMATeacher(policy, "student", decay=0.5)
    start = [e.detach().clone() for e, _ in f.pairs]
    perturb(policy, 5)
    f.update()
    for (e, s), e0 in zip(f.pairs, start):
        assert torch.allclose(e, 0.5 * e0 + 0.5 * s, atol=1e-7)

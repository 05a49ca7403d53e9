"""The EMA teacher of the self-distillation baselines (``--teacher ema``, SDPO's reference teacher).

The references keep a full copy of the model as the teacher and, after each optimiser step, move every weight
``θ_T <- (1 - r) θ_T + r θ_S`` (lasgroup/SDPO 0e6d510 ``dp_actor.py`` ``_update_teacher``, rate
``teacher_update_rate`` 0.05; TRL's ``teacher_update_rate`` 0.05). Our student is a LoRA on a frozen backbone, so
its weight is ``W + ΔW`` with ``ΔW = s · B A`` (``s`` = alpha / r) and the EMA of the weight is ``W + EMA(ΔW)``.
:class:`EMATeacher` keeps exactly that: per LoRA layer the dense EMA of the effective update ``s · B A`` (fp32,
``out × in``), and scores with the backbone (adapters off) plus ``x · EMA(ΔW)ᵀ`` added to each layer's output by a
forward hook. The EMA of the factors, ``EMA(B) · EMA(A)``, is not the EMA of ``B A`` (the product of averages is not
the average of products); :class:`FactorEMATeacher` keeps that old behaviour, under ``--teacher ema-factors``, only
to reproduce the v2 runs.

``--ema-decay d`` is ``1 - r`` (0.95 is the reference's rate 0.05). Remaining deviations: the deltas cost one dense
fp32 matrix per LoRA layer (the size of the adapted backbone weights, as the reference's teacher copy); LoRA
dropout is not applied to the teacher (it is deterministic, as a teacher in eval mode); only LoRA on
``nn.Linear`` layers is supported; the deltas go into each checkpoint's algorithm state (``ema_deltas``).
"""

from __future__ import annotations

import contextlib
import copy

import torch

from lopd_train import models

EMA_ADAPTER = "ema"


def lora_delta(module, adapter: str) -> torch.Tensor:
    """The effective weight update ``s · B A`` (``out × in``, fp32) of one peft LoRA layer's ``adapter``."""
    a = module.lora_A[adapter].weight.detach().float()
    b = module.lora_B[adapter].weight.detach().float()
    return (b @ a) * float(module.scaling[adapter])


class EMATeacher:
    """The EMA of the student's effective weight ``W + s·BA``, one dense delta per LoRA layer."""

    def __init__(self, policy, student: str = "student", decay: float = 0.95):
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"--ema-decay must lie in [0, 1], got {decay}")
        from peft.tuners.lora import LoraLayer

        self.policy, self.student, self.decay = policy, student, float(decay)
        self.layers = {name: m for name, m in policy.named_modules()
                       if isinstance(m, LoraLayer) and student in getattr(m, "lora_A", {})}
        if not self.layers:
            raise ValueError(f"the policy has no LoRA layer of adapter {student!r} to average")
        for name, m in self.layers.items():
            if not isinstance(m.get_base_layer(), torch.nn.Linear) or getattr(m, "fan_in_fan_out", False):
                raise ValueError(f"the EMA teacher supports LoRA on nn.Linear only; {name} is "
                                 f"{type(m.get_base_layer()).__name__}")
        self.deltas: dict[str, torch.Tensor] = {}
        self.reset()

    @torch.no_grad()
    def reset(self) -> None:
        """Make the teacher equal to the student (at the start of a run)."""
        self.deltas = {name: lora_delta(m, self.student) for name, m in self.layers.items()}

    @torch.no_grad()
    def update(self) -> None:
        """One EMA step after a student step: ``EMA(ΔW) <- d · EMA(ΔW) + (1 - d) · s B A``."""
        for name, m in self.layers.items():
            self.deltas[name].mul_(self.decay).add_(lora_delta(m, self.student), alpha=1.0 - self.decay)

    @contextlib.contextmanager
    def scoring(self):
        """Inside the block the policy scores as the EMA teacher: adapters off, each LoRA layer's output plus
        ``x · EMA(ΔW)ᵀ``. Use ``score_group(..., teacher=False)`` inside (it keeps the adapter mode it finds)."""
        hooks = []
        cast: dict[str, torch.Tensor] = {}

        def hook(name):
            def add(module, inputs, output):
                x = inputs[0]
                d = cast.get(name)
                if d is None or d.dtype != x.dtype:
                    d = cast[name] = self.deltas[name].to(x.dtype)
                return output + torch.nn.functional.linear(x, d)
            return add

        try:
            for name, m in self.layers.items():
                # peft types LoraLayer as a bare mixin; each of its layers is also an nn.Module
                hooks.append(m.register_forward_hook(hook(name)))  # pyright: ignore[reportAttributeAccessIssue]
            with models.base_only(self.policy):
                yield
        finally:
            for h in hooks:
                h.remove()

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {name: d.detach().cpu().clone() for name, d in self.deltas.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        missing = set(self.deltas) ^ set(state)
        if missing:
            raise ValueError(f"the checkpoint's EMA deltas do not match the LoRA layers: {sorted(missing)[:3]}")
        for name, d in self.deltas.items():
            d.copy_(state[name].to(d.device, d.dtype))


class FactorEMATeacher:
    """The v2 EMA teacher (``--teacher ema-factors``): a second LoRA adapter, ``ema``, whose factors A and B are
    each averaged, ``ema <- d · ema + (1 - d) · student``. Kept only to reproduce the v2 runs: ``EMA(B)·EMA(A)`` is
    not the EMA of the update ``BA`` (see the module docstring). Its weights are in every checkpoint's ``lora``
    state like the student's."""

    def __init__(self, policy, student: str = "student", decay: float = 0.99):
        if not 0.0 <= decay <= 1.0:
            raise ValueError(f"--ema-decay must lie in [0, 1], got {decay}")
        self.policy, self.student, self.decay = policy, student, float(decay)
        active = policy.active_adapter
        if EMA_ADAPTER not in policy.peft_config:
            policy.add_adapter(EMA_ADAPTER, copy.deepcopy(policy.peft_config[student]))
        models.activate(policy, active)  # peft freezes the other adapters when it adds one
        named = dict(policy.named_parameters())
        self.pairs = [(named[n.replace(f".{student}.", f".{EMA_ADAPTER}.")], p)
                      for n, p in named.items() if "lora_" in n and f".{student}." in n]
        for ema, _ in self.pairs:
            ema.requires_grad_(False)
        self.reset()

    @torch.no_grad()
    def reset(self) -> None:
        for ema, s in self.pairs:
            ema.copy_(s)

    @torch.no_grad()
    def update(self) -> None:
        for ema, s in self.pairs:
            ema.mul_(self.decay).add_(s.detach(), alpha=1.0 - self.decay)

    def scoring(self):
        return models.adapter(self.policy, EMA_ADAPTER)

    def state_dict(self) -> dict:
        return {}  # the adapter's weights are in the checkpoint's lora state

    def load_state_dict(self, state: dict) -> None:
        pass

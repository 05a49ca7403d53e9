"""What the text-context self-distillation baselines (OPSD, SDPO, SDFT, Skill-SD) share.

Each is the same on-policy distillation step and differs in the privileged text its teacher reads
(:meth:`SelfDistillation.contexts`): the student samples; the teacher is a copy of the model given that text,
re-scoring the student's own tokens without gradient; the student minimises a divergence to it, token by token,
weighted by a clipped importance ratio, as a token mean over the supervised tokens of each minibatch (one
optimiser step each). Rollouts with no context get no supervision.

``--baseline-semantics reference`` (the default) runs each baseline as its reference does; what that means per
baseline is its class's :attr:`~SelfDistillation.reference` (teacher, divergence, tail) and its own module
docstring (context). Shared by all references:

* the teacher prompt is rebuilt, not spliced: the last (task) user message is replaced by the reference's template
  around the task text and the context, the conversation re-rendered and re-tokenised, the response ids appended
  as sampled (:func:`lopd_train.latent.context.reprompt`);
* both distributions at the sampling temperature (``--temperature``);
* the per-token divergence times ``min(exp(clamp(log p_S - log p_sampler, ±20)), --importance-clip)``
  (:func:`lopd_train.algorithms.losses.clipped_importance_ratio`).

``--baseline-semantics v2`` keeps what study v2 ran: frozen-base teacher (or ``ema-factors``), the context
spliced at the start of the task's user turn between each baseline's framing, reverse KL over the teacher's
top-M + tail at T = 1 (``--distill-loss topk``), no importance ratio (Skill-SD: its own). Every knob can be set
on its own over either (``--teacher``, ``--ema-decay``, ``--distill-loss``, ``--distill-alpha``,
``--distill-topk``, ``--distill-tail``, ``--kl-entry-clip``, ``--importance-clip``).

Metrics per update (issue 56, item 5): ``context_fraction`` (supervised share of rollouts), ``context_from_<source>``
(share of rollouts whose context came from each source: ``group``, ``bank``, ``feedback``, ``gold``,
``retrieved``, ``skills``), ``student_loss_success`` / ``student_loss_failure`` (the loss of the tokens of
successful and of failed rollouts over all supervised tokens of the update: the two add up to its token-mean loss),
``supervised_tokens_success`` / ``_failure`` (their token counts) and ``importance_ratio`` (its token mean; 1 when
nothing was supervised).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import torch

from lopd_train import models
from lopd_train.algorithms import losses
from lopd_train.algorithms.base import Algorithm
from lopd_train.algorithms.ema import EMATeacher, FactorEMATeacher
from lopd_train.latent.context import reprompt, task_prompt_text
from lopd_train.rollout.engine import Trajectory
from lopd_train.scoring import score_group

TEACHERS = ("base", "ema", "ema-factors")
DISTILL_LOSSES = ("jsd", "forward_kl", "topk", "sampled")
SEMANTICS = ("reference", "v2")
SOURCES = ("group", "bank", "feedback", "gold", "retrieved", "skills")
#: what ``--baseline-semantics v2`` resolves ``auto`` to, for every baseline
V2 = dict(teacher="base", ema_decay=0.99, loss="topk", tail=True)


class Context(NamedTuple):
    """A rollout's privileged context: the teacher's text and where it came from (one of :data:`SOURCES`).
    Under the reference semantics ``text`` is the whole new task message; under v2 the block spliced into it."""

    text: str
    source: str


@dataclass(frozen=True)
class Semantics:
    """The resolved settings of one run's baseline (``auto`` replaced by the reference's or v2's)."""

    reference: bool
    teacher: str
    ema_decay: float
    loss: str
    alpha: float
    topk: int
    tail: bool
    entry_clip: float
    importance_clip: float | None


def resolve(algo_cls, cfg) -> Semantics:
    own = cfg.baselines  # the baselines' own settings
    if own.baseline_semantics not in SEMANTICS:
        raise ValueError(f"--baseline-semantics must be one of {SEMANTICS}")
    ref = own.baseline_semantics == "reference"
    base = algo_cls.reference if ref else V2
    teacher = base["teacher"] if own.teacher == "auto" else own.teacher
    loss = base["loss"] if own.distill_loss == "auto" else own.distill_loss
    if teacher not in TEACHERS or loss not in DISTILL_LOSSES:
        raise ValueError(f"--teacher must be one of {TEACHERS} and --distill-loss one of {DISTILL_LOSSES}")
    decay = own.ema_decay if own.ema_decay is not None else (base.get("ema_decay", 0.95))
    tail = own.distill_tail if own.distill_tail is not None else base.get("tail", True)
    clip = own.importance_clip if (ref or algo_cls.v2_importance) else None
    return Semantics(ref, teacher, float(decay), loss, float(own.distill_alpha), int(own.distill_topk),
                     bool(tail), float(own.kl_entry_clip), clip)


class SelfDistillation(Algorithm):
    uses_bank = True
    #: reads the bank under the references' semantics too (Skill-SD summarises banked successes); SDPO's and
    #: SDFT's references never do (a group success; the prompt's own demonstration), so no bank is built for them
    bank_in_reference = False
    #: the reference's defaults (teacher, divergence, tail); a subclass states its own
    reference: ClassVar[dict] = dict(teacher="base", loss="jsd", tail=True)
    #: v2 applied the importance ratio (Skill-SD only)
    v2_importance = False
    #: v2: text around the context inside the task's user turn (``lopd_train.latent.context.context_prompt``)
    framing: tuple[str, str] = ("", "")
    #: v2: when a context is longer than ``--experience-tokens``, keep its end rather than its start
    keep_end = False

    @classmethod
    def needs_bank(cls, cfg) -> bool:
        return cfg.baselines.baseline_semantics == "v2" or cls.bank_in_reference

    def __init__(self, policy, tokenizer, cfg, bank=None, retriever=None):
        super().__init__(policy, tokenizer, cfg, bank, retriever)
        self.sem = resolve(type(self), cfg)
        self.ema = None
        if self.sem.teacher == "ema":
            self.ema = EMATeacher(policy, self.student_adapter, self.sem.ema_decay)
        elif self.sem.teacher == "ema-factors":
            self.ema = FactorEMATeacher(policy, self.student_adapter, self.sem.ema_decay)

    # ------------------------------------------------------------------ what a subclass says
    def contexts(self, members: list[Trajectory]) -> list[Context | None]:
        """The privileged context of each rollout of one task's group (``None``: that rollout is not supervised)."""
        raise NotImplementedError

    def prepare(self, trajectories: list[Trajectory]) -> dict[str, float]:
        """Called once per update before any context is built (Skill-SD summarises new successes here)."""
        return {}

    @property
    def temperature(self) -> float:
        t = float(self.cfg.temperature)
        return t if t > 0 else 1.0

    def token_loss(self, s_logits: torch.Tensor, t_logits: torch.Tensor, y: torch.Tensor,
                   sampler_logp: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token student loss ``[T]`` and the importance ratio it was weighed by (``s_logits`` carry the
        gradient; ``t_logits`` do not)."""
        sem, kl = self.sem, self.cfg.kl
        if sem.loss == "topk":  # v2: reverse KL over --kl-support's top-M + tail, raw (T = 1) logits
            div = losses.reverse_kl_topm(s_logits, t_logits, kl.top_m, reduce=False, support=kl.kl_support)
        elif sem.loss == "sampled":
            t = self.temperature if sem.reference else 1.0
            div = losses.sampled_token_kl(losses.token_logprobs(s_logits / t, y), losses.token_logprobs(t_logits / t, y))
        elif sem.loss == "jsd":
            div = losses.self_distillation_divergence(s_logits, t_logits, alpha=sem.alpha, top_k=sem.topk,
                                                      support="student", tail=sem.tail, temperature=self.temperature)
        else:  # forward_kl
            div = losses.self_distillation_divergence(s_logits, t_logits, alpha=0.0, support="full",
                                                      entry_clip=sem.entry_clip, temperature=self.temperature)
        if sem.importance_clip is None:
            return div, torch.ones_like(div)
        student_logp_y = losses.token_logprobs(s_logits / self.temperature, y)  # the sampler's scale
        ratio = losses.clipped_importance_ratio(student_logp_y, sampler_logp, sem.importance_clip)
        return div * ratio, ratio

    # ------------------------------------------------------------------ the shared pieces
    def gold_contexts(self, members: list[Trajectory], template: str | None) -> list[Context | None]:
        """Every rollout of the group the same context, from the task's reference answer (OPSD, SDFT): the whole
        task message ``template`` makes of the task and the answer, or without one (v2) the answer as the block
        spliced in; ``None`` for each when the task has no reference answer (no supervision)."""
        answer = self.reference_answer(members[0].task_id)
        if answer is None:
            return [None] * len(members)
        if template is None:
            return [Context(self.clip(answer), "gold")] * len(members)
        return [Context(template.format(prompt=task_prompt_text(members[0].messages), privileged_context=answer),
                        "gold")] * len(members)

    def clip(self, text: str) -> str:
        """v2: ``text`` cut to ``--experience-tokens`` tokens (its end or its start, see :attr:`keep_end`)."""
        ids = models.encode(self.tokenizer, text)
        n = self.cfg.experience.experience_tokens
        if len(ids) <= n:
            return text
        return self.tokenizer.decode(ids[-n:] if self.keep_end else ids[:n])

    def teacher_view(self, members: list[Trajectory], text: str):
        """``(seqs, masks)``: the rollouts as the teacher reads them: under the reference semantics the prompt
        rebuilt with ``text`` as the task message; under v2 ``text`` spliced into the task's user turn."""
        if not self.sem.reference:
            _, seqs, masks = self.context_view(members, text=text, framing=self.framing)
            return seqs, masks
        first = members[0]
        rp = reprompt(self.tokenizer, first.messages, first.tools, text, first.prompt_len,
                      text_tools=self.cfg.text_tools)
        views = [rp.sequence(t.input_ids, t.action_mask) for t in members]
        seqs = [torch.tensor(ids, dtype=torch.long, device=self.device) for ids, _ in views]
        masks = [torch.tensor(mask, dtype=torch.long, device=self.device) for _, mask in views]
        return seqs, masks

    @torch.no_grad()
    def teacher_logits(self, seqs: list[torch.Tensor], masks: list[torch.Tensor]) -> list[torch.Tensor]:
        if self.ema is not None:
            with self.ema.scoring():
                return score_group(self.policy, seqs, masks, share_prefix=self.share_prompt)
        return score_group(self.policy, seqs, masks, teacher=True, share_prefix=self.share_prompt)

    # ------------------------------------------------------------------ one update
    def update(self, trajectories: list[Trajectory]) -> dict[str, float]:
        m = {"student_loss": 0.0, "grad_norm": 0.0, **self.prepare(trajectories)}
        batches = self.minibatches(trajectories)
        n_all, n_supervised = sum(len(b.trajectories) for b in batches), 0
        sources: dict[str, int] = dict.fromkeys(SOURCES, 0)
        split = {True: [0.0, 0], False: [0.0, 0]}  # success -> [loss sum, tokens]
        ratio_sum, ratio_n = 0.0, 0
        for batch in batches:
            # the privileged context of each rollout; rollouts of a task with the same context share a prompt
            jobs: list[tuple[str, list[Trajectory]]] = []
            for members in batch.groups_of():
                same: dict[str, list[Trajectory]] = {}
                for t, ctx in zip(members, self.contexts(members)):
                    if ctx is not None:
                        same.setdefault(ctx.text, []).append(t)
                        sources[ctx.source] += 1
                jobs += list(same.items())
            n_tokens = sum(t.n_actions for _, ms in jobs for t in ms)
            if not jobs and self.dist.world_size == 1:
                continue  # nothing to supervise (data-parallel ranks still step together, below)
            for text, ms in jobs:
                t_all = self.teacher_logits(*self.teacher_view(ms, text))
                seqs, masks, targets, old = self.tensors(ms)
                s_all = score_group(self.policy, seqs, masks, share_prefix=self.share_prompt)
                loss = 0.0
                for t, s, tl, y, o in zip(ms, s_all, t_all, targets, old):
                    per_token, ratio = self.token_loss(s, tl, y, o)
                    loss = loss + per_token.sum()
                    ok = bool(t.success)
                    split[ok][0] += float(per_token.detach().sum())
                    split[ok][1] += per_token.numel()
                    ratio_sum, ratio_n = ratio_sum + float(ratio.sum()), ratio_n + ratio.numel()
                assert isinstance(loss, torch.Tensor)  # a job has rollouts (ms is never empty): the sum is a tensor
                loss = loss / n_tokens
                loss.backward()
                m["student_loss"] += float(loss.detach()) / len(batches)
                n_supervised += len(ms)
                del t_all, s_all, loss
            m["grad_norm"] += self.step_optimizer(self.student_opt, self.student_params) / len(batches)
            if self.ema is not None:
                self.ema.update()
        m["context_fraction"] = n_supervised / max(n_all, 1)
        for source, n in sources.items():
            m[f"context_from_{source}"] = n / max(n_all, 1)
        for ok, name in ((True, "success"), (False, "failure")):  # the two parts add up to the token-mean loss
            m[f"student_loss_{name}"] = split[ok][0] / max(ratio_n, 1)
            m[f"supervised_tokens_{name}"] = float(split[ok][1])
        m["importance_ratio"] = ratio_sum / ratio_n if ratio_n else 1.0
        return m

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self):
        state = super().state_dict()
        if isinstance(self.ema, EMATeacher):
            state["ema_deltas"] = self.ema.state_dict()
        return state

    def load_state_dict(self, state):
        super().load_state_dict(state)
        if isinstance(self.ema, EMATeacher):
            self.ema.load_state_dict(state["ema_deltas"])

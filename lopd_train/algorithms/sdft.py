"""SDFT (self-distillation fine-tuning, Shenfeld et al. 2026): the teacher is the model conditioned on the task's
demonstration in context, and the student is distilled toward it on its own samples.

**Reference**: TRL's ``SDFTTrainer``/``SDFTConfig`` (TRL 1.10.0.dev0, ``trl/experimental/sdft/``, f2cd577; the same
defaults since v1.6.0). By default (``--baseline-semantics reference``) lopd does what it does:

* **context**: **this task's own demonstration** (TRL's ``privileged_context`` column): the suite's reference
  answer for the task (gold calls, canonical or scripted solution), the same for every rollout of the task;
  tasks without one get no supervision;
* **template and position**: the task's user message is replaced by ``"{prompt}\\n\\n{privileged_context}"``
  (``teacher_prompt_template``), re-rendered and re-tokenised;
* **teacher**: the initial student (the frozen backbone), ``teacher_model_kind="base"``;
* **loss**: JSD with α = 0.5 over the student's top-100 tokens renormalised (``distillation_mode="topk_logits"``,
  ``distillation_add_tail=False``), at the sampling temperature, times the importance ratio clipped at 2.

Remaining deviations: the demonstration is lopd's rendering of the suite's gold answer, not a dataset column of
expert demonstrations, and tasks without one (LiveCodeBench, official EnvScaler scenarios) are not supervised;
``num_loss_tokens_to_skip`` is 0 as TRL's default.

``--baseline-semantics v2`` keeps study v2's SDFT: the experience bank's nearest successful trajectory by the
retriever (for most tasks *another* task's), spliced before the task between :data:`FRAMING`; frozen-base teacher;
reverse KL over the teacher's top-M + tail at T = 1.
"""

from __future__ import annotations

from typing import ClassVar

from lopd_train.algorithms.distill import Context, SelfDistillation
from lopd_train.experience.bank import trace_key
from lopd_train.latent.context import SDFT_TEMPLATE, experience_text

FRAMING = ("Here is a demonstration of how a task like the one below was solved successfully:\n\n",
           "\n\n(end of the demonstration)\n\nNow solve the following task with your own approach:\n\n")


class SDFT(SelfDistillation):
    name = "sdft"
    teacher_sees = ("TRL 1.10 SDFT: this task's own demonstration (its reference answer) after the task; base "
                    "teacher; JSD a=0.5 over the student's top-100, renormalised; IS clip 2")
    reference: ClassVar[dict] = dict(teacher="base", loss="jsd", tail=False)
    framing = FRAMING
    keep_end = True

    def demonstration(self, members):
        """v2: the retriever's top-1 experience for the group's task, excluding the group's own rollouts."""
        if self.retriever is None or self.bank is None:  # the retriever indexes the bank: both or neither
            return None
        own = [e.id for e in (self.bank.get_by_key(trace_key(t.trace)) for t in members if t.trace is not None) if e]
        (hits,) = self.retriever.retrieve([members[0].task], k=1, exclude=[own])
        return hits[0] if hits else None

    def contexts(self, members):
        if self.sem.reference:
            return self.gold_contexts(members, SDFT_TEMPLATE)
        demo = self.demonstration(members)
        if demo is None:
            return [None] * len(members)
        text = self.clip(experience_text(demo, self.cfg.experience.experience_format))
        return [Context(text, "retrieved")] * len(members)

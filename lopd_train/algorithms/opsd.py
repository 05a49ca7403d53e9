"""OPSD (on-policy self-distillation): the teacher is the model itself given the task's reference answer.

**Reference**: TRL's ``OPSDTrainer``/``OPSDConfig`` (huggingface/trl PR #5990, ``trl/experimental/opsd/`` at
55c3a9e16; never in a TRL release: TRL later folded it into SDFT), whose defaults it calls "the official OPSD
setting". By default (``--baseline-semantics reference``) lopd does what it does:

* **context**: the task's reference answer (``reference_answer(task)``: the gold calls for BFCL-v3 and ACEBench,
  the canonical solution for HumanEval+/MBPP+, the scripted solution of lopd's own EnvScaler environments), the
  same for every rollout of the task; tasks without one (LiveCodeBench, official EnvScaler scenarios) get no
  supervision;
* **template and position**: the task's user message is replaced by :data:`lopd_train.latent.context.OPSD_TEMPLATE`
  (``{prompt}``, "Here is a reference solution to this problem: === Reference Solution Begin === ...", the
  instruction to derive it independently), re-rendered and re-tokenised;
* **teacher**: the initial student (the frozen backbone: a fresh LoRA adds zero), ``teacher_model_kind="base"``;
* **loss**: forward KL ``KL(p_T || p_S)`` over the whole vocabulary (``distillation_alpha=0``,
  ``distillation_mode="full_logits"``), each vocabulary entry's term clipped at 0.05 before the sum
  (``distillation_kl_clip``), at the sampling temperature, times the importance ratio clipped at 2.

Remaining deviations: the privileged text is lopd's rendering of the suite's gold answer (TRL takes a dataset
column); lopd samples ``--group-size`` rollouts per task (TRL's OPSD default ``num_generations=1``).

``--baseline-semantics v2`` keeps study v2's OPSD: the answer spliced before the task between :data:`FRAMING`,
frozen-base teacher, reverse KL over the teacher's top-M + tail at T = 1.
"""

from __future__ import annotations

from typing import ClassVar

from lopd_train.algorithms.distill import SelfDistillation
from lopd_train.latent.context import OPSD_TEMPLATE

FRAMING = ("A reference answer to the task below is shown first, for you to learn from. Solve the task as if "
           "you had worked it out yourself; do not mention the reference.\n\nReference answer:\n",
           "\n\n(end of the reference answer)\n\nTask:\n")


class OPSD(SelfDistillation):
    name = "opsd"
    teacher_sees = ("TRL OPSD (PR #5990): the task's reference answer after the task in OPSD's template; base "
                    "teacher; forward KL over the vocabulary, 0.05 clip per entry; IS clip 2")
    reference: ClassVar[dict] = dict(teacher="base", loss="forward_kl", tail=False)
    uses_bank = False
    framing = FRAMING

    def contexts(self, members):
        return self.gold_contexts(members, OPSD_TEMPLATE if self.sem.reference else None)

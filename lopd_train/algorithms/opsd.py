"""OPSD (on-policy self-distillation): the teacher is the model itself given the task's reference answer.

The privileged text is the suite's reference answer for the task (``reference_answer(task)``: the gold
calls for BFCL-v3 and ACEBench, the canonical solution for HumanEval+/MBPP+, the scripted solution of lopd's
own EnvScaler environments); the teacher re-scores the student's own samples with it in its task's user turn.
Tasks without a reference answer (LiveCodeBench, official EnvScaler scenarios) get no supervision. Everything
else (teacher kind, loss) is :class:`~lopd_train.algorithms.distill.SelfDistillation`.
"""

from __future__ import annotations

from lopd_train.algorithms.distill import SelfDistillation

FRAMING = ("A reference answer to the task below is shown first, for you to learn from. Solve the task as if "
           "you had worked it out yourself; do not mention the reference.\n\nReference answer:\n",
           "\n\n(end of the reference answer)\n\nTask:\n")


class OPSD(SelfDistillation):
    name = "opsd"
    teacher_sees = "the task's reference answer (gold calls, canonical or scripted solution) as text"
    uses_bank = False
    framing = FRAMING

    def contexts(self, members):
        answer = self.reference_answer(members[0].task_id)
        return [self.clip(answer) if answer is not None else None] * len(members)

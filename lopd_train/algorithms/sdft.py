"""SDFT (self-distillation fine-tuning): the teacher is the model conditioned on a demonstration, in
context, and the student is distilled toward it on its own samples.

The demonstration of a task group is the experience bank's nearest successful trajectory (the retriever's
top-1 for the task; the bank holds the run's successes and the ``--init-bank`` traces), never one of the
group's own rollouts. A group for which the bank holds nothing gets no supervision. Unlike SDPO the
demonstration may be of another task (the nearest one), and there is no feedback fallback; unlike LOPD it is
read as text, and nothing is trained to compress it.
"""

from __future__ import annotations

from lopd_train.algorithms.distill import SelfDistillation
from lopd_train.experience.bank import trace_key
from lopd_train.latent.context import experience_text

FRAMING = ("Here is a demonstration of how a task like the one below was solved successfully:\n\n",
           "\n\n(end of the demonstration)\n\nNow solve the following task with your own approach:\n\n")


class SDFT(SelfDistillation):
    name = "sdft"
    teacher_sees = "a demonstration in context: the bank's nearest successful trajectory (not the rollout's own)"
    framing = FRAMING
    keep_end = True

    def demonstration(self, members):
        """The retriever's top-1 experience for the group's task, excluding the group's own rollouts."""
        if self.retriever is None:
            return None
        own = [e.id for e in (self.bank.get_by_key(trace_key(t.trace)) for t in members if t.trace is not None) if e]
        (hits,) = self.retriever.retrieve([members[0].task], k=1, exclude=[own])
        return hits[0] if hits else None

    def contexts(self, members):
        demo = self.demonstration(members)
        text = self.clip(experience_text(demo, self.cfg.experience_format)) if demo is not None else None
        return [text] * len(members)

"""SDPO (self-distillation with rich feedback): the teacher is the model re-prompted with a hint for the
rollout it re-scores, placed inside the task's user turn through the chat template (``lopd_train.latent.context``).

The hint of a rollout is, in this order:

1. another successful attempt at **the same task**: a different success of its group, else a success of
   that task in the experience bank from an earlier step; never the rollout's own success (not even an
   identical copy of it), which would teach the student nothing it did not already do;
2. otherwise, when no attempt at the task succeeded and the rollout failed, the environment's feedback on
   that rollout (:func:`feedback_text`: its error results, failing tests, final evaluation);
3. otherwise nothing: the rollout is not supervised (a lone success has nobody to learn from).

Teacher (``--teacher base|ema``) and loss (``--distill-loss topk|sampled``) as in
:class:`~lopd_train.algorithms.distill.SelfDistillation`.
"""

from __future__ import annotations

from lopd_train.algorithms.distill import SelfDistillation
from lopd_train.experience.bank import trace_key
from lopd_train.latent.context import experience_text, trace_text

FRAMING = ("Before the task, here is information about it to help you answer.\n\n", "\n\n(end of the "
           "information)\n\nNow solve the task yourself, from the beginning:\n\n")
SOLUTION_HEAD = "A correct solution of this same task, from another attempt:\n"
FEEDBACK_HEAD = "Feedback from the environment on an earlier attempt at this task, which failed:\n"


def feedback_text(trace) -> str | None:
    """What the environment said about a failed attempt: its steps whose result was an error, else its last
    step's result (code envs: the evaluation summary with the failing tests), then the outcome. ``None``
    when the trace holds no result at all."""
    if trace is None:
        return None
    steps = [s for s in trace.steps if s.error and s.result] or [s for s in trace.steps if s.result][-1:]
    if not steps:
        return None
    return "\n".join([s.render() for s in steps] + [f"Outcome: failure (reward {trace.reward:.2f})"])


class SDPO(SelfDistillation):
    name = "sdpo"
    teacher_sees = "another success at the same task (never its own), else the env's feedback on it"
    framing = FRAMING
    keep_end = True

    _banked: dict[tuple[str, str], list[tuple[str, str]]] | None = None

    def prepare(self, trajectories):
        self._banked = None  # the bank grew since the last update
        return {}

    def banked_solutions(self, members) -> list[tuple[str, str]]:
        """``(key, text)`` of the bank's successes of the group's task, oldest first (one pass over the bank
        per update)."""
        if self._banked is None:
            self._banked = {}
            for e in self.bank.all() if self.bank is not None else []:
                self._banked.setdefault((e.env_id, e.task_id), []).append(
                    (e.key, experience_text(e, self.cfg.experience_format)))
        return self._banked.get((members[0].env_id, members[0].task_id), [])

    def contexts(self, members):
        fmt = self.cfg.experience_format
        solutions = [(trace_key(t.trace), trace_text(t.trace, fmt)) for t in members if t.success and t.trace]
        solutions += self.banked_solutions(members)
        out = []
        for t in members:
            own = trace_key(t.trace) if t.trace is not None else None
            other = next((text for key, text in solutions if key != own), None)
            if other is not None:
                out.append(SOLUTION_HEAD + self.clip(other))
            elif not solutions and not t.success and feedback_text(t.trace) is not None:
                out.append(FEEDBACK_HEAD + self.clip(feedback_text(t.trace)))
            else:
                out.append(None)
        return out

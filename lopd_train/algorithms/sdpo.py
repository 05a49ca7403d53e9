"""SDPO (self-distillation policy optimisation, Hübotter et al. 2026): the teacher is the model re-prompted with
another successful attempt at the same task, or with the environment's feedback on this one.

**Reference**: the authors' code, lasgroup/SDPO v1.0.0 (0e6d510): ``verl/trainer/ppo/ray_trainer.py``
``_maybe_build_self_distillation_batch``, ``verl/trainer/ppo/core_algos.py`` ``compute_self_distillation_loss``,
``verl/workers/actor/dp_actor.py`` ``_update_teacher``, ``verl/trainer/config/actor/actor.yaml``. By default
(``--baseline-semantics reference``) lopd does what it does:

* **context**, per rollout: the response text of the first *other* rollout of its group with reward >= 0.5
  (``dont_reprompt_on_self_success``; decoded with special tokens skipped, think blocks removed); when there is
  none and ``--sdpo-feedback`` (the reference's ``include_environment_feedback`` with
  ``environment_feedback_only_without_solution``), the environment's feedback on the rollout; else no supervision;
* **template and position**: the task's user message is replaced by ``{prompt}`` + "\nCorrect solution:\n\n" +
  solution (+ "\nThe following is feedback from your unsuccessful earlier attempt:\n\n" + feedback) +
  "\n\nCorrectly solve the original question.", re-rendered and re-tokenised
  (:func:`lopd_train.latent.context.sdpo_teacher_text`, :func:`~lopd_train.latent.context.reprompt`);
* **teacher**: EMA of the student, rate 0.05 per optimiser step (``teacher_update_rate``), of the effective
  weight (:class:`lopd_train.algorithms.ema.EMATeacher`);
* **loss**: JSD with α = 0.5 over the student's top-100 + tail, both at the sampling temperature, times the
  importance ratio clipped at 2 (``is_clip``), token mean over the supervised tokens.

Remaining deviations: the group is one task's ``--group-size`` rollouts of this step (the reference's ``uid``
group, usually 8 rollouts); "feedback" is lopd's :func:`feedback_text` of a failed rollout (error results, failing
tests, outcome), the reference's is the reward function's ``feedback`` string, and is given to failed rollouts
only; the reference's tool-use runs set ``include_environment_feedback=False`` (pass ``--no-sdpo-feedback`` to
match them); for a multi-turn episode the "response" is everything after the prompt (assistant turns and the tool
results between them), as verl's multi-turn response; no ``max_reprompt_len`` truncation (10240 tokens there);
the success threshold is the reference's 0.5 on lopd's reward (TRL's SDPOTrainer uses 1.0); a special token's text
that a solution spells out with ordinary tokens (e.g. ``<|im_end|>``) is removed from it
(:func:`~lopd_train.latent.context.strip_special_text`): the reference's ``skip_special_tokens`` drops only special
ids, and its re-tokenised reprompt would turn that text into the special id.

TRL's ``SDPOTrainer`` (1.10.0.dev0) differs from the authors' code in its defaults (``distillation_mode=
"sampled_token"``, α = 1, no tail, no feedback): ``--distill-loss sampled`` is that loss.

``--baseline-semantics v2`` keeps study v2's SDPO: another success of the same task from the group, else from the
experience bank (base-model successes before training, as chat transcripts or compact traces), never the
rollout's own; else, when nothing succeeded, the feedback; spliced before the task between :data:`FRAMING`.
"""

from __future__ import annotations

from typing import ClassVar

from lopd_train.algorithms.distill import Context, SelfDistillation
from lopd_train.experience.bank import trace_key
from lopd_train.latent.context import experience_text, response_text, sdpo_teacher_text, task_prompt_text, trace_text

#: the reference's ``success_reward_threshold``
SUCCESS_THRESHOLD = 0.5

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
    teacher_sees = ("lasgroup/SDPO 0e6d510: another success of its group (response text), else the env's feedback, "
                    "after the task; EMA teacher 0.05; JSD a=0.5 over the student's top-100 + tail at T; IS clip 2")
    reference: ClassVar[dict] = dict(teacher="ema", loss="jsd", tail=True)
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
                    (e.key, experience_text(e, self.cfg.experience.experience_format)))
        return self._banked.get((members[0].env_id, members[0].task_id), [])

    def contexts(self, members):
        if not self.sem.reference:
            return self.v2_contexts(members)
        prompt = task_prompt_text(members[0].messages)
        out = []
        for i, t in enumerate(members):
            other = next((u for j, u in enumerate(members) if j != i and u.reward >= SUCCESS_THRESHOLD), None)
            feedback = None
            if other is None and self.cfg.baselines.sdpo_feedback and not t.success:
                feedback = feedback_text(t.trace)
            if other is not None:
                out.append(Context(sdpo_teacher_text(prompt, response_text(self.tokenizer, other), None), "group"))
            elif feedback is not None:
                out.append(Context(sdpo_teacher_text(prompt, None, feedback), "feedback"))
            else:
                out.append(None)
        return out

    def v2_contexts(self, members):
        fmt = self.cfg.experience.experience_format
        solutions = [(trace_key(t.trace), trace_text(t.trace, fmt), "group")
                     for t in members if t.success and t.trace]
        solutions += [(key, text, "bank") for key, text in self.banked_solutions(members)]
        out = []
        for t in members:
            own = trace_key(t.trace) if t.trace is not None else None
            other = next(((text, src) for key, text, src in solutions if key != own), None)
            if other is not None:
                out.append(Context(SOLUTION_HEAD + self.clip(other[0]), other[1]))
            elif not solutions and not t.success and (feedback := feedback_text(t.trace)) is not None:
                out.append(Context(FEEDBACK_HEAD + self.clip(feedback), "feedback"))
            else:
                out.append(None)
        return out

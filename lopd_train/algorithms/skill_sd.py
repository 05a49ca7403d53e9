"""Skill-SD: successful traces are summarised into short natural-language skills, kept in a skill bank; the
teacher sees the skills retrieved for the task; the student minimises an importance-weighted divergence.

**No public reference implementation** of Skill-SD could be found (issue 56): this is **lopd's reading of the
paper**, with these choices of ours:

* **Summariser** (``--skill-summariser``): who turns a success into a skill: ``student`` (the student itself,
  greedy, as study v2 ran: with a 135M student the skills barely change the teacher, per-token loss ~0.03),
  ``base`` (the frozen backbone) or a model name or path (a separate, stronger summariser, loaded once, on the
  policy's device). Each experience in the bank not yet summarised (the run's successes and the ``--init-bank``
  traces) is rendered into :data:`SUMMARY_PROMPT` and decoded greedily, at most ``--skill-tokens`` tokens; an empty
  summary is kept as attempted, so it is not retried every step.
* **Skill bank**: ``skills.sqlite`` beside the run's ``bank.sqlite`` (an :class:`ExperienceBank` whose entries'
  text is the skill), indexed by the same dense retriever; its rows go into every checkpoint and are merged back
  on resume.
* **Teacher context**: the top-J skills for the task (``--top-j``), never those summarised from the group's own
  rollouts, as a bullet list spliced at the start of the task's user turn between :data:`FRAMING` (both
  semantics: there is no reference template).
* **Teacher and loss**: the frozen backbone; reverse KL over ``--kl-support``'s top-M + tail at T = 1 times the
  per-token importance ratio ``min(p_S(y) / p_sampler(y), --importance-clip)``; ``--teacher``/``--distill-loss``
  choose otherwise.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

from lopd_train import models
from lopd_train.algorithms.distill import Context, SelfDistillation
from lopd_train.experience.bank import ExperienceBank, trace_key
from lopd_train.experience.retriever import Retriever
from lopd_train.rollout.engine import generate
from lopd_train.sampling import Sampling

SUMMARY_PROMPT = ("Below is a successful attempt at a task. Summarise, in one or two short sentences, the "
                  "reusable skill it shows: what to do and which tool to use, not the specific values.\n\n"
                  "{trajectory}\n\nSkill:")
FRAMING = ("Skills learned from earlier successful attempts at similar tasks:\n",
           "\n\n(end of the skills)\n\nTask:\n")


@dataclass
class SkillRecord:
    """A skill in the shape :meth:`ExperienceBank.add` takes (a successful "trace" rendering to the skill)."""

    env_id: str
    task_id: str
    task: str
    skill: str
    source: str  # the key of the experience it was summarised from
    reward: float = 1.0
    success: bool = True

    def render(self) -> str:
        return self.skill

    def to_json(self) -> str:
        return json.dumps({"source": self.source, "skill": self.skill})


class SkillSD(SelfDistillation):
    name = "skill_sd"
    teacher_sees = ("lopd's reading (no public reference): skills summarised from successes (--skill-summariser), "
                    "retrieved for the task, before it; base teacher; reverse KL top-M x IS ratio")
    reference: ClassVar[dict] = dict(teacher="base", loss="topk", tail=True)
    v2_importance = True
    framing = FRAMING
    bank_in_reference = True  # its skills are summarised from the bank's successes under either semantics

    def __init__(self, policy, tokenizer, cfg, bank=None, retriever=None):
        super().__init__(policy, tokenizer, cfg, bank, retriever)
        self.skills = ExperienceBank(bank.path.with_name("skills.sqlite")) if bank is not None else None
        self.attempted: set[str] = set()  # experience keys already summarised (empty summaries included)
        self._skill_retriever: Retriever | None = None

    def close(self) -> None:
        if self.skills is not None:
            self.skills.close()

    # ------------------------------------------------------------------ skill bank
    @property
    def skill_bank(self) -> ExperienceBank:
        """The skill bank, beside the experience bank: skill_sd reads the experience bank (:meth:`needs_bank`),
        so the trainer always gives it one."""
        assert self.skills is not None, "skill_sd runs with an experience bank"
        return self.skills

    def source_of(self, skill) -> str:
        return json.loads(skill.trace)["source"]

    @property
    def skill_retriever(self) -> Retriever:
        if self._skill_retriever is None:  # shares the experience retriever's embedding model
            embedder = self.retriever.embedder if self.retriever is not None else None
            self._skill_retriever = Retriever(self.skill_bank, embedder=embedder)
        return self._skill_retriever

    def summary_prompt(self, experience) -> list[int]:
        """The token ids the model summarises ``experience`` from (its compact trace in :data:`SUMMARY_PROMPT`)."""
        text = models.render_chat(self.tokenizer, [{"role": "user", "content": SUMMARY_PROMPT.format(
            trajectory=experience.text)}])
        return models.encode(self.tokenizer, text)

    def summarise(self, experiences) -> list[str]:
        """One skill per experience: the summariser's greedy summary, at most ``--skill-tokens`` tokens."""
        if not experiences:
            return []
        cfg = Sampling(max_new_tokens=self.cfg.baselines.skill_tokens, greedy=True)
        who = self.cfg.baselines.skill_summariser
        if who not in ("student", "base"):
            model, tok = self.summariser_model()
            prompts = [models.encode(tok, models.render_chat(tok, [{"role": "user", "content": SUMMARY_PROMPT.format(
                trajectory=e.text)}])) for e in experiences]
            outs = generate(model, tok, prompts, cfg)
            return [tok.decode(toks, skip_special_tokens=True).strip() for toks, *_ in outs]
        was_training = self.policy.training
        self.policy.eval()
        mode = models.adapter(self.policy, self.student_adapter) if who == "student" else models.base_only(self.policy)
        with mode:
            outs = generate(self.policy, self.tokenizer, [self.summary_prompt(e) for e in experiences], cfg)
        self.policy.train(was_training)
        return [self.tokenizer.decode(toks, skip_special_tokens=True).strip() for toks, *_ in outs]

    _summariser = None

    def summariser_model(self):
        """The separate summariser (``--skill-summariser NAME_OR_PATH``) and its tokenizer, loaded once."""
        if self._summariser is None:
            model, tok = models.load_backbone(self.cfg.baselines.skill_summariser, self.device,
                                              next(self.policy.parameters()).dtype)
            self._summariser = (model.eval(), tok)
        return self._summariser

    def prepare(self, trajectories):
        """Summarise the bank's experiences that have no skill yet, and index the new skills."""
        todo = [e for e in (self.bank.all() if self.bank is not None else []) if e.key not in self.attempted]
        summaries = self.summarise(todo) if self.dist.is_main else []  # rank 0 summarises for all ranks
        records = [SkillRecord(e.env_id, e.task_id, e.task, skill, e.key) for e, skill in zip(todo, summaries) if skill]
        self.attempted.update(e.key for e in todo)
        # rank 0 writes the one skill bank, then every rank indexes the same new rows
        ids = self.dist.on_main(lambda: [s.id for s in self.skill_bank.add(records)] if records else [])
        added = [self.skill_bank.get(i) for i in ids]
        self.skill_retriever.add(added)
        return {"skills_added": float(len(added)), "skill_bank_size": float(len(self.skill_bank))}

    # ------------------------------------------------------------------ teacher context and loss
    def contexts(self, members):
        own = {trace_key(t.trace) for t in members if t.success and t.trace is not None}
        exclude = [s.id for s in self.skill_bank.all() if self.source_of(s) in own]
        (hits,) = self.skill_retriever.retrieve([members[0].task], k=self.cfg.experience.top_j, exclude=[exclude])
        text = self.clip("\n".join(f"- {s.text}" for s in hits)) if hits else None
        return [Context(text, "skills") if text is not None else None] * len(members)

    def teacher_view(self, members, text):
        """The skills are spliced at the start of the task's user turn under both semantics (no reference)."""
        _, seqs, masks = self.context_view(members, text=text, framing=self.framing)
        return seqs, masks

    # ------------------------------------------------------------------ checkpoint state
    def state_dict(self):
        rows = [(s.env_id, s.task_id, s.task, s.text, self.source_of(s)) for s in self.skill_bank.all()]
        return {**super().state_dict(), "skills": rows, "attempted": sorted(self.attempted)}

    def load_state_dict(self, state):
        super().load_state_dict(state)
        self.dist.on_main(lambda: len(self.skill_bank.add([SkillRecord(*row) for row in state["skills"]])))
        self.attempted = set(state["attempted"])
        self._skill_retriever = None  # rebuilt from the skill bank on first use

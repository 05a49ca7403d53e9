"""Where a teacher's privileged context goes, and what the composer's encoder reads.

**Placement**: the context sits inside the user message that carries the task's question, between two
framing texts and before the question:

    <system prompt + tools> [<demonstrations ...>] <user> FRAMING_BEFORE [context] FRAMING_AFTER <task ...> ...

That message is the **last user message of the episode's opening observation** (:func:`task_message_index`):
a few-shot prompt (BFCL's ``few_shot=``) puts worked examples as earlier user/assistant turns before it, a
conversation history (ACEBench's multi-turn tasks) earlier user turns, and a multi-turn episode's later
requests arrive after the opening. The authors' code injects into the *first* user message because there the
first user message is the task; with demonstrations in front, the first one is a demonstration, two turns
before what the student answers.

For LOPD the context is a run of ``n_latent`` placeholder ids (the tokenizer's pad id) whose input
embeddings the scorer replaces with the J·K latent tokens; for text baselines (SDPO) it is the tokens of a
text. :func:`context_prompt` is the one place that builds it: its ``input_ids`` and ``positions`` are also
what a serving engine needs ("placeholder sentinel + dummy token ids": prompt ids plus the embeddings to put
at ``positions``). The block is spliced into the ids the student actually saw, so every other token id of
the rollout stays exactly as sampled (nothing is re-tokenised).

**Encoder input** is task-conditioned: ``"Task to solve:\\n{task}\\n\\nReference past trajectory:\\n{trajectory}"``,
where the trajectory is the experience's full chat transcript (the reference's rendering) or our compact
action-result trace (``--experience-format trace``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lopd_envs.chat import TextTools
from lopd_train import models
from lopd_train.rollout.replay import TRANSCRIPT_KEY, attach_transcript  # noqa: F401  (attach_transcript: its old home)

#: framing around the privileged context, so the teacher reads it as a worked example of another task
FRAMING_BEFORE = ("Below is a worked example from an earlier, different task that was solved successfully. "
                  "It only illustrates an approach: it happened in another session, and nothing of it has "
                  "been done in the task below, whose environment is in its initial state. Make every call "
                  "yourself and rely only on the results you actually receive.\n\n")
FRAMING_AFTER = "\n\n(end of the worked example)\n\nNow solve the following task from the beginning:\n\n"

TASK_HEAD = "Task to solve:\n"
TRAJECTORY_HEAD = "\n\nReference past trajectory:\n"
_MARK = "\u2063LOPD-CONTEXT\u2063"  # only used to find the start of the task's user message in the template text

EXPERIENCE_FORMATS = ("chat", "trace")


@dataclass(frozen=True)
class ContextPrompt:
    """A prompt with a privileged-context block spliced in.

    ``input_ids``: the whole prompt; ``positions``: the placeholder positions whose embeddings are replaced
    (empty for a text context); ``insert_at``/``block_len``: where the block starts in the original prompt ids
    and how long it is (every id outside it is the original prompt's)."""

    input_ids: list[int]
    positions: list[int]
    insert_at: int
    block_len: int
    prompt_len: int  # length of the original prompt

    def sequence(self, ids: Sequence[int], mask: Sequence[int]) -> tuple[list[int], list[int]]:
        """The teacher's view of a rollout that started with the original prompt: the same ids and action
        mask with the block inserted (the block is never trained)."""
        ids, mask = list(ids), list(mask)
        head = self.input_ids[:self.insert_at] + self.input_ids[self.insert_at + self.block_len:]
        if ids[:self.prompt_len] != head:
            raise ValueError("the rollout does not start with the prompt this context was built for")
        return self.input_ids + ids[self.prompt_len:], [0] * len(self.input_ids) + mask[self.prompt_len:]


def task_message_index(messages: list[dict[str, Any]]) -> int:
    """Index of the user message that carries the task's question in an episode's opening messages: the last
    user message (demonstrations and history come before it)."""
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    if not users:
        raise ValueError("the prompt has no user message to place the context in")
    return users[-1]


def unused_mark(text: str) -> str:
    """A marker string that does not occur in ``text``: the prompt (a task, a tool description, a
    demonstration) could hold our marker, and then the context would be placed at that earlier occurrence."""
    mark, n = _MARK, 0
    while mark in text:
        n += 1
        mark = f"{_MARK[:-1]}-{n}{_MARK[-1]}"
    return mark


def task_turn_start(tokenizer, prompt_ids: Sequence[int], messages: list[dict[str, Any]],
                    tools: list[dict[str, Any]] | None, text_tools: TextTools = TextTools()) -> int:
    """Index into ``prompt_ids`` where the content of the task's user message (:func:`task_message_index`)
    begins, as the rollout rendered it."""
    k = task_message_index(messages)
    mark = unused_mark(json.dumps([messages, tools], ensure_ascii=False, default=str))
    marked = [dict(m) for m in messages]
    marked[k]["content"] = mark + str(marked[k].get("content") or "")
    text = models.render_chat(tokenizer, marked, tools, text_tools=text_tools)
    head = models.encode(tokenizer, text.split(mark, 1)[0])
    if list(prompt_ids[:len(head)]) != head:
        raise ValueError("cannot place the context: the prompt's tokens do not split at the start of the task's "
                         "user message (does the chat template or the tool listing differ from the rollout's?)")
    return len(head)


def context_prompt(tokenizer, prompt_ids: Sequence[int], messages: list[dict[str, Any]],
                   tools: list[dict[str, Any]] | None = None, n_latent: int = 0, text: str | None = None,
                   text_tools: TextTools = TextTools(),
                   framing: tuple[str, str] = (FRAMING_BEFORE, FRAMING_AFTER)) -> ContextPrompt:
    """The prompt with a context block at the start of the task's user message: ``framing[0]`` (default
    ``FRAMING_BEFORE``), then ``n_latent`` placeholder ids (latent context) or the tokens of ``text``, then
    ``framing[1]`` (``FRAMING_AFTER``). Baselines whose context is not a worked example of another task (a
    reference answer, feedback, skills) pass their own framing; the place is the same for all.

    ``prompt_ids``/``messages``/``tools`` are the rollout's own prompt and what it was rendered from;
    ``text_tools`` must be the sampler's (the same rendering)."""
    if (n_latent > 0) == (text is not None):
        raise ValueError("give either n_latent > 0 (latent context) or text (a text context)")
    at = task_turn_start(tokenizer, prompt_ids, messages, tools, text_tools)
    before = models.encode(tokenizer, framing[0])
    body = [placeholder_id(tokenizer)] * n_latent if text is None else models.encode(tokenizer, text)
    block = before + body + models.encode(tokenizer, framing[1])
    ids = list(prompt_ids[:at]) + block + list(prompt_ids[at:])
    positions = list(range(at + len(before), at + len(before) + n_latent)) if text is None else []
    return ContextPrompt(ids, positions, at, len(block), len(prompt_ids))


def placeholder_id(tokenizer) -> int:
    """The dummy id under the latent tokens (its embedding is replaced, so any id works; pad is harmless)."""
    for tid in (tokenizer.pad_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id):
        if tid is not None:
            return int(tid)
    raise ValueError("the tokenizer has no pad, eos or unk token to use as the latent placeholder")


# ----------------------------------------------------------------------------------- encoder input

def encoder_text_parts(task: str, trajectory: str) -> tuple[str, str]:
    """The composer encoder's input in two parts (the task part is never truncated, the trajectory may be):
    ``"Task to solve:\\n{task}\\n\\nReference past trajectory:\\n"`` and ``trajectory``."""
    return TASK_HEAD + task.rstrip() + TRAJECTORY_HEAD, trajectory


def trace_text(trace, fmt: str = "chat") -> str:
    """A live rollout's trace as :func:`experience_text` renders the same trace once it is in the bank."""
    if fmt not in EXPERIENCE_FORMATS:
        raise ValueError(f"unknown experience format {fmt!r}; choose from {EXPERIENCE_FORMATS}")
    if fmt == "chat" and trace.metadata.get(TRANSCRIPT_KEY):
        return str(trace.metadata[TRANSCRIPT_KEY])
    return trace.render()


def experience_text(experience, fmt: str = "chat") -> str:
    """An experience as the encoder reads it: its chat transcript (``chat``, the reference's rendering; an
    experience recorded without one, e.g. a hand-written trace, falls back to its trace) or its compact
    action-result trace (``trace``)."""
    if fmt not in EXPERIENCE_FORMATS:
        raise ValueError(f"unknown experience format {fmt!r}; choose from {EXPERIENCE_FORMATS}")
    if fmt == "chat":
        try:
            meta = json.loads(experience.trace).get("metadata") or {}
        except (TypeError, ValueError):
            meta = {}
        if meta.get(TRANSCRIPT_KEY):
            return str(meta[TRANSCRIPT_KEY])
    return experience.text


# ----------------------------------------------------------------------------------- the references' teacher prompts
#
# The self-distillation references (lasgroup/SDPO 0e6d510 ``ray_trainer.py`` ``_maybe_build_self_distillation_batch``;
# TRL's SDFT/OPSD ``_compose_teacher_prompt``) do not splice a block into the student's prompt: they rebuild the
# conversation as ``messages[:-1] + [{"role": "user", "content": template(prompt=messages[-1]["content"], ...)}]``,
# render and tokenise it anew with the chat template (generation prompt added), and append the rollout's response
# ids as sampled. :func:`reprompt` does exactly that; the templates are the references' own strings.

#: SDPO (lasgroup/SDPO 0e6d510, ``verl/trainer/config/actor/actor.yaml`` ``self_distillation``; YAML ``|-`` blocks)
SDPO_REPROMPT_TEMPLATE = "{prompt}{solution}{feedback}\n\nCorrectly solve the original question."
SDPO_SOLUTION_TEMPLATE = "\nCorrect solution:\n\n{successful_previous_attempt}"
SDPO_FEEDBACK_TEMPLATE = "\nThe following is feedback from your unsuccessful earlier attempt:\n\n{feedback_raw}"
#: SDFT (TRL 1.10.0.dev0 ``SDFTConfig.teacher_prompt_template``)
SDFT_TEMPLATE = "{prompt}\n\n{privileged_context}"
#: OPSD (TRL PR #5990 ``OPSDConfig.teacher_prompt_template`` at 55c3a9e16, "the official OPSD" template)
OPSD_TEMPLATE = ("{prompt}\n\n"
                 "Here is a reference solution to this problem:\n"
                 "=== Reference Solution Begin ===\n{privileged_context}\n=== Reference Solution End ===\n\n"
                 "After reading the reference solution above, make sure you truly understand the reasoning behind "
                 "each step, do not copy or paraphrase it. Now, using your own words and independent reasoning, "
                 "derive the same final answer to the problem above. Think step by step, explore different "
                 "approaches, and don't be afraid to backtrack or reconsider if something doesn't work out:")


def sdpo_teacher_text(prompt: str, solution: str | None, feedback: str | None) -> str:
    """SDPO's reprompt of the task message: the prompt, then the solution section (when there is a solution),
    then the feedback section (when feedback is used), then the closing instruction."""
    return SDPO_REPROMPT_TEMPLATE.format(
        prompt=prompt,
        solution=SDPO_SOLUTION_TEMPLATE.format(successful_previous_attempt=solution) if solution is not None else "",
        feedback=SDPO_FEEDBACK_TEMPLATE.format(feedback_raw=feedback) if feedback is not None else "")


def strip_thinking(text: str) -> str:
    """``<think>...</think>`` blocks and the whitespace after them removed (SDPO's
    ``remove_thinking_from_demonstration``)."""
    import re

    return re.sub(r"<think>.*?</think>\s*", "", text, flags=re.DOTALL)


def special_token_texts(tokenizer) -> list[str]:
    """The text of every special token of ``tokenizer`` (the ids ``skip_special_tokens`` drops), longest first."""
    texts = {str(t) for t in getattr(tokenizer, "all_special_tokens", None) or []}
    texts |= {t.content for t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values() if t.special}
    return sorted((t for t in texts if t), key=len, reverse=True)


def strip_special_text(tokenizer, text: str) -> str:
    """``text`` without any special token's text: a response can spell e.g. ``<|im_end|>`` with ordinary tokens,
    and re-tokenising a prompt that holds it would turn it into the special id (a false end of turn)."""
    specials = special_token_texts(tokenizer)
    while True:  # removing one can join the pieces of another ("<|im_<|im_end|>end|>")
        out = text
        for s in specials:
            out = out.replace(s, "")
        if out == text:
            return out
        text = out


def response_text(tokenizer, trajectory) -> str:
    """A rollout's response as the references use a demonstration: every id after its prompt decoded with
    special tokens skipped (SDPO's ``tokenizer.decode(ids, skip_special_tokens=True)``), any special token's text
    the response spells out removed too (:func:`strip_special_text`; the reference keeps it), think blocks
    removed (SDPO's ``remove_thinking_from_demonstration``)."""
    text = tokenizer.decode(list(trajectory.input_ids[trajectory.prompt_len:]), skip_special_tokens=True)
    return strip_thinking(strip_special_text(tokenizer, text))


@dataclass(frozen=True)
class RepromptedPrompt:
    """The teacher's prompt rebuilt from its messages (``input_ids``), for rollouts whose own prompt was
    ``prompt_len`` ids long: :meth:`sequence` keeps every response id as sampled."""

    input_ids: list[int]
    prompt_len: int

    def sequence(self, ids: Sequence[int], mask: Sequence[int]) -> tuple[list[int], list[int]]:
        return self.input_ids + list(ids[self.prompt_len:]), [0] * len(self.input_ids) + list(mask[self.prompt_len:])


def reprompt(tokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, user_text: str,
             prompt_len: int, text_tools: TextTools = TextTools()) -> RepromptedPrompt:
    """The references' teacher prompt: the episode's opening ``messages`` with the last one (the task's user
    message) replaced by ``user_text``, rendered with the sampler's template settings and tokenised whole."""
    if not messages or messages[-1].get("role") != "user":
        raise ValueError("the references rebuild the last message, which must be the task's user message")
    msgs = [dict(m) for m in messages[:-1]] + [{"role": "user", "content": user_text}]
    text = models.render_chat(tokenizer, msgs, tools, text_tools=text_tools)
    return RepromptedPrompt(models.encode(tokenizer, text), int(prompt_len))


def task_prompt_text(messages: list[dict[str, Any]]) -> str:
    """The ``{prompt}`` of the references' templates: the last message's content."""
    return str(messages[-1].get("content") or "")

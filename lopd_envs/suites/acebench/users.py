"""Simulated users for ``agent_multi_turn``: any callable that takes the conversation (from the user's
side) and returns the user's next message; the conversation ends when a message contains
``"finish conversation"`` (ACEBench's signal).

The conversation a simulator receives is what ACEBench's ``APIUSER`` keeps: a system message with its
instructions (the task's ``question`` in the official user prompt), the opener "Is there anything you need
help with today?" as a ``user`` message, then the agent's messages as ``user`` and the simulator's own
replies as ``assistant`` (upstream files them under ``system``, which chat templates reject). The official
evaluation uses gpt-4o here; :class:`LLMUser` wraps any text policy, :class:`ScriptedUser` replays lines.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from lopd_envs.suites.acebench.prompts import FINISH

Conversation = list[dict[str, str]]


class UserSimulator(Protocol):
    def __call__(self, conversation: Conversation) -> str: ...


def _own_turns(conversation: Conversation) -> int:
    return sum(1 for m in conversation if m["role"] == "assistant")


class ScriptedUser:
    """Says its lines in order, then ``"finish conversation"``. Stateless: the line is chosen by how many
    replies the conversation already holds, so one instance serves any number of episodes and threads."""

    def __init__(self, lines: Sequence[str]):
        self.lines = list(lines)

    def __call__(self, conversation: Conversation) -> str:
        turn = _own_turns(conversation)
        return self.lines[turn] if turn < len(self.lines) else FINISH


class InstructionUser:
    """The default when no user is given: states its instruction once, then finishes. Enough to run and
    test episodes; real evaluation needs an LLM user."""

    def __call__(self, conversation: Conversation) -> str:
        if _own_turns(conversation) == 0:
            return conversation[0]["content"].split("Instruction:", 1)[-1].split("\n\n", 1)[0].strip()
        return FINISH


def render_conversation(conversation: Conversation) -> str:
    """A plain-text prompt for a completion policy: the instructions, the dialogue, and a cue."""
    lines = [conversation[0]["content"].rstrip(), ""]
    for message in conversation[1:]:
        speaker = "agent" if message["role"] == "user" else "user"
        lines.append(f"{speaker}: {message['content']}")
    lines.append("user:")
    return "\n".join(lines)


class LLMUser:
    """A simulated user driven by any text policy (``str -> str``), e.g. a lopd model's generate function.
    ``render`` turns the conversation into the policy's prompt; the reply is stripped of a leading
    ``user:`` label."""

    def __init__(self, policy: Callable[[str], str], render: Callable[[Conversation], str] = render_conversation):
        self.policy = policy
        self.render = render

    def __call__(self, conversation: Conversation) -> str:
        reply = self.policy(self.render(conversation)).strip()
        return reply[5:].strip() if reply.lower().startswith("user:") else reply

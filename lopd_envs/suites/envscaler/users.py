"""The simulated user of conversational EnvScaler episodes, on the pluggable simulators of the ACEBench suite.

A simulator is any :class:`~lopd_envs.suites.acebench.users.UserSimulator` (``conversation -> reply``).
The conversation it receives is EnvScaler's own ``UserAgent.messages``: the user prompt with the task as a
``system`` message, the fixed opener ``"[Agent] Hi! How can I help you today?"`` as ``user``, then each
agent message as ``user`` (prefixed ``"[Agent] "``) and the simulator's raw replies as ``assistant`` (the
same role layout ACEBench's simulator uses, so :class:`ScriptedUser` and :class:`LLMUser` work unchanged).

Replies are read as EnvScaler reads them: any ``###STOP###`` ends the conversation; otherwise the text
after ``# Reply:``. The official simulator retries a reply without that section up to five times and then
sends an empty one; here a reply without the section is taken whole (a scripted user or a plain chat
model needs no format), which the module docstring of the suite lists as a deviation.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import cast

from lopd_envs.suites.acebench.users import Conversation, LLMUser, ScriptedUser, UserSimulator
from lopd_envs.suites.envscaler.prompts import AGENT_OPENER, AGENT_PREFIX, STOP, USER_SYSTEM

THOUGHT, REPLY = "# Thought:", "# Reply:"


def parse_reply(raw: str) -> str:
    """The user's message in a raw simulator reply (``UserAgent._parse_response``, lenient)."""
    if STOP in raw:
        return STOP
    # The official ``# Thought:\s*(.*?)\s*# Reply:\s*(.*)`` (re.S), found without the regex: searched, it
    # backtracks quadratically over long whitespace runs and retries every later "# Thought:". Its group 2,
    # stripped, is what follows the first "# Reply:" after the first "# Thought:".
    thought = raw.find(THOUGHT)
    reply = raw.find(REPLY, thought + len(THOUGHT)) if thought >= 0 else -1
    return raw[reply + len(REPLY):].strip() if reply >= 0 else raw.strip()


def opening_conversation(task: str) -> Conversation:
    return [{"role": "system", "content": USER_SYSTEM.format(task=task)}, {"role": "user", "content": AGENT_OPENER}]


def default_user(task: str) -> UserSimulator:
    """Without a simulator: state the task, then stop at the agent's next message. Enough to run and test
    episodes; real evaluation needs an LLM user (:func:`official_user`)."""
    return ScriptedUser([task, STOP])


def make_user(user: UserSimulator | Sequence[str] | None, task: str) -> UserSimulator:
    if user is None:
        return default_user(task)
    if isinstance(user, (list, tuple)):
        return ScriptedUser(list(user))
    return cast(UserSimulator, user)  # the lines (a list or tuple) were taken above


def render_official(conversation: Conversation) -> str:
    """The conversation as one text prompt for a completion policy, ending where the user's
    ``# Thought:`` begins."""
    parts = [conversation[0]["content"].rstrip(), ""]
    for message in conversation[1:]:
        parts.append(message["content"] if message["role"] == "user" else f"[User] {message['content']}")
    parts.append("# Thought:")
    return "\n".join(parts)


def official_user(policy: Callable[[str], str]) -> UserSimulator:
    """An LLM user in EnvScaler's format driven by a text policy (``prompt -> completion``)."""
    return LLMUser(lambda prompt: "# Thought:" + policy(prompt), render=render_official)


__all__ = [
    "AGENT_PREFIX",
    "STOP",
    "LLMUser",
    "ScriptedUser",
    "UserSimulator",
    "default_user",
    "make_user",
    "official_user",
    "opening_conversation",
    "parse_reply",
    "render_official",
]

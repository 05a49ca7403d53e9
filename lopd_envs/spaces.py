"""Gymnasium spaces for chat environments.

Observations are lists of OpenAI-style messages and actions are free text or an assistant message; no
built-in space describes either honestly (``Text`` restricts the charset, which would exclude Chinese
prompts and code). These spaces check exactly the structure the env contract promises, and sample
arbitrary text, which is the most adversarial action a model can produce.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium.spaces import Space

ROLES = ("system", "user", "assistant", "tool")
_SAMPLE_ALPHABET = string.printable + "中文工具调用{}[]()\"'=,"


def _sample_text(rng: np.random.Generator, max_length: int) -> str:
    length = int(rng.integers(0, max_length + 1))
    return "".join(rng.choice(list(_SAMPLE_ALPHABET), size=length))


def is_message(x: Any) -> bool:
    return (isinstance(x, dict) and x.get("role") in ROLES and isinstance(x.get("content"), str)
            and all(isinstance(k, str) for k in x))


class ChatMessages(Space[list]):
    """A list of chat messages: each a dict with a ``role`` and string ``content`` (plus extras such as a
    tool result's ``name``)."""

    def __init__(self, seed: int | None = None):
        super().__init__(shape=None, dtype=None, seed=seed)

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> list[dict[str, str]]:
        n = int(self.np_random.integers(1, 4))
        return [{"role": str(self.np_random.choice(ROLES)), "content": _sample_text(self.np_random, 64)}
                for _ in range(n)]

    def contains(self, x: Any) -> bool:
        return isinstance(x, list) and all(is_message(m) for m in x)

    def __repr__(self) -> str:
        return "ChatMessages()"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ChatMessages)


class AgentAction(Space[Any]):
    """Raw model text, or a structured assistant message ``{"role": "assistant", "content", "tool_calls"}``."""

    def __init__(self, seed: int | None = None, max_length: int = 256):
        super().__init__(shape=None, dtype=None, seed=seed)
        self.max_length = max_length

    @property
    def is_np_flattenable(self) -> bool:
        return False

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        return _sample_text(self.np_random, self.max_length)

    def contains(self, x: Any) -> bool:
        if isinstance(x, str):
            return True
        return (isinstance(x, dict) and x.get("role", "assistant") == "assistant"
                and isinstance(x.get("content", ""), (str, type(None)))
                and isinstance(x.get("tool_calls", []), (list, type(None))))

    def __repr__(self) -> str:
        return "AgentAction()"

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, AgentAction)

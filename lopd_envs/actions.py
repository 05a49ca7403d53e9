"""One turn of an episode as data: what the agent did (:class:`AssistantTurn`, its :class:`ToolCall` list)
and what the env answered (:class:`Reaction`).

Plain dataclasses at the bottom of the contract, importing nothing of lopd: the parsers that build a turn from
model text (:mod:`lopd_envs.tools`), the trace that records turn and reaction (:mod:`lopd_envs.trace`) and the
env core that runs the loop (:mod:`lopd_envs.core`) all stand on them, none on another's module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": self.arguments}


@dataclass
class AssistantTurn:
    """An agent action after parsing: the raw text, the calls read from it, and why reading failed."""

    text: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    parse_error: str | None = None
    syntax: str = "text"  # text | hermes | json | python | structured

    @property
    def message(self) -> dict[str, Any]:
        """The turn as an OpenAI-style assistant message for the conversation history."""
        msg: dict[str, Any] = {"role": "assistant", "content": self.text}
        if self.tool_calls:
            msg["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        return msg


@dataclass
class Reaction:
    """What the env answers to one action: ``observation`` (the new messages), ``done`` (the episode is
    over), ``results`` (one result per tool call of the action, in order, for the trace; ``None`` when the
    calls are not answered one by one), ``errors`` (paired with ``results``: True where that call failed;
    the suite knows, so the core never guesses from the text) and ``error`` (why the action failed)."""

    observation: list[dict[str, Any]]
    done: bool = False
    results: list[str] | None = None
    errors: list[bool] | None = None
    error: str | None = None

    def __post_init__(self) -> None:
        if (self.results is None) != (self.errors is None) or \
                (self.results is not None and self.errors is not None and len(self.results) != len(self.errors)):
            raise ValueError("Reaction: `errors` must pair with `results`, one flag per result")

"""Action-result traces: the compact record of an episode that the trainer's experience bank consumes,
and how an action and its reaction become trace steps (:meth:`Trace.record`).

A trace keeps what an agent *did* and what came of it, not the verbose observations: the paper's
experience bank stores "task + simplified action-result trace", and the retriever embeds exactly that
text. Results are therefore truncated when recorded (``RESULT_CHARS``), while the action is kept whole
because it is what a later policy should learn to reproduce.
"""

from __future__ import annotations

import copy
import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only for annotations: the core imports this module
    from lopd_envs.core import Reaction
    from lopd_envs.tools import AssistantTurn

RESULT_CHARS = 240


def compact(text: str, limit: int = RESULT_CHARS) -> str:
    """Shorten ``text`` to ``limit`` characters, marking the cut so a reader knows it is partial."""
    text = text if isinstance(text, str) else json.dumps(text, ensure_ascii=False, default=str)
    if len(text) <= limit:
        return text
    return text[: limit - 14] + f" …[+{len(text) - limit + 14} chars]"


@dataclass
class TraceStep:
    """One agent action and its compact result.

    ``action`` is either ``{"name": ..., "arguments": {...}}`` for a tool call or ``{"text": ...}`` for a
    plain message; ``result`` is the truncated observation it produced ("" when the episode ended).
    """

    action: dict[str, Any]
    result: str = ""
    error: bool = False

    def render(self) -> str:
        if "name" in self.action:
            args = json.dumps(self.action.get("arguments", {}), ensure_ascii=False, sort_keys=True)
            line = f"call {self.action['name']}({args})"
        else:
            line = f"say {compact(str(self.action.get('text', '')), 400)}"
        if self.result:
            line += f" -> {'ERROR ' if self.error else ''}{self.result}"
        return line


@dataclass
class Trace:
    """What an episode did, JSON-serialisable and losslessly round-tripped through ``to_json``."""

    env_id: str
    task_id: str
    task: str
    category: str = ""
    steps: list[TraceStep] = field(default_factory=list)
    reward: float = 0.0
    success: bool = False
    metadata: dict[str, Any] = field(default_factory=dict)

    def __deepcopy__(self, memo: dict[int, Any]) -> "Trace":
        """Field by field: envs copy the trace into every step's ``info``, and the generic dataclass path
        of :func:`copy.deepcopy` was the largest cost of a single-turn step."""
        steps = [TraceStep(copy.deepcopy(s.action, memo), s.result, s.error) for s in self.steps]
        return Trace(self.env_id, self.task_id, self.task, self.category, steps, self.reward, self.success,
                     copy.deepcopy(self.metadata, memo))

    def add(self, action: dict[str, Any], result: str = "", error: bool = False) -> None:
        self.steps.append(TraceStep(dict(action), compact(result) if result else "", error))

    def record(self, turn: "AssistantTurn", reaction: "Reaction") -> None:
        """Add one action and what came of it: one step per tool call, with its result and error flag, when
        the reaction answers the calls one by one; otherwise the calls (or the text, or the parse failure)
        with the observation as the result of the last one."""
        results, errors = reaction.results, reaction.errors
        if turn.tool_calls and results is not None and errors is not None and len(results) == len(turn.tool_calls):
            for call, result, failed in zip(turn.tool_calls, results, errors):
                self.add(call.to_dict(), result, error=bool(failed))
            return
        summary = " | ".join(m.get("content", "") for m in reaction.observation)
        if turn.tool_calls:
            for call in turn.tool_calls:
                self.add(call.to_dict())
            if summary:
                self.steps[-1].result = compact(summary)
            return
        self.add({"text": turn.text}, summary, error=bool(turn.parse_error or reaction.error))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trace":
        data = dict(data)
        data["steps"] = [TraceStep(**s) for s in data.get("steps", [])]
        return cls(**data)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        return cls.from_dict(json.loads(text))

    def render(self) -> str:
        """The text the experience bank stores and the retriever embeds: task, then one line per step."""
        lines = [f"Task: {self.task}"]
        lines += [f"{i + 1}. {step.render()}" for i, step in enumerate(self.steps)]
        lines.append(f"Outcome: {'success' if self.success else 'failure'} (reward {self.reward:.2f})")
        return "\n".join(lines)

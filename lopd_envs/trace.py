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
import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # only for annotations: the core imports this module
    from lopd_envs.core import Reaction
    from lopd_envs.tools import AssistantTurn

RESULT_CHARS = 240
MAX_DEPTH = 32          # nesting levels of lists and dicts; real tool arguments use a handful
MAX_NODES = 20_000      # values in one action
MAX_CHARS = 1_000_000   # characters of all strings (keys included) in one recorded action
MAX_INT_BITS = 4096     # |n| < 2**4096 (1,234 digits): far below Python's int-string limit (4,300 digits)


class NotJSON(ValueError):
    """A value that a trace cannot hold losslessly (see :func:`json_value`)."""


def json_value(value: Any, max_chars: int = MAX_CHARS) -> Any:
    """The one rule for what a trace (and so an action's arguments) may hold: a fresh copy of ``value`` as
    plain JSON data, or :class:`NotJSON` saying why it has none.

    JSON data is ``None``, ``bool``, ``int`` (within ``MAX_INT_BITS``), finite ``float``, ``str``, lists
    and dicts with string keys. Tuples become lists (JSON has one sequence type, and a model's Python-call
    ``(1, 2)`` means a list). Everything else is refused rather than converted, because a conversion (bytes
    to text, ``1`` as the key ``"1"``, NaN) would not come back as it went in, and every trace must
    round-trip exactly through :meth:`Trace.to_json`. Subclasses of the JSON types are copied as the base
    type. The walk is iterative and bounded (``MAX_DEPTH``, ``MAX_NODES``, ``max_chars``) *before* anything
    recursive (``repr``, ``json.dumps``, ``deepcopy``) can meet the value, so no input can exhaust the stack,
    and a self-referencing structure ends at the depth bound.
    """
    root: list[Any] = [None]
    stack: list[tuple[Any, Any, Any, int]] = [(value, root, 0, 0)]
    nodes, chars = 0, 0
    while stack:
        item, parent, slot, depth = stack.pop()
        nodes += 1
        if isinstance(item, (list, tuple, dict)):
            if depth >= MAX_DEPTH:
                raise NotJSON(f"nested deeper than {MAX_DEPTH} levels")
            if nodes + len(stack) + len(item) > MAX_NODES:
                raise NotJSON(f"more than {MAX_NODES} values")
            if isinstance(item, dict):
                out: Any = {}
                for key, child in item.items():
                    if not isinstance(key, str):
                        raise NotJSON(f"dict keys must be strings, got {type(key).__name__}")
                    key = str.__str__(key)
                    chars += len(key)
                    out[key] = None
                    stack.append((child, out, key, depth + 1))
            else:
                out = [None] * len(item)
                stack.extend((child, out, i, depth + 1) for i, child in enumerate(item))
        elif item is None or isinstance(item, bool):
            out = item
        elif isinstance(item, int):
            out = int.__int__(item)
            if out.bit_length() > MAX_INT_BITS:
                raise NotJSON(f"integer beyond {MAX_INT_BITS} bits")
        elif isinstance(item, float):
            out = float.__float__(item)
            if not math.isfinite(out):
                raise NotJSON(f"{out} is not a JSON number")
        elif isinstance(item, str):
            out = str.__str__(item)
            chars += len(out)
        else:
            raise NotJSON(f"a value of type {type(item).__name__} has no JSON form")
        if chars > max_chars:
            raise NotJSON(f"more than {max_chars} characters")
        parent[slot] = out
    return root[0]


def compact(text: str, limit: int = RESULT_CHARS) -> str:
    """Shorten ``text`` to at most ``limit`` characters, marking the cut (`` …[+N chars]``, N the number of
    characters removed) so a reader knows it is partial. The marker's length depends on N's digits and N on
    the marker's length, so the pair is found by iterating to the fixed point (it only grows, so it ends)."""
    if not isinstance(text, str):
        try:
            text = json.dumps(json_value(text), ensure_ascii=False)
        except NotJSON:
            text = f"<{type(text).__name__}>"
    if len(text) <= limit:
        return text
    cut = len(text) - limit
    while True:
        marker = f" …[+{cut} chars]"
        keep = limit - len(marker)
        if keep < 0:  # no room for a marker
            return text[:limit]
        if len(text) - keep == cut:
            return text[:keep] + marker
        cut = len(text) - keep


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
        """Record a copy of ``action`` (so a suite that later mutates the call's arguments cannot rewrite
        history); actions are JSON data already (:func:`lopd_envs.tools.parse_action` applies
        :func:`json_value`), so the fallback below only guards the contract against a suite's bug."""
        try:
            action = json_value(action)
        except NotJSON as exc:
            action = {"text": f"<action not recordable: {exc}>"}
        self.steps.append(TraceStep(action, compact(result) if result else "", bool(error)))

    def record(self, turn: "AssistantTurn", reaction: "Reaction") -> None:
        """Add one action and what came of it: one step per tool call, with its result and error flag, when
        the reaction answers the calls one by one; otherwise the calls (or the text, or the parse failure)
        with the observation as the result of the last one."""
        results, errors = reaction.results, reaction.errors
        if turn.tool_calls and results is not None and errors is not None and len(results) == len(turn.tool_calls):
            for call, result, failed in zip(turn.tool_calls, results, errors):
                self.add(call.to_dict(), result, error=bool(failed))
            return
        contents = (m.get("content", "") for m in reaction.observation)
        summary = " | ".join(c if isinstance(c, str) else compact(c) for c in contents)
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
        """Stable (sorted keys) and exact: ``Trace.from_json(t.to_json()) == t``; NaN is refused rather than
        written as JSON cannot read it back equal."""
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        return cls.from_dict(json.loads(text))

    def render(self) -> str:
        """The text the experience bank stores and the retriever embeds: task, then one line per step."""
        lines = [f"Task: {self.task}"]
        lines += [f"{i + 1}. {step.render()}" for i, step in enumerate(self.steps)]
        lines.append(f"Outcome: {'success' if self.success else 'failure'} (reward {self.reward:.2f})")
        return "\n".join(lines)

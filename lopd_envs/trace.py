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
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lopd_envs.actions import AssistantTurn, Reaction
from lopd_envs.jsonvalue import NotJSON, json_value

RESULT_CHARS = 240


class TraceError(ValueError):
    """A stored trace that cannot be read back (corrupt JSON, a missing field, a wrong type)."""


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

    def __deepcopy__(self, memo: dict[int, Any]) -> Trace:
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

    def record(self, turn: AssistantTurn, reaction: Reaction) -> None:
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
    def from_dict(cls, data: dict[str, Any]) -> Trace:
        """The inverse of :meth:`to_dict`, checked field by field: traces come back from files (a bank, a
        held-back set, a JSONL to seed a bank) that may be corrupt or hand-edited, and a wrong type must be
        a :class:`TraceError` naming the field, not a crash later inside a cold start or a render."""
        if not isinstance(data, dict):
            raise TraceError(f"a trace is a JSON object, not {type(data).__name__}")
        unknown = set(data) - set(_FIELDS)
        if unknown:
            raise TraceError(f"unknown trace field(s) {sorted(unknown)}")
        for name in ("env_id", "task_id", "task"):
            if not isinstance(data.get(name), str):
                raise TraceError(f"trace field {name!r} must be a string, got {type(data.get(name)).__name__}")
        if not isinstance(data.get("category", ""), str):
            raise TraceError("trace field 'category' must be a string")
        reward = data.get("reward", 0.0)
        if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
            raise TraceError(f"trace field 'reward' must be a number, got {reward!r:.80}")
        if not isinstance(data.get("success", False), bool):
            raise TraceError("trace field 'success' must be true or false")
        if not isinstance(data.get("metadata", {}), dict):
            raise TraceError("trace field 'metadata' must be an object")
        raw_steps = data.get("steps", [])
        if not isinstance(raw_steps, list):
            raise TraceError("trace field 'steps' must be a list")
        steps = []
        for i, s in enumerate(raw_steps):
            if (not isinstance(s, dict) or set(s) - {"action", "result", "error"} or not isinstance(s.get("action"), dict)
                    or not isinstance(s.get("result", ""), str) or not isinstance(s.get("error", False), bool)):
                raise TraceError(f"trace step {i} must be {{'action': object, 'result': string, 'error': bool}}")
            steps.append(TraceStep(s["action"], s.get("result", ""), s.get("error", False)))
        return cls(**{**data, "steps": steps, "reward": float(reward)})

    def to_json(self) -> str:
        """Stable (sorted keys) and exact: ``Trace.from_json(t.to_json()) == t``; NaN is refused rather than
        written as JSON cannot read it back equal."""
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=True, allow_nan=False)

    @classmethod
    def from_json(cls, text: str) -> Trace:
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            raise TraceError(f"not JSON ({str(exc)[:120]})") from None
        return cls.from_dict(data)

    def render(self) -> str:
        """The text the experience bank stores and the retriever embeds: task, then one line per step."""
        lines = [f"Task: {self.task}"]
        lines += [f"{i + 1}. {step.render()}" for i, step in enumerate(self.steps)]
        lines.append(f"Outcome: {'success' if self.success else 'failure'} (reward {self.reward:.2f})")
        return "\n".join(lines)


_FIELDS = tuple(Trace.__dataclass_fields__)


def parse_trace_lines(lines: Iterable[str | bytes], where: str) -> list[Trace]:
    """Traces from JSONL lines (blank ones skipped); a bad line is a :class:`TraceError` naming ``where`` and
    the line, so a corrupt source is never half-read into a bank."""
    traces = []
    for n, raw in enumerate(lines, 1):
        try:
            line = raw.decode("utf-8") if isinstance(raw, bytes) else raw
            if line.strip():
                traces.append(Trace.from_json(line))
        except (TraceError, UnicodeDecodeError) as exc:
            raise TraceError(f"{where}, line {n}: {exc}") from None
    return traces


def read_traces(path: str | Path) -> list[Trace]:
    """Traces from a JSONL file, one per non-empty line (:func:`parse_trace_lines`)."""
    with open(path, "rb") as f:
        return parse_trace_lines(f, str(path))

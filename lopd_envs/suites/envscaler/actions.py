"""What one agent action means in EnvScaler: tool calls, a message to the user, or an error.

The official runner (``envscaler_env/utils/parse_util.py``) reads a ``<think>`` block (an opening tag
without its closing tag fails), the *first* ``<tool_call>{"name", "arguments"}</tool_call>`` block (more
are ignored), and otherwise takes the text after the think block as a message to the user
(``chat_with_user``); a structured message's first tool call wins over its content; nothing at all is a
parse failure, and so is an unclosed ``<tool_call>`` or a block without ``"name"`` and ``"arguments"``.
``official`` mode reads a text action exactly as the reference does (:func:`read_official_text`: LOPD's
EnvScaler runtime, on that parser): a ``<tool_call>`` block the official pattern does not match is text, so
the action is a message to the user (a bare JSON object or ``[f(x=1)]`` too), and a ``chat_with_user`` call
without a string ``content`` ends the episode. ``strict`` reads the calls with
:func:`lopd_envs.tools.parse_action`, accepts every syntax lopd parses, runs all the calls of an action in
order, and reports an unmatched block as a parse error and a contentless ``chat_with_user`` as an invalid
action (the agent can correct either). Structured calls (an API's ``tool_calls``) are read the same way
in both modes; official mode runs the first.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from lopd_envs.actions import AssistantTurn, ToolCall

PARSE_FAILED = "Error: Failed to parse response to struct response"
NO_ACTION = "Error: Failed to parse response to action"
INVALID = "Error: Invalid action"
CHAT = "chat_with_user"
# The official parser's patterns are ``(?:<|@)think(?:>|@)\s*(.*?)(?:<|@)/think(?:>|@)`` and
# ``<tool_call>\s*(\{.*?\})\s*</tool_call>``. Searched as regexes they retry every later opening tag once the
# first has no closing one, which is quadratic in model-written text (an action of many ``<think>`` took
# minutes); :func:`_think_end` and :func:`_official_block` find the same leftmost match in one pass each.
_THINK_OPEN = re.compile(r"(?:<|@)think(?:>|@)", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"(?:<|@)/think(?:>|@)", re.IGNORECASE)
_TOOL_BLOCK = re.compile(r"<tool_call>.*?(?:</tool_call>|$)", re.DOTALL)  # linear: a block always ends (at $)
_OFFICIAL_OPEN = re.compile(r"<tool_call>\s*\{")
_OFFICIAL_CLOSE = re.compile(r"\}\s*</tool_call>")


def _think_end(text: str) -> int | None:
    """Where the first complete think block ends, or ``None``. A closing tag after the first opening one
    closes it; with none after the first, none follows any later opening tag either."""
    opened = _THINK_OPEN.search(text)
    closed = _THINK_CLOSE.search(text, opened.end()) if opened else None
    return closed.end() if closed else None


def _official_block(text: str) -> str | None:
    """The JSON object of the first well-formed ``<tool_call>{...}</tool_call>``, as the official regex
    finds it: the leftmost opening ``<tool_call>{`` and the first ``}</tool_call>`` after its brace."""
    opened = _OFFICIAL_OPEN.search(text)
    if opened is None:
        return None
    brace = opened.end() - 1
    closed = _OFFICIAL_CLOSE.search(text, brace + 1)
    return text[brace:closed.start() + 1] if closed else None


@dataclass
class Action:
    """``calls`` to run (possibly empty), or ``message`` for the user, or ``error`` (an observation text).
    ``final``: the action ends the episode and grades it, whatever the mode (official: a ``chat_with_user``
    call without a string ``content``)."""

    calls: list[ToolCall] = field(default_factory=list)
    message: str | None = None
    error: str | None = None
    skipped: int = 0  # calls of the action that official mode does not run
    final: bool = False


def visible_text(text: str) -> str | None:
    """The content around the reasoning: the text after a complete think block with any tool-call blocks
    removed; ``None`` when a think block is opened and never closed (an official parse failure)."""
    end = _think_end(text)
    if end is None and _THINK_OPEN.search(text):
        return None
    body = text[end:] if end is not None else text
    return _TOOL_BLOCK.sub("", body).strip()


def read_action(turn: AssistantTurn, strict: bool) -> Action:
    if not strict and turn.syntax != "structured":
        return read_official_text(turn.text or "")
    content = visible_text(turn.text or "")
    if turn.parse_error and (strict or turn.syntax in ("hermes", "structured")):
        return Action(error=PARSE_FAILED)
    if content is None:
        return Action(error=PARSE_FAILED)
    calls = list(turn.tool_calls) if (strict or turn.syntax in ("hermes", "structured")) else []
    if calls:
        run = calls if strict else calls[:1]
        if run[0].name == CHAT:
            said = run[0].arguments.get("content")
            return Action(message=str(said)) if isinstance(said, str) else Action(error=INVALID)
        if any(c.name == CHAT for c in run[1:]):  # strict: a message ends the batch of calls before it
            run = run[:next(i for i, c in enumerate(run) if c.name == CHAT)]
        return Action(calls=run, skipped=len(calls) - len(run))
    if not content:
        return Action(error=NO_ACTION)
    return Action(message=content)


def read_official_text(text: str) -> Action:
    """A text action as the reference reads it (LOPD's EnvScaler runtime: upstream's ``parse_response`` and
    ``parse_action``), whatever lopd's own parser made of it. The first ``<tool_call>{...}</tool_call>`` the
    official pattern matches is the call; when it matches none, the text after the think block is a
    message to the user, tags and all (rule a: a block with both tags but no ``}`` before the closing tag,
    text after the JSON, or a JSON array), unless a ``<tool_call>`` is never closed (a parse failure).
    A ``chat_with_user`` call ends the episode whatever its ``content`` (rule b)."""
    body = text.strip()
    end = _think_end(body)
    if end is None and _THINK_OPEN.search(body):
        return Action(error=PARSE_FAILED)
    block = _official_block(body)
    if block is None:
        if "<tool_call>" in body and "</tool_call>" not in body:
            return Action(error=PARSE_FAILED)
        content = (body[end:] if end is not None else body).strip()
        return Action(message=content) if content else Action(error=NO_ACTION)
    try:
        call = json.loads(block)
    except (ValueError, RecursionError):
        return Action(error=PARSE_FAILED)
    if not isinstance(call, dict) or "name" not in call or "arguments" not in call:
        return Action(error=PARSE_FAILED)
    arguments = call["arguments"]
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except (ValueError, RecursionError):
            return Action(error=NO_ACTION)
    arguments = arguments or {}
    name = call["name"]
    if name == CHAT:
        said = arguments.get("content") if isinstance(arguments, dict) else None
        return Action(message=said) if isinstance(said, str) else Action(final=True)
    if not isinstance(name, str) or not isinstance(arguments, dict):
        return Action(error=INVALID)
    return Action(calls=[ToolCall(name, arguments)])

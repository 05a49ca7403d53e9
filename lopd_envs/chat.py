"""The text tool protocol on chat messages, without torch: the tool listing put into the system prompt for
models and servers that take no ``tools=``. Shared by the trainer's chat rendering
(:mod:`lopd_train.models`), ``lopd-eval``'s openai backend and the verifiers adapter."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from lopd_envs.tools import render_tool_prompt
from lopd_envs.wire import function_of


def clean_message(message: dict[str, Any]) -> dict[str, Any]:
    """A message whose content is a string (``None`` becomes "", structured content JSON), as chat
    templates and servers expect."""
    out = dict(message)
    content = out.get("content")
    if content is None:
        out["content"] = ""
    elif not isinstance(content, str):
        out["content"] = json.dumps(content, ensure_ascii=False)
    return out


def with_tool_prompt(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None,
                     syntax: str = "hermes") -> list[dict[str, Any]]:
    """Put the tool listing into the system prompt (for templates that ignore ``tools=``)."""
    messages = [clean_message(m) for m in messages]
    if not tools:
        return messages
    prompt = render_tool_prompt(tools, syntax=syntax)
    if messages and messages[0]["role"] == "system":
        messages[0] = {**messages[0], "content": messages[0]["content"].rstrip() + "\n\n" + prompt}
    else:
        messages.insert(0, {"role": "system", "content": prompt})
    return messages


@dataclass(frozen=True)
class TextTools:
    """How a model that reads tools as text is told about them: the call syntax the listing asks for
    (``"hermes"`` or ``"python"``) and when the listing goes into the system prompt (``"auto"``: unless the
    env's own prompt already lists every tool, as BFCL's and ACEBench's do; ``"always"``; ``"never"``).

    One value that travels whole, so a renderer, a sampler, an eval backend and an adapter cannot disagree on
    half of it; every env reads every syntax, so the choice only changes what the model is asked to write."""

    syntax: str = "hermes"
    prompt: str = "auto"

    def __post_init__(self):
        if self.syntax not in TOOL_SYNTAXES:
            raise ValueError(f"tool syntax must be one of {', '.join(TOOL_SYNTAXES)}; got {self.syntax!r}")
        if self.prompt not in TOOL_PROMPTS:
            raise ValueError(f"tool prompt must be one of {', '.join(TOOL_PROMPTS)}; got {self.prompt!r}")

    def to_list(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list | None:
        """The tools the prompt still has to list (``None`` when the listing is skipped)."""
        if not tools or self.prompt == "never":
            return None
        if self.prompt == "auto" and tools_already_listed(messages, tools):
            return None
        return tools

    def apply(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
        """The messages as a model without ``tools=`` should see them: cleaned, the listing added if due."""
        return with_tool_prompt(messages, self.to_list(messages, tools), self.syntax)


TOOL_SYNTAXES = ("hermes", "python")
TOOL_PROMPTS = ("auto", "always", "never")


def tools_already_listed(messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> bool:
    """Whether the env's own prompt already lists every tool (BFCL's and ACEBench's prompts do)."""
    text = "\n".join(str(m.get("content") or "") for m in messages if m.get("role") in ("system", "user"))
    names = [function_of(t).get("name", "") for t in tools]
    return bool(names) and all(n and n in text for n in names)

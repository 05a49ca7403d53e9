"""A lopd-eval backend with known answers, for tests that need a real run (env loop, records, results) but no
model: ``Scripted(answer)`` replies to each conversation with ``answer(messages, n)``, ``n`` counting the
earlier episodes of the same task (the samples of a multi-sample run)."""

from __future__ import annotations

import ast


class Scripted:
    """A backend answering each conversation with ``answer(messages, n)`` (``n``: how often that conversation's
    task was asked before), so a lopd-eval run has known answers without a model."""

    name = "scripted"

    def __init__(self, answer):
        self.answer, self.asked = answer, {}

    def chat(self, batch, sampling):
        replies = []
        for conv in batch:
            key = next(m["content"] for m in conv.messages if m["role"] == "user")
            n = self.asked.get(key, 0)
            if not any(m["role"] == "assistant" for m in conv.messages):  # a new episode of that task
                self.asked[key] = n + 1
            replies.append(self.answer(conv.messages, n))
        return replies

    def describe(self):
        return {"backend": "scripted"}

    def close(self):
        pass


def gold_calls(call_strings):
    """Native tool calls (``[{"name", "arguments", "id"}]``) of call strings, or of one ``[f(a=1), ...]`` text."""
    if isinstance(call_strings, str):
        call_strings = [ast.unparse(e) for e in ast.parse(call_strings, mode="eval").body.elts]
    calls = []
    for text in call_strings:
        node = ast.parse(text, mode="eval").body
        args = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
        calls.append({"name": ast.unparse(node.func), "arguments": args, "id": f"c{len(calls)}"})
    return calls

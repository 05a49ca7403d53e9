"""A chat-completions response body, read (bounded) and parsed as untrusted input: either a well-formed assistant turn or a
:class:`BadReply` saying what was wrong.

``lopd-eval`` talks to servers it does not control. Their 200 answers are parsed here, field by field,
instead of trusting the SDK's lenient models: a body that is not JSON, nests deeper than any real
response, lacks ``choices[0].message`` or gives a field the wrong type is a per-record error, never a
crash. The message itself is read by the one reader of the wire format, :func:`lopd_envs.wire.read_message`
(``content`` sent as content parts is the concatenation of its text parts, as the format defines it); what
it finds malformed is a :class:`BadReply` here.
"""

from __future__ import annotations

import json
from typing import Any

from lopd_envs.wire import MAX_DEPTH, depth, read_message

#: Replies (HTTP bodies) larger than this are refused: no real answer to one turn is near it, and a record
#: must not swallow whatever a server sends. Stated in ``lopd-eval --help`` (``--request-timeout``).
MAX_REPLY_BYTES = 4 << 20


class BadReply(ValueError):
    """A response the evaluation cannot use; the message says what was wrong with it."""


async def read_body(raw: Any) -> bytes:
    """The whole body, refused once it passes the reply limit (by its Content-Length, or as it arrives)."""
    limit = MAX_REPLY_BYTES
    declared = raw.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise BadReply(f"reply of {declared} bytes, over the {limit} byte limit")
    chunks, size = [], 0
    async for chunk in raw.iter_bytes():
        size += len(chunk)
        if size > limit:
            raise BadReply(f"reply over the {limit} byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


def decode(body: bytes) -> Any:
    """The JSON of a response body; :class:`BadReply` for anything else."""
    if len(body) > MAX_REPLY_BYTES:
        raise BadReply(f"reply of {len(body)} bytes, over the {MAX_REPLY_BYTES} byte limit")
    try:
        data = json.loads(body)
    except RecursionError:
        raise BadReply(f"reply nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError
        raise BadReply(f"reply is not JSON ({exc}): {body[:120]!r}") from None
    if depth(data) > MAX_DEPTH:
        raise BadReply(f"reply nested deeper than {MAX_DEPTH} levels")
    return data


def _snippet(value: Any) -> str:
    return json.dumps(value, default=str)[:200]


def completion_tokens(usage: Any) -> int:
    """The server's count of generated tokens; 0 when it gives none or nonsense (it is only reported)."""
    n = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and 0 <= n < 1 << 31 else 0


def parse(data: Any) -> tuple[str, list[dict[str, Any]] | None, int]:
    """(text, tool calls, generated tokens) of a decoded chat-completions response."""
    if not isinstance(data, dict):
        raise BadReply(f"reply is a JSON {type(data).__name__}, not an object: {_snippet(data)}")
    if "choices" not in data and isinstance(data.get("error"), (dict, str)):
        err = data["error"]
        raise BadReply(f"the server answered an error with status 200: "
                       f"{_snippet(err.get('message', err) if isinstance(err, dict) else err)}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise BadReply(f"reply has no choices[0]: {_snippet(data)}")
    msg = choices[0].get("message")
    if not isinstance(msg, dict):
        raise BadReply(f"choices[0].message is not an object: {_snippet(choices[0])}")
    reply = read_message(msg)
    if reply.error:
        raise BadReply(reply.error)
    return reply.content, reply.with_ids() or None, completion_tokens(data.get("usage"))


def transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP errors of the library the openai SDK reads through: httpx2 from openai 3 on (which brings no
    httpx: a plain ``import httpx`` fails in a ``lopd[eval]`` venv), httpx before."""
    import importlib

    found = []
    for name in ("httpx2", "httpx"):
        try:
            found.append(importlib.import_module(name).HTTPError)
        except ImportError:
            pass
    return tuple(found)

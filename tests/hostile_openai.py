"""A misbehaving OpenAI-compatible server on 127.0.0.1, for ``lopd-eval``'s client: each request is answered
by the next of ``answers`` (the last one repeats). An answer is raw bytes (sent with status 200), or one
of the behaviours below, which no honest server has but a broken or hostile one may."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from tests.fake_openai import LoopbackServer, QuietJSONHandler


def trickle_body(handler: BaseHTTPRequestHandler) -> None:
    """Headers at once, then one byte of a never-ending body every half second."""
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", "100000")
    handler.end_headers()
    for _ in range(10_000):
        handler.wfile.write(b" ")
        handler.wfile.flush()
        time.sleep(0.5)


def trickle_headers(handler: BaseHTTPRequestHandler) -> None:
    """The status line, then one byte of headers every half second."""
    handler.wfile.write(b"HTTP/1.1 200 OK\r\n")
    for _ in range(10_000):
        handler.wfile.write(b"X")
        handler.wfile.flush()
        time.sleep(0.5)


def huge(size: int, declared: bool) -> Callable[[BaseHTTPRequestHandler], None]:
    """A well-formed completion padded to ``size`` bytes, with or without a Content-Length."""
    def send(handler: BaseHTTPRequestHandler) -> None:
        head = b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "'
        tail = b'"}}]}'
        handler.send_response(200)
        handler.send_header("Content-Type", "application/json")
        if declared:
            handler.send_header("Content-Length", str(size))
        handler.end_headers()
        handler.wfile.write(head)
        pad = size - len(head) - len(tail)
        block = b"x" * (1 << 20)
        while pad > 0:
            handler.wfile.write(block[:pad])
            pad -= len(block)
        handler.wfile.write(tail)
    return send


def text(content: Any, tokens: Any = 3) -> bytes:
    """A completion whose message content is ``content`` (a string, content parts, anything)."""
    return json.dumps({"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                       "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                    "finish_reason": "stop"}],
                       "usage": {"completion_tokens": tokens}}).encode()


class HostileServer(LoopbackServer):
    def __init__(self, *answers: bytes | Callable[[BaseHTTPRequestHandler], None]):
        self.answers = list(answers)
        self.requests: list[dict] = []
        self._lock = threading.Lock()
        server = self

        class Handler(QuietJSONHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append(body)
                    answer = server.answers.pop(0) if len(server.answers) > 1 else server.answers[0]
                try:
                    if callable(answer):
                        answer(self)
                    else:
                        self.send_response(200)
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(answer)))
                        self.end_headers()
                        self.wfile.write(answer)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up on us: as it should
                    self.close_connection = True

        self.serve(Handler, daemon_threads=True)

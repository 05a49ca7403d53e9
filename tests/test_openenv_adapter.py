"""A lopd env served as an OpenEnv environment (``lopd_train.integrations.openenv``), driven by OpenEnv's own
client over a real local server: a gold episode scores 1, two sessions hold separate episodes, and a bad
keyword fails when the server is built."""

from __future__ import annotations

import socket
import threading
import time

import pytest

openenv = pytest.importorskip("openenv", reason="openenv-core is not installed (pip install 'lopd[openenv]'): "
                                                "the OpenEnv adapter was NOT tested")
uvicorn = pytest.importorskip("uvicorn")

from openenv.core import GenericEnvClient  # noqa: E402

from lopd_train.integrations.openenv import create_app  # noqa: E402

GOLD = "[calculate_triangle_area(base=10, height=5)]"  # BFCL-v3 simple_0's answer


@pytest.fixture
def server(bfcl_data):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    app = create_app("lopd/BFCLv3-v0", max_concurrent_envs=2, category="simple")
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

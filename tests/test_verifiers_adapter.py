"""Every lopd id as a verifiers environment (``lopd_train.integrations.verifiers``), run by verifiers' own
rollout loop (``evaluate_sync``) against a local OpenAI-compatible model server (``tests/fake_openai.py``,
answering scripted replies): the env's score is the rollout's reward, with native tool calls or the text
protocol. Needs verifiers' classic API (0.1.9 to 0.3.x); skipped, saying so, where it is not installed (it
cannot share a pip-resolved environment with lopd's evalplus pin: see the module docstring)."""

from __future__ import annotations

import json

import pytest

vf = pytest.importorskip("verifiers", reason="verifiers is not installed: the verifiers adapter was NOT tested "
                                             "(uv pip install 'verifiers<0.4' --override 'protobuf>=6.31.1')")
if not hasattr(vf, "MultiTurnEnv"):
    pytest.skip(f"verifiers {vf.__version__} has no classic API (MultiTurnEnv): the adapter was NOT tested",
                allow_module_level=True)

from lopd_envs.registration import ENV_ENTRY_POINTS  # noqa: E402
from tests.fake_openai import FakeServer, completion  # noqa: E402

MODULE = "lopd_train.integrations.verifiers"
# each id constructible offline, lopd's own data named where the official data is not on this machine
SETTINGS = {
    "lopd/BFCLv3-v0": {"category": "simple"},
    "lopd/ACEBench-v0": {"category": "normal_atom_bool"},
    "lopd/EnvScaler-v0": {"source": "ours", "category": "non_conversation", "allow_unisolated": True},
    "lopd/HumanEvalPlus-v0": {"allow_unisolated": True},
    "lopd/MBPPPlus-v0": {"allow_unisolated": True},
    "lopd/LiveCodeBench-v0": {"source": "bundled", "allow_unisolated": True},
}
GOLD_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "calculate_triangle_area", "arguments": '{"base": 10, "height": 5}'}}


def _evaluate(env, server, n=1):
    return env.evaluate_sync(client=vf.ClientConfig(api_base_url=server.url, api_key_var="LOPD_FAKE_KEY"),
                             model="m", num_examples=n, rollouts_per_example=1, max_concurrent=1,
                             state_columns=["lopd_score"])


@pytest.fixture(autouse=True)
def key(monkeypatch):
    monkeypatch.setenv("LOPD_FAKE_KEY", "sk-fake")


@pytest.mark.parametrize("env_id", sorted(ENV_ENTRY_POINTS))
def test_load_environment_for_every_id(env_id, bfcl_data):
    env = vf.load_environment(MODULE, env=env_id, tasks=None, **SETTINGS[env_id])
    assert isinstance(env, vf.MultiTurnEnv) and len(env.eval_dataset) > 0
    info = json.loads(env.eval_dataset[0]["info"])
    assert info["lopd_env"] == env_id and info["task_id"]


def test_native_tool_call_scores_through_verifiers_own_loop(bfcl_data):
    env = vf.load_environment(MODULE, env="lopd/BFCLv3-v0", category="simple", tasks=["simple_0"])
    reply = completion({"role": "assistant", "content": None, "tool_calls": [GOLD_CALL]})
    with FakeServer(script=[(200, reply)]) as server:
        out = _evaluate(env, server)
    sent = server.requests[0]["body"]
    assert [t["function"]["name"] for t in sent["tools"]] == ["calculate_triangle_area"]  # the task's own tool
    assert len(server.requests) == 1  # one action ends a single-turn BFCL episode: no second model call
    [state] = out["outputs"] if isinstance(out, dict) else out.outputs
    assert state["reward"] == 1.0 and state["metrics"]["lopd_success"] == 1.0


def test_text_mode_and_a_wrong_answer(bfcl_data):
    env = vf.load_environment(MODULE, env="lopd/BFCLv3-v0", category="simple", tasks=["simple_0", "simple_1"],
                              tool_mode="text")
    right = completion({"role": "assistant", "content": "[calculate_triangle_area(base=10, height=5)]"})
    wrong = completion({"role": "assistant", "content": "I cannot help."})
    with FakeServer(script=[(200, right), (200, wrong)]) as server:
        out = _evaluate(env, server, n=2)
    assert all("tools" not in r["body"] for r in server.requests)  # the tools are in the prompt's text
    states = out["outputs"] if isinstance(out, dict) else out.outputs
    assert sorted(s["reward"] for s in states) == [0.0, 1.0]


def test_a_misspelt_keyword_is_refused_by_the_env(bfcl_data):
    with pytest.raises(Exception, match="did you mean 'category'"):
        vf.load_environment(MODULE, env="lopd/BFCLv3-v0", categroy="simple")


@pytest.mark.parametrize("env_id", sorted(ENV_ENTRY_POINTS))
def test_verifiers_own_loop_plays_an_episode_of_every_id(env_id, bfcl_data):
    """One rollout per id through ``evaluate_sync``: the fake server calls the task's first tool (native tool
    calls) or answers a code block; the lopd env plays the episode to its end and scores it."""
    env = vf.load_environment(MODULE, env=env_id, max_turns=8, **SETTINGS[env_id])
    with FakeServer() as server:
        out = _evaluate(env, server)
    [state] = out["outputs"] if isinstance(out, dict) else out.outputs
    assert state["lopd_score"] is not None, f"{env_id}: the episode did not end with a score"
    assert 0.0 <= state["reward"] <= 1.0 and server.requests

"""lopd_envs.loop: an agent callable ``messages -> assistant message`` drives every env id, sync and async,
many at once; wire-format tool calls are converted and their results linked; failures end unscored."""

from __future__ import annotations

import asyncio
import json

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.loop import arun_episodes, openai_tools, run_episode, run_episodes, to_action
from lopd_envs.registration import ENV_ENTRY_POINTS

gym.register_envs(lopd_envs)

# every id, with a category that needs no simulated user (the loop's agent is the only model here)
SETTINGS = {
    "lopd/BFCLv3-v0": {"category": "simple"},
    "lopd/ACEBench-v0": {"category": "normal_atom_bool"},
    "lopd/EnvScaler-v0": {"source": "ours", "category": "non_conversation"},
    "lopd/HumanEvalPlus-v0": {},
    "lopd/MBPPPlus-v0": {},
    "lopd/LiveCodeBench-v0": {"source": "bundled"},
}
CODE_ENVS = {"lopd/HumanEvalPlus-v0", "lopd/MBPPPlus-v0", "lopd/LiveCodeBench-v0"}


def tool_name(tool: dict) -> str:
    return tool["function"]["name"] if "function" in tool else tool["name"]


def scripted_agent(messages, tools):
    """Calls the first tool once (OpenAI wire format, empty arguments), then answers in text; writes code
    for the code envs."""
    if not tools:
        return {"role": "assistant", "content": "```python\ndef solve():\n    return 0\n```"}
    if sum(m["role"] == "assistant" for m in messages) == 0:
        return {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": tool_name(tools[0]), "arguments": "{}"}}]}
    return {"role": "assistant", "content": "I am done."}


def test_settings_cover_every_registered_id():
    assert set(SETTINGS) == set(ENV_ENTRY_POINTS)


@pytest.mark.parametrize("env_id", sorted(SETTINGS))
def test_the_loop_drives_every_env_id(env_id, request):
    if env_id == "lopd/BFCLv3-v0":
        request.getfixturevalue("bfcl_data")
    env = gym.make(env_id, **SETTINGS[env_id])
    result = run_episode(env, scripted_agent, seed=0, max_turns=4)
    assert result.error is None
    assert result.task_id and result.env_id == env_id
    assert result.messages[0]["role"] == "system" and any(m["role"] == "user" for m in result.messages)
    assert result.turns == sum(m["role"] == "assistant" for m in result.messages) >= 1
    assert (result.tools == []) == (env_id in CODE_ENVS)
    if result.truncated and result.reward is None:  # stopped by the loop's own cap: unscored
        assert result.turns == 4
    else:
        assert result.terminated or result.truncated
        assert 0.0 <= result.reward <= 1.0
        assert result.trace is not None and result.trace.task_id == result.task_id
    json.dumps(result.messages)  # the transcript is plain JSON, ready for an OpenAI-compatible server


def test_a_correct_wire_format_call_scores_and_a_wrong_one_does_not(bfcl_data):
    env = gym.make("lopd/BFCLv3-v0", category="simple")

    def agent(args):
        return lambda messages: {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "calculate_triangle_area", "arguments": args}}]}
    right = run_episode(env, agent('{"base": 10, "height": 5}'), task_id="simple_0")
    wrong = run_episode(env, agent('{"base": 10, "height": 6}'), task_id="simple_0")
    assert (right.reward, wrong.reward) == (1.0, 0.0)
    assert right.trace.steps[0].action == {"name": "calculate_triangle_area", "arguments": {"base": 10, "height": 5}}


def test_tool_results_carry_the_call_id():
    env = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation")
    result = run_episode(env, scripted_agent, seed=0, max_turns=4)
    tool_msgs = [m for m in result.messages if m["role"] == "tool"]
    assert tool_msgs and tool_msgs[0]["tool_call_id"] == "call_0"


def test_malformed_arguments_reach_the_env_as_an_error_not_an_exception():
    action, message, ids = to_action({"role": "assistant", "tool_calls": [
        {"id": "x", "type": "function", "function": {"name": "f", "arguments": "{not json"}}]})
    assert action["tool_calls"] == [{"name": "f", "arguments": "{not json"}] and ids == ["x"]
    env = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation")
    result = run_episode(env, lambda m: message if len(m) < 3 else "bye", seed=0, max_turns=3)
    assert result.error is None and result.turns >= 1  # the env answered with an error observation


def canonical_answers():
    env = gym.make("lopd/HumanEvalPlus-v0")
    tasks = env.unwrapped.tasks[:3]
    return env, {t.data["prompt"]: "```python\n" + t.data["prompt"] + t.data["canonical_solution"] + "\n```"
                 for t in tasks}, [t.task_id for t in tasks]


def test_many_episodes_at_once_in_threads():
    _env, answers, ids = canonical_answers()

    def agent(messages):
        user = next(m["content"] for m in messages if m["role"] == "user")
        return next(a for prompt, a in answers.items() if prompt.strip() in user)
    results = run_episodes(lambda: gym.make("lopd/HumanEvalPlus-v0"), agent, ids, concurrency=3)
    assert [r.task_id for r in results] == ids and [r.reward for r in results] == [1.0, 1.0, 1.0]


def test_async_agents_many_envs_and_a_failing_agent_ends_unscored():
    _env, answers, ids = canonical_answers()
    running, peak = 0, 0

    async def agent(messages):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.05)  # a slow model: the episodes overlap
        running -= 1
        user = next(m["content"] for m in messages if m["role"] == "user")
        if "def separate_paren_groups" in user:  # HumanEval/1: this one's model call fails
            raise RuntimeError("model server down")
        return next(a for prompt, a in answers.items() if prompt.strip() in user)
    results = asyncio.run(arun_episodes(lambda: gym.make("lopd/HumanEvalPlus-v0"), agent, ids, concurrency=3))
    assert peak > 1
    assert [r.reward for r in results] == [1.0, None, 1.0]
    assert results[1].error == "RuntimeError: model server down" and results[1].turns == 0
    assert results[0].error is None and results[2].error is None


def test_openai_tools_turns_benchmark_schemas_into_the_api_shape():
    out = openai_tools([{"name": "math.add", "description": "Add.", "parameters": {"type": "dict", "properties": {}}}])
    assert out == [{"type": "function", "function": {"name": "math.add", "description": "Add.",
                                                     "parameters": {"type": "object", "properties": {}}}}]

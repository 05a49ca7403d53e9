"""``lopd/EnvScaler-v0`` against the env contract (docs/design.md section 3), in both modes, on lopd's own data."""

from __future__ import annotations

import json
import subprocess
import sys

import gymnasium as gym

from tests.conformance import Conformance

CALL = {"name": "get_account", "arguments": {"account_id": "ACC-100"}}


class TestNonConversation(Conformance):
    env_id = "lopd/EnvScaler-v0"
    kwargs = {"source": "ours", "category": "non_conversation"}

    def text_action(self, info):
        return "Task Completed"


class TestConversation(Conformance):
    env_id = "lopd/EnvScaler-v0"
    kwargs = {"source": "ours", "category": "conversation"}

    def text_action(self, info):
        return "Could you tell me more about what you need?"


class TestStrict(Conformance):
    env_id = "lopd/EnvScaler-v0"
    kwargs = {"source": "ours", "category": "all", "scoring": "strict"}


def test_make_by_module_path_in_a_fresh_interpreter():
    code = ("import gymnasium as gym\n"
            "env = gym.make('lopd_envs:lopd/EnvScaler-v0', source='ours', category='non_conversation')\n"
            "obs, info = env.reset(options={'task_id': 'lopd-bank-01'})\n"
            "step = env.step('<tool_call>{\"name\": \"deposit\", \"arguments\": {\"account_id\": \"ACC-200\", \"amount\": 250}}</tool_call>')\n"
            "end = env.step('Task Completed')\n"
            "print(end[1], info['task_id'], len(info['tools']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["1.0", "lopd-bank-01", "7"]


def test_observations_follow_the_official_runner():
    env = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation")
    obs, _info = env.reset(options={"task_id": "lopd-bank-02"})
    system = obs[0]["content"]
    assert system.startswith("You are a helpful assistant. When given a specific task")
    assert "# Environment Information" in system and "<tools>" in system and "<tool_call>" in system
    assert "- No account may go below a zero balance." in system
    assert obs[1]["content"].startswith("Maria Lopez wants to move 400")
    tool_obs = env.step(f"<tool_call>{json.dumps(CALL)}</tool_call>")[0]
    assert tool_obs == [{"role": "tool", "name": "get_account", "content": str({
        "success": True, "data": {"account_id": "ACC-100", "owner": "Maria Lopez", "balance": 1200.0, "status": "active",
                                  "daily_limit": 1000.0, "verification_code": "4471"}})}]
    assert env.step('<tool_call>{"name": "no_such", "arguments": {}}</tool_call>')[0][0]["content"] == "Error: Invalid action"
    assert env.step("<think>unclosed")[0][0]["content"] == "Error: Failed to parse response to struct response"
    assert env.step("<think>only thoughts</think>")[0][0]["content"] == "Error: Failed to parse response to action"
    env.close()


def test_official_mode_runs_only_the_first_call_and_reads_bare_json_as_text():
    env = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation")
    env.reset(options={"task_id": "lopd-bank-01"})
    deposit = {"name": "deposit", "arguments": {"account_id": "ACC-200", "amount": 250}}
    obs, _, terminated, _, info = env.step(f"<tool_call>{json.dumps(deposit)}</tool_call><tool_call>{json.dumps(deposit)}</tool_call>")
    assert len(obs) == 1 and not terminated
    assert [s.error for s in info["trace"].steps] == [False, True]  # the second call is recorded as not run
    obs, reward, terminated, _, info = env.step(json.dumps(deposit))  # no tags: a message, which ends the task
    assert terminated and reward == 1.0
    env.close()


def test_a_raising_tool_ends_official_episodes_ungraded_and_strict_ones_go_on():
    bad = '<tool_call>{"name": "get_account", "arguments": {"no_such_argument": 1}}</tool_call>'
    env = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation")
    env.reset(options={"task_id": "lopd-bank-06"})  # two of its four checks hold at reset
    obs, reward, terminated, _, info = env.step(bad)
    assert terminated and reward == 0.0 and obs[0]["content"].startswith("Error: <Exception>")
    assert info["score"]["graded"] is False
    strict = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation", scoring="strict")
    strict.reset(options={"task_id": "lopd-bank-06"})
    obs, _, terminated, _, _ = strict.step(bad)
    assert not terminated and obs[0]["role"] == "tool" and "TypeError" in obs[0]["content"]
    _, reward, terminated, _, info = strict.step("Task Completed")
    assert terminated and info["score"]["official_reward"] == 0.5 and reward == 0.0


def test_official_truncation_scores_zero_and_strict_grades_it():
    look = f"<tool_call>{json.dumps(CALL)}</tool_call>"
    for scoring, want in (("official", 0.0), ("strict", 0.0)):
        env = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation", scoring=scoring, max_turns=3)
        env.reset(options={"task_id": "lopd-bank-06"})
        for _ in range(3):
            _, reward, terminated, truncated, info = env.step(look)
        assert truncated and not terminated and reward == want
        assert info["score"]["graded"] is (scoring == "strict")
        if scoring == "strict":
            assert info["score"]["official_reward"] == 0.5


def test_workers_are_reaped_when_episodes_end_and_envs_close():
    env = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation")
    env.reset(options={"task_id": "lopd-bank-01"})
    first = env.unwrapped._episode.worker.session.proc
    env.reset(options={"task_id": "lopd-bank-01"})
    assert first.poll() is not None  # the previous episode's worker is gone
    second = env.unwrapped._episode.worker.session.proc
    env.step("Task Completed")
    assert second.poll() is not None  # scored: killed and reaped
    env.reset(options={"task_id": "lopd-bank-01"})
    third = env.unwrapped._episode.worker.session.proc
    env.close()
    assert third.poll() is not None


def test_an_llm_user_in_the_official_format_drives_the_conversation():
    """The user simulator sees EnvScaler's messages (task prompt, the fixed opener, "[Agent] …") and its
    "# Thought: / # Reply:" output is read as upstream; ###STOP### ends and grades the episode."""
    from lopd_envs.suites.envscaler import official_user

    prompts = []

    def policy(prompt: str) -> str:
        prompts.append(prompt)
        if "[Agent] Done" in prompt:
            return " all good\n# Reply: ###STOP###"
        return " I should ask for the deposit.\n# Reply: Please deposit 250 into ACC-200."

    env = gym.make("lopd/EnvScaler-v0", source="ours", category="conversation", user=official_user(policy))
    obs, _ = env.reset(options={"task_id": "lopd-bank-01:conv"})
    assert obs[-1]["content"] == "Please deposit 250 into ACC-200."
    assert "[Task Goal]" in prompts[0] and "Deposit 250 into account ACC-200." in prompts[0]
    assert "[Agent] Hi! How can I help you today?" in prompts[0]
    env.step('<tool_call>{"name": "deposit", "arguments": {"account_id": "ACC-200", "amount": 250}}</tool_call>')
    obs, reward, terminated, _, _info = env.step("Done, the deposit is made.")
    assert terminated and reward == 1.0 and obs[-1]["content"] == "###STOP###"


def test_a_failing_user_simulator_ends_the_episode_with_an_error():
    def broken(conversation):
        if len(conversation) > 2:
            raise RuntimeError("simulator offline")
        return "Please deposit 250 into ACC-200."

    env = gym.make("lopd/EnvScaler-v0", source="ours", category="conversation", user=broken)
    env.reset(options={"task_id": "lopd-bank-01:conv"})
    obs, _reward, terminated, _, info = env.step("What should I do?")
    assert terminated and "simulator offline" in obs[0]["content"] and info["error"].startswith("user simulator")


def test_official_tool_call_blocks_need_closing_tags_and_both_keys():
    env = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation")
    env.reset(options={"task_id": "lopd-bank-01"})
    for text in ('<tool_call>{"name": "get_account", "arguments": {"account_id": "ACC-100"}}',
                 '<tool_call>{"name": "get_account"}</tool_call>'):
        obs, _, terminated, _, _ = env.step(text)
        assert not terminated and obs[0]["content"] == "Error: Failed to parse response to struct response"
    strict = gym.make("lopd/EnvScaler-v0", source="ours", category="non_conversation", scoring="strict")
    strict.reset(options={"task_id": "lopd-bank-01"})
    obs = strict.step('<tool_call>{"name": "get_account", "arguments": {"account_id": "ACC-100"}}')[0]
    assert obs[0]["role"] == "tool" and "Maria Lopez" in obs[0]["content"]

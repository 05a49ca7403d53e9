"""EnvScaler's ``official`` scoring follows the reference in the four rules of issue 55, class 13 (the LOPD
authors' runtime, ``bingreeky/LOPD`` @ 50c3d7f ``envs/envscaler/runtime.py`` and ``env.py``, on upstream's
parser); ``strict`` keeps lopd's choice where it is the better one (rules a, b, d). One test per rule,
each on a scenario in the official file format played through ``gym.make``."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.suites.envscaler import actions
from lopd_envs.suites.envscaler.ours import build
from tests.test_envscaler_data import CLASS_CODE, release_env, release_scenario, write_release

gym.register_envs(lopd_envs)

#: A class that keeps a view of its config, as lopd's own environment classes do (``self.init_config``).
KEEPER = '''class Keeper:
    def __init__(self, init_config: dict):
        self.init_config = init_config
        self.items = init_config.get("items", {})

    def bump(self, key: str) -> dict:
        """Add one to an item."""
        self.items[key] = self.items.get(key, 0) + 1
        return {"success": True}
'''
INCREMENT = {"name": "increment", "arguments": {"name": "a", "by": 2}}
A_IS_3 = "def check_func(final_state):\n    return final_state['counters'].get('a') == 3"
B_KEPT = "def check_func(final_state):\n    return initial_state['counters'].get('b') == final_state['counters'].get('b')"
#: Rule d: the first check changes the final state and fails; the second reads what the first wrote.
MUTATES = "def check_func(final_state):\n    final_state['counters']['a'] = 3\n    return False"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("official-rules")
    envs = {"env_1": release_env("env_1", CLASS_CODE, "CounterService", build.tools_of(CLASS_CODE, "CounterService")),
            "env_2": release_env("env_2", KEEPER, "Keeper", build.tools_of(KEEPER, "Keeper"))}
    keeper = release_scenario("keeper", "env_2", "Keeper", [
        "def check_func(final_state):\n    return final_state['init_config']['items']['x'] == 1",
        "def check_func(final_state):\n    return final_state['items']['x'] == 1"])
    keeper["init_config"] = json.dumps({"items": {"x": 0}})
    write_release(root, envs, [release_scenario("counters", checks=[A_IS_3, B_KEPT]), keeper,
                               release_scenario("shared", checks=[MUTATES, A_IS_3])])
    return root


def make(data_dir: Path, scoring: str):
    return gym.make("lopd/EnvScaler-v0", source="official", data_dir=str(data_dir), category="non_conversation",
                    scoring=scoring, sandbox="process", allow_unisolated=True, prestart=False)


def play(data_dir: Path, scoring: str, task_id: str, steps: list[str]):
    env = make(data_dir, scoring)
    try:
        env.reset(options={"task_id": task_id})
        out = []
        for text in steps:
            out.append(env.step(text))
            if out[-1][2]:
                break
        return out
    finally:
        env.close()


UNMATCHED = {  # both tags, but the official pattern <tool_call>\s*(\{.*?\})\s*</tool_call> matches nothing
    "no closing brace": '<tool_call>{"name": "increment", "arguments": []</tool_call>',
    "text after the JSON": f"<tool_call>{json.dumps(INCREMENT)} and done</tool_call>",
    "a JSON array": f"<tool_call>[{json.dumps(INCREMENT)}]</tool_call>",
}


@pytest.mark.parametrize("case", list(UNMATCHED))
def test_rule_a_an_unmatched_tool_call_block_is_a_message_that_ends_the_episode(data_dir, case):
    """Official: the whole text is a message to the user; the episode ends, graded on the state so far
    (nothing ran: a is 1, b is kept, so 0.5). Strict: the episode goes on."""
    (_, reward, terminated, _, info), = play(data_dir, "official", "counters", [UNMATCHED[case]])
    assert terminated and info["score"]["graded"] and reward == 0.5, info["score"]
    assert info["score"]["ending"] == "answered"
    (_obs, reward, terminated, _, _), = play(data_dir, "strict", "counters", [UNMATCHED[case]])
    assert not terminated  # strict: a parse error, or (the array) a call lopd reads; either way it goes on


@pytest.mark.parametrize("arguments", [{}, {"content": 5}, {"content": None}, {"text": "done"}])
def test_rule_b_chat_with_user_without_string_content_ends_and_grades(data_dir, arguments):
    call = json.dumps({"name": "chat_with_user", "arguments": arguments})
    steps = [f"<tool_call>{json.dumps(INCREMENT)}</tool_call>", f"<tool_call>{call}</tool_call>"]
    *_, (_, reward, terminated, _, info) = play(data_dir, "official", "counters", steps)
    assert terminated and info["score"]["graded"] and reward == 1.0, info["score"]
    *_, (obs, _, terminated, _, _) = play(data_dir, "strict", "counters", steps)
    assert not terminated and obs[0]["content"] == actions.INVALID


@pytest.mark.parametrize("scoring", ["official", "strict"])
def test_rule_c_one_copy_of_init_config_goes_to_constructor_and_attributes(data_dir, scoring):
    """The constructor keeps ``init_config`` and takes ``items`` from it; the attributes are then set from
    the same copy, so ``bump`` changes what ``init_config`` shows too (two copies: 0.5 instead of 1.0)."""
    steps = ['<tool_call>{"name": "bump", "arguments": {"key": "x"}}</tool_call>', "Task Completed"]
    *_, (_, _reward, terminated, _, info) = play(data_dir, scoring, "keeper", steps)
    assert terminated and [c["passed"] for c in info["score"]["checks"]] == [True, True], info["score"]
    assert info["score"]["final_state"]["init_config"] == {"items": {"x": 1}}


def test_rule_d_official_checks_share_one_final_state_strict_ones_do_not(data_dir):
    (_, reward, terminated, _, info), = play(data_dir, "official", "shared", ["Task Completed"])
    assert terminated and [c["passed"] for c in info["score"]["checks"]] == [False, True] and reward == 0.5
    (_, reward, terminated, _, info), = play(data_dir, "strict", "shared", ["Task Completed"])
    assert terminated and [c["passed"] for c in info["score"]["checks"]] == [False, False], info["score"]


@pytest.mark.parametrize("text, expected", [
    (UNMATCHED["a JSON array"], {"message": UNMATCHED["a JSON array"]}),
    (f"<think>x</think> say <tool_call>{json.dumps(INCREMENT)} .</tool_call>",
     {"message": f"say <tool_call>{json.dumps(INCREMENT)} .</tool_call>"}),
    ('<tool_call>{"name": "increment"', {"error": actions.PARSE_FAILED}),  # never closed
    ('<tool_call>{"name": "increment"}</tool_call>', {"error": actions.PARSE_FAILED}),  # no "arguments"
    ('<tool_call>{"name": "chat_with_user", "arguments": {}}</tool_call>', {"final": True}),
    ('<tool_call>{"name": "chat_with_user", "arguments": {"content": "hi"}}</tool_call>', {"message": "hi"}),
    ('<tool_call>{"name": "increment", "arguments": [1]}</tool_call>', {"error": actions.INVALID}),
    ('<tool_call>{"name": "increment", "arguments": "{\\"name\\": \\"a\\"}"}</tool_call>',
     {"calls": [actions.ToolCall("increment", {"name": "a"})]}),
])
def test_the_official_reading_of_a_text_action(text, expected):
    """Rules a and b as a pure function of the text (the reference's ``parse_response`` and ``parse_action``)."""
    assert actions.read_official_text(text) == actions.Action(**expected)

"""The OpenAI wire format's one module (lopd_envs.wire): tools out, a reply in, tool results paired with their
calls; round trips, malformed and enormous input (an error value, never an exception), and the pieces that
use it (the agent loop, lopd-eval's reply parser) reading exactly as it does."""

from __future__ import annotations

import json

import gymnasium as gym
import pytest

from lopd_envs.actions import AssistantTurn, ToolCall
from lopd_envs.loop import run_episode, to_action
from lopd_envs.tools import parse_action
from lopd_envs.wire import (
    MAX_CHARS,
    answered_calls,
    function_of,
    link_tool_results,
    openai_messages,
    openai_tools,
    read_message,
)

OURS = {"name": "math.add", "description": "Add.",
        "parameters": {"type": "dict", "properties": {"xs": {"type": "list", "items": {"type": "float"}}},
                       "required": ["xs"]}}


def wire_call(name, arguments, cid="c1"):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": arguments}}


# --------------------------------------------------------------------------------------------------- tools


def test_tools_go_out_with_json_schema_types_and_come_back_by_function_of():
    [tool] = openai_tools([OURS])
    assert tool == {"type": "function", "function": {
        "name": "math.add", "description": "Add.",
        "parameters": {"type": "object", "properties": {"xs": {"type": "array", "items": {"type": "number"}}},
                       "required": ["xs"]}}}
    assert function_of(tool)["name"] == function_of(OURS)["name"] == "math.add"
    assert openai_tools([tool]) == [tool]  # already in the wire shape: as it is ...
    tool["function"]["parameters"]["required"].append("y")
    assert OURS["parameters"]["required"] == ["xs"]  # ... and never sharing the env's own schema


def test_a_tool_without_a_name_is_not_an_exception():
    assert function_of(openai_tools([{"description": "?"}])[0])["name"] == ""


# --------------------------------------------------------------------------------------------------- replies


def test_a_wire_reply_becomes_our_action_and_turn():
    reply = read_message({"role": "assistant", "content": None, "tool_calls": [
        wire_call("f", '{"a": 1}'), wire_call("g", "", cid="c2")]})
    assert reply.error is None and reply.ids == ["c1", "c2"]
    assert reply.action == {"role": "assistant", "content": "",
                            "tool_calls": [{"name": "f", "arguments": {"a": 1}}, {"name": "g", "arguments": {}}]}
    assert reply.turn() == AssistantTurn("", [ToolCall("f", {"a": 1}), ToolCall("g", {})], syntax="structured")
    assert reply.with_ids()[0] == {"name": "f", "arguments": {"a": 1}, "id": "c1"}


def test_content_parts_are_joined_and_calls_in_our_shape_pass_as_they_are():
    reply = read_message({"content": [{"type": "text", "text": "[f("}, {"type": "refusal", "refusal": "no"},
                                      {"type": "text", "text": "a=1)]"}],
                          "tool_calls": [{"name": "f", "arguments": {"a": 1}}]})
    assert reply.error is None and reply.content == "[f(a=1)]" and reply.ids == [None]
    assert reply.calls == [{"name": "f", "arguments": {"a": 1}}]


def test_round_trip_our_turn_to_the_wire_and_back():
    turn = AssistantTurn("thinking", [ToolCall("f", {"a": [1, {"b": None}]}), ToolCall("g", {})],
                         syntax="structured")
    message = {**turn.message, "tool_calls": [{**c, "id": f"id{k}"} for k, c in enumerate(turn.message["tool_calls"])]}
    [wire] = openai_messages([message])
    assert all(isinstance(c["function"]["arguments"], str) for c in wire["tool_calls"])
    back = read_message(json.loads(json.dumps(wire)))
    assert back.error is None and back.turn() == turn and back.ids == ["id0", "id1"]


MALFORMED = {
    "not an object": (["x"], "message is a list"),
    "content a number": ({"content": 42}, "message.content is a int"),
    "content a dict": ({"content": {"text": "hi"}}, "message.content is a dict"),
    "a part without a type": ({"content": [{"text": "hi"}]}, "not a typed object"),
    "a text part without text": ({"content": [{"type": "text", "text": None}]}, "without a string 'text'"),
    "tool_calls a string": ({"tool_calls": "f()"}, "message.tool_calls is not a list"),
    "a call without a function": ({"tool_calls": [{"id": "c"}]}, "a tool call without a function name"),
    "a name that is not text": ({"tool_calls": [wire_call(7, "{}")]}, "a tool call without a function name"),
    "arguments a number": ({"tool_calls": [wire_call("f", 3)]}, "neither a JSON string nor an object"),
    "enormous": ({"content": "x" * (MAX_CHARS + 1)}, "character limit"),
}


@pytest.mark.parametrize("message,why", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_reply_is_an_error_value_and_the_env_reads_it_without_raising(message, why):
    reply = read_message(message)
    assert why in reply.error
    turn = reply.turn()
    assert turn.parse_error.startswith("malformed reply: ") and not turn.tool_calls
    if isinstance(message, dict):
        parse_action(reply.action)  # what the env steps with: never raises (it answers with its error)


BAD_ARGUMENTS = {
    "not JSON": "{not json",
    "nested 100000 deep": "[" * 100_000 + "]" * 100_000,
    "nested 100 deep": "[" * 100 + "]" * 100,
    "an int past Python's limit": "1" * 5000,
    "a list, not an object": "[1, 2]",
}


@pytest.mark.parametrize("arguments", BAD_ARGUMENTS.values(), ids=BAD_ARGUMENTS.keys())
def test_arguments_that_are_no_json_object_reach_the_env_as_its_error(arguments):
    reply = read_message({"tool_calls": [wire_call("f", arguments)]})
    assert reply.error is None and reply.ids == ["c1"]
    turn = reply.turn()
    assert turn.parse_error and not turn.tool_calls  # the env's own error observation, as the benchmark's


def test_an_enormous_argument_string_is_not_decoded():
    huge = json.dumps({"a": "x" * MAX_CHARS})
    reply = read_message({"tool_calls": [wire_call("f", huge)]})
    assert "character limit" in reply.error and reply.calls[0]["arguments"] is huge


def test_the_loop_steps_an_env_with_whatever_the_agent_sends():
    env = gym.make("tests.coin_env:lopd-test/Coin-v0")
    replies = iter([{"role": "assistant", "tool_calls": [wire_call("note", "[" * 50_000 + "]" * 50_000)]},
                    {"role": "assistant", "content": {"not": "text"}, "tool_calls": "f()"}])
    result = run_episode(env, lambda messages: next(replies), seed=0, max_turns=2)
    assert result.error is None and result.turns == 2
    env.close()


def test_the_eval_reply_parser_raises_what_the_reader_finds():
    openai_reply = pytest.importorskip("lopd_train.evaluation.openai_reply")
    for message, _ in MALFORMED.values():
        if not isinstance(message, dict) or len(str(message.get("content"))) > 1000:
            continue  # the parser's own checks come first there (the message's type, the body's size)
        with pytest.raises(openai_reply.BadReply) as err:
            openai_reply.parse({"choices": [{"message": message}]})
        assert str(err.value) == read_message(message).error
    message = {"content": "", "tool_calls": [wire_call("f", "{}")]}
    text, calls, _ = openai_reply.parse({"choices": [{"message": message}]})
    assert (text, calls) == ("", [{"name": "f", "arguments": {}, "id": "c1"}])


# --------------------------------------------------------------------------------------------------- pairing


def test_tool_results_answer_the_calls_in_order():
    messages = [{"role": "user"}, {"role": "tool"}, {"role": "tool"}, {"role": "tool"}]
    assert answered_calls(messages, 2) == [None, 0, 1, None]
    assert answered_calls(messages, 0) == [None, None, None, None]


def test_results_are_linked_only_when_every_call_has_one():
    obs = [{"role": "tool", "content": "1"}, {"role": "user", "content": "?"}, {"role": "tool", "content": "2"}]
    linked = link_tool_results(obs, ["a", "b"])
    assert [m.get("tool_call_id") for m in linked] == ["a", None, "b"] and "tool_call_id" not in obs[0]
    assert [m.get("tool_call_id") for m in link_tool_results(obs, ["a"])] == [None, None, None]  # a guess: none
    assert [m.get("tool_call_id") for m in link_tool_results(obs, [None, "b"])] == [None, None, "b"]
    kept = link_tool_results([{"role": "tool", "tool_call_id": "own"}], ["x"])
    assert kept[0]["tool_call_id"] == "own"


def test_a_transcript_goes_to_the_wire_with_every_result_paired():
    wire = openai_messages([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None, "tool_calls": [{"name": "f", "arguments": {"a": 1}, "id": "c1"},
                                                              {"name": "g", "arguments": '{"b": 2}'}]},
        {"role": "tool", "name": "f", "content": "1"}, {"role": "tool", "name": "g", "content": {"x": 2}},
        {"role": "tool", "name": "h", "content": "extra"}])
    made_up = wire[1]["tool_calls"][1]["id"]
    assert made_up == "call_1_1" and wire[1]["content"] == ""
    assert wire[1]["tool_calls"][1]["function"]["arguments"] == '{"b": 2}'
    assert [m.get("tool_call_id") for m in wire[2:]] == ["c1", made_up, None]
    assert wire[3]["content"] == '{"x": 2}'


def test_the_loop_keeps_the_ids_of_the_calls_it_sends():
    action, message, ids = to_action({"tool_calls": [wire_call("f", '{"a": 1}', cid="z")]})
    assert action["tool_calls"] == [{"name": "f", "arguments": {"a": 1}}] and ids == ["z"]
    assert message["role"] == "assistant" and message["tool_calls"][0]["id"] == "z"

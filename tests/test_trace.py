"""The trace's one rule for what it holds (:func:`lopd_envs.trace.json_value`), its lossless JSON round
trip, and ``compact``'s length limit, each class of input from issue 11 as data."""

from __future__ import annotations

import json
import math

import pytest

from lopd_envs.core import Reaction
from lopd_envs.jsonvalue import MAX_DEPTH, MAX_INT_BITS, NotJSON, json_value
from lopd_envs.tools import parse_action
from lopd_envs.trace import Trace, TraceStep, compact


def _nest(depth: int) -> object:
    value: object = 1
    for _ in range(depth):
        value = {"k": [value]}
    return value


def _recorded(action: object) -> Trace:
    trace = Trace("lopd/Toy-v0", "t0", "task")
    trace.record(parse_action(action), Reaction([{"role": "tool", "name": "f", "content": "r" * 500}]))
    return trace


def assert_round_trips(trace: Trace) -> None:
    text = trace.to_json()
    again = Trace.from_json(text)
    assert again == trace and again.to_json() == text


# ------------------------------------------------------------------------------------------ compact

@pytest.mark.parametrize("length", [241, 254, 255, 999, 1_000, 1_240, 9_999, 10_254, 10**5, 10**6 + 7, 10**7])
@pytest.mark.parametrize("limit", [12, 20, 40, 240, 1000])
def test_compact_never_exceeds_its_limit_whatever_the_cut_count_digits(length, limit):
    text = "".join(chr(0x61 + i % 26) for i in range(length))
    out = compact(text, limit)
    assert len(out) <= limit
    if length > limit and " …[+" in out:
        kept, marker = out.split(" …[+")
        assert text.startswith(kept) and marker == f"{length - len(kept)} chars]"  # the count is exact
        assert len(out) == limit  # and nothing is wasted


def test_compact_keeps_short_text_and_hard_cuts_when_no_marker_fits():
    assert compact("short", 240) == "short"
    assert compact("x" * 100, 5) == "xxxxx"


def test_compact_of_a_non_string_never_recurses():
    assert compact({"a": [1, 2]}) == '{"a": [1, 2]}'
    assert compact(_nest(5000)) == "<dict>"


# ------------------------------------------------------------------------------------------ json_value

@pytest.mark.parametrize("value", [None, True, 0, -7, 2**4095, -(2**4095) + 1, 0.5, -0.0, 1e308, "", "中文",
                                   "\ud800", [], {}, {"a": [1, {"b": None}]}, _nest(MAX_DEPTH // 2 - 1)])
def test_json_data_is_copied_unchanged(value):
    copied = json_value(value)
    assert copied == value and json.loads(json.dumps(copied)) == copied
    if isinstance(value, (list, dict)):
        assert copied is not value


def test_tuples_become_lists_and_subclasses_their_base_type():
    class S(str):
        pass

    class Int(int):
        pass

    out = json_value({"t": (1, (2, [3])), "s": S("x"), "i": Int(3)})
    assert out == {"t": [1, [2, [3]]], "s": "x", "i": 3}
    assert type(out["s"]) is str and type(out["i"]) is int


@pytest.mark.parametrize("value, reason", [
    (b"x", "bytes"), ({1, 2}, "set"), (object(), "object"), (1j, "complex"), (math.nan, "nan"),
    (math.inf, "inf"), (-math.inf, "-inf"), ({1: "a"}, "keys"), ({None: 1}, "keys"), ({(1,): 1}, "keys"),
    (2**MAX_INT_BITS, "bits"), (-(2**MAX_INT_BITS), "bits"), (_nest(MAX_DEPTH), "deeper"), ([0] * 30_000, "values"),
    (["x" * 600_000] * 2, "characters"), (range(3), "range"),
])
def test_values_json_cannot_hold_exactly_are_refused_with_the_reason(value, reason):
    with pytest.raises(NotJSON, match=reason):
        json_value(value)


def test_a_self_referencing_structure_ends_at_the_depth_bound():
    cyclic: dict = {}
    cyclic["self"] = cyclic
    with pytest.raises(NotJSON, match="deeper"):
        json_value(cyclic)


# ------------------------------------------------------------------------------------------ traces

DEEP = {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": _nest(3000)}]}
HOSTILE_ACTIONS = [
    DEEP, {"role": "assistant", "content": _nest(3000)}, _nest(3000), [[[]]] * 3,
    {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": "[" * 50_000}]},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": '{"a": ' + "[" * 500 + "]" * 500 + "}"}]},
    '<tool_call>{"name": "f", "arguments": {"n": ' + "9" * 5000 + "}}</tool_call>",
    '{"name": "f", "arguments": {"n": ' + "9" * 1300 + "}}",
    "[f(n=0x" + "f" * 100_000 + ")]", "[f(0x" + "f" * 100_000 + ")]", "[f(n=" + "9" * 5000 + ")]",
    "[f(n=1e999)]", "[f(n={1: 2})]", "[f(n={1, 2})]", "[f(n=b'x')]", '{"name": "f", "arguments": {"n": NaN}}',
    {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {"n": b"x", "m": {1, 2}}}]},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {1: 2}}]},
    {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {"n": math.nan}}]},
]


@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=range(len(HOSTILE_ACTIONS)))
def test_hostile_actions_are_parse_errors_and_their_traces_round_trip(action):
    turn = parse_action(action)
    assert turn.parse_error and "internal" not in turn.parse_error and not turn.tool_calls
    trace = _recorded(action)
    assert_round_trips(trace)
    assert len(trace.render()) < 10_000


@pytest.mark.parametrize("action, arguments", [
    ("[f(n=(1, 2), m=[(3,)])]", {"n": [1, 2], "m": [[3]]}),
    ({"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {"n": (1, 2)}}]}, {"n": [1, 2]}),
    ('{"name": "f", "arguments": {"n": ' + "9" * 1200 + "}}", {"n": int("9" * 1200)}),
    ({"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": '{"a": {"b": [1.5, null]}}'}]},
     {"a": {"b": [1.5, None]}}),
])
def test_accepted_arguments_are_normalised_json_and_round_trip(action, arguments):
    turn = parse_action(action)
    assert turn.parse_error is None and turn.tool_calls[0].arguments == arguments
    assert_round_trips(_recorded(action))


def test_the_trace_keeps_the_call_as_made_even_if_a_suite_mutates_the_arguments():
    turn = parse_action("[f(a=[1])]")
    trace = Trace("e", "t", "task")
    trace.record(turn, Reaction([], results=["ok"], errors=[False]))
    turn.tool_calls[0].arguments["a"].append(2)
    assert trace.steps[0].action == {"name": "f", "arguments": {"a": [1]}}


def test_to_json_is_stable_and_refuses_nan_rather_than_writing_what_reads_back_unequal():
    trace = Trace("e", "t", "task", steps=[TraceStep({"name": "f", "arguments": {"b": 1, "a": 2}}, "r")],
                  reward=1.0, success=True, metadata={"z": 1, "a": "x"})
    assert_round_trips(trace)
    trace.reward = math.nan
    with pytest.raises(ValueError):
        trace.to_json()

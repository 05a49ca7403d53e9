"""Tool-call parsing: every syntax models emit, and malformed input as a parse error, never an exception."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lopd_envs.actions import ToolCall
from lopd_envs.tools import (
    ToolNames,
    openai_tool,
    parse_action,
    parse_python_calls,
    parse_tool_calls,
    render_python_calls,
    render_tool_prompt,
    sanitize_name,
)


def calls(text):
    turn = parse_tool_calls(text)
    assert turn.parse_error is None, turn.parse_error
    return [(c.name, c.arguments) for c in turn.tool_calls]


def test_hermes_blocks():
    text = 'Sure.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n' \
           '<tool_call>{"name": "f", "arguments": "{\\"x\\": 1}"}</tool_call>'
    assert calls(text) == [("get_weather", {"city": "Paris"}), ("f", {"x": 1})]


def test_unterminated_hermes_block_still_parses():
    assert calls('<tool_call>{"name": "f", "arguments": {}}') == [("f", {})]


def test_bare_json_object_list_and_fence():
    assert calls('{"name": "f", "parameters": {"a": 1}}') == [("f", {"a": 1})]
    assert calls('[{"name": "f", "arguments": {}}, {"name": "g", "arguments": {"b": [1]}}]') == [("f", {}), ("g", {"b": [1]})]
    assert calls('```json\n{"name": "f", "arguments": {"a": null}}\n```') == [("f", {"a": None})]


def test_openai_wire_format():
    assert calls('{"function": {"name": "f", "arguments": "{\\"a\\": 2}"}}') == [("f", {"a": 2})]


def test_python_call_syntax_as_bfcl_prompts_ask():
    assert calls('[math.factorial(number=5), get_time(tz="UTC", exact=True, xs=[1, -2.5], d={"k": (1, 2)})]') == [
        ("math.factorial", {"number": 5}),
        ("get_time", {"tz": "UTC", "exact": True, "xs": [1, -2.5], "d": {"k": [1, 2]}})]
    assert calls("f()") == [("f", {})]
    assert calls("```python\n[f(a=1)]\n```") == [("f", {"a": 1})]


def test_python_calls_reject_non_literals_without_evaluating():
    for text in ["[f(a=open('x'))]", "[f(a=__import__('os').system('true'))]", "[f(a=1+1)]", "[f(a=x)]",
                 "[f(1)]", "[f(**kw)]", "[f(a=lambda: 1)]", "[(lambda: 1)()]"]:
        turn = parse_tool_calls(text)
        assert turn.parse_error and not turn.tool_calls, text


def test_bare_identifiers_as_strings_when_asked():
    assert parse_python_calls("[f(unit=celsius, ok=True)]", names_as_strings=True)[0].arguments == {"unit": "celsius", "ok": True}


def test_plain_text_is_a_message_not_an_error():
    turn = parse_tool_calls("The answer is 42.")
    assert turn.tool_calls == [] and turn.parse_error is None and turn.syntax == "text"


def test_malformed_calls_are_parse_errors():
    for text in ["<tool_call>{oops</tool_call>", '{"name": 1}', '{"arguments": {}}', "[f(a=", '[{"name": "f", "arguments": 3}]',
                 "[" * 3000 + "]" * 3000]:
        turn = parse_tool_calls(text)
        assert turn.parse_error, text


def test_structured_messages_taken_as_they_are():
    turn = parse_action({"role": "assistant", "content": "ok", "tool_calls": [{"name": "f", "arguments": {"a": 1}}]})
    assert turn.syntax == "structured" and turn.tool_calls == [ToolCall("f", {"a": 1})]
    assert parse_action({"role": "assistant", "content": "[g(b=2)]"}).tool_calls == [ToolCall("g", {"b": 2})]
    assert parse_action({"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": "{x"}]}).parse_error
    assert parse_action(12345).parse_error


def test_names_map_back_from_sanitised_spelling():
    names = ToolNames(["math.factorial", "get_x"])
    assert sanitize_name("math.factorial") == "math_factorial"
    assert names.resolve("math_factorial") == "math.factorial" and names.resolve("math.factorial") == "math.factorial"
    assert names.resolve("unknown") == "unknown" and "math_factorial" in names


def test_openai_schema_converts_benchmark_types():
    tool = openai_tool({"name": "a.b", "description": "d", "parameters": {
        "type": "dict", "properties": {"x": {"type": "float"}, "y": {"type": "tuple", "items": {"type": "integer"}},
                                       "z": {"type": "HashMap"}}, "required": ["x"]}}, sanitize=True)
    fn = tool["function"]
    assert fn["name"] == "a_b" and fn["parameters"]["type"] == "object"
    props = fn["parameters"]["properties"]
    assert props["x"]["type"] == "number" and props["y"]["type"] == "array" and props["z"]["type"] == "string"
    assert "HashMap" in props["z"]["description"]


def test_render_round_trip_and_prompt():
    original = [ToolCall("f", {"a": 1, "b": "x", "c": [1.5, None]}), ToolCall("g.h", {})]
    assert parse_tool_calls(render_python_calls(original)).tool_calls == original
    prompt = render_tool_prompt([openai_tool({"name": "f", "parameters": {"type": "dict", "properties": {}}})], "python")
    assert '"name": "f"' in prompt and "[func_name1(" in prompt


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=300), st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
                 st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                              lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3))))
def test_parse_action_never_raises(action):
    turn = parse_action(action)
    assert isinstance(turn.text, str)

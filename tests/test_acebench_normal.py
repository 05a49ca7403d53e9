"""Normal categories: gold answers replay, perturbed answers fail for the right reason, and the official
checker's quirks are reproduced while ``strict`` fixes them."""

from __future__ import annotations

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.actions import ToolCall
from lopd_envs.suites.acebench.data import NORMAL, load_rows
from lopd_envs.suites.acebench.decode import DecodeError, decode_answer
from lopd_envs.suites.acebench.normal import gold_answer, score_normal, standardize

gym.register_envs(lopd_envs)

# Gold answers that the *official* checker rejects, per language and category, with the reason. Each is an
# official quirk (see lopd_envs/suites/acebench/normal.py), not a gold error: string values inside nested
# lists lose their spaces and are then compared unstandardised; empty gold lists/dicts never match; a
# gold function name ending in _<n> is stripped to a name that does not exist.
OFFICIAL_GOLD_FAILURES = {
    "en": {"normal_atom_object_deep": 17, "normal_single_turn_single_function": 8,
           "normal_single_turn_parallel_function": 14, "normal_multi_turn_user_adjust": 13,
           "normal_multi_turn_user_switch": 14, "normal_similar_api": 2, "normal_preference": 1},
    "zh": {"normal_atom_list": 1, "normal_atom_object_short": 1, "normal_single_turn_single_function": 1,
           "normal_single_turn_parallel_function": 3, "normal_multi_turn_user_adjust": 1,
           "normal_multi_turn_user_switch": 1, "normal_similar_api": 2},
}
# The one gold answer that is wrong by its own schema: zh normal_atom_object_short_1 omits the required
# parameter budget_constraints, so no scoring mode can accept it.
GOLD_ERRORS = {("zh", "normal_atom_object_short"): {"normal_atom_object_short_1"}}


def replay(language: str, category: str, mode: str) -> tuple[int, int, list[str]]:
    rows = load_rows(category, language)
    failed = [r.question["id"] for r in rows
              if not score_normal(gold_answer(r.gold, r.question["function"]), r.question["function"], r.gold, mode).valid]
    return len(rows) - len(failed), len(rows), failed


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("category", NORMAL)
def test_gold_answers_replay_per_category(language, category):
    """Counted per category: strict accepts every gold answer (bar the one schema-invalid gold); official
    accepts all but its documented quirk cases."""
    passed, total, failed = replay(language, category, "strict")
    assert set(failed) == GOLD_ERRORS.get((language, category), set()), failed
    passed, total, failed = replay(language, category, "official")
    assert total - passed == OFFICIAL_GOLD_FAILURES[language].get(category, 0), failed


def _first(category: str, language: str = "en", predicate=lambda r: True):
    return next(r for r in load_rows(category, language) if predicate(r))


def _call(row) -> tuple[str, dict]:
    name, params = next(iter(row.gold.items()))
    return name, dict(params)


def _score(row, calls, mode="official"):
    text = "[" + ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in p.items())})" for n, p in calls) + "]"
    return score_normal(text, row.question["function"], row.gold, mode)


def test_wrong_function_name_fails_as_function_mismatch():
    row = _first("normal_atom_bool")
    name, params = _call(row)
    verdict = _score(row, [(name + "X", params)])
    assert not verdict.valid and verdict.error_type == "function_mismatch"


def test_changed_string_value_fails_as_value_error_string():
    row = _first("normal_atom_bool")  # ProteinRichMealPlanner_generateList(meal_type='dinner', ...)
    name, params = _call(row)
    params["meal_type"] = "breakfast"
    verdict = _score(row, [(name, params)])
    assert not verdict.valid and verdict.error_type == "value_error:string" and "meal_type" in verdict.error


def test_missing_required_parameter_fails_as_lack_args():
    row = _first("normal_atom_bool")
    name, params = _call(row)
    function = next(f for f in row.question["function"] if f["name"] == name)
    required = function["parameters"]["required"][0]
    del params[required]
    verdict = _score(row, [(name, params)])
    assert not verdict.valid and verdict.error_type == "lack_args" and required in verdict.error


def test_extra_parameter_fails_as_addition_args():
    row = _first("normal_atom_bool")
    name, params = _call(row)
    params["made_up"] = 1
    verdict = _score(row, [(name, params)])
    assert not verdict.valid and verdict.error_type == "addition_args"


def test_wrong_number_of_calls_fails():
    row = _first("normal_atom_bool")
    name, params = _call(row)
    verdict = _score(row, [(name, params), (name, params)])
    assert not verdict.valid and verdict.error_type == "wrong functions number"


@pytest.mark.parametrize("text", ["ProteinRichMealPlanner_generateList(meal_type='dinner')",
                                  "```python\n[ProteinRichMealPlanner_generateList(meal_type='dinner')]\n```",
                                  "Sure! [ProteinRichMealPlanner_generateList(meal_type='dinner')]", "", "[f(x=lambda: 1)]"])
def test_official_needs_a_bare_bracketed_call_list(text):
    row = _first("normal_atom_bool")
    verdict = score_normal(text, row.question["function"], row.gold)
    assert not verdict.valid and verdict.error_type == "wrong_output_format"


def test_boolean_and_number_values_are_not_compared_officially_but_strictly():
    row = _first("normal_atom_bool")
    name, params = _call(row)
    params["include_vegetarian_options"] = not params["include_vegetarian_options"]
    assert _score(row, [(name, params)], "official").valid  # the official checker never compares booleans
    strict = _score(row, [(name, params)], "strict")
    assert not strict.valid and strict.error_type == "value_error"
    row = _first("normal_atom_number", predicate=lambda r: any(
        isinstance(v, int) and not isinstance(v, bool) for v in next(iter(r.gold.values())).values()))
    name, params = _call(row)
    key = next(k for k, v in params.items() if isinstance(v, int) and not isinstance(v, bool))
    params[key] += 7
    assert _score(row, [(name, params)], "official").valid
    assert not _score(row, [(name, params)], "strict").valid


def test_official_string_check_is_a_substring_test_strict_is_equality():
    row = _first("normal_atom_bool")
    name, params = _call(row)
    params["cuisine_preference"] = "Asian fusion"
    assert _score(row, [(name, params)], "official").valid
    assert not _score(row, [(name, params)], "strict").valid


def test_strings_are_standardised_both_ways():
    assert standardize("New-York City_Tour's") == 'newyorkcitytour"s'
    row = _first("normal_atom_bool")
    name, params = _call(row)
    params["cuisine_preference"] = "ASIAN"
    assert _score(row, [(name, params)], "official").valid and _score(row, [(name, params)], "strict").valid


def test_parallel_calls_match_in_any_order():
    row = _first("normal_single_turn_parallel_function", "zh", lambda r: len(r.gold) == 2 and
                 score_normal(gold_answer(r.gold, r.question["function"]), r.question["function"], r.gold).valid)
    calls = [(k, v) for k, v in row.gold.items()]
    known = {f["name"] for f in row.question["function"]}
    strip = [(k if k in known else k.rsplit("_", 1)[0], v) for k, v in calls]
    assert _score(row, strip[::-1]).valid and _score(row, strip[::-1], "strict").valid


def test_strict_reads_other_tool_call_syntaxes_official_does_not():
    row = _first("normal_atom_bool")
    name, params = _call(row)
    import json
    hermes = f'<tool_call>{json.dumps({"name": name, "arguments": params})}</tool_call>'
    assert not score_normal(hermes, row.question["function"], row.gold).valid
    assert score_normal(hermes, row.question["function"], row.gold, "strict").valid


def test_decoder_reproduces_the_harness_quirks_without_eval():
    assert decode_answer("[f(unit=celsius, n=+5, b=not True, t=(1, 2), x=g(a=1), y=h(), z=a[0])]") == [
        {"f": {"unit": "celsius", "n": -5, "b": -1, "t": (1, 2), "x": {"g": {"a": 1}}, "y": {"h": {}}, "z": "a[0]"}}]
    assert decode_answer("[f(1, a=3*60)]") == [{"f": {"a": 180}}]  # positional arguments are dropped
    # a call used as a value is only named, never run; arithmetic on anything but literals is refused
    assert decode_answer("[f(a=__import__('os').getcwd())]") == [{"f": {"a": {"getcwd": {}}}}]
    for bad in ("f(a=1)", "[f(a=__import__('os').system('true')+1)]", "[f(a={1, 2})]", "[f(a=x.y)]", "[f(a=9**9**9)]", "[1]",
                "[f(a=((((9**64)**64)**64)**64))]"):
        with pytest.raises(DecodeError):
            decode_answer(bad)


@pytest.mark.parametrize("language", ["en", "zh"])
def test_env_reset_step_replays_every_gold_answer_as_text_and_as_structured_calls(language):
    """The whole path (prompt, action parsing, scoring, reward) on every normal row."""
    env = gym.make("lopd/ACEBench-v0", category="normal", language=language, scoring="strict")
    tasks = [t for t in env.unwrapped.tasks if (language, t.category) not in GOLD_ERRORS or
             t.task_id not in GOLD_ERRORS[(language, t.category)]]
    for task in tasks:
        row = task.data
        text = gold_answer(row.gold, row.question["function"])
        env.reset(options={"task_id": task.task_id})
        _, reward, terminated, _, info = env.step(text)
        assert terminated and reward == 1.0, (task.task_id, info["score"])
        alternative = row.gold[0] if isinstance(row.gold, list) else row.gold
        known = {f["name"] for f in row.question["function"]}
        calls = [{"name": k if k in known else k.rsplit("_", 1)[0], "arguments": v} for k, v in alternative.items()]
        env.reset(options={"task_id": task.task_id})
        _, reward, _, _, info = env.step({"role": "assistant", "content": "", "tool_calls": calls})
        assert reward == 1.0, (task.task_id, info["score"])


def test_multi_turn_rows_report_their_conversation():
    env = gym.make("lopd/ACEBench-v0", category="normal_multi_turn_user_switch")
    env.reset(options={"task_id": "normal_multi_turn_user_switch_3_1"})
    _, reward, _, _, info = env.step("[nothing()]")
    assert reward == 0.0 and info["score"]["conversation"] == "normal_multi_turn_user_switch_3"
    assert info["trace"].steps[0].action == {"name": "nothing", "arguments": {}}


def test_structured_calls_are_rendered_in_acebench_format():
    from lopd_envs.suites.acebench.episodes import answer_text
    from lopd_envs.tools import parse_action
    turn = parse_action({"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {"a": "中文", "b": [1]}}]})
    assert answer_text(turn) == "[f(a='中文', b=[1])]"
    assert ToolCall("f", {}).to_dict() == {"name": "f", "arguments": {}}


def test_official_category_and_summary_arithmetic():
    from lopd_envs.suites.acebench.summary import category_accuracy, overall
    turns = [{"valid": True, "conversation": "c0"}, {"valid": False, "conversation": "c0"},
             {"valid": True, "conversation": "c1"}]
    assert category_accuracy("normal_multi_turn_user_adjust", turns) == {"accuracy": 0.5, "process_accuracy": 0.75, "total_count": 3}
    assert category_accuracy("special_irrelevant", [{"valid": True}] * 2 + [{"valid": False}])["accuracy"] == 2 / 3
    assert category_accuracy("agent_multi_step", [{"end_to_end": True, "process_accuracy": 1.0},
                                                  {"end_to_end": False, "process_accuracy": 0.5}]) == {
        "accuracy": 0.5, "process_accuracy": 0.75, "total_count": 2}
    perfect = overall(dict.fromkeys((*NORMAL, "special_incomplete", "special_error_param", "special_irrelevant",
                                     "agent_multi_step", "agent_multi_turn"), 1.0))
    assert perfect == {"normal": 1.0, "special": 1.0, "agent": 1.0, "summary": 1.0}


def test_structured_calls_may_use_sanitised_tool_names():
    """With ``sanitize_tool_names=True`` the schemas say ``ai_assistantModelSelector``; a structured call
    under that name is scored under the dataset's ``ai.assistantModelSelector``."""
    from lopd_envs.suites.acebench.episodes import answer_text
    from lopd_envs.tools import ToolNames, parse_action
    env = gym.make("lopd/ACEBench-v0", category="normal_atom_bool", sanitize_tool_names=True)
    _, info = env.reset(options={"task_id": "normal_atom_bool_0"})
    assert "ai_assistantModelSelector" in {t["function"]["name"] for t in info["tools"]}
    turn = parse_action({"role": "assistant", "content": "",
                         "tool_calls": [{"name": "ai_assistantModelSelector", "arguments": {"a": 1}}]})
    assert answer_text(turn, ToolNames(["ai.assistantModelSelector"])) == "[ai.assistantModelSelector(a=1)]"

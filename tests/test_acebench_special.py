"""Special categories: ACEBench's phrase checks, in both languages."""

from __future__ import annotations

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.suites.acebench.data import SPECIAL, load_rows
from lopd_envs.suites.acebench.special import expected_answer, score_special

gym.register_envs(lopd_envs)

REFUSALS = ["I'm sorry, I can't help with that.", "抱歉，我无法完成这个请求。", ""]


@pytest.mark.parametrize("language", ["en", "zh"])
@pytest.mark.parametrize("category", SPECIAL)
def test_every_row_accepts_the_expected_form_and_rejects_a_generic_refusal(language, category):
    for row in load_rows(category, language):
        answer = expected_answer(row.gold, category)
        for mode in ("official", "strict"):
            assert score_special(answer, row.gold, category, mode).valid, (row.question["id"], answer)
        for refusal in REFUSALS:
            verdict = score_special(refusal, row.gold, category)
            assert not verdict.valid and verdict.error_type == "error_detection", row.question["id"]


def test_incomplete_needs_the_phrase_the_api_and_every_missing_parameter():
    gold = {"analyze_diplomatic_impact": ["time_period"]}
    ok = '["Missing necessary parameters (time_period) for the api (analyze_diplomatic_impact)"]'
    assert score_special(ok, gold, "special_incomplete").valid
    assert score_special(ok.replace("(analyze_diplomatic_impact)", "(other)"), gold, "special_incomplete").error_type == "error_correction"
    assert score_special(ok.replace("time_period", "date"), gold, "special_incomplete").error_type == "error_correction"
    assert score_special("Please tell me the time period.", gold, "special_incomplete").error_type == "error_detection"


def test_error_param_needs_the_phrase_and_every_wrong_value():
    gold = {"time_range": ["10点到16点"]}
    ok = '["There is incorrect value (10点到16点) for the parameters (time_range) in the conversation history."]'
    assert score_special(ok, gold, "special_error_param").valid
    assert score_special(ok.replace("10点到16点", "10:00-16:00"), gold, "special_error_param").error_type == "error_correction"


def test_irrelevant_needs_the_limitation_phrase():
    assert score_special('["Due to the limitations of the function, I cannot solve this problem."]', "x", "special_irrelevant").valid
    assert not score_special("[some_function(a=1)]", "x", "special_irrelevant").valid


def test_stray_spaces_in_gold_values_are_demanded_officially_and_stripped_strictly():
    row = next(r for r in load_rows("special_incomplete", "en") if r.question["id"] == "special_incomplete_0")
    values = next(iter(row.gold.values()))
    assert values == ["propertyDetails ", " rentalManagement ", " maintenanceScheduling"]
    natural = ('["Missing necessary parameters (propertyDetails, rentalManagement, maintenanceScheduling) '
               'for the api (RealEstateManager_manageProperty)"]')
    assert not score_special(natural, row.gold, "special_incomplete", "official").valid
    assert score_special(natural, row.gold, "special_incomplete", "strict").valid


@pytest.mark.parametrize("language", ["en", "zh"])
def test_env_scores_special_answers_and_refusals(language):
    env = gym.make("lopd/ACEBench-v0", category="special", language=language)
    for task in env.unwrapped.tasks[::25]:
        env.reset(options={"task_id": task.task_id})
        _, reward, terminated, _, info = env.step(expected_answer(task.data.gold, task.category))
        assert terminated and reward == 1.0, info["score"]
        env.reset(options={"task_id": task.task_id})
        _, reward, _, _, info = env.step(REFUSALS[0])
        assert reward == 0.0 and info["score"]["error_type"] == "error_detection"

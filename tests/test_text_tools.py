"""``TextTools``: the one value that says how a model reading tools as text is told about them, so the trainer's
renderer, the eval backends and the adapters cannot disagree on half of it."""

from __future__ import annotations

import pytest

from lopd_envs.chat import TextTools

TOOLS = [{"name": "get_weather", "description": "Weather of a city.",
          "parameters": {"type": "dict", "properties": {"city": {"type": "string"}}, "required": ["city"]}}]
BARE = [{"role": "user", "content": "Weather in Paris?"}]
LISTED = [{"role": "system", "content": "You can call get_weather(city)."}, {"role": "user", "content": "Paris?"}]


def test_auto_lists_the_tools_unless_the_env_prompt_already_does():
    auto = TextTools()
    assert auto.to_list(BARE, TOOLS) == TOOLS
    assert auto.to_list(LISTED, TOOLS) is None
    assert "get_weather" in auto.apply(BARE, TOOLS)[0]["content"] and auto.apply(BARE, TOOLS)[0]["role"] == "system"
    assert auto.apply(LISTED, TOOLS) == LISTED


def test_always_and_never_override_the_check():
    assert TextTools(prompt="always").to_list(LISTED, TOOLS) == TOOLS
    assert TextTools(prompt="never").to_list(BARE, TOOLS) is None
    assert TextTools(prompt="never").apply(BARE, TOOLS) == BARE
    assert TextTools().to_list(BARE, []) is None and TextTools().to_list(BARE, None) is None


def test_the_syntax_decides_what_the_listing_asks_for():
    hermes = TextTools("hermes").apply(BARE, TOOLS)[0]["content"]
    python = TextTools("python").apply(BARE, TOOLS)[0]["content"]
    assert hermes != python and "<tool_call>" in hermes and "<tool_call>" not in python


def test_messages_come_back_clean_and_the_input_is_not_changed():
    raw = [{"role": "user", "content": None}]
    out = TextTools().apply(raw, TOOLS)
    assert out[-1]["content"] == "" and raw == [{"role": "user", "content": None}]


@pytest.mark.parametrize("kwargs", [{"syntax": "xml"}, {"prompt": "sometimes"}])
def test_unknown_values_are_refused_with_the_choices(kwargs):
    with pytest.raises(ValueError, match="must be one of"):
        TextTools(**kwargs)


def test_trainer_and_sampler_hand_the_same_value_on():
    from lopd_train.config import TrainConfig
    from lopd_train.sampling import Sampling

    cfg = TrainConfig(tool_syntax="python", tool_prompt="always")
    assert cfg.text_tools == TextTools("python", "always") == cfg.sampling().text_tools
    assert Sampling().text_tools == TextTools()

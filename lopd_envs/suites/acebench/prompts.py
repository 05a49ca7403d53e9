"""ACEBench's prompts assembled as the official inference code assembles them (texts in
:mod:`official_prompts`). Function lists are inserted with ``str()`` (Python reprs, not JSON), as
upstream does, because the model sees exactly that text."""

from __future__ import annotations

from typing import Any

from lopd_envs.suites.acebench import official_prompts as P

FINISH = "finish conversation"


def _pick(name: str, language: str) -> str:
    return getattr(P, f"{name}_{language.upper()}")


def single_turn_messages(row: dict[str, Any], category: str, language: str) -> list[dict[str, str]]:
    """System and user prompt of a normal or special row (``single_turn_inference``)."""
    functions = row["function"]
    if "special" in category:
        system = _pick("SYSTEM_PROMPT_FOR_SPECIAL_DATA", language).format(time=row.get("time", ""), function=functions)
    elif "preference" in category:
        system = _pick("SYSTEM_PROMPT_FOR_PREFERENCE_DATA", language).format(profile=row.get("profile", ""), function=functions)
    else:
        system = _pick("SYSTEM_PROMPT_FOR_NORMAL_DATA", language).format(time=row.get("time", ""), function=functions)
    user = _pick("USER_PROMPT", language).format(question=row["question"])
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def agent_system_prompt(category: str, involved_classes: list[str], language: str) -> str:
    """The agent's system prompt: multi-step has a fixed one; multi-turn appends the domain rules."""
    if category == "agent_multi_step":
        return _pick("MULTI_STEP_AGENT_SYSTEM", language)
    system = _pick("MULTI_TURN_AGENT_SYSTEM", language)
    if "Travel" in involved_classes:
        system += _pick("TRAVEL_PROMPT", language)
    if "BaseApi" in involved_classes:
        system += _pick("BASE_PROMPT", language)
    return system


def agent_user_prompt(category: str, functions: list[dict], history: str, language: str) -> str:
    """The agent's user prompt: the function list and the whole conversation history as text."""
    name = "MULTI_STEP_AGENT_USER" if category == "agent_multi_step" else "MULTI_TURN_AGENT_USER"
    return _pick(name, language).format(functions=functions, history=history)


def history_line(sender: str, message: Any, category: str) -> str:
    """One line of the history text (``get_inference_message`` of the scene classes)."""
    if sender == "execution":
        label = "execution result:" if category == "agent_multi_step" else "execution:"
        return f"{label}{message}\n"
    return f"{sender}:{message}\n"


def user_simulator_system(instruction: str, involved_classes: list[str], language: str) -> str:
    """The simulated user's system prompt (``APIUSER.get_init_prompt``)."""
    name = "USER_SIM_BASE" if "BaseApi" in involved_classes else "USER_SIM_TRAVEL"
    return _pick(name, language).format(instruction=instruction)


def user_simulator_opener(language: str) -> str:
    return _pick("USER_SIM_OPENER", language)

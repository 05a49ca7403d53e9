"""The BFCL prompting-mode conversation: the official system prompt, the per-language notes added to the
function docs, and the user message that reveals held-out functions (miss_func).

Text and layout are the harness's (``constants/default_prompts.py``, ``model_handler/utils.py``), so a
model sees what it would see on the leaderboard. The function list is formatted with Python's ``str`` of
the list, as the harness formats it, although the prompt calls it JSON.
"""

from __future__ import annotations

import json
from typing import Any

from lopd_envs.suites.bfcl.data import json_copy

SYSTEM_PROMPT = (
    "You are an expert in composing functions. You are given a question and a set of possible functions. "
    "Based on the question, you will need to make one or more function/tool calls to achieve the purpose.\n"
    "If none of the functions can be used, point it out. If the given question lacks the parameters required "
    "by the function, also point it out.\nYou should only return the function calls in your response.\n\n"
    "If you decide to invoke any of the function(s), you MUST put it in the format of "
    "[func_name1(params_name1=params_value1, params_name2=params_value2...), func_name2(params)]\n"
    "You SHOULD NOT include any other text in the response.\n\n"
    "At each turn, you should try your best to complete the tasks requested by the user within the current "
    "turn. Continue to output functions to call until you have fulfilled the user's request to the best of "
    "your ability. Once you have no more functions to call, the system will consider the current turn "
    "complete and proceed to the next turn or task.\n"
    "\nHere is a list of functions in JSON format that you can invoke.\n{functions}\n\n"
)
ADDITIONAL_FUNCTIONS_PROMPT = "{functions}\nI have updated some more functions you can choose from. What about now?"


def _hint(category: str) -> str:
    if category == "java":
        return " Note that the provided function is in Java 8 SDK syntax."
    if category == "javascript":
        return " Note that the provided function is in JavaScript syntax."
    return " Note that the provided function is in Python 3 syntax."


def prepare_docs(functions: list[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    """The function docs as the model is shown them: a language note on each description, and Java /
    JavaScript parameters declared as strings in the language's syntax (``func_doc_language_specific_pre_processing``)."""
    docs = json_copy(functions)
    for doc in docs:
        doc["description"] = doc["description"] + _hint(category)
        if category not in ("java", "javascript"):
            continue
        lang = "Java" if category == "java" else "JavaScript"
        for value in doc["parameters"]["properties"].values():
            if value["type"] == "any":
                value["description"] += f" This parameter can be of any type of {lang} object in string representation."
            else:
                value["description"] += f" This is {lang} {value['type']} type parameter in string representation."
            if value["type"] in (("ArrayList", "Array") if lang == "Java" else ("array",)):
                value["description"] += (f" The list elements are of type {value['items']['type']}; "
                                         "they are not in string representation.")
                del value["items"]
            if lang == "JavaScript" and value["type"] == "dict" and "properties" in value:
                value["description"] += (" The dictionary entries have the following schema; they are not in "
                                         f"string representation. {json.dumps(value['properties'])}")
                del value["properties"]
            value["type"] = "string"
    return docs


def opening_messages(first_turn: list[dict[str, Any]], docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first turn with the system prompt prepended, or merged in front of the entry's own system message."""
    messages = [dict(m) for m in first_turn]
    prompt = SYSTEM_PROMPT.format(functions=docs)
    if messages and messages[0]["role"] == "system":
        messages[0]["content"] = prompt + "\n\n" + messages[0]["content"]
    else:
        messages.insert(0, {"role": "system", "content": prompt})
    return messages


def additional_functions_message(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "user", "content": ADDITIONAL_FUNCTIONS_PROMPT.format(functions=docs)}


# ------------------------------------------------------------------ few-shot (not the leaderboard's prompt)

FEW_SHOT_QUESTION = "Functions: {functions}\n\nQuestion: {question}"


def few_shot_messages(opening: list[dict[str, Any]], functions: list[dict[str, Any]],
                      demonstrations: list[tuple[list[dict[str, Any]], str, str]]) -> list[dict[str, Any]]:
    """``opening`` with worked examples before its question: for each demonstration (its functions, its
    question, its gold calls) a user turn and the assistant's answer, and every question, the task's own
    included, restating the functions it may call (:data:`FEW_SHOT_QUESTION`).

    Why: SmolLM2-135M-Instruct answers BFCL's own prompt in prose (0 of 400 on ``simple``); two worked
    examples with the functions beside each question bring it to calls, 6 of 16 correct on training tasks.
    This is a prompt for training studies, never for leaderboard numbers (scoring itself is unchanged)."""
    messages = [dict(m) for m in opening]
    last = max(i for i, m in enumerate(messages) if m["role"] == "user")
    shots: list[dict[str, Any]] = []
    for docs, question, answer in demonstrations:
        shots.append({"role": "user", "content": FEW_SHOT_QUESTION.format(functions=json.dumps(docs),
                                                                           question=question)})
        shots.append({"role": "assistant", "content": answer})
    messages[last] = dict(messages[last], content=FEW_SHOT_QUESTION.format(
        functions=json.dumps(functions), question=messages[last]["content"]))
    return messages[:last] + shots + messages[last:]

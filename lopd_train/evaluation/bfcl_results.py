"""BFCL-v3 result files (bfcl-eval 2025.8.6.2's ``BFCL_v3_<category>_result.json``): read, scored by lopd's
BFCL scorer (:mod:`lopd_envs.suites.bfcl`) as bfcl-eval's ``eval_runner`` scores them, and the responses of
lopd's own episodes put in that format (for :mod:`.official_files`).

A result file is JSON Lines, one ``{"id": ..., "result": ...}`` per task, written by bfcl-eval's
``BaseHandler.write`` for one model (``result/<model>/``). ``result`` is the model's raw response: for a
prompting model the text (``"[f(a=1)]"``), decoded with the harness's prompting decoder; for a
function-calling (FC) model a list of ``{name: JSON arguments}``; for a multi-turn task a list of turns, each
a list of step responses of those kinds. How responses are read (``fmt``): ``prompting`` or ``fc`` as the
handler of such a model reads them (text is no call for an FC model; a list is no text for a prompting
one), or ``auto``: each response by its shape, a list as FC calls and text as prompting text, which is how
lopd's env read the answers it writes here (a run may mix native calls and text).

The arithmetic follows ``ast_file_runner``, ``relevance_file_runner`` and ``multi_turn_runner``: a response
that cannot be decoded fails (no call, for irrelevance); a multi-turn entry whose number of turns differs
from the ground truth's fails as force-terminated, one whose ``result`` is not a list of turns as an
inference error; every step of a turn is decoded, the ones that fail or are empty skipped, and the rest
executed on the simulated APIs and checked turn by turn. Deviations, on input bfcl-eval itself would crash
on or never writes: a file may hold part of a category (bfcl-eval asserts it holds all; lopd scores the ids
present, counted as that category's total), ids are matched to tasks by id (bfcl-eval pairs sorted rows by
position), arguments given as objects rather than JSON text are taken as they are, and a turn that is not a
list fails the entry as an inference error.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from lopd_envs.datafile import DataFileError, iter_jsonl

#: the category in a result file's name, as bfcl-eval's ``extract_test_category`` reads it
RESULT_NAME = re.compile(r"BFCL_v3_(\w+?)(?:_unused)?(?:_score|_result)?\.json$")
FORMATS = ("auto", "fc", "prompting")


class ResultFileError(ValueError):
    """A result file (or folder of them) that cannot be scored: the message names the file and line."""


def result_files(paths: Sequence[str | Path]) -> list[Path]:
    """The result files a user named: files, folders holding ``BFCL_v3_*.json`` files, or a result folder
    with one model's folder in it (``result/<model>/``, as bfcl-eval lays them out)."""
    found: list[Path] = []
    for given in paths:
        path = Path(given)
        if path.is_file():
            found.append(path)
            continue
        if not path.is_dir():
            raise ResultFileError(f"{path}: no such file or folder")
        files = sorted(p for p in path.glob("*.json") if RESULT_NAME.search(p.name))
        if not files:
            models = sorted(d for d in path.iterdir() if d.is_dir() and any(RESULT_NAME.search(p.name)
                                                                           for p in d.glob("*.json")))
            if len(models) > 1:
                raise ResultFileError(f"{path}: result folders of {len(models)} models "
                                      f"({', '.join(d.name for d in models[:4])}); name one")
            files = sorted(p for p in models[0].glob("*.json") if RESULT_NAME.search(p.name)) if models else []
        if not files:
            raise ResultFileError(f"{path}: no BFCL_v3_<category>_result.json file in this folder")
        found.extend(files)
    return list(dict.fromkeys(found))


def read_results(paths: Sequence[str | Path], categories: Iterable[str]) -> dict[str, list[dict[str, Any]]]:
    """``{category: [{"id", "result", "where", "tokens"}]}`` from the files, each row checked: a JSON object
    with ``id`` and ``result``, an id of the file's category, no id twice."""
    known = set(categories)
    out: dict[str, list[dict[str, Any]]] = {}
    seen: dict[str, str] = {}
    for path in result_files(paths):
        match = RESULT_NAME.search(path.name)
        if not match:
            raise ResultFileError(f"{path}: not a BFCL-v3 result file name (BFCL_v3_<category>_result.json)")
        category = match.group(1)
        if category not in known:
            raise ResultFileError(f"{path}: {category!r} is not a BFCL-v3 category lopd scores "
                                  f"({', '.join(sorted(known))})")
        if category in out:
            raise ResultFileError(f"{path}: a second result file of category {category!r}")
        rows = out.setdefault(category, [])

        def check(row: dict) -> str | None:
            if "result" not in row:
                return "row lacks the field 'result'"
            if row["id"].rsplit("_", 1)[0] != category:  # noqa: B023 - used within this iteration
                return f"id {row['id']!r} is not a task of {category} (the file's category)"  # noqa: B023
            return None
        try:
            for line, row in iter_jsonl(path, {"id": str}, check):
                where = f"{path}:{line}"
                if row["id"] in seen:
                    raise ResultFileError(f"{where}: id {row['id']!r} appears twice (first at {seen[row['id']]})")
                seen[row["id"]] = where
                rows.append({"id": row["id"], "result": row["result"], "where": where,
                             "tokens": _tokens(row.get("output_token_count"))})
        except DataFileError as exc:
            raise ResultFileError(str(exc)) from None
        if not rows:
            raise ResultFileError(f"{path}: the file holds no results")
    return out


def _tokens(value: Any) -> int:
    """bfcl-eval's ``output_token_count``: a number, or per turn and step lists of them."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, (int, float)):
        return int(value)
    if isinstance(value, list):
        return sum(_tokens(v) for v in value)
    return 0


# ------------------------------------------------------------------------------------------------ reading


def _kind(response: Any, fmt: str) -> str:
    if fmt == "auto":
        return "fc" if isinstance(response, list) else "prompting"
    return fmt


def decode_single(response: Any, item: Any, fmt: str, strict: bool) -> tuple[Any, str | None]:
    """``handler.decode_ast``: ``(decoded, None)`` or ``(None, why it failed)``."""
    from lopd_envs.actions import AssistantTurn
    from lopd_envs.suites.bfcl.env import decode_action

    if _kind(response, fmt) == "prompting":
        if not isinstance(response, str):
            return None, f"a prompting model's response must be text, got {type(response).__name__}"
        return decode_action(AssistantTurn(response, syntax="text"), item, strict)
    if not isinstance(response, list):
        return None, f"an FC model's response must be a list of calls, got {type(response).__name__}"
    decoded = []
    for call in response:  # decode_ast takes each call's first key
        if not isinstance(call, dict) or not call:
            return None, "each FC call must be an object {name: arguments}"
        name, args = next(iter(call.items()))
        try:
            args = json.loads(args) if isinstance(args, str) else args
        except (ValueError, RecursionError) as exc:
            return None, f"the arguments of {name!r} are not JSON ({type(exc).__name__})"
        decoded.append({item.names.resolve(name): args})
    return decoded, None


def execution_calls(response: Any, item: Any, fmt: str, strict: bool) -> list[str]:
    """``handler.decode_execute``: one step's call strings, ``[]`` when it cannot be decoded or is empty (the
    multi-turn runner skips such a step)."""
    from lopd_envs.suites.bfcl.decode import DecodeError, decode_text, execution_strings, fc_execution_strings

    try:
        if _kind(response, fmt) == "prompting":
            if not isinstance(response, str):
                return []
            decoded = decode_text(response, "Python", strict)
            decoded = [{item.names.resolve(k): v for k, v in c.items()} for c in decoded]
            calls = execution_strings(decoded)
        else:
            steps = [response] if isinstance(response, dict) else response
            if not isinstance(steps, list):
                return []
            pairs = []
            for call in steps:  # convert_to_function_call takes every key of each call
                if not isinstance(call, dict):
                    return []
                for name, args in call.items():
                    args = json.loads(args) if isinstance(args, str) else args
                    if not isinstance(args, dict):
                        return []
                    pairs.append((item.names.resolve(name), args))
            calls = fc_execution_strings(pairs)
    except (DecodeError, ValueError, TypeError, AttributeError, RecursionError, MemoryError):
        return []
    return [] if not calls or (len(calls) == 1 and not calls[0]) else calls


def score_multi_turn(result: Any, item: Any, fmt: str, strict: bool, data_dir: str | None) -> dict[str, Any]:
    from lopd_envs.suites.bfcl.multi_turn import MultiTurnScorer

    gold = item.answer
    if not isinstance(result, list) or not all(isinstance(t, list) for t in result):
        return {"valid": False, "error_type": "multi_turn:inference_error", "turns_completed": 0,
                "error_message": "Error during inference phase. Model did not output a list of model responses."}
    if len(result) != len(gold):
        return {"valid": False, "error_type": "multi_turn:force_terminated", "turns_completed": len(result),
                "error_message": f"Model was force-terminated during inference phase. The length of the model "
                                 f"result turns ({len(result)}) does not match the length of the ground truth "
                                 f"turns ({len(gold)})."}
    scorer = MultiTurnScorer(item.entry, gold, data_dir, strict)
    for turn in result:
        for step in turn:
            calls = execution_calls(step, item, fmt, strict)
            if calls:
                scorer.execute(calls)
        scorer.end_turn()
    details = scorer.result(force_quit=False)
    details["turns_completed"] = scorer.turns_done
    return details


def score_result(result: Any, item: Any, fmt: str, strict: bool, data_dir: str | None) -> dict[str, Any]:
    """The score details of one task's ``result``, as the env's episode would give them."""
    from lopd_envs.suites.bfcl.data import is_multi_turn
    from lopd_envs.suites.bfcl.single_turn import score_single_turn

    if is_multi_turn(item.category):
        details = score_multi_turn(result, item, fmt, strict, data_dir)
    else:
        decoded, error = decode_single(result, item, fmt, strict)
        details = score_single_turn(decoded, error, item.functions, item.answer, item.category, item.language)
        details["decoded"] = decoded if error is None else None
    details.setdefault("error_type", None)
    return details


def score_files(paths: Sequence[str | Path], env: Any, fmt: str = "auto") -> list[dict[str, Any]]:
    """Every row of the result files scored on ``env`` (a BFCL-v3 env holding their categories): one scored
    item per task, in the benchmark's order."""
    if fmt not in FORMATS:
        raise ResultFileError(f"--bfcl-format {fmt!r}: choose from {', '.join(FORMATS)}")
    from lopd_envs.suites.bfcl.data import CATEGORIES

    rows = read_results(paths, CATEGORIES)
    unwrapped = env.unwrapped
    tasks = {t.task_id: (order, t) for order, t in enumerate(unwrapped.tasks)}
    strict = unwrapped.scoring == "strict"
    scored = []
    for category, entries in rows.items():
        for row in entries:
            if row["id"] not in tasks:
                raise ResultFileError(f"{row['where']}: no BFCL-v3 task {row['id']!r}")
            order, task = tasks[row["id"]]
            details = score_result(row["result"], task.data, fmt, strict, unwrapped.data_dir)
            turns = len(row["result"]) if isinstance(row["result"], list) and "multi_turn" in category else 1
            scored.append({"task_id": row["id"], "sample": 0, "order": order, "category": category,
                           "details": details, "success": bool(details.get("valid")), "where": row["where"],
                           "turns": turns, "tokens": row["tokens"]})
    return sorted(scored, key=lambda s: s["order"])


def categories_in(paths: Sequence[str | Path]) -> list[str]:
    """The categories the named files hold (by their names), in bfcl-eval's order of categories."""
    from lopd_envs.suites.bfcl.data import CATEGORIES

    named = set()
    for path in result_files(paths):
        match = RESULT_NAME.search(path.name)
        if not match or match.group(1) not in CATEGORIES:
            raise ResultFileError(f"{path}: not a result file of a BFCL-v3 category lopd scores "
                                  "(BFCL_v3_<category>_result.json)")
        named.add(match.group(1))
    return [c for c in CATEGORIES if c in named]


# ------------------------------------------------------------------------------------------------ writing


def response_of(message: dict[str, Any]) -> Any:
    """An assistant message of a lopd episode as bfcl-eval's result holds a response, read as the env read it
    (:func:`lopd_envs.tools.parse_action`): calls the env took as an FC model's as ``[{name: JSON}]``, the
    rest as the text the env decoded with the prompting decoder. Calls the env could not read stay
    unreadable (their arguments are not JSON)."""
    from lopd_envs.suites.bfcl.env import is_fc
    from lopd_envs.tools import parse_action

    action: Any = message.get("content") or ""
    if message.get("tool_calls"):
        action = {"role": "assistant", "content": message.get("content") or "",
                  "tool_calls": [{"name": c.get("name"), "arguments": c.get("arguments")}
                                 for c in message["tool_calls"]]}
    turn = parse_action(action)
    if not is_fc(turn):
        return turn.text
    if turn.parse_error:
        return [{"unreadable_call": f"not JSON: {turn.parse_error}"}]
    return [{c.name: json.dumps(c.arguments, ensure_ascii=False)} for c in turn.tool_calls]


def episode_result(record: dict[str, Any], multi_turn: bool) -> Any:
    """The ``result`` of one lopd record: the response of its one answer, or for a multi-turn task its
    responses per turn (a turn ends with the first response not answered by tool results, as the harness
    ends a turn at the first response without calls). The episode's own answers are the last ``turns``
    assistant messages (few-shot demonstrations come before them)."""
    messages = record.get("messages") or []
    mine = [i for i, m in enumerate(messages) if m.get("role") == "assistant"][-int(record.get("turns") or 0):] \
        if record.get("turns") else []
    if not mine:
        return "" if not multi_turn else []
    if not multi_turn:
        return response_of(messages[mine[0]])
    turns: list[list[Any]] = []
    current: list[Any] = []
    for i in mine:
        current.append(response_of(messages[i]))
        answered = i + 1 < len(messages) and messages[i + 1].get("role") == "tool"
        if not answered:
            turns.append(current)
            current = []
    if current:  # force-terminated: the last turn ends with calls
        turns.append(current)
    return turns


def sort_key(task_id: str) -> tuple[str, int]:
    """bfcl-eval's ``sort_key``: category, then the index before any ``-`` sub-index."""
    category, _, index = task_id.rpartition("_")
    try:
        return category, int(index.split("-")[0])
    except ValueError:
        return category, -1

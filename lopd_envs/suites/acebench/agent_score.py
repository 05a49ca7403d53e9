"""Scoring of ACEBench's agent categories (``agent_eval`` and ``agent_eval_process`` in ``eval_main.py``).

End-to-end accuracy compares the saved end state of the involved scenario classes (after the JSON round
trip, so integer keys are strings) with the gold state. ``official`` reproduces the harness:

* the number of saved classes must equal the number of gold classes (no execution at all: fail);
* each gold class is compared with the saved class of the *same name*; when none has it (the gold spells
  ``ReminderAPI``, ``Reminderpi``, ``BaseAPI``), that class is silently not checked;
* for a dict attribute only the gold's keys are compared, so extra entries (an extra message, an extra
  reminder) pass; other attributes must be equal.

``strict`` matches class names case-insensitively and up to one typo, fails a gold class with no saved
counterpart, and compares every attribute exactly.

Process accuracy: the share of gold milestones found, in order, among the agent's messages that reached
execution (exact text after ``strip()``); with several milestone lists, the best; 1.0 when the end state
is correct; rounded to three decimals as upstream.
"""

from __future__ import annotations

from typing import Any

from lopd_envs.suites.acebench.verdict import PASS, Verdict, fail


def _official_class(saved: dict[str, Any], gold: dict[str, Any], name: str) -> list[str]:
    errors = []
    for attribute, value in saved.items():
        if attribute not in gold:
            errors.append(f"class({name}) attributes({attribute}) missing in possible_answer.")
            continue
        expected = gold[attribute]
        if isinstance(expected, dict):
            for key, item in expected.items():
                if key not in value:
                    errors.append(f"class({name}) attributes({attribute}) wrong, [expected: {expected}, real: {value}]")
                elif item != value[key]:
                    errors.append(f"class({name}) attributes({attribute}.{key}) wrong, [expected: {item}, real: {value[key]}]")
        elif expected != value:
            errors.append(f"class({name}) attributes({attribute}) wrong, [expected: {expected}, real: {value}]")
    return errors


def _within_one_edit(a: str, b: str) -> bool:
    if a == b:
        return True
    if abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        return sum(x != y for x, y in zip(a, b)) == 1
    short, long_ = sorted((a, b), key=len)
    return any(long_[:i] + long_[i + 1:] == short for i in range(len(long_)))


def _strict_match(gold_name: str, saved: list[dict[str, Any]]) -> dict[str, Any] | None:
    wanted = gold_name.lower()
    for entry in saved:
        if next(iter(entry)).lower() == wanted:
            return entry
    for entry in saved:
        if _within_one_edit(next(iter(entry)).lower(), wanted):
            return entry
    return None


def end_to_end(saved: list[dict[str, Any]], gold: list[dict[str, Any]] | dict[str, Any], mode: str = "official") -> Verdict:
    """Compare the saved end state (list of ``{ClassName: {attribute: value}}``) with the gold state."""
    gold = gold if isinstance(gold, list) else [gold]
    if len(gold) != len(saved):
        return fail("wrong number of class", f"expected {len(gold)} classes in the end state, got {len(saved)}")
    errors: list[str] = []
    for entry in gold:
        name, expected = next(iter(entry.items()))
        if mode == "official":
            match = next((s for s in saved if set(s) == {name}), None)
            if match is not None:
                errors += _official_class(match[name], expected, name)
            continue
        match = _strict_match(name, saved)
        if match is None:
            errors.append(f"class({name}) has no counterpart in the end state")
        elif next(iter(match.values())) != expected:
            errors.append(f"class({name}) state differs: [expected: {expected}, real: {next(iter(match.values()))}]")
    if errors:
        return fail("class attributes wrong", "; ".join(errors))
    return PASS


def _in_order(messages: list[str], milestones: list[str]) -> float:
    if not milestones:
        return 1.0
    found, position = 0, 0
    for stone in milestones:
        while position < len(messages):
            position += 1
            if messages[position - 1].strip() == stone.strip():
                found += 1
                break
    return found / len(milestones)


def process_accuracy(messages: list[str], milestones: list, end_to_end_valid: bool = False) -> float:
    """Milestones matched in order among ``messages`` (the agent messages that reached execution)."""
    if end_to_end_valid:
        return 1.0
    if milestones and isinstance(milestones[0], list):
        return max(round(_in_order(messages, m), 3) for m in milestones)
    return round(_in_order(messages, milestones), 3)

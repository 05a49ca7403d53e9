"""Official HumanEval+/MBPP+ extraction calls evalplus's own ``sanitize`` (issue 52 item 5): the call is real
(a stand-in put in its place is what the judge returns), the programs judged, and so the verdicts, are the
ones lopd's former copy gave on every HumanEval+ and MBPP+ problem's canonical answer in several wrappings and
on generated mixed answers, and the two guards (long answers, answers evalplus raises on) keep an answer from
raising or costing minutes."""

from __future__ import annotations

import pytest

from lopd_envs.codeexec.extract import MAX_SCAN_LINES
from lopd_envs.codeexec.extract import sanitize as lopd_copy
from lopd_envs.suites.evalplus import data as ep_data
from lopd_envs.suites.evalplus import judge as ep_judge
from lopd_envs.suites.evalplus.answer import official_solution
from tests.test_evalplus import _answer_set


def _wrappings(code: str, entry_point: str) -> list[str]:
    return [f"```python\n{code}```", f"Sure, here it is:\n```python\n{code}```\nIt runs in O(n).",
            f"{code}\n\nprint({entry_point}(1))", f"```python\n{code}```\nTests:\n```python\nassert {entry_point}\n```",
            code.replace("\n", "\n\n", 1)]


@pytest.fixture(scope="module", params=["humaneval", "mbpp"])
def problems(request):
    try:
        path = ep_data.dataset_path(request.param)
    except Exception as exc:  # noqa: BLE001 - the data are not here
        pytest.skip(f"{request.param} data unavailable: {exc}")
    return ep_data.load_problems(request.param, path)


def test_the_judge_calls_evalplus_sanitize(monkeypatch):
    import evalplus.sanitize

    calls = []
    monkeypatch.setattr(evalplus.sanitize, "sanitize", lambda text, ep: calls.append((text, ep)) or "SENTINEL")
    problem = {"entry_point": "add", "prompt": "def add(x, y):\n"}
    assert ep_judge.solution_from_answer(problem, "def add(x, y):\n    return x + y") == "SENTINEL"
    assert calls == [("def add(x, y):\n    return x + y", "add")]


def test_programs_and_so_verdicts_unchanged_on_every_problem(problems):
    checked = 0
    for task_id, p in problems.items():
        code = p["prompt"] + p["canonical_solution"]
        for text in _wrappings(code, p["entry_point"]):
            assert ep_judge.solution_from_answer(p, text) == lopd_copy(text, p["entry_point"]), (task_id, text)
            checked += 1
    assert checked >= 5 * 164


@pytest.mark.parametrize("seed", range(6))
def test_programs_unchanged_on_generated_mixed_answers(seed):
    for text in _answer_set(seed):
        assert official_solution(text, "add") == lopd_copy(text, "add"), text


@pytest.mark.parametrize("text,error", [("def add(x):\n    return " + "not " * 5000 + "x", RecursionError),
                                        ('def add(x):\n    return "\ud800"', UnicodeEncodeError)])
def test_an_answer_evalplus_raises_on_is_read_by_the_copy_not_raised(text, error):
    import evalplus.sanitize

    with pytest.raises(error):
        evalplus.sanitize.sanitize(text, "add")  # evalplus itself raises (deep nesting, a lone surrogate)
    assert official_solution(text, "add") == lopd_copy(text, "add")


def test_a_long_answer_skips_evalplus_cubic_scan(monkeypatch):
    import evalplus.sanitize

    def refuse(*_):
        raise AssertionError("evalplus's scan called on a long answer")
    monkeypatch.setattr(evalplus.sanitize, "sanitize", refuse)
    text = "def add(x, y):\n    return x + y\n" + "Some prose.\n" * MAX_SCAN_LINES
    assert official_solution(text, "add") == lopd_copy(text, "add")

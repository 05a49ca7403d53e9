"""Big results recognised by their digest (issue 53 item 5, the time HumanEval+ canonical spent over the
no-overhead ceiling): the harness sends a digest of a big output instead of its value, the scorer answers
``ok`` when it is the expected output's and ``send`` otherwise, and every verdict stays what the values give.

HumanEval/130's canonical outputs took 2.4 s of the sandbox's CPU to encode as JSON and 0.4 s of the host's
to read, against 1.0 s for computing them; with digests, 0.35 s in all over the computation."""

from __future__ import annotations

import copy
import json
import subprocess

import pytest

from lopd_envs.codeexec import valuecodec
from lopd_envs.codeexec.channel import ResultChannel
from lopd_envs.codeexec.functest import EXPECTED, MATCHED, FunctestSchedule, Group, run_function_tests
from lopd_envs.suites.evalplus import groundtruth as gt
from lopd_envs.suites.evalplus import judge
from lopd_envs.suites.evalplus.groundtruth import Oracle, read_oracle, write_oracle
from tests.test_evalplus_recognised import cached_truth

N = 30_000  # list(range(N)) encodes to ~170 KB: over DIGEST_BYTES


def _stored(tmp_path, base, plus=(), name="t") -> Oracle:
    meta = tmp_path / f"{name}.json"
    write_oracle(meta, Oracle(list(base), [0.001] * len(base), list(plus), [0.001] * len(plus), {}))
    return read_oracle(meta)


# ------------------------------------------------------------------------------ the digest

def test_a_digest_depends_on_the_value_alone():
    value = [1, 2.5, "x", (1, 2), {"k": [None, True]}, {3}, -0.0, 1 << 80] * 500
    rebuilt = valuecodec.loads(valuecodec.dumps(value))  # no object shared with ``value``, no string interned
    assert valuecodec.digest(value) == valuecodec.digest(copy.deepcopy(value)) == valuecodec.digest(rebuilt)
    assert len({valuecodec.digest(v) for v in ([1], [1.0], [True], (1,), ["1"], [1, 1])}) == 6
    assert valuecodec.digest({"a": 1, "b": 2}) != valuecodec.digest({"b": 2, "a": 1})  # a value, not equality

    class Sub(list):
        pass

    nested: list = []
    for _ in range(5000):
        nested = [nested]
    assert valuecodec.digest(Sub([1])) is None and valuecodec.digest(object()) is None
    assert valuecodec.digest(nested) is None and valuecodec.digest([1] * 10, 1 << 20) is None


def test_the_sandbox_interpreter_computes_the_same_digest():
    """The harness's copy of the codec (``_blake2``, no hashlib) in the sandbox's interpreter against the
    scorer's: equal for the same value."""
    from lopd_envs.sandbox import interpreter
    from lopd_envs.sandbox.base import as_root

    python = interpreter.resolve(as_root()).executable
    source = (gt.Path(valuecodec.__file__).read_text() + "\nimport sys\nv = [list(range(2000)), 'é' * 300, (1.5, None),"
              " {'k': frozenset({1})}]\nsys.stdout.write(digest(v) + ' ' + str('hashlib' in sys.modules))\n")
    out = subprocess.run([python, "-I", "-S", "-c", source], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    theirs, hashlib_loaded = out.stdout.split()
    ours = valuecodec.digest([list(range(2000)), "é" * 300, (1.5, None), {"k": frozenset({1})}])
    assert theirs == ours and hashlib_loaded == "False"


# ------------------------------------------------------------------------------ the expected outputs' digests

def test_digests_are_kept_only_where_equal_bytes_mean_a_pass(tmp_path):
    big = list(range(N))
    o = _stored(tmp_path, [big, [float("nan"), *big], [b"x" * 16] * 8000, [1, 2], {"k": big}])
    assert o.expected_digests("base") == {0: valuecodec.digest(big), 4: valuecodec.digest({"k": big})}
    assert o.expected_digests("plus") == {}
    assert json.loads((tmp_path / "t.json").read_text())["digests"]["scheme"] == valuecodec.DIGEST_SCHEME


@pytest.mark.parametrize("damage", ["missing", "other scheme"])
def test_an_index_without_digests_is_upgraded_once(tmp_path, monkeypatch, damage):
    truth, meta = cached_truth(tmp_path, monkeypatch, Oracle([list(range(N)), [1]], [0, 0], [], [], {}))
    index = json.loads(meta.read_text())
    if damage == "missing":
        del index["digests"]
    else:
        index["digests"] = {"scheme": "md5-of-something", "base": {"1": "0" * 64}, "plus": {}}
    meta.write_text(json.dumps(index))
    assert read_oracle(meta).base.digests is None
    got = truth.get({"task_id": "HumanEval/3"})
    assert got.expected_digests("base") == {0: valuecodec.digest(list(range(N)))}
    assert json.loads(meta.read_text())["digests"]["base"] == {"0": valuecodec.digest(list(range(N)))}


# ------------------------------------------------------------------------------ the scorer's answers

def _digest_line(group: str, i: int, value) -> bytes:
    return json.dumps({"g": group, "i": i, "h": valuecodec.digest(value), "t": 0.5}, separators=(",", ":")).encode()


def _schedule(o: Oracle) -> FunctestSchedule:
    n = len(o.base)
    s = FunctestSchedule([Group("base", [[0]] * n, [1.0] * n, expected_json=o.expected_json("base"),
                                digests=o.expected_digests("base"))], None)
    assert s.accept({"g": "base", "ready": 1})
    return s


def test_the_expected_digest_is_accepted_and_answered_ok(tmp_path):
    o = _stored(tmp_path, [list(range(N)), [1, 2]])
    channel = ResultChannel(_schedule(o))
    assert channel(_digest_line("base", 0, list(range(N))) + b"\n") == b"ok:base:0\n"
    record = channel.records[0]
    assert record["v"] is EXPECTED and record["h"] is MATCHED and channel.violation is None


def test_another_digest_asks_for_the_value_once_and_only_for_a_big_expected_output(tmp_path):
    o = _stored(tmp_path, [list(range(N)), [1, 2]])
    schedule = _schedule(o)
    channel = ResultChannel(schedule)
    wrong = _digest_line("base", 0, list(range(N - 1)))
    assert channel(wrong + b"\n") == b"send:base:0\n"
    assert channel(wrong + b"\n" + wrong + b"\n") is None and channel.records == []  # asked once, never accepted
    forged = json.dumps({"g": "base", "i": 0, "h": True, "v": [9], "t": 0.1}).encode()  # a parsed "h" is no match
    assert channel(forged + b"\n") is None and channel.records[0]["v"] == [9]
    assert channel(_digest_line("base", 1, [1, 2]) + b"\n") is None  # no digest kept for input 1: no answer
    assert channel(b'{"g":"base","i":1,"v":[1,2],"t":0.1}\n') is None and channel.records[1]["v"] is EXPECTED


# ------------------------------------------------------------------------------ end to end, in the sandbox

def test_end_to_end_a_big_correct_result_goes_back_as_a_digest(bubblewrap, tmp_path):
    o = _stored(tmp_path, [list(range(N)), [0.5] * 10], [list(range(N))])
    problem = {"task_id": "T/1", "entry_point": "f", "atol": 0, "base_input": [[N], [10]], "plus_input": [[N]]}
    good = "def f(n):\n    return list(range(n)) if n > 10 else [0.5] * n\n"
    d = judge.evaluate_task("humaneval", problem, o, good, bubblewrap)
    assert d["passed"] and d["base"]["passed"] == 2 and d["plus_status"] == "pass", d
    groups = [Group("base", problem["base_input"], [5.0, 5.0], expected_json=o.expected_json("base"),
                    digests=o.expected_digests("base"))]
    run = run_function_tests(bubblewrap, good, "f", groups, timeout=60)
    assert run.groups["base"].outputs == {0: EXPECTED, 1: EXPECTED}
    assert '"h":"' in run.result.stdout and "29999" not in run.result.stdout  # the digest went back, not the list


@pytest.mark.parametrize("body, passed", [
    ("list(range(n - 1)) + [n]", False),  # a near miss: the digest differs, the value is sent and fails
    ("[float(x) for x in range(n)]", True),  # equal by ==, not by type: the value is sent, and passes as in evalplus
    ("tuple(range(n))", False),  # a tuple is never equal to the list
])
def test_end_to_end_a_different_digest_is_judged_on_the_value(bubblewrap, tmp_path, body, passed):
    o = _stored(tmp_path, [list(range(N))])
    problem = {"task_id": "T/1", "entry_point": "f", "atol": 0, "base_input": [[N]], "plus_input": []}
    d = judge.evaluate_task("humaneval", problem, o, f"def f(n):\n    return {body}\n", bubblewrap, base_only=True)
    assert d["passed"] is passed, d
    if not passed:
        assert d["base"]["failing_index"] == 0 and d["base"]["reason"].startswith("wrong output"), d


def test_a_candidate_that_prints_the_expected_digest_without_the_value_still_fails(bubblewrap, tmp_path):
    """Writing a digest record itself, before the harness's, for a value it did not return: only a digest
    of the expected output is accepted, and the candidate can only have that by computing the output."""
    o = _stored(tmp_path, [list(range(N))])
    problem = {"task_id": "T/1", "entry_point": "f", "atol": 0, "base_input": [[N]], "plus_input": []}
    forged = _digest_line("base", 0, list(range(N - 1))).decode()
    code = ("import os\ndef f(n):\n    for fd in range(3, 12):\n        try:\n            os.write(fd, b'" + forged +
            "\\n')\n        except OSError:\n            pass\n    return None\n")
    d = judge.evaluate_task("humaneval", problem, o, code, bubblewrap, base_only=True)
    assert not d["passed"] and d["base_status"] in ("fail", "timeout"), d


def test_a_run_asks_for_at_most_max_digests_so_unread_answers_never_fill_the_pipe():
    from lopd_envs.codeexec.functest import MAX_DIGESTS, capped_digests

    groups = [Group("base", [[0]] * 40, digests=dict.fromkeys(range(40), "d")),
              Group("plus", [[0]] * 40, digests=dict.fromkeys(range(39, -1, -1), "d")), Group("x", [[0]])]
    capped = capped_digests(groups, MAX_DIGESTS)
    assert capped[0] is groups[0] and sorted(capped[1].digests) == list(range(MAX_DIGESTS - 40))
    assert capped[2].digests is None and capped_digests(groups, 0)[0].digests is None
    answers = sum(len(b"send:plus:%d\n" % i) + len(b"ok:plus:%d\n" % i) for i in range(10**3, 10**3 + MAX_DIGESTS))
    assert answers + 2 * len(b"skip:base\n") < 4096

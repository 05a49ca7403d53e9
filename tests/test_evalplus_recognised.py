"""Results recognised by their bytes (issue 11, the HumanEval+ ratio): a result record whose value bytes
equal the stored expected output is taken as that output without parsing either side, and every verdict
is the one full decoding gives. Plus the time the host allows for bringing a big result back."""

from __future__ import annotations

import json
import math

import pytest

from lopd_envs.codeexec import valuecodec
from lopd_envs.codeexec.channel import ResultChannel
from lopd_envs.codeexec.functest import EXPECTED, FunctestSchedule, Group, GroupOutcome, run_function_tests
from lopd_envs.suites.evalplus import groundtruth as gt
from lopd_envs.suites.evalplus import judge
from lopd_envs.suites.evalplus.groundtruth import Oracle, StoredOutputs, read_oracle, write_oracle


def _stored(tmp_path, base, plus=(), name="t") -> Oracle:
    meta = tmp_path / f"{name}.json"
    write_oracle(meta, Oracle(list(base), [0.001] * len(base), list(plus), [0.001] * len(plus), {}))
    return read_oracle(meta)


def _line(group: str, i: int, value, t: float = 0.25) -> bytes:
    """What the harness writes for a result (its ``emit``: compact JSON, keys in this order)."""
    return json.dumps({"g": group, "i": i, "v": valuecodec.encode(value), "t": t},
                      separators=(",", ":")).encode()


# ------------------------------------------------------------------------------ the value codec

@pytest.mark.parametrize("value", [[1, 2.5, True, None, "s"], [], [1 << 70, 1], [1, 1 << 70], [-(1 << 63), 0],
                                   [float("nan"), 1 << 70], [1, float("nan"), 1 << 70], [1.5, 2, -(1 << 62)],
                                   [1, "a", 1 << 70], [True, False, 3]])
def test_flat_lists_encode_exactly(value):
    back = valuecodec.loads(valuecodec.dumps(value))
    assert len(back) == len(value)
    for a, b in zip(back, value):
        assert type(a) is type(b) and (a == b or (isinstance(a, float) and math.isnan(a) and math.isnan(b)))


def test_int_subclasses_in_a_list_are_not_passed_through_as_ints():
    import enum

    class E(enum.IntEnum):
        A = 1

    back = valuecodec.loads(valuecodec.dumps([1, E.A]))
    assert back[0] == 1 and isinstance(back[1], valuecodec.Opaque)


# ------------------------------------------------------------------------------ stored bytes

def test_stored_bytes_are_the_codec_encoding_and_unsafe_values_have_none(tmp_path):
    values = [[1, 2, 3], (1, "a"), float("nan"), [1.0, float("nan")], {"k": 1}, 1 << 90, "NaN"]
    o = _stored(tmp_path, values)
    assert o.base.encoded(0) == b"[1,2,3]" and o.base.encoded(1) == valuecodec.dumps((1, "a")).encode()
    assert o.base.encoded(2) is None and o.base.encoded(3) is None  # NaN equals nothing
    assert o.base.encoded(4) == valuecodec.dumps({"k": 1}).encode()
    assert o.base.encoded(6) is None  # the test is on bytes: a string holding "NaN" is left to parsing
    assert o.base.encoded(7) is None and o.base.encoded(-1) is None


def cached_truth(tmp_path, monkeypatch, oracle: Oracle):
    """A HumanEval+ ground truth in an empty cache under ``tmp_path`` with ``oracle`` stored as HumanEval/3's
    index (no sandbox: nothing is computed); returns the ground truth and the index file, to damage."""
    monkeypatch.setenv("LOPD_CACHE", str(tmp_path))
    data = tmp_path / "HumanEvalPlus-v0.1.10.jsonl.gz"
    data.write_bytes(b"x")

    class _Sandbox:
        python = None

    truth = gt.GroundTruth("humaneval", data, _Sandbox())
    truth.folder.mkdir(parents=True)
    meta = truth.folder / "HumanEval_3.json"
    write_oracle(meta, oracle)
    return truth, meta


def test_an_index_without_float_flags_is_upgraded_once(tmp_path, monkeypatch):
    truth, meta = cached_truth(tmp_path, monkeypatch, Oracle([[0.5, 1.5], [1, 2]], [0, 0], [2.0], [0], {}))
    index = json.loads(meta.read_text())
    del index["floats"]
    meta.write_text(json.dumps(index))
    assert read_oracle(meta).base.encoded(0) is None  # no flags: no shortcut (the float rule needs them)
    got = truth.get({"task_id": "HumanEval/3"})
    assert json.loads(meta.read_text())["floats"] == {"base": [0], "plus": [0]}
    assert got.is_floats("base", 0) and not got.is_floats("base", 1) and got.base.encoded(1) == b"[1,2]"


# ------------------------------------------------------------------------------ the schedule

def _schedule(o: Oracle, group="base"):
    g = Group(group, [[0]] * len(getattr(o, group)), [1.0] * len(getattr(o, group)),
              expected_json=o.expected_json(group))
    s = FunctestSchedule([g], None)
    assert s.accept({"g": group, "ready": 1})
    return s


def test_only_byte_identical_results_are_recognised(tmp_path):
    o = _stored(tmp_path, [[1, 2, 3], "x"])
    s = _schedule(o)
    assert s.recognise(_line("base", 0, [1, 2, 3], 1.5e-05)) == {"g": "base", "i": 0, "v": EXPECTED, "t": 1.5e-05}
    for other in (_line("base", 0, [1, 2, 4]), _line("base", 1, [1, 2, 3]), _line("plus", 0, [1, 2, 3]),
                  _line("base", 0, [1, 2, 3])[:-1] + b',"s":1}', _line("base", 0, [1, 2, 3]) + b" ",
                  _line("base", 0, [1, 2, 3]).replace(b'"t":0.25', b'"t":"0.25"'),
                  b'{"g":"base","i":0,"v":[1,2,3],"v":[9],"t":0.1}'):
        assert s.recognise(other) is None, other
    assert s.accept({"g": "base", "i": 0, "v": EXPECTED, "t": 0.1})
    assert s.recognise(_line("base", 1, "x")) is not None  # the next input now


def test_the_channel_does_not_parse_a_recognised_result(tmp_path, monkeypatch):
    o = _stored(tmp_path, [list(range(50000))])
    channel = ResultChannel(_schedule(o))
    monkeypatch.setattr(valuecodec, "loads", lambda text: pytest.fail("parsed a recognised record"))
    channel(_line("base", 0, list(range(50000))) + b"\n")
    assert channel.records[0]["v"] is EXPECTED and channel.violation is None


@pytest.mark.parametrize("seed", range(200))
def test_verdicts_with_recognised_results_equal_full_decoding(tmp_path, seed):
    """The float rule of evalplus (a float output seen with atol 0 moves atol to 1e-6 for the inputs after
    it) holds whether the outputs before were recognised or decoded."""
    import random

    rng = random.Random(seed)
    expected = [rng.choice([[1.0, 2.0], [1, 2], 0.5, "s", (1, 2), [0.25]]) for _ in range(6)]
    o = _stored(tmp_path, expected)
    outputs = {}
    for i, e in enumerate(expected):
        roll = rng.random()
        if roll < 0.5:
            outputs[i] = e
        elif roll < 0.8 and isinstance(e, list) and e:
            outputs[i] = [x + 5e-7 for x in e]  # within 1e-6: an int list passes only once atol moved
        elif roll < 0.9:
            outputs[i] = [e]
        else:
            break
    problem = {"base_input": [[0]] * len(expected), "entry_point": "f", "atol": 0}
    decoded = GroupOutcome(outputs={i: valuecodec.loads(valuecodec.dumps(v)) for i, v in outputs.items()},
                           ended=True)
    s = _schedule(o)
    recognised = GroupOutcome(ended=True)
    for i, v in outputs.items():
        rec = s.recognise(_line("base", i, v))
        recognised.outputs[i] = rec["v"] if rec is not None else valuecodec.loads(valuecodec.dumps(v))
        s.accept({"g": "base", "i": i, "v": 0})
    want = judge.judge_group("humaneval", problem, "base", decoded, list(o.base))
    got = judge.judge_group("humaneval", problem, "base", recognised, o.base, oracle=o)
    assert (got.status, got.passed, got.first_failure) == (want.status, want.passed, want.first_failure)


def test_special_oracles_are_never_shortcut():
    assert not judge.recognisable("humaneval", "find_zero") and judge.recognisable("humaneval", "tri")
    assert not judge.recognisable("mbpp", "are_equivalent") and not judge.recognisable("mbpp", "sum_div")


# ------------------------------------------------------------------------------ the time for the bytes

def test_transfer_allowance_adds_to_the_hosts_limit(tmp_path):
    o = _stored(tmp_path, ["y" * 2_000_000, 1])
    allowances = judge.transfer_allowances(o, "base")
    assert allowances[0] == pytest.approx(o.base.encoded_size(0) / judge.TRANSFER_BYTES_PER_SECOND)
    assert allowances[1] < 1e-6
    s = FunctestSchedule([Group("base", [[0], [1]], [1.0, 1.0], transfer=allowances)], None)
    s.accept({"g": "base", "ready": 1})
    assert s.limit() == pytest.approx(1.0 + allowances[0])
    assert judge.transfer_allowances(Oracle([1], [0], [], [], {}), "base") is None


# ------------------------------------------------------------------------------ end to end, in the sandbox

def test_end_to_end_a_big_correct_result_is_recognised_and_a_near_miss_fails(bubblewrap, tmp_path):
    n = 300_000
    o = _stored(tmp_path, [list(range(n)), [0.5] * 10], [list(range(n))])
    problem = {"task_id": "T/1", "entry_point": "f", "atol": 0, "base_input": [[n], [10]], "plus_input": [[n]]}
    good = "def f(n):\n    return list(range(n)) if n > 10 else [0.5] * n\n"
    near = "def f(n):\n    return list(range(n - 1)) + [n] if n > 10 else [0.5] * n\n"
    d = judge.evaluate_task("humaneval", problem, o, good, bubblewrap)
    assert d["passed"] and d["base"]["passed"] == 2 and d["plus_status"] == "pass", d
    bad = judge.evaluate_task("humaneval", problem, o, near, bubblewrap)
    assert bad["base_status"] == "fail" and bad["base"]["failing_index"] == 0, bad
    groups = [Group("base", problem["base_input"], [5.0, 5.0], expected_json=o.expected_json("base"))]
    run = run_function_tests(bubblewrap, good, "f", groups, timeout=60)
    assert run.groups["base"].outputs[0] is EXPECTED and run.groups["base"].outputs[1] is EXPECTED
    assert isinstance(o.base, StoredOutputs)

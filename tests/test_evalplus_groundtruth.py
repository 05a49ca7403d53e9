"""HumanEval+/MBPP+ expected outputs on disk: an index plus one output per line, decoded only when compared,
a damaged cache recomputed rather than trusted, the earlier one-file cache converted once."""

from __future__ import annotations

import json
import os

import pytest

from lopd_envs.codeexec import valuecodec
from lopd_envs.suites.evalplus import groundtruth as gt
from lopd_envs.suites.evalplus.groundtruth import GroundTruth, Oracle, StoredOutputs, read_oracle, write_oracle

VALUES = [(1, "a"), {2, 3}, 1 << 80, -0.5, None, {"k": [1, (2,)]}, "x" * 5000, [[]], frozenset({1}), b"\x00"]


def _oracle() -> Oracle:
    return Oracle(VALUES[:4], [0.1] * 4, VALUES[4:], [0.2] * 6, {"plus": "why"})


def test_round_trip_is_exact_and_reads_nothing_until_indexed(tmp_path, monkeypatch):
    meta = tmp_path / "HumanEval_1.json"
    write_oracle(meta, _oracle())
    calls = []
    real = valuecodec.loads
    monkeypatch.setattr(valuecodec, "loads", lambda text: calls.append(len(text)) or real(text))
    back = read_oracle(meta)
    assert isinstance(back.plus, StoredOutputs) and calls == []
    assert back.base_time == [0.1] * 4 and back.plus_time == [0.2] * 6 and back.errors == {"plus": "why"}
    assert back.plus[2] == "x" * 5000 and len(calls) == 1
    assert list(back.base) == VALUES[:4] and list(back.plus) == VALUES[4:]
    assert [type(v) for v in back.plus] == [type(v) for v in VALUES[4:]]
    assert back.plus[-1] == b"\x00" and back.base[1:3] == VALUES[1:3]
    with pytest.raises(IndexError):
        back.base[4]
    assert len(json.loads(meta.read_text())["offsets"]["plus"]) == 6  # the index holds no outputs


def test_big_outputs_are_left_out_of_the_streaming_check(tmp_path):
    meta = tmp_path / "t.json"
    write_oracle(meta, Oracle([1, "y" * (gt.INLINE_BYTES + 10)], [0, 0], [], [], {}))
    back = read_oracle(meta)
    assert back.cheap("base", 0) and not back.cheap("base", 1)
    assert _oracle().cheap("plus", 5)  # values in memory are always at hand


@pytest.mark.parametrize("damage", ["truncate", "drop_outputs", "garble_index"])
def test_a_damaged_cache_is_not_trusted(tmp_path, damage):
    meta = tmp_path / "t.json"
    write_oracle(meta, _oracle())
    outputs = tmp_path / "t.outputs.jsonl"
    if damage == "truncate":
        outputs.write_bytes(outputs.read_bytes()[:-3])
    elif damage == "drop_outputs":
        outputs.unlink()
    else:
        meta.write_text(meta.read_text()[:-5])
    assert read_oracle(meta) is None


class _Sandbox:
    python = None


def test_legacy_one_file_cache_is_converted_once(tmp_path, monkeypatch):
    monkeypatch.setenv("LOPD_CACHE", str(tmp_path))
    data = tmp_path / "HumanEvalPlus-v0.1.10.jsonl.gz"
    data.write_bytes(b"not read here")
    truth = GroundTruth("humaneval", data, _Sandbox())
    assert truth.folder.name.endswith(f"-v{gt.GROUNDTRUTH_VERSION}")
    legacy = truth.folder.with_name(truth.folder.name.rsplit("-v", 1)[0] + "-v2")
    legacy.mkdir(parents=True)
    o = _oracle()
    (legacy / "HumanEval_7.json").write_text(json.dumps({
        "base": [valuecodec.encode(x) for x in o.base], "plus": [valuecodec.encode(x) for x in o.plus],
        "base_time": o.base_time, "plus_time": o.plus_time, "errors": o.errors}))
    monkeypatch.setattr(GroundTruth, "_compute", lambda self, p: pytest.fail("must not recompute"))
    got = truth.get({"task_id": "HumanEval/7"})
    assert isinstance(got.plus, StoredOutputs) and list(got.plus) == VALUES[4:]
    assert (truth.folder / "HumanEval_7.json").exists() and (truth.folder / "HumanEval_7.outputs.jsonl").exists()
    os.remove(legacy / "HumanEval_7.json")
    again = GroundTruth("humaneval", data, _Sandbox()).get({"task_id": "HumanEval/7"})
    assert list(again.base) == VALUES[:4]

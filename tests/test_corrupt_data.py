"""Corrupt data files: each class (empty, truncated, garbled, a missing field, files that do not pair, a
short doc file) gives one error naming the file, and the line where there is one, in every suite. The
corrupt files are copies built in tmp dirs; ../shared/data is never touched."""

from __future__ import annotations

import gzip
import json
import os
import shutil
from pathlib import Path

import pytest

from lopd_envs import datafile
from lopd_envs.datafile import DataFileError, pair_by_key, read_json, read_jsonl

SHARED = Path(os.environ.get("LOPD_DATA_DIR", ""))
BFCL_CACHE = Path(os.environ.get("LOPD_CACHE") or Path.home() / ".cache" / "lopd") / "bfcl_v3"


def _write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return path


# ------------------------------------------------------------------ the shared reader: each class once

ROWS = '{"id": "a", "function": []}\n{"id": "b", "function": []}\n{"id": "c", "function": []}\n'


@pytest.mark.parametrize("name, content, line, words", [
    ("empty.jsonl", "", None, "no rows"),
    ("blank.jsonl", "\n  \n", None, "no rows"),
    ("truncated.jsonl", ROWS[:-12], 3, "truncated"),
    ("garbled.jsonl", ROWS.replace('"b"', 'b"'), 2, "corrupt JSON"),
    ("array.jsonl", ROWS + "[1, 2]\n", 4, "JSON object"),
    ("nofield.jsonl", ROWS + '{"id": "d"}\n', 4, "'function'"),
    ("wrongtype.jsonl", ROWS + '{"id": "d", "function": "f"}\n', 4, "must be list"),
    ("bigint.jsonl", ROWS + '{"id": "d", "function": [' + "9" * 5000 + "]}\n", 4, "corrupt JSON"),
    ("deep.jsonl", '{"id": "d", "function": ' + "[" * 100000 + "]" * 100000 + "}\n", 1, "corrupt JSON"),
    ("latin1.jsonl", ROWS.encode() + b'{"id": "\xe9", "function": []}\n', 4, "UTF-8"),
])
def test_each_corruption_class_names_file_and_line(tmp_path, name, content, line, words):
    path = _write(tmp_path / name, content)
    with pytest.raises(DataFileError) as err:
        read_jsonl(path, {"id": str, "function": list})
    message = str(err.value)
    assert message.startswith(f"{path}:{line}: " if line else f"{path}: "), message
    assert words in message and err.value.line == line


def _gz(path: Path, text: str) -> Path:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(text)
    return path


def test_gzip_is_read_by_content_and_a_cut_or_broken_gzip_names_the_file(tmp_path):
    good = _gz(tmp_path / "ok.jsonl.gz", ROWS)
    assert [r["id"] for r in read_jsonl(good)] == ["a", "b", "c"]
    data = good.read_bytes()
    cut = _write(tmp_path / "cut.jsonl.gz", data[: len(data) // 2])
    with pytest.raises(DataFileError, match=rf"^{cut}: truncated or corrupt gzip"):
        read_jsonl(cut)
    flipped = bytearray(data)
    flipped[-6] ^= 0xFF  # the CRC/length trailer: the data decompresses, the check fails
    bad = _write(tmp_path / "crc.jsonl.gz", bytes(flipped))
    with pytest.raises(DataFileError, match=rf"^{bad}: truncated or corrupt gzip"):
        read_jsonl(bad)
    fake = _write(tmp_path / "plain.jsonl.gz", ROWS)
    with pytest.raises(DataFileError, match="not a gzip file"):
        read_jsonl(fake)


def test_whole_file_json_names_the_line(tmp_path):
    path = _write(tmp_path / "doc.json", '{\n  "a": 1,\n  "b": \n}\n')
    with pytest.raises(DataFileError, match=rf"^{path}:4: corrupt JSON"):
        read_json(path)
    with pytest.raises(DataFileError, match="empty"):
        read_json(_write(tmp_path / "e.json", ""))


def test_pairing_names_both_files_and_the_first_misaligned_row(tmp_path):
    q = _write(tmp_path / "q.json", '{"id": "x"}\n\n{"id": "y"}\n{"id": "z"}\n')
    a = _write(tmp_path / "a.json", '{"id": "x"}\n{"id": "z"}\n')
    with pytest.raises(DataFileError) as err:
        pair_by_key(read_jsonl(q), q, read_jsonl(a), a)
    message = str(err.value)
    assert f"{q}:3" in message and f"{a}:2" in message and "'y'" in message and "'z'" in message
    short = _write(tmp_path / "s.json", '{"id": "x"}\n{"id": "y"}\n')
    with pytest.raises(DataFileError, match=r"ends after 2 rows"):
        pair_by_key(read_jsonl(q), q, read_jsonl(short), short)


def test_reader_is_the_one_every_suite_uses():
    """No suite parses its data files by itself: the data modules import the shared reader."""
    root = Path(datafile.__file__).parent / "suites"
    for module in ("bfcl/data.py", "acebench/data.py", "evalplus/data.py", "livecodebench/data.py"):
        text = (root / module).read_text()
        assert "lopd_envs.datafile import" in text, module
        assert "json.loads(line" not in text and "stream_jsonl" not in text, module


# ------------------------------------------------------------------ ACEBench

def _acebench_copy(tmp_path: Path) -> Path:
    if not (SHARED / "acebench" / "data_en").is_dir():
        pytest.skip(f"ACEBench data not found under LOPD_DATA_DIR={SHARED!s}: cannot build corrupt copies")
    root = tmp_path / "data" / "acebench" / "data_en"
    shutil.copytree(SHARED / "acebench" / "data_en", root)
    return tmp_path / "data"


def _acebench_error(data_dir: Path, category: str = "normal_atom_bool") -> str:
    from lopd_envs.suites.acebench.data import load_rows

    with pytest.raises(DataFileError) as err:
        load_rows(category, "en", str(data_dir))
    return str(err.value)


def _drop_field(path: Path, index: int, name: str) -> list[str]:
    """Rewrite ``path`` with ``name`` removed from row ``index`` (0-based); returns the new rows."""
    rows = path.read_text().splitlines()
    row = json.loads(rows[index])
    del row[name]
    rows[index] = json.dumps(row)
    path.write_text("\n".join(rows) + "\n")
    return rows


def test_acebench_empty_question_file(tmp_path):
    data = _acebench_copy(tmp_path)
    q = data / "acebench/data_en/data_normal_atom_bool.json"
    q.write_text("")
    assert _acebench_error(data).startswith(f"{q}: ")


def test_acebench_empty_answer_file(tmp_path):
    data = _acebench_copy(tmp_path)
    a = data / "acebench/data_en/possible_answer/data_normal_atom_bool.json"
    a.write_text("\n")
    assert _acebench_error(data).startswith(f"{a}: ")


def test_acebench_rows_that_do_not_pair(tmp_path):
    data = _acebench_copy(tmp_path)
    a = data / "acebench/data_en/possible_answer/data_normal_atom_enum.json"
    lines = a.read_text().splitlines(keepends=True)
    a.write_text("".join(lines[:3] + lines[4:]))  # one answer row dropped in the middle
    message = _acebench_error(data, "normal_atom_enum")
    assert f"{a}:4" in message and "data_normal_atom_enum.json:4" in message


def test_acebench_row_without_function_and_truncated_file(tmp_path):
    data = _acebench_copy(tmp_path)
    q = data / "acebench/data_en/data_normal_atom_list.json"
    rows = _drop_field(q, 5, "function")
    assert _acebench_error(data, "normal_atom_list").startswith(f"{q}:6: row lacks the field 'function'")
    q.write_text("\n".join(rows[:5]) + "\n" + rows[6][: len(rows[6]) // 2])
    assert _acebench_error(data, "normal_atom_list").startswith(f"{q}:6: corrupt JSON")


def test_acebench_function_without_name(tmp_path):
    data = _acebench_copy(tmp_path)
    q = data / "acebench/data_en/data_special_incomplete.json"
    rows = q.read_text().splitlines()
    row = json.loads(rows[0])
    row["function"][0].pop("name")
    rows[0] = json.dumps(row)
    q.write_text("\n".join(rows) + "\n")
    assert _acebench_error(data, "special_incomplete").startswith(f"{q}:1: function 0 of")


# ------------------------------------------------------------------ HumanEval+ / MBPP+

@pytest.mark.parametrize("dataset, name", [("humaneval", "HumanEvalPlus-v0.1.10.jsonl.gz"),
                                           ("mbpp", "MbppPlus-prerelease-767efcc.jsonl.gz")])
def test_broken_evalplus_gz(tmp_path, dataset, name):
    from lopd_envs.suites.evalplus.data import load_problems

    original = SHARED / "evalplus" / name
    if not original.exists():
        pytest.skip(f"{original} not found: cannot build a corrupt copy")
    data = original.read_bytes()
    cut = _write(tmp_path / f"cut-{name}", data[: len(data) // 3])
    with pytest.raises(DataFileError, match=rf"^{cut}: truncated or corrupt gzip"):
        load_problems(dataset, cut)
    lines = gzip.decompress(data).decode().splitlines()
    row = json.loads(lines[7])
    del row["entry_point"]
    garbled = _gz(tmp_path / f"nofield-{name}", "\n".join([*lines[:7], json.dumps(row), *lines[8:]]) + "\n")
    with pytest.raises(DataFileError, match=rf"^{garbled}:8: row lacks the field 'entry_point'"):
        load_problems(dataset, garbled)
    twice = _gz(tmp_path / f"twice-{name}", "\n".join(lines[:3] + lines[2:3]) + "\n")
    with pytest.raises(DataFileError, match=rf"^{twice}:4: task .* appears twice"):
        load_problems(dataset, twice)
    empty = _gz(tmp_path / f"empty-{name}", "")
    with pytest.raises(DataFileError, match=rf"^{empty}: "):
        load_problems(dataset, empty)


# ------------------------------------------------------------------ LiveCodeBench

def test_livecodebench_garbled_release_file(tmp_path):
    from lopd_envs.suites.livecodebench.data import SAMPLES, read_rows

    lines = SAMPLES.read_text().splitlines()
    bad = _write(tmp_path / "test.jsonl", "\n".join([*lines[:2], lines[2][:100]]) + "\n")
    with pytest.raises(DataFileError, match=rf"^{bad}:3: corrupt JSON"):
        read_rows([bad])
    row = json.loads(lines[0])
    del row["private_test_cases"]
    bad.write_text(json.dumps(row) + "\n")
    with pytest.raises(DataFileError, match=rf"^{bad}:1: row lacks the field 'private_test_cases'"):
        read_rows([bad])


# ------------------------------------------------------------------ BFCL-v3

@pytest.fixture
def bfcl_copy(tmp_path, bfcl_data):
    from lopd_envs.suites.bfcl import data as bfcl

    root = tmp_path / "bfcl_v3"
    shutil.copytree(BFCL_CACHE / "data", root / "data")
    shutil.copytree(BFCL_CACHE / bfcl.API_SOURCE_DIR, root / bfcl.API_SOURCE_DIR)
    return root


def test_bfcl_empty_question_and_answer_files(bfcl_copy):
    from lopd_envs.suites.bfcl import data as bfcl

    q = bfcl_copy / bfcl.question_file("simple")
    q.write_text("")
    with pytest.raises(DataFileError, match=rf"^{q}: the file holds no rows"):
        bfcl.load_rows("simple", str(bfcl_copy))
    a = bfcl_copy / bfcl.answer_file("parallel")
    lines = a.read_text().splitlines()
    a.write_text("\n".join(lines[:-1]) + "\n")  # the last answer is lost
    with pytest.raises(DataFileError) as err:
        bfcl.load_rows("parallel", str(bfcl_copy))
    assert str(err.value).startswith(f"{a}: no possible answer for 'parallel_199'")
    assert f"{bfcl_copy / bfcl.question_file('parallel')}:200" in str(err.value)


@pytest.mark.parametrize("how", ["empty", "short", "garbled"])
def test_bfcl_multi_turn_doc_file_must_describe_every_function(bfcl_copy, how):
    """The silent case: a short doc file used to give a task fewer tools (14 instead of 32)."""
    import gymnasium as gym

    import lopd_envs
    from lopd_envs.suites.bfcl import data as bfcl

    doc = bfcl_copy / bfcl.api_doc_file("gorilla_file_system")
    lines = doc.read_text().splitlines()
    doc.write_text({"empty": "", "short": "\n".join(lines[:4]) + "\n",
                    "garbled": "\n".join([*lines[:4], lines[4][:-7], *lines[5:]]) + "\n"}[how])
    with pytest.raises(DataFileError) as err:
        bfcl.load_api_docs("GorillaFileSystem", str(bfcl_copy))
    expected = {"empty": f"{doc}: the file holds no rows", "short": f"{doc}: describes 4 functions but "
                "GorillaFileSystem has 18", "garbled": f"{doc}:5: corrupt JSON"}[how]
    assert str(err.value).startswith(expected), str(err.value)
    gym.register_envs(lopd_envs)
    with pytest.raises(DataFileError, match=str(doc)):  # the env refuses too, it does not build the task
        gym.make("lopd/BFCLv3-v0", category="multi_turn_base", data_dir=str(bfcl_copy))


def test_bfcl_held_out_function_that_no_doc_describes(bfcl_copy):
    from lopd_envs.suites.bfcl import data as bfcl

    q = bfcl_copy / bfcl.question_file("multi_turn_miss_func")
    rows = [json.loads(line) for line in q.read_text().splitlines()]
    turn = next(iter(rows[2]["missed_function"]))
    rows[2]["missed_function"][turn] = ["no_such_function"]
    q.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    with pytest.raises(DataFileError, match=rf"^{q}:3: held-out function 'no_such_function'"):
        bfcl.load_rows("multi_turn_miss_func", str(bfcl_copy))


def test_unreadable_path_is_one_error_naming_it(tmp_path):
    folder = tmp_path / "data.jsonl"
    folder.mkdir()
    with pytest.raises(DataFileError, match=rf"^{folder}: cannot be read"):
        read_jsonl(folder)


def test_acebench_agent_row_without_its_scenario(tmp_path):
    data = _acebench_copy(tmp_path)
    q = data / "acebench/data_en/data_agent_multi_step.json"
    _drop_field(q, 3, "initial_config")
    assert _acebench_error(data, "agent_multi_step").startswith(f"{q}:4: row lacks the field 'initial_config'")


@pytest.mark.parametrize("field, value, words", [
    ("metadata", "{not json", "is not JSON"),
    ("metadata", "[1]", "must be a JSON object"),
    ("public_test_cases", '[{"input": "1"}]', "list of {input, output}"),
    ("contest_date", "yesterday-ish", "is not a date"),
])
def test_livecodebench_fields_that_must_decode_at_load(tmp_path, field, value, words):
    from lopd_envs.suites.livecodebench.data import SAMPLES, read_rows

    lines = SAMPLES.read_text().splitlines()
    row = json.loads(lines[1])
    row[field] = value
    bad = _write(tmp_path / "test.jsonl", "\n".join([lines[0], json.dumps(row), *lines[2:]]) + "\n")
    with pytest.raises(DataFileError, match=rf"^{bad}:2: .*{words}"):
        read_rows([bad])


def test_bfcl_api_source_that_does_not_parse(bfcl_copy):
    from lopd_envs.suites.bfcl import data as bfcl

    source = bfcl_copy / bfcl.api_source_file("message_api")
    lines = source.read_text().splitlines()
    source.write_text("\n".join([*lines, "def broken(:"]) + "\n")
    # refused as a copy that is not the packaged original (issue 24), before it is parsed or run
    with pytest.raises(DataFileError, match=rf"^{source}: is not the original"):
        bfcl.load_api_docs("MessageAPI", str(bfcl_copy))


def test_repeated_ids_are_named_where_they_repeat(tmp_path, bfcl_copy):
    from lopd_envs.suites.bfcl import data as bfcl
    from lopd_envs.suites.livecodebench.data import SAMPLES, read_rows

    a = bfcl_copy / bfcl.answer_file("simple")
    lines = a.read_text().splitlines()
    a.write_text("\n".join([*lines[:10], lines[3], *lines[11:]]) + "\n")  # row 11 repeats row 4's id
    with pytest.raises(DataFileError, match=rf"^{a}:11: id 'simple_3' appears twice"):
        bfcl.load_rows("simple", str(bfcl_copy))
    rows = SAMPLES.read_text().splitlines()
    lcb = _write(tmp_path / "test.jsonl", "\n".join(rows + rows[:1]) + "\n")
    with pytest.raises(DataFileError, match=rf"^{lcb}:{len(rows) + 1}: question_id .* appears twice"):
        read_rows([lcb])

"""``lopd envs list`` and ``lopd assets``: what a user sees before running anything."""

from __future__ import annotations

import pytest

from lopd_envs.cli import main


def test_envs_list_shows_ids_categories_and_counts(capsys):
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    assert "lopd/BFCLv3-v0  (4441 tasks, data found)" in out
    assert "lopd/ACEBench-v0 language=en  (1023 tasks" in out and "lopd/ACEBench-v0 language=zh  (1017 tasks" in out
    assert "lopd/HumanEvalPlus-v0  (164 tasks" in out
    assert "multi_turn_long_context" in out and "normal_atom_bool" in out


def test_envs_list_reports_missing_data_without_failing(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("LOPD_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setenv("LOPD_DATA_DIR", str(tmp_path / "empty-data"))
    monkeypatch.setenv("LOPD_OFFLINE", "1")
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    assert "lopd/BFCLv3-v0\n  data: MISSING (BFCL-v3: file 'data/BFCL_v3_" in out


def test_assets_where_and_unknown_benchmark(capsys):
    assert main(["assets", "where", "evalplus"]) == 0
    assert "HumanEvalPlus-v0.1.10.jsonl.gz:" in capsys.readouterr().out
    assert main(["assets", "fetch", "nope"]) == 2


def test_envs_list_says_what_each_env_loads(capsys, monkeypatch):
    """LiveCodeBench without its release files says they are missing (no stand-in); MBPP+ names the
    pre-release it stands in."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["envs", "list"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    lcb = lines.index("lopd/LiveCodeBench-v0")  # offline without its release files: said, never stood in for
    assert lines[lcb + 1].startswith("  data: MISSING (LiveCodeBench release_v6: release files")
    mbpp = next(line for line in out.splitlines() if line.startswith("lopd/MBPPPlus-v0"))
    assert "MbppPlus-prerelease-767efcc.jsonl.gz (stand-in for MbppPlus-v0.2.0.jsonl.gz)" in mbpp


@pytest.fixture
def no_caches(monkeypatch, tmp_path):
    """Empty lopd and hub caches: only the shared data folder holds files."""
    monkeypatch.setenv("LOPD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))


def test_assets_where_knows_the_mbpp_prerelease_and_livecodebench(capsys, no_caches):
    assert main(["assets", "where", "evalplus"]) == 0
    out = capsys.readouterr().out
    assert "MbppPlus-v0.2.0.jsonl.gz: " in out and "MbppPlus-prerelease-767efcc.jsonl.gz (a stand-in" in out
    assert "missing" not in out
    assert main(["assets", "where", "livecodebench"]) == 0
    out = capsys.readouterr().out
    assert "test.jsonl: missing (source: Hugging Face dataset livecodebench/code_generation_lite)" in out
    assert "test6.jsonl: missing" in out and "the env loads" not in out  # no stand-in is offered


def test_assets_fetch_offline_finds_local_files_and_fails_fast_on_the_hub(capsys, monkeypatch, no_caches):
    import time

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("LOPD_OFFLINE", raising=False)  # it would be named as the reason instead (and skip the hub)
    assert main(["assets", "fetch", "evalplus"]) == 0
    assert "evalplus: ready (2 files)" in capsys.readouterr().out
    start = time.monotonic()
    assert main(["assets", "fetch", "livecodebench"]) == 1
    assert time.monotonic() - start < 5
    assert "HF_HUB_OFFLINE is set" in capsys.readouterr().err


@pytest.mark.parametrize("argv", [["envs", "list", "--bogus"], ["envs"], ["nope"], ["assets", "where"]])
def test_lopd_command_line_mistakes_are_one_line_exit_2(argv, capsys):
    from lopd_envs.cli import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and err[0].startswith("lopd") and "error:" in err[0]

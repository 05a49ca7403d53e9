"""``lopd envs list`` and ``lopd assets``: what a user sees before running anything."""

from __future__ import annotations

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

"""Strict construction, for every id: an unknown keyword argument is a TypeError naming it, a close match and
the accepted ones (never silently the default); a bad value names the accepted values; and every env records
which data it loaded (``provenance``), its own data only when asked for by name."""

from __future__ import annotations

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs import provenance
from lopd_envs.registration import ENV_ENTRY_POINTS

gym.register_envs(lopd_envs)

# what makes each id constructible offline on the test machines (lopd's own data named explicitly)
BASE = {
    "lopd/BFCLv3-v0": {"category": "simple"},
    "lopd/ACEBench-v0": {"category": "normal_atom_bool"},
    "lopd/EnvScaler-v0": {"source": "ours", "category": "non_conversation", "prestart": False,
                          "allow_unisolated": True},
    "lopd/HumanEvalPlus-v0": {"allow_unisolated": True},
    "lopd/MBPPPlus-v0": {"allow_unisolated": True},
    "lopd/LiveCodeBench-v0": {"source": "bundled", "allow_unisolated": True},
}
# (keyword, bad value, text the error must hold: the accepted values) per id, beyond the common ones
BAD_VALUES = {
    "lopd/BFCLv3-v0": [("few_shot", "multi_turn_base_0", "not a single-turn BFCL-v3 task id")],
    "lopd/ACEBench-v0": [("language", "eng", "'en', 'zh'; got 'eng' (did you mean 'en'?)")],
    "lopd/EnvScaler-v0": [("source", "auto", "'official', 'ours'; got 'auto'"),
                          ("split", "test", "'rl', 'sft', 'eval', 'train'"),
                          ("sandbox", "bwrap", "'auto', 'bubblewrap', 'docker', 'process'")],
    "lopd/HumanEvalPlus-v0": [("sandbox", "bubble", "(did you mean 'bubblewrap'?)")],
    "lopd/MBPPPlus-v0": [("sandbox", "dockr", "(did you mean 'docker'?)")],
    "lopd/LiveCodeBench-v0": [("source", "samplez", "'official', 'bundled', 'samples'"),
                              ("difficulty", "med", "'easy', 'medium', 'hard'; got 'med'"),
                              ("start_date", "2024/07/01", "YYYY-MM-DD"),
                              ("release_version", "v6.1", "release_v1..release_v6")],
}


@pytest.fixture
def make(request):
    made = []

    def _make(env_id, **overrides):
        if env_id == "lopd/BFCLv3-v0":
            request.getfixturevalue("bfcl_data")
        env = gym.make(env_id, **{**BASE[env_id], **overrides})
        made.append(env)
        return env
    yield _make
    for env in made:
        env.close()


def test_every_id_is_covered():
    assert set(BASE) == set(BAD_VALUES) == set(ENV_ENTRY_POINTS)


@pytest.mark.parametrize("env_id", sorted(ENV_ENTRY_POINTS))
def test_a_misspelt_keyword_is_a_type_error_with_a_suggestion_and_the_accepted_names(env_id, make):
    with pytest.raises(TypeError) as err:
        make(env_id, categroy="simple")
    text = str(err.value)
    assert "unexpected keyword argument 'categroy' (did you mean 'category'?)" in text
    accepted = text.split("accepted: ")[1].split(" was raised")[0].split(", ")
    assert {"category", "data_dir", "max_turns", "scoring", "sanitize_tool_names"} <= set(accepted)


@pytest.mark.parametrize("env_id", sorted(ENV_ENTRY_POINTS))
def test_a_keyword_with_no_close_match_is_refused_before_any_data_is_read(env_id, monkeypatch):
    def no_reading(*a, **k):
        raise AssertionError("data was read before the keywords were checked")
    monkeypatch.setattr(lopd_envs.assets, "locate", no_reading)
    with pytest.raises(TypeError, match=r"unexpected keyword arguments 'zzz', 'qqq'; accepted: category"):
        gym.make(env_id, zzz=1, qqq=2)


@pytest.mark.parametrize("env_id", sorted(ENV_ENTRY_POINTS))
def test_common_bad_values_name_the_accepted_ones(env_id, make):
    with pytest.raises(ValueError, match=r"scoring must be one of 'official', 'strict'; got 'stric' "
                                         r"\(did you mean 'strict'\?\)"):
        make(env_id, scoring="stric")
    with pytest.raises(ValueError, match="max_turns must be a positive integer"):
        make(env_id, max_turns=0)
    with pytest.raises(ValueError, match=r"unknown category 'no_such_category'; choose from: .*\ball\b"):
        make(env_id, category="no_such_category")


@pytest.mark.parametrize("env_id", sorted(ENV_ENTRY_POINTS))
def test_suite_specific_bad_values_name_the_accepted_ones(env_id, make):
    for key, value, expected in BAD_VALUES[env_id]:
        with pytest.raises(ValueError) as err:
            make(env_id, **{key: value})
        assert expected in str(err.value), (key, str(err.value))


@pytest.mark.parametrize("env_id", sorted(ENV_ENTRY_POINTS))
def test_every_env_records_the_data_it_loaded(env_id, make):
    record = provenance.of(make(env_id))
    expected = {"lopd/EnvScaler-v0": "ours", "lopd/LiveCodeBench-v0": "bundled", "lopd/MBPPPlus-v0": "stand-in"}
    assert record["source"] == expected.get(env_id, "official")
    assert record["version"] and record["files"]
    assert all(len(f["sha256"]) == 64 and f["bytes"] > 0 for f in record["files"])


def test_missing_official_data_is_an_error_not_a_stand_in(tmp_path, monkeypatch):
    monkeypatch.setenv("LOPD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("LOPD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(lopd_envs.assets.AssetMissing, match=r"191_env_metadata\.json"):
        gym.make("lopd/EnvScaler-v0", allow_unisolated=True, prestart=False)
    with pytest.raises(lopd_envs.assets.AssetMissing, match="lopd assets fetch livecodebench"):
        gym.make("lopd/LiveCodeBench-v0", allow_unisolated=True)


def test_bfcl_provenance_hashes_the_wheel_files_it_read(make):
    record = provenance.of(make("lopd/BFCLv3-v0", category=["simple", "irrelevance"]))
    names = [f["path"].rsplit("/", 2)[-2:] for f in record["files"]]
    # irrelevance has no answer file; simple's question and answer files are both recorded
    assert names == [["data", "BFCL_v3_simple.json"], ["possible_answer", "BFCL_v3_simple.json"],
                     ["data", "BFCL_v3_irrelevance.json"]]
    assert record["version"] == "bfcl-eval==2025.8.6.2"

"""An explicit ``data_dir`` is the only place looked (issue 55, class 12): a file missing there used to be
taken from ``$LOPD_DATA_DIR``, the cache, the hub's cache or a download without a word, so a run read data
its user never chose. Now it is an error that names ``data_dir`` and the copy found elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from lopd_envs import assets
from lopd_envs.assets import AssetMissing, Benchmark, Source
from lopd_envs.suites.envscaler import data as envscaler_data
from lopd_envs.suites.livecodebench import data as lcb_data


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv(assets.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(assets.DATA_ENV, str(tmp_path / "env"))
    monkeypatch.setenv(assets.OFFLINE_ENV, "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    (tmp_path / "mine").mkdir()
    return tmp_path


def _put(path: Path, text: str = "x") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.parametrize("where", ["env", "cache"])
def test_a_file_missing_from_data_dir_is_not_taken_from_elsewhere(isolated, where):
    bench = Benchmark("demo", "Demo")
    other = _put(isolated / where / "demo" / "f.json")
    assert assets.locate(bench, "f.json") == other  # without data_dir the default chain still finds it
    with pytest.raises(AssetMissing) as err:
        assets.locate(bench, "f.json", data_dir=isolated / "mine")
    message = str(err.value)
    assert str(isolated / "mine") in message and str(other) in message and "only place looked" in message
    assert assets.find_local(bench, "f.json", isolated / "mine") == (None, False)
    assert assets.candidate_dirs("demo", isolated / "mine") == [isolated / "mine" / "demo", isolated / "mine"]


def test_a_file_in_data_dir_is_found_there(isolated):
    bench = Benchmark("demo", "Demo")
    _put(isolated / "env" / "demo" / "f.json")
    mine = _put(isolated / "mine" / "demo" / "f.json")
    assert assets.locate(bench, "f.json", data_dir=isolated / "mine") == mine


def test_no_download_and_no_hub_cache_for_an_explicit_data_dir(isolated, monkeypatch):
    monkeypatch.delenv(assets.OFFLINE_ENV)
    fetched = []
    monkeypatch.setattr(assets, "fetch", lambda *a, **k: fetched.append(a))
    monkeypatch.setattr(assets, "hub_cached", lambda repo, name: _put(isolated / "hub" / name))
    bench = Benchmark("demo", "Demo", {"f.json": Source("hf", "org/demo"), "g.json": Source("url", "http://x/g")})
    for rel in ("f.json", "g.json"):
        with pytest.raises(AssetMissing, match="only place looked"):
            assets.locate(bench, rel, data_dir=isolated / "mine")
    assert fetched == []


def test_envscaler_data_dir_is_the_only_place(isolated):
    _put(isolated / "env" / "envscaler" / envscaler_data.ENV_FILES[0], "{}")
    with pytest.raises(AssetMissing) as err:
        envscaler_data.locate("env", str(isolated / "mine"))
    assert str(isolated / "env" / "envscaler") in str(err.value) and "only place looked" in str(err.value)
    assert envscaler_data.locate("env", None) == isolated / "env" / "envscaler" / envscaler_data.ENV_FILES[0]


def test_livecodebench_data_dir_is_the_only_place(isolated):
    wanted = lcb_data.release_files("v1")
    for name in wanted:
        _put(isolated / "env" / "livecodebench" / name, "")
    with pytest.raises(AssetMissing) as err:
        lcb_data.find_files(None, str(isolated / "mine"), "v1")
    assert "only place looked" in str(err.value) and str(isolated / "env" / "livecodebench") in str(err.value)
    assert lcb_data.find_files(None, None, "v1")[1] == str(isolated / "env" / "livecodebench")

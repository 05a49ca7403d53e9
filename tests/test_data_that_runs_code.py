"""Data that would silently lose its meaning, or run code in the host, is refused by name (issue 24, items
8 and 9): BFCL's simulated API sources from a data folder run in the host process only when they are the
pinned wheel's originals (a truncated or modified copy is a ``DataFileError`` naming it, and is never
imported), and an EnvScaler RL scenario without check functions is a format error naming its file."""

from __future__ import annotations

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.datafile import DataFileError
from lopd_envs.suites.envscaler import data as envscaler_data
from tests.test_corrupt_data import bfcl_copy  # noqa: F401 - a fixture: a writable copy of the BFCL-v3 files
from tests.test_envscaler_data import release_env, release_scenario, write_release

gym.register_envs(lopd_envs)


def _source(root, module: str):
    from lopd_envs.suites.bfcl import data as bfcl

    return root / bfcl.api_source_file(module)


def test_a_truncated_api_source_is_refused_by_name(bfcl_copy):  # noqa: F811
    """Cut after a whole method, the file still parses and used to load with ``tail`` missing, failing
    only later, inside an episode, as "name 'tail' is not defined"."""
    source = _source(bfcl_copy, "gorilla_file_system")
    text = source.read_text()
    source.write_text(text[:text.index("    def tail(")])
    with pytest.raises(DataFileError, match=rf"^{source}: is not the original"):
        gym.make("lopd/BFCLv3-v0", category="multi_turn_base", data_dir=str(bfcl_copy))


@pytest.mark.parametrize("module", ["gorilla_file_system", "long_context"])
def test_a_modified_api_source_never_runs_in_the_host(bfcl_copy, tmp_path, module):  # noqa: F811
    """A data folder's source with a line added at import time: refused before it is imported, both when
    the env loads and if the classes are asked for directly."""
    from lopd_envs.suites.bfcl import api

    marker = tmp_path / "ran-in-the-host"
    source = _source(bfcl_copy, module)
    source.write_text(source.read_text() + f"\nimport os\nopen({str(marker)!r}, 'w').write(str(os.getpid()))\n")
    with pytest.raises(DataFileError, match=str(source)):
        gym.make("lopd/BFCLv3-v0", category="multi_turn_base", data_dir=str(bfcl_copy))
    with pytest.raises(DataFileError, match=str(source)):
        api.api_class("GorillaFileSystem", str(bfcl_copy))
    assert not marker.exists()


def test_a_source_that_is_no_file_of_the_wheel_is_refused(tmp_path):
    from lopd_envs.suites.bfcl import data as bfcl

    stray = tmp_path / "not_an_api.py"
    stray.write_text("x = 1\n")
    with pytest.raises(DataFileError, match="is not a file of bfcl-eval"):
        bfcl.verified_source(stray)


@pytest.mark.parametrize("checks", [None, [], "missing"])
def test_an_rl_scenario_without_check_functions_names_its_file(tmp_path, checks):
    """It used to load and score 0.0 for every answer."""
    row = release_scenario()
    if checks == "missing":
        del row["checklist_with_func"]
    else:
        row["checklist_with_func"] = checks
    write_release(tmp_path, {"env_1": release_env()}, [release_scenario(task_id="ok"), row])
    scenarios = tmp_path / "envscaler" / "rl_scenario_metadata.json"
    with pytest.raises(envscaler_data.FormatError, match=rf"{scenarios}: scenario #1 .*checklist_with_func"):
        gym.make("lopd/EnvScaler-v0", source="official", data_dir=str(tmp_path), category="non_conversation")

"""EnvScaler's official file format: fixtures shaped like the released JSON (a dict keyed ``env_N`` whose
``tools`` arrive as a JSON string, RL scenarios whose ``init_config`` is a JSON string, an SFT file without
check functions), and lopd's own data checked against the same format."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lopd_envs import assets
from lopd_envs.suites.envscaler import data
from lopd_envs.suites.envscaler.ours import build

CLASS_CODE = '''from typing import Dict


class CounterService:
    def __init__(self, init_config: dict):
        self.counters: Dict[str, int] = {}
        self.init_config = init_config

    def get_counter(self, name: str) -> dict:
        """Read one counter."""
        if name not in self.counters:
            return {"success": False, "error": "no such counter"}
        return {"success": True, "data": self.counters[name]}

    def increment(self, name: str, by: int) -> dict:
        """Add to a counter."""
        self.counters[name] = self.counters.get(name, 0) + by
        return {"success": True, "message": "ok"}
'''
TOOLS = [{"type": "function", "function": {"name": "get_counter", "description": "Read one counter.",
                                           "parameters": {"type": "object", "properties": {"name": {"type": "string"}},
                                                          "required": ["name"]}}},
         {"type": "function", "function": {"name": "increment", "description": "Add to a counter.",
                                           "parameters": {"type": "object",
                                                          "properties": {"name": {"type": "string"}, "by": {"type": "integer"}},
                                                          "required": ["name", "by"]}}}]


def release_env(env_id: str = "env_1", code: str = CLASS_CODE, class_name: str = "CounterService",
                tools: list | None = None) -> dict:
    """One environment as the hub release stores it: ``tools`` as a JSON string."""
    return {"env_id": env_id, "environment_summary": "Counters", "environment_introduction": "A counter service.",
            "state_space_definition": [{"entity": "Counter", "attributes": "name, value", "description": "A counter."}],
            "constraints_rules": ["Counters only grow."],
            "operation_list": [{"operation_name": "increment", "operation_description": "Add.", "operation_type": "state_change"}],
            "env_class_name": class_name, "env_class_code": code, "env_class_def": code.split("    def get")[0],
            "env_structure": "class CounterService", "tools": json.dumps(TOOLS if tools is None else tools)}


def release_scenario(task_id: str = "0912-101530", env_id: str = "env_1", class_name: str = "CounterService",
                     checks: list[str] | None = None) -> dict:
    checks = checks if checks is not None else [
        "def check_func(final_state):\n    return final_state['counters'].get('a') == 3",
        "def check_func(final_state):\n    return initial_state['counters'].get('b') == final_state['counters'].get('b')"]
    items = [{"check_item": f"Has check {i} passed?", "check_func": src} for i, src in enumerate(checks)]
    return {"env_id": env_id, "env_class_name": class_name, "task_id": task_id,
            "init_config": json.dumps({"counters": {"a": 1, "b": 7}}), "task": "Increase counter a by 2.",
            "checklist": [i["check_item"] for i in items], "checklist_with_func": items}


def write_release(folder: Path, envs: dict, rl: list | None = None, sft: list | None = None) -> Path:
    root = folder / "envscaler"
    root.mkdir(parents=True, exist_ok=True)
    (root / "191_env_metadata.json").write_text(json.dumps(envs))
    if rl is not None:
        (root / "rl_scenario_metadata.json").write_text(json.dumps(rl))
    if sft is not None:
        (root / "sft_scenario_metadata.json").write_text(json.dumps(sft))
    return folder


def test_release_shapes_are_decoded(tmp_path):
    write_release(tmp_path, {"env_1": release_env()}, [release_scenario()])
    ds = data.load_dataset("official", "rl", str(tmp_path))
    env = ds.environments["env_1"]
    assert ds.origin == "official" and env.class_name == "CounterService"
    assert [t["function"]["name"] for t in env.tools] == ["get_counter", "increment"]  # JSON string decoded
    sc = ds.scenarios[0]
    assert sc.init_config == {"counters": {"a": 1, "b": 7}} and sc.graded and len(sc.check_funcs) == 2
    assert sc.check_funcs[0].startswith("def check_func(final_state):")


def test_a_list_of_environments_is_accepted_and_keyed_by_env_id():
    envs = data.parse_environments([release_env("env_7"), release_env("env_9")], "list.json")
    assert list(envs) == ["env_7", "env_9"]


def test_sft_scenarios_have_no_checks_and_are_ungraded(tmp_path):
    row = {k: v for k, v in release_scenario().items() if k not in ("checklist", "checklist_with_func")}
    write_release(tmp_path, {"env_1": release_env()}, sft=[row])
    ds = data.load_dataset("official", "sft", str(tmp_path))
    assert not ds.scenarios[0].graded and ds.scenarios[0].check_funcs == ()


def test_eval_split_is_the_first_200_rl_scenarios_without_a_splits_file(tmp_path):
    rows = [release_scenario(task_id=f"t{i}") for i in range(205)]
    write_release(tmp_path, {"env_1": release_env()}, rows)
    ds = data.load_dataset("official", "rl", str(tmp_path))
    assert [s.task_id for s in data.select_scenarios(ds, "eval")] == [f"t{i}" for i in range(200)]
    assert [s.task_id for s in data.select_scenarios(ds, "train")] == [f"t{i}" for i in range(200, 205)]


def test_environment_filter_and_unknown_environment(tmp_path):
    write_release(tmp_path, {"env_1": release_env(), "env_2": release_env("env_2")},
                  [release_scenario(env_id="env_1"), release_scenario(task_id="x", env_id="env_2")])
    ds = data.load_dataset("official", "rl", str(tmp_path))
    assert [s.task_id for s in data.select_scenarios(ds, "rl", ["env_2"])] == ["x"]
    with pytest.raises(ValueError, match="env_99"):
        data.select_scenarios(ds, "rl", ["env_99"])


@pytest.mark.parametrize("broken, message", [
    ({"env_1": {**release_env(), "env_class_code": ""}}, "env_class_code"),
    ({"env_1": {**release_env(), "tools": "{not json"}}, "not valid JSON"),
    ([1, 2], "expected an object"),
])
def test_malformed_metadata_is_a_clear_error(broken, message):
    with pytest.raises(data.FormatError, match=message):
        data.parse_environments(broken, "bad.json")


def test_scenarios_naming_missing_environments_are_refused(tmp_path):
    write_release(tmp_path, {"env_1": release_env()}, [release_scenario(env_id="env_404")])
    ds = data.load_dataset("official", "rl", str(tmp_path))
    with pytest.raises(data.FormatError, match="env_404"):
        data.select_scenarios(ds, "rl")


def test_offline_without_files_names_the_files_the_hub_and_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("LOPD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("LOPD_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(assets.AssetMissing) as err:
        data.load_dataset("official", "rl")
    text = str(err.value)
    assert "191_env_metadata.json" in text and "LOPD_DATA_DIR" in text and "XXHStudyHard/EnvScaler-191-Env" in text
    with pytest.raises(ValueError, match="source must be one of 'official', 'ours'; got 'auto'"):
        data.load_dataset("auto", "rl")  # no silent switch to lopd's own data: it is taken by name only
    assert data.load_dataset("ours", "rl").origin == "ours"


def test_ours_is_in_the_official_format_and_up_to_date():
    env_path, scen_path = data.ours_paths()
    raw_envs = json.loads(env_path.read_text())
    assert isinstance(raw_envs, dict) and sorted(raw_envs) == [f"env_{i}" for i in range(1, 9)]
    for key, env in raw_envs.items():
        assert env["env_id"] == key
        assert {"environment_summary", "environment_introduction", "state_space_definition", "constraints_rules",
                "operation_list", "env_class_name", "env_class_code", "env_class_def", "env_structure", "tools"} <= set(env)
        assert len(env["constraints_rules"]) >= 3 and len(env["tools"]) >= 5
    rows = json.loads(scen_path.read_text())
    assert isinstance(rows, list) and len(rows) >= 40
    for row in rows:
        assert set(row) == {"env_id", "env_class_name", "task_id", "init_config", "task", "checklist", "checklist_with_func"}
        assert all(c.startswith("Has ") for c in row["checklist"])
        assert [i["check_item"] for i in row["checklist_with_func"]] == row["checklist"]
        assert all(i["check_func"].startswith("def check_func(final_state):") for i in row["checklist_with_func"])
    out = subprocess.run([sys.executable, "-m", "lopd_envs.suites.envscaler.ours.build", "--check"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr


def test_build_refuses_a_wrong_annotation():
    files = build.build()
    files["lopd_ours_solutions.json"]["lopd-bank-01"]["true_at_reset"] = [0, 2]
    assert any("lopd-bank-01: reset" in p for p in build.verify(files))


def test_ours_ships_in_the_wheel():
    """setuptools package data covers the JSON files of the (package) folder ``ours``."""
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    assert '"*.json"' in text and "lopd_envs*" in text
    assert (data.OURS_DIR / "__init__.py").exists() and (data.OURS_DIR / "src" / "__init__.py").exists()


def test_hub_download_picks_the_known_file_names(tmp_path, monkeypatch):
    """Online, the loader lists each hub dataset's files and downloads the known name (a stub hub here)."""
    import types

    local = write_release(tmp_path / "hub", {"env_1": release_env()}, [release_scenario()]) / "envscaler"
    fetched = []

    def list_repo_files(repo, repo_type):
        assert repo_type == "dataset"
        return {"XXHStudyHard/EnvScaler-191-Env": ["README.md", "191_env_metadata.json"],
                "XXHStudyHard/EnvScaler-RL-Scenario": [".gitattributes", "rl_scenario_metadata.json"]}[repo]

    def hf_hub_download(repo, filename, repo_type):
        fetched.append((repo, filename))
        return str(local / filename)

    stub = types.SimpleNamespace(list_repo_files=list_repo_files, hf_hub_download=hf_hub_download)
    monkeypatch.setitem(sys.modules, "huggingface_hub", stub)
    monkeypatch.setattr(assets, "hub_offline_reason", lambda endpoint=None: None)  # the stub hub is "online"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.delenv("LOPD_OFFLINE", raising=False)
    monkeypatch.setenv("LOPD_DATA_DIR", str(tmp_path / "empty"))
    monkeypatch.setenv("LOPD_CACHE", str(tmp_path / "cache"))
    ds = data.load_dataset("official", "rl")
    assert ds.origin == "official" and [s.task_id for s in ds.scenarios] == ["0912-101530"]
    assert fetched == [("XXHStudyHard/EnvScaler-191-Env", "191_env_metadata.json"),
                       ("XXHStudyHard/EnvScaler-RL-Scenario", "rl_scenario_metadata.json")]


def test_a_truncated_metadata_file_names_its_path(tmp_path):
    from lopd_envs.datafile import DataFileError

    folder = write_release(tmp_path, {"env_1": release_env()}, [release_scenario()]) / "envscaler"
    meta = folder / "191_env_metadata.json"
    meta.write_text(meta.read_text()[:200])
    with pytest.raises(DataFileError, match=r"191_env_metadata\.json"):
        data.load_dataset("official", "rl", str(tmp_path))

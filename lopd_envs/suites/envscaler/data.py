"""EnvScaler's files in their official format: environment metadata and RL / SFT scenarios.

Environment metadata (``191_env_metadata.json``): a dict keyed ``"env_1"``, ``"env_2"``, … (a list is
accepted too), each environment with ``env_id``, ``environment_summary``, ``environment_introduction``,
``state_space_definition``, ``constraints_rules``, ``operation_list``, ``env_class_name``,
``env_class_code`` (the Python source of one class), ``env_class_def``, ``env_structure`` and ``tools``
(OpenAI function schemas). Scenarios (``rl_scenario_metadata.json``; SFT: ``sft_scenario_metadata.json``):
a list of ``env_id, env_class_name, task_id, init_config, task`` plus, for RL, ``checklist`` ("Has …"
strings) and ``checklist_with_func`` (``[{check_item, check_func}]``, each ``check_func`` the source of
``def check_func(final_state)``). The Hugging Face release stores some fields (``tools``,
``init_config``, …) as JSON strings: they are decoded here, so everything downstream sees the
structures the official runner sees after ``json.load``.

Where the files come from (``source=``): ``"official"``: ``data_dir``, ``$LOPD_DATA_DIR/envscaler/``,
the lopd cache, then the hub datasets (``XXHStudyHard/EnvScaler-191-Env``, ``-RL-Scenario``,
``-SFT-Scenario``) when online; missing, an error that says where to put them (the default);
``"ours"``: lopd's own environments in the same format (:mod:`.ours`), only when asked for by name, so that
no result is ever computed on them by accident.

Splits: ``rl`` (all RL scenarios), ``sft`` (no check functions: episodes are not graded), ``eval`` and
``train``. The paper's "eval200" is not defined in public code; lopd follows the re-implementations and
freezes the first :data:`EVAL_SIZE` RL scenarios in file order as ``eval`` (a source may ship a
``splits.json`` naming its ``eval`` task ids instead, as ours does); ``train`` is the rest of ``rl``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lopd_envs import assets, datafile
from lopd_envs.options import check_choice

BENCHMARK = "envscaler"
EVAL_SIZE = 200
SPLITS = ("rl", "sft", "eval", "train")
SOURCES = ("official", "ours")
ENV_FILES = ("191_env_metadata.json",)
SCENARIO_FILES = {"rl": ("rl_scenario_metadata.json", "envscaler_rl_scenario_metadata.json"),
                  "sft": ("sft_scenario_metadata.json",)}
HUB_DATASETS = {"env": "XXHStudyHard/EnvScaler-191-Env", "rl": "XXHStudyHard/EnvScaler-RL-Scenario",
                "sft": "XXHStudyHard/EnvScaler-SFT-Scenario"}
OURS_DIR = Path(__file__).with_name("ours")
OURS_ENV_FILE = "lopd_ours_env_metadata.json"
OURS_SCENARIO_FILE = "lopd_ours_rl_scenario_metadata.json"
SPLITS_FILE = "splits.json"
#: Fields that the hub release may carry as JSON text.
_ENV_JSON_FIELDS = ("tools", "state_space_definition", "constraints_rules", "operation_list")
_SCENARIO_JSON_FIELDS = ("init_config", "checklist", "checklist_with_func")

BENCH = assets.register(assets.Benchmark(
    BENCHMARK, "EnvScaler (environment metadata and scenarios)", {},
    note="EnvScaler's data lives only on the Hugging Face hub (datasets "
         + ", ".join(HUB_DATASETS.values()) + "); put 191_env_metadata.json and rl_scenario_metadata.json "
         "(or sft_scenario_metadata.json) in $LOPD_DATA_DIR/envscaler/, or use source='ours'."))


class FormatError(ValueError):
    """A file is not in EnvScaler's format; the message names the file and the item."""


@dataclass(frozen=True)
class Environment:
    env_id: str
    class_name: str
    class_code: str
    introduction: str
    rules: tuple[str, ...]
    tools: tuple[dict[str, Any], ...]
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)


@dataclass(frozen=True)
class Scenario:
    env_id: str
    class_name: str
    task_id: str
    task: str
    init_config: Any
    checklist: tuple[str, ...]
    check_funcs: tuple[str, ...]  # one per checklist_with_func item, in order
    graded: bool  # False for SFT scenarios (no check functions)
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)


# ----------------------------------------------------------------------------------- decoding

def _maybe_json(value: Any, where: str) -> Any:
    """A field that arrives as JSON text in the hub release, decoded; other values pass unchanged."""
    if isinstance(value, str):
        stripped = value.strip()
        if stripped[:1] in ("[", "{"):
            try:
                return json.loads(stripped)
            except json.JSONDecodeError as exc:
                raise FormatError(f"{where}: field is a string that is not valid JSON ({exc.msg})") from None
    return value


def _decoded(item: Any, fields: Sequence[str], where: str) -> dict[str, Any]:
    """``item`` (which must be an object) with its JSON-string ``fields`` decoded."""
    if not isinstance(item, dict):
        raise FormatError(f"{where}: expected an object, got {type(item).__name__}")
    return {**item, **{f: _maybe_json(item[f], f"{where}.{f}") for f in fields if f in item}}


def parse_environment(item: Any, key: str, origin: str) -> Environment:
    where = f"{origin}: environment {key!r}"
    item = _decoded(item, _ENV_JSON_FIELDS, where)
    for name in ("env_class_name", "env_class_code"):
        if not isinstance(item.get(name), str) or not item[name].strip():
            raise FormatError(f"{where}: missing or empty {name!r}")
    tools = item.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise FormatError(f"{where}: 'tools' must be a list of OpenAI function schemas")
    rules = item.get("constraints_rules") or []
    if not isinstance(rules, list):
        raise FormatError(f"{where}: 'constraints_rules' must be a list of strings")
    return Environment(str(item.get("env_id") or key), item["env_class_name"], item["env_class_code"],
                       str(item.get("environment_introduction", "")), tuple(str(r) for r in rules),
                       tuple(tools), item)


def parse_environments(data: Any, origin: str) -> dict[str, Environment]:
    """A metadata file's content: a dict keyed ``env_N`` or a list; keyed by ``env_id``."""
    if isinstance(data, dict):
        items = list(data.items())
    elif isinstance(data, list):
        items = [(str(e.get("env_id", i)) if isinstance(e, dict) else str(i), e) for i, e in enumerate(data)]
    else:
        raise FormatError(f"{origin}: expected a dict keyed env_N or a list, got {type(data).__name__}")
    envs: dict[str, Environment] = {}
    for key, item in items:
        env = parse_environment(item, key, origin)
        envs[env.env_id] = env
    return envs


def parse_scenario(row: Any, index: int, origin: str, graded: bool | None = None) -> Scenario:
    """One scenario of ``origin``. ``graded``: True for an RL file, whose every scenario must bring a
    non-empty ``checklist_with_func`` (without one every answer would silently score 0, as upstream divides
    by zero); False for SFT (never graded); None: graded when it has one."""
    where = f"{origin}: scenario #{index}"
    row = _decoded(row, _SCENARIO_JSON_FIELDS, where)
    for name in ("env_id", "task_id", "task"):
        if name not in row:
            raise FormatError(f"{where}: missing {name!r}")
    items = row.get("checklist_with_func")
    if graded and not items:
        raise FormatError(f"{where} ({row['task_id']}): an RL scenario needs a non-empty 'checklist_with_func' "
                          f"(its check functions), got {items!r:.80}; without one it cannot be graded")
    graded = items is not None if graded is None else graded
    items = items or []
    if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("check_func"), str)
                                              for i in items):
        raise FormatError(f"{where} ({row['task_id']}): 'checklist_with_func' must be a list of "
                          "{check_item, check_func} objects")
    checklist = row.get("checklist") or [i.get("check_item", "") for i in items]
    return Scenario(str(row["env_id"]), str(row.get("env_class_name", "")), str(row["task_id"]), str(row["task"]),
                    row.get("init_config"), tuple(str(c) for c in checklist),
                    tuple(i["check_func"] for i in items), graded, row)


def parse_scenarios(data: Any, origin: str, graded: bool | None = None) -> list[Scenario]:
    if isinstance(data, dict):  # tolerate a dict keyed by task id
        data = list(data.values())
    if not isinstance(data, list):
        raise FormatError(f"{origin}: expected a list of scenarios, got {type(data).__name__}")
    return [parse_scenario(row, i, origin, graded) for i, row in enumerate(data)]


def read_json(path: Path) -> Any:
    """A ``.json`` file, or a ``.jsonl`` file as a list of rows (through lopd's one data-file reader, so a
    corrupt file names its path and line)."""
    return datafile.read_jsonl(path) if path.suffix == ".jsonl" else datafile.read_json(path)


# ----------------------------------------------------------------------------------- locating

def _local(names: Sequence[str], data_dir: str | None) -> Path | None:
    for folder in assets.candidate_dirs(BENCHMARK, data_dir):
        for name in names:
            for candidate in (folder / name, (folder / name).with_suffix(".jsonl")):
                if candidate.is_file():
                    return candidate
    return None


def _from_hub(dataset: str, names: Sequence[str]) -> Path:
    """Download one data file of a hub dataset: a known name if present, else its only JSON file."""
    from huggingface_hub import hf_hub_download, list_repo_files

    files = list_repo_files(dataset, repo_type="dataset")
    chosen = next((n for n in names if n in files), None)
    if chosen is None:
        data = [f for f in files if f.endswith((".json", ".jsonl"))]
        if len(data) != 1:
            raise assets.AssetMissing(f"hub dataset {dataset}: expected one of {list(names)} or a single JSON "
                                      f"file, found {data}")
        chosen = data[0]
    return Path(hf_hub_download(dataset, chosen, repo_type="dataset"))


def locate(kind: str, data_dir: str | None, hub: bool = True) -> Path:
    """The official file of ``kind`` (``env``, ``rl``, ``sft``): local first, then the hub."""
    names = ENV_FILES if kind == "env" else SCENARIO_FILES[kind]
    found = _local(names, data_dir)
    if found is not None:
        return found
    if data_dir:  # an explicit data_dir is the only place looked: no other folder, no hub
        elsewhere = _local(names, None)
        raise assets.AssetMissing(assets.explicit_missing_message(BENCH.title, list(names[:1]), BENCHMARK, data_dir,
                                                                  [elsewhere] if elsewhere is not None else []))
    reason = assets.hub_offline_reason() if hub else "the hub was not asked"
    if reason is None:
        try:
            return _from_hub(HUB_DATASETS[kind], names)
        except ImportError:
            reason = "huggingface_hub is not installed (pip install huggingface_hub)"
        except Exception as exc:  # noqa: BLE001 - network, auth, missing file: one clear message below
            reason = f"the hub download from {HUB_DATASETS[kind]} failed: {exc}"
    raise assets.AssetMissing(assets.missing_message(BENCH, names[0], assets.candidate_dirs(BENCHMARK, data_dir),
                                                     reason))


def ours_paths() -> tuple[Path, Path]:
    return OURS_DIR / OURS_ENV_FILE, OURS_DIR / OURS_SCENARIO_FILE


def ours_solutions() -> dict[str, Any]:
    """lopd's own scripted solution of each of its scenarios, by scenario id (``build.py`` verified each
    one reaches reward 1.0); not an EnvScaler file, so official scenarios have none."""
    return read_json(OURS_DIR / "lopd_ours_solutions.json")


@dataclass
class Dataset:
    environments: dict[str, Environment]
    scenarios: list[Scenario]
    origin: str
    eval_ids: tuple[str, ...] | None = None  # from a splits.json, when the source has one
    files: tuple[Path, ...] = ()  # what was read, for the env's provenance


def load_dataset(source: str = "official", split: str = "rl", data_dir: str | None = None) -> Dataset:
    """Environments and the scenarios of ``split`` (before the eval/train cut) from ``source``: the official
    files (missing: an error saying where to put or how to fetch them) or, only when asked by name, ours."""
    check_choice("split", split, SPLITS)
    check_choice("source", source, SOURCES)
    kind = "sft" if split == "sft" else "rl"
    if source == "official":
        return _read(locate("env", data_dir), locate(kind, data_dir), "official", graded=kind == "rl")
    if kind == "sft":
        raise ValueError("lopd's own EnvScaler data has no SFT split; use split='rl', 'eval' or 'train'")
    env_path, scen_path = ours_paths()
    return _read(env_path, scen_path, "ours", graded=True)


def _read(env_path: Path, scen_path: Path, origin: str, graded: bool) -> Dataset:
    envs = parse_environments(read_json(env_path), str(env_path))
    scenarios = parse_scenarios(read_json(scen_path), str(scen_path), graded)
    splits_path = scen_path.with_name(SPLITS_FILE)
    eval_ids = None
    files = [env_path, scen_path]
    if splits_path.is_file():
        eval_ids = tuple(str(t) for t in read_json(splits_path).get("eval", []))
        files.append(splits_path)
    return Dataset(envs, scenarios, origin, eval_ids, tuple(files))


def select_scenarios(dataset: Dataset, split: str, env_ids: Iterable[str] | None = None) -> list[Scenario]:
    """Apply the eval/train cut and an environment filter; every scenario's environment must exist."""
    scenarios = dataset.scenarios
    if split in ("eval", "train"):
        eval_ids = set(dataset.eval_ids) if dataset.eval_ids is not None else {
            s.task_id for s in scenarios[:EVAL_SIZE]}
        scenarios = [s for s in scenarios if (s.task_id in eval_ids) == (split == "eval")]
    if env_ids is not None:
        wanted = [env_ids] if isinstance(env_ids, str) else list(env_ids)
        unknown = [e for e in wanted if e not in dataset.environments]
        if unknown:
            raise ValueError(f"unknown EnvScaler environment(s) {unknown}; e.g. {sorted(dataset.environments)[:5]}")
        scenarios = [s for s in scenarios if s.env_id in set(wanted)]
    missing = sorted({s.env_id for s in scenarios if s.env_id not in dataset.environments})
    if missing:
        raise FormatError(f"scenarios refer to environments missing from the metadata: {missing[:10]}")
    return scenarios

"""BFCL-v3 files: categories, task rows with their possible answers, and the multi-turn function docs.

Files are found through :mod:`lopd_envs.assets` (``data_dir`` → ``$LOPD_DATA_DIR/bfcl_v3`` → cache →
the pinned ``bfcl-eval`` wheel). Parsed files are cached per process: an env is cheap to create many
times (vectorised use, tests), and the rows are never mutated after loading.
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from lopd_envs.assets import Benchmark, Source, locate, read_jsonl, register

SINGLE_TURN = (
    "simple", "multiple", "parallel", "parallel_multiple", "java", "javascript", "irrelevance",
    "live_simple", "live_multiple", "live_parallel", "live_parallel_multiple", "live_irrelevance",
    "live_relevance")
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
CATEGORIES = SINGLE_TURN + MULTI_TURN
NO_ANSWER = ("irrelevance", "live_irrelevance", "live_relevance")  # scored by "is there a call" alone
GROUPS: dict[str, tuple[str, ...]] = {
    "all": CATEGORIES,
    "single_turn": SINGLE_TURN,
    "multi_turn": MULTI_TURN,
    "live": tuple(c for c in CATEGORIES if c.startswith("live_")),
    "non_live": tuple(c for c in SINGLE_TURN if not c.startswith("live_")),
}

# simulated API class -> its module / doc file stem in the wheel
API_MODULES = {
    "GorillaFileSystem": "gorilla_file_system", "MathAPI": "math_api", "MessageAPI": "message_api",
    "TwitterAPI": "posting_api", "TicketAPI": "ticket_api", "TradingBot": "trading_bot",
    "TravelAPI": "travel_booking", "VehicleControlAPI": "vehicle_control",
}
STATELESS_APIS = ("MathAPI",)
API_SOURCE_DIR = "eval_checker/multi_turn_eval/func_source_code"


def language_of(category: str) -> str:
    return {"java": "Java", "javascript": "JavaScript"}.get(category, "Python")


def is_multi_turn(category: str) -> bool:
    return category.startswith("multi_turn")


def question_file(category: str) -> str:
    return f"data/BFCL_v3_{category}.json"


def answer_file(category: str) -> str:
    return f"data/possible_answer/BFCL_v3_{category}.json"


def api_doc_file(module: str) -> str:
    return f"data/multi_turn_func_doc/{module}.json"


def api_source_file(module: str) -> str:
    return f"{API_SOURCE_DIR}/{module}.py"


BFCL_WHEEL = Source(
    kind="pypi", ref="bfcl-eval==2025.8.6.2",
    sha256="fdb996ac963ed1c6fce1eb4884053aae4a6de282fb931665a46dbeed204a228d",
    members=("bfcl_eval/data/", f"bfcl_eval/{API_SOURCE_DIR}/"), strip="bfcl_eval/")


def _files() -> dict[str, Source]:
    """Every file the env reads, all from the one pinned wheel (``long_context`` is the APIs' own import)."""
    files = {question_file(c): BFCL_WHEEL for c in CATEGORIES}
    files.update({answer_file(c): BFCL_WHEEL for c in CATEGORIES if c not in NO_ANSWER})
    for module in API_MODULES.values():
        files[api_doc_file(module)] = BFCL_WHEEL
        files[api_source_file(module)] = BFCL_WHEEL
    files[api_source_file("long_context")] = BFCL_WHEEL
    return files


BFCL_V3 = register(Benchmark(
    "bfcl_v3", "BFCL-v3", _files(),
    note="BFCL-v3 ships inside the PyPI wheel bfcl-eval==2025.8.6.2; lopd takes it without its dependencies "
         "(they conflict with evalplus)."))


def _key(path: Path) -> tuple[str, float]:
    return str(path.resolve()), os.path.getmtime(path)


@lru_cache(maxsize=64)
def _read(path: str, mtime: float) -> tuple[dict[str, Any], ...]:
    return tuple(read_jsonl(Path(path)))


def load_rows(category: str, data_dir: str | None = None) -> list[tuple[dict[str, Any], Any]]:
    """``(entry, ground_truth)`` pairs of one category in file order; ground truth is ``None`` for the
    categories scored without one."""
    entries = _read(*_key(locate(BFCL_V3, question_file(category), data_dir)))
    if category in NO_ANSWER:
        return [(e, None) for e in entries]
    answers = {a["id"]: a["ground_truth"] for a in _read(*_key(locate(BFCL_V3, answer_file(category), data_dir)))}
    missing = [e["id"] for e in entries if e["id"] not in answers]
    if missing:
        raise ValueError(f"BFCL-v3 {category}: no possible answer for {missing[:3]} ({len(missing)} in all)")
    return [(e, answers[e["id"]]) for e in entries]


def load_api_docs(class_name: str, data_dir: str | None = None) -> tuple[dict[str, Any], ...]:
    """The function docs of one simulated API class (``multi_turn_func_doc/<module>.json``)."""
    path = locate(BFCL_V3, api_doc_file(API_MODULES[class_name]), data_dir)
    return _read(*_key(path))


def api_source_path(module: str, data_dir: str | None = None) -> Path:
    return locate(BFCL_V3, api_source_file(module), data_dir)


def json_copy(value: Any) -> Any:
    """A deep copy of plain JSON data, much faster than :func:`copy.deepcopy`."""
    return json.loads(json.dumps(value))

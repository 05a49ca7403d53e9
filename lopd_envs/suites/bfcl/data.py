"""BFCL-v3 files: categories, task rows with their possible answers, and the multi-turn function docs.

Files are found through :mod:`lopd_envs.assets` (``data_dir`` → ``$LOPD_DATA_DIR/bfcl_v3`` → cache →
the pinned ``bfcl-eval`` wheel). Parsed files are cached per process: an env is cheap to create many
times (vectorised use, tests), and the rows are never mutated after loading.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from lopd_envs.assets import Benchmark, Source, locate, register
from lopd_envs.datafile import DataFileError, check_unique, line_numbers, read_jsonl

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


# what each row of each kind of file must hold (checked by the shared reader, which names file and line)
SINGLE_TURN_FIELDS = {"id": str, "question": list, "function": list}
MULTI_TURN_FIELDS = {"id": str, "question": list, "involved_classes": list, "initial_config": dict}
ANSWER_FIELDS = {"id": str, "ground_truth": (list, dict, str)}
DOC_FIELDS = {"name": str, "parameters": dict}


def _fields_of(kind: str) -> dict[str, Any]:
    return {"single_turn": SINGLE_TURN_FIELDS, "multi_turn": MULTI_TURN_FIELDS, "answer": ANSWER_FIELDS,
            "doc": DOC_FIELDS}[kind]


@lru_cache(maxsize=64)
def _read(path: str, mtime: float, kind: str) -> tuple[dict[str, Any], ...]:
    rows = read_jsonl(Path(path), _fields_of(kind))
    check_unique(rows, path, "name" if kind == "doc" else "id")
    return tuple(rows)


def load_rows(category: str, data_dir: str | None = None) -> list[tuple[dict[str, Any], Any]]:
    """``(entry, ground_truth)`` pairs of one category in file order; ground truth is ``None`` for the
    categories scored without one. Every entry must have its answer (matched by id, as BFCL does)."""
    qpath = locate(BFCL_V3, question_file(category), data_dir)
    entries = _read(*_key(qpath), "multi_turn" if is_multi_turn(category) else "single_turn")
    if is_multi_turn(category):
        _check_multi_turn(qpath, entries, data_dir)
    if category in NO_ANSWER:
        return [(e, None) for e in entries]
    apath = locate(BFCL_V3, answer_file(category), data_dir)
    answers = {a["id"]: a["ground_truth"] for a in _read(*_key(apath), "answer")}
    missing = [(n, e["id"]) for n, e in zip(line_numbers(qpath), entries) if e["id"] not in answers]
    if missing:
        (line, first), count = missing[0], len(missing)
        raise DataFileError(apath, f"no possible answer for {first!r} (asked at {qpath}:{line}; "
                                   f"{count} question(s) in all lack one)")
    return [(e, answers[e["id"]]) for e in entries]


#: sha256 of every simulated API source in the pinned wheel (:data:`BFCL_WHEEL`), by relative path.
API_SOURCE_SHA256: dict[str, str] = json.loads(Path(__file__).with_name("api_sources.sha256.json").read_text())


def verified_source(path: Path) -> str:
    """The text of the simulated API source at ``path``, only when it is byte for byte the pinned wheel's
    original of that file. These sources are *executed in the host process* (the APIs hold each episode's
    state there), so a copy from a data folder that differs, a truncated one included, is refused by name
    rather than run: code from a data folder never runs in the host unless it is the packaged original.
    The bytes checked are the bytes returned (no window to swap the file between check and use)."""
    relpath = api_source_file(path.stem)
    expected = API_SOURCE_SHA256.get(relpath)
    try:
        content = path.read_bytes()
    except OSError as exc:
        raise DataFileError(path, f"cannot be read ({exc.strerror or exc})") from None
    digest = hashlib.sha256(content).hexdigest()
    if digest != expected:
        why = f"is not a file of {BFCL_WHEEL.ref}" if expected is None else \
            f"is not the original {relpath} of {BFCL_WHEEL.ref} ({len(content)} bytes, sha256 {digest[:12]}..., " \
            f"expected {expected[:12]}...)"
        raise DataFileError(path, f"{why}: the simulated API sources run in lopd's own process, so only the "
                                  "packaged originals are run; restore it (`lopd assets fetch bfcl_v3`) or remove "
                                  "it from the data folder")
    return content.decode("utf-8")


def _class_methods(source: Path, class_name: str) -> set[str] | None:
    """The public method names of a simulated API class, read from its (verified) source with ``ast``
    (never run): the functions its doc file must describe. None when the class is not found in the file."""
    text = verified_source(source)
    try:
        tree = ast.parse(text, str(source))
    except (SyntaxError, ValueError, UnicodeDecodeError) as exc:
        raise DataFileError(source, f"the API source does not parse ({type(exc).__name__}: "
                                    f"{getattr(exc, 'msg', exc)})", getattr(exc, "lineno", None)) from None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            return {f.name for f in node.body
                    if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and not f.name.startswith("_")}
    return None


@lru_cache(maxsize=64)
def _checked_docs(doc_path: str, doc_mtime: float, source_path: str, source_mtime: float,
                  class_name: str) -> tuple[dict[str, Any], ...]:
    docs = _read(doc_path, doc_mtime, "doc")
    methods = _class_methods(Path(source_path), class_name)
    if methods is None:
        raise DataFileError(source_path, f"defines no class {class_name}")
    missing = sorted(methods - {d["name"] for d in docs})
    if missing:  # a short doc file would silently offer the model fewer tools than the category has
        raise DataFileError(doc_path, f"describes {len(docs)} functions but {class_name} has {len(methods)}; "
                                      f"missing: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    return docs


def _check_multi_turn(qpath: Path, entries: Sequence[dict[str, Any]], data_dir: str | None) -> None:
    """Every involved class is a known API and every held-out function is one of its documented ones;
    otherwise the task would silently lose the function instead of offering it later."""
    for line, entry in zip(line_numbers(qpath), entries):
        unknown = [c for c in entry["involved_classes"] if c not in API_MODULES]
        if unknown:
            raise DataFileError(qpath, f"unknown API class {unknown[0]!r} in {entry['id']}", line)
        missed = entry.get("missed_function") or {}
        if not isinstance(missed, dict):
            raise DataFileError(qpath, f"'missed_function' must be an object in {entry['id']}", line)
        names = {d["name"] for c in entry["involved_classes"] for d in load_api_docs(c, data_dir)}
        absent = [n for held in missed.values() for n in (held if isinstance(held, list) else [held])
                  if n not in names]
        if absent:
            raise DataFileError(qpath, f"held-out function {absent[0]!r} of {entry['id']} is not documented "
                                       f"by {', '.join(entry['involved_classes'])}", line)


def load_api_docs(class_name: str, data_dir: str | None = None) -> tuple[dict[str, Any], ...]:
    """The function docs of one simulated API class (``multi_turn_func_doc/<module>.json``), checked to
    describe every public method of the class (from its source file), so a short file is an error."""
    if class_name not in API_MODULES:
        raise ValueError(f"BFCL-v3: unknown API class {class_name!r} (known: {', '.join(API_MODULES)})")
    module = API_MODULES[class_name]
    doc = locate(BFCL_V3, api_doc_file(module), data_dir)
    source = locate(BFCL_V3, api_source_file(module), data_dir)
    _verified_once(*_key(locate(BFCL_V3, api_source_file("long_context"), data_dir)))  # imported by the APIs
    return _checked_docs(*_key(doc), *_key(source), class_name)


@lru_cache(maxsize=16)
def _verified_once(path: str, mtime: float) -> None:
    """:func:`verified_source` at load time, once per file version (the run-time load checks again)."""
    verified_source(Path(path))


def api_source_path(module: str, data_dir: str | None = None) -> Path:
    return locate(BFCL_V3, api_source_file(module), data_dir)


def json_copy(value: Any) -> Any:
    """A deep copy of plain JSON data, much faster than :func:`copy.deepcopy`."""
    return json.loads(json.dumps(value))

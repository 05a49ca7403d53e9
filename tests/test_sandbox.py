"""The sandbox interface: every backend that works here runs programs with the same contract."""

from __future__ import annotations

import os
import time

import pytest

from lopd_envs.sandbox import (
    BACKENDS,
    Limits,
    MiB,
    ProcessSandbox,
    RunRequest,
    SandboxPool,
    available_backends,
    get_sandbox,
)
from lopd_envs.sandbox.base import as_root
from lopd_envs.sandbox.interpreter import resolve

WORKING = [name for name, problem in available_backends().items() if problem is None]


@pytest.fixture(scope="module", params=WORKING or ["none"])
def sandbox(request):
    if request.param == "none":
        pytest.skip("no sandbox backend works here")
    return BACKENDS[request.param](Limits(timeout=5, memory=512 * MiB))


def test_stdin_in_stdout_out(sandbox):
    r = sandbox.run("import sys\nprint(sys.stdin.read().upper())", stdin="hello")
    assert r.ok and r.stdout == "HELLO\n" and r.backend == sandbox.name


def test_exit_status_and_stderr(sandbox):
    r = sandbox.run("import sys\nsys.stderr.write('bad')\nsys.exit(3)")
    assert r.exit_code == 3 and r.stderr == "bad" and not r.ok and r.status() == "error"


def test_files_are_readable_in_the_working_dir(sandbox):
    r = sandbox.run("print(open('data/in.txt').read())", files={"data/in.txt": "42"})
    assert r.stdout.strip() == "42"


def test_unsafe_file_names_are_refused(sandbox):
    r = sandbox.run("pass", files={"../escape.txt": "x"})
    assert r.error and "unsafe" in r.error


def test_timeout_kills_the_run(sandbox):
    start = time.monotonic()
    r = sandbox.run("while True: pass", timeout=1)
    assert r.timed_out and r.status() == "timeout" and time.monotonic() - start < 4


def test_memory_limit(sandbox):
    r = sandbox.run("x = bytearray(900 * 1024 * 1024)\nprint('allocated')", memory_limit=256 * MiB)
    assert r.oom and "allocated" not in r.stdout


def test_output_is_capped(sandbox):
    r = sandbox.run("import sys\nwhile True: sys.stdout.write('x' * 65536)", output=1 * MiB, timeout=5)
    assert r.truncated and len(r.stdout) <= 1 * MiB and not r.timed_out


def test_python_is_isolated_mode_without_site(sandbox):
    r = sandbox.run("import sys\nprint(sys.flags.isolated, sys.flags.no_site, 'site' in sys.modules)")
    assert r.stdout.split() == ["1", "1", "False"]


def test_environment_is_scrubbed(sandbox, monkeypatch):
    monkeypatch.setenv("LOPD_TEST_SECRET", "s3cr3t-value")
    r = sandbox.run("import os\nprint(dict(os.environ))")
    assert "s3cr3t-value" not in r.stdout and "PATH" in r.stdout


def test_isolation_label():
    assert BACKENDS["bubblewrap"].isolating and BACKENDS["docker"].isolating
    assert not ProcessSandbox.isolating


def test_default_is_the_best_available(monkeypatch):
    monkeypatch.delenv("LOPD_SANDBOX", raising=False)  # .ci/run's Docker pass forces a backend
    best = next(name for name in ("bubblewrap", "docker", "process") if available_backends()[name] is None)
    assert get_sandbox().name == best


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        get_sandbox("chroot")


def test_interpreter_is_a_real_binary_not_a_shim():
    python = resolve(as_root())
    assert "shims" not in python.executable and os.path.isfile(python.executable)
    assert not any(p in ("/", "/root", "/home", "/work") for p in python.paths)


@pytest.mark.skipif("bubblewrap" not in WORKING, reason="bubblewrap unavailable")
def test_bubblewrap_binds_only_the_interpreter():
    sb = BACKENDS["bubblewrap"]()
    r = sb.run("import os\nprint(sorted(os.listdir('/')))\nprint(os.getuid())")
    top = eval(r.stdout.splitlines()[0])
    assert set(top) <= {"usr", "lib", "lib64", "bin", "tmp", "proc", "dev", "sandbox", "lib32", "libx32"}
    assert r.stdout.splitlines()[1] == "65534"


@pytest.mark.skipif("docker" in WORKING, reason="a Docker engine is reachable")
def test_docker_unavailable_is_reported_not_raised():
    assert available_backends()["docker"]


def test_pool_runs_in_parallel_and_keeps_order():
    sb = get_sandbox()
    start = time.monotonic()
    sb.run("import time\ntime.sleep(0.5)")
    one = time.monotonic() - start  # one run, start-up included, at the machine's load of the moment
    with SandboxPool(sb, workers=2) as pool:
        start = time.monotonic()
        results = pool.map([RunRequest(f"import time\ntime.sleep(0.5)\nprint({i})") for i in range(4)])
        elapsed = time.monotonic() - start
    assert [r.stdout.strip() for r in results] == ["0", "1", "2", "3"]
    assert elapsed < 3 * one  # 4 runs on 2 workers: about 2 × one; one after the other: 4 × one


def test_runs_from_many_threads_do_not_mix():
    sb = get_sandbox()
    with SandboxPool(sb, workers=4) as pool:
        results = pool.map([RunRequest("print(input())", stdin=str(i)) for i in range(12)])
    assert [r.stdout.strip() for r in results] == [str(i) for i in range(12)]

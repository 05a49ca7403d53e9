"""Warm spares (lopd_envs.sandbox.spares): a sandbox started ahead of need serves exactly one run, exactly as
a cold start would, with the run's own limits, and never outlives its host.

Each backend that keeps spares (bubblewrap, process) is tested where it works here; bubblewrap's absence
is a loud skip (a failure under CI=true, see tests/isolation.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import psutil
import pytest

from lopd_envs.sandbox import BACKENDS, Limits, MiB, available_backends
from lopd_envs.sandbox.base import as_root
from tests.isolation import require_bubblewrap

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NAMES = ["bubblewrap", "process"]
LIMITS = Limits(timeout=5, memory=512 * MiB)

#: What a program can see of how it was started.
PROBE = r"""
import json, os, resource, sys
lim = {name: resource.getrlimit(getattr(resource, name)) for name in
       ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_FSIZE", "RLIMIT_NPROC", "RLIMIT_STACK", "RLIMIT_NOFILE", "RLIMIT_CORE")}
print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "env": dict(os.environ), "uid": os.getuid(),
                  "files": sorted(os.listdir(".")), "stdin": sys.stdin.read(), "limits": lim,
                  "main": __name__, "file": __file__, "globals": sorted(k for k in globals() if k.startswith("_"))}))
"""


def make(name: str, **options):
    if name == "bubblewrap":
        require_bubblewrap()
    elif available_backends()[name] is not None:
        pytest.skip(f"SKIPPED: the {name} backend does not work here: {available_backends()[name]}")
    return BACKENDS[name](LIMITS, **options)


@pytest.fixture(params=NAMES)
def name(request):
    return request.param


def _waiting_pids(sandbox) -> set[int]:
    return {spare.run.proc.pid for ready in sandbox.spares._ready.values() for spare in ready}


def _normal(report: dict, folder_of: str) -> dict:
    """The probe's report with the run folder's host path (process backend: a fresh one per run) masked."""
    text = json.dumps(report)
    return json.loads(text.replace(folder_of, "<folder>")) if folder_of != "/sandbox" else report


def test_a_spare_runs_the_program_exactly_as_a_cold_start(name):
    warm, cold = make(name, spares=2), make(name, spares=0)
    try:
        warm.run("pass")
        warm.spares.settle()
        assert warm.spares.waiting() >= 1, "no spare was stocked after the first run"
        reports = []
        for sb in (warm, cold):
            r = sb.run(PROBE, stdin="the input", files={"data/x.txt": "1"}, memory_limit=300 * MiB, timeout=3)
            assert r.ok, r
            report = json.loads(r.stdout)
            reports.append(_normal(report, report["cwd"]))
        assert reports[0] == reports[1]
        assert reports[0]["stdin"] == "the input" and reports[0]["files"] == ["data", "main.py"]
        assert reports[0]["limits"]["RLIMIT_AS"] == [300 * MiB, 300 * MiB]
        assert reports[0]["globals"] == ["__builtins__", "__file__", "__name__"]  # no bootstrap name left
    finally:
        warm.close()


def test_each_run_gets_a_fresh_sandbox(name):
    sb = make(name, spares=2)
    try:
        seen = []
        for _ in range(4):
            r = sb.run("import os\nprint(os.getpid(), os.path.exists('/tmp/lopd-spare-mark'))\n"
                       "if os.environ['TMPDIR'] == '/tmp' and os.path.isdir('/sandbox'):\n"
                       "    open('/tmp/lopd-spare-mark', 'w').write('x')\n")
            assert r.ok, r
            pid, marked = r.stdout.split()
            seen.append(pid)
            if name == "bubblewrap":
                assert marked == "False", "a file written by an earlier run is visible: a sandbox was reused"
            sb.spares.settle()
        if name == "process":  # bubblewrap's PID namespace gives every run the same pid
            assert len(set(seen)) == 4, f"an interpreter served two runs: {seen}"
    finally:
        sb.close()


def test_a_spare_gets_the_limits_of_its_run(name):
    sb = make(name, spares=1)
    try:
        sb.run("pass")
        sb.spares.settle()
        small = sb.run(PROBE, memory_limit=200 * MiB, processes=7, timeout=4, open_files=20)
        assert small.ok, small
        report = json.loads(small.stdout)
        assert report["limits"]["RLIMIT_AS"] == [200 * MiB] * 2 and report["limits"]["RLIMIT_CPU"] == [5, 5]
        assert report["limits"]["RLIMIT_NOFILE"] == [20, 20]
        if as_root():  # not root, NPROC also counts the caller's own processes
            assert report["limits"]["RLIMIT_NPROC"] == [7, 7]
        sb.spares.settle()
        hog = "x = bytearray(300 * 1024 * 1024)\nprint('allocated')"  # slow to zero on a loaded VM: long timeouts
        assert sb.run(hog, memory_limit=200 * MiB, timeout=30).oom
        sb.spares.settle()
        big = sb.run(hog, memory_limit=640 * MiB, timeout=30)
        assert big.ok and "allocated" in big.stdout, big  # the spare's cgroup was raised to the run's limit
    finally:
        sb.close()


def test_a_stale_spare_is_thrown_away_not_used():
    sb = make("process", spares=1, max_age=0.0)
    try:
        sb.run("pass")
        sb.spares.settle()
        stocked = _waiting_pids(sb)
        assert stocked
        r = sb.run("import os\nprint(os.getpid())")
        assert r.ok and int(r.stdout) not in stocked
        sb.spares.settle()
        time.sleep(0.2)  # the discard runs on the background thread after the take
        assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in stocked)
    finally:
        sb.close()


def test_a_fresh_spare_is_used():
    """Shown on the process backend: bubblewrap's PID namespace hides the host pid from the program."""
    sb = make("process", spares=1)
    try:
        sb.run("pass")
        sb.spares.settle()
        stocked = _waiting_pids(sb)
        r = sb.run("import os\nprint(os.getpid())")
        assert r.ok and int(r.stdout) in stocked
    finally:
        sb.close()


def test_close_kills_and_reaps_every_spare(name):
    sb = make(name, spares=2)
    sb.run("pass")
    sb.spares.settle()
    stocked = _waiting_pids(sb)
    assert len(stocked) == 2
    sb.close()
    assert sb.spares.waiting() == 0
    assert not any(psutil.pid_exists(p) for p in stocked), "a spare was left running or unreaped"
    assert sb.run("print(1)").stdout == "1\n"  # a closed sandbox still runs (cold, then refills)
    sb.close()


HOST = """
import json, os, sys, psutil
from lopd_envs.sandbox import BACKENDS
sb = BACKENDS[sys.argv[1]](spares=2)
sb.run("pass")
sb.spares.settle()
print(json.dumps([p.pid for p in psutil.Process().children(recursive=True)]), flush=True)
if sys.argv[2] == "exit":
    os._exit(0)  # no atexit: the spares are not closed by their host
sys.stdin.read()  # wait to be killed
"""


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_spares_die_with_their_host(name, how):
    make(name)  # skips where the backend does not work
    host = subprocess.Popen([sys.executable, "-c", HOST, name, how], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            cwd=REPO, text=True)
    pids = json.loads(host.stdout.readline())
    assert pids, "the host had no spare processes to lose"
    if how == "kill":
        host.kill()
    host.wait(timeout=30)
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.05)
    assert not alive, f"spare processes outlived their host: {alive}"


def test_no_spares_means_every_run_starts_cold(name, monkeypatch):
    monkeypatch.setenv("LOPD_SANDBOX_SPARES", "0")
    sb = make(name)
    assert sb.run("print(2)").stdout == "2\n"
    sb.spares.settle()
    assert sb.spares.waiting() == 0


def test_a_forked_child_starts_its_own_spares(name):
    """A child forked from a host with spares (multiprocessing's fork start, gymnasium's async vector envs)
    must not take the parent's (they are not its children); both keep working."""
    sb = make(name, spares=1)
    try:
        sb.run("pass")
        sb.spares.settle()
        stocked = _waiting_pids(sb)
        pid = os.fork()
        if pid == 0:  # the child: exits with 0 only if its runs work and the parent's spares are left alone
            code = 1
            try:
                ok = sb.run("print(3)").stdout == "3\n" and not (_waiting_pids(sb) & stocked)
                sb.close()
                code = 0 if ok else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert _waiting_pids(sb) == stocked
        assert sb.run("print(4)").stdout == "4\n"
    finally:
        sb.close()


def test_a_dropped_sandbox_gives_its_spares_back(name):
    """No close(): once the sandbox is collected its spares are killed and reaped, and their uid slots
    (a pool of 256) and cgroups returned, so creating sandboxes in a loop cannot exhaust them."""
    import gc

    from lopd_envs.sandbox.base import UIDS
    from lopd_envs.sandbox.spares import drain

    make(name)
    gc.collect()
    drain()  # earlier tests' discards done: the count of free slots is stable now
    free = len(UIDS._free)
    pids: set[int] = set()
    for _ in range(3):
        sb = make(name, spares=2)
        sb.run("pass")
        sb.spares.settle()
        pids |= _waiting_pids(sb)
        del sb
        gc.collect()
    drain()
    assert len(UIDS._free) == free, "uid slots of dropped sandboxes' spares were not returned"
    assert not any(psutil.pid_exists(p) for p in pids), "spares of dropped sandboxes are still there"


def test_the_stock_follows_the_runs_in_flight(name, monkeypatch):
    """Unset LOPD_SANDBOX_SPARES: as many spares per key as runs were seen at once (a pool of N workers
    finds N), at least two."""
    from concurrent.futures import ThreadPoolExecutor

    from lopd_envs.sandbox.spares import MIN_SPARES

    monkeypatch.delenv("LOPD_SANDBOX_SPARES", raising=False)
    sb = make(name)
    try:
        sb.run("pass")
        sb.spares.settle()
        assert sb.spares.waiting() == MIN_SPARES
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda k: sb.run(f"import time\ntime.sleep(1)\nprint({k})"), range(4)))
        assert [r.stdout for r in results] == [f"{k}\n" for k in range(4)]
        sb.spares.settle()
        assert sb.spares.peak == 4 and sb.spares.waiting() == 4
    finally:
        sb.close()


def test_the_spare_bootstrap_reads_exactly_its_arguments(tmp_path):
    """The arguments come first on stdin; the program gets the rest untouched. Cut short (the host closed
    the pipe or died), the bootstrap ends with 125, which no run can read as a success."""
    from lopd_envs.sandbox.base import SPARE_BOOTSTRAP, Limits, spare_arguments

    program = tmp_path / "main.py"
    program.write_text("import sys\nprint(repr(sys.stdin.buffer.read()), sys.argv)")
    head = spare_arguments([*Limits().rlimit_args(), str(program), "extra"])
    argv = [sys.executable, "-I", "-S", "-c", SPARE_BOOTSTRAP]
    done = subprocess.run(argv, input=head + b"\x00rest\n", capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout.decode() == f"b'\\x00rest\\n' ['{program}', 'extra']\n", done
    for cut in (b"", head[:2], head[:-1]):
        assert subprocess.run(argv, input=cut, capture_output=True, timeout=60).returncode == 125


def test_a_spare_never_waits_for_a_uid_slot():
    """The background thread also runs the discards that free slots: a spare start that waited for one
    could wait forever. With every slot taken it gives up at once (runs themselves still wait)."""
    from lopd_envs.sandbox.base import UIDS
    from lopd_envs.sandbox.spares import Command, start_spare

    if not as_root():
        pytest.skip("SKIPPED: uid slots are used only when the caller is root")
    held = []
    try:
        while (uid := UIDS.try_acquire()) is not None:
            held.append(uid)
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="uid slot"):
            start_spare(lambda folder: Command(["/bin/true"]), LIMITS, key=None, waiting=True)
        assert time.monotonic() - start < 1
    finally:
        for uid in held:
            UIDS.release(uid)

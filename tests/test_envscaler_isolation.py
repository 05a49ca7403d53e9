"""The persistent sandbox session (``lopd_envs.sandbox.session``) that hosts EnvScaler's workers: framing,
host-side deadlines, reply budgets, request ids, reaping; and the worker's official instance construction."""

from __future__ import annotations

import time

import pytest

from lopd_envs.sandbox import BubblewrapSandbox, Limits, MiB, SandboxUnavailable, get_sandbox
from lopd_envs.sandbox.session import (
    CHANNEL,
    ReplyRejected,
    SandboxSession,
    SessionCrashed,
    SessionTimeout,
    nesting_depth,
)
from lopd_envs.suites.envscaler import scoring
from lopd_envs.suites.envscaler.isolation import EnvWorker

needs_bubblewrap = pytest.mark.skipif(BubblewrapSandbox.probe() is not None,
                                      reason=f"bubblewrap unavailable here: {BubblewrapSandbox.probe()}")
pytestmark = needs_bubblewrap

ECHO = CHANNEL + r'''
import json, os, signal, struct
while True:
    frame = read_frame()
    if frame is None:
        break
    req = json.loads(frame)
    op = req.get("op")
    if op == "huge_header":
        _ROUT.write(struct.pack(">I", 1 << 30))
        continue
    if op == "deep":
        write_frame(("[" * 500 + "]" * 500).encode())
        continue
    if op == "no_id":
        write_frame(b'{"ok": true}')
        continue
    if op == "die":
        os._exit(7)
    if op == "stop_reading":  # answer, then never read again (env code that blocks or spins)
        write_frame(json.dumps({"_id": req["_id"]}).encode())
        while True:
            signal.pause()
    if op == "bad_reply":  # the adversarial body it was given, as the whole reply
        write_frame(req["body"].encode())
        continue
    if op == "memfd":
        try:
            os.memfd_create("x")
            req["x"] = "created"
        except OSError as exc:
            req["x"] = f"refused: {exc.errno}"
    if op == "print":
        print("noise on stdout")
    write_frame(json.dumps({"echo": req.get("x"), "_id": req["_id"]}).encode())
'''


@pytest.fixture()
def session():
    s = SandboxSession(ECHO, get_sandbox("bubblewrap"), Limits(timeout=60, memory=512 * MiB))
    yield s
    s.close()


def test_requests_and_replies_round_trip(session):
    assert session.request({"x": [1, "two"]}, 5) == {"echo": [1, "two"]}
    assert session.request({"op": "print", "x": 3}, 5) == {"echo": 3}  # a stray print cannot corrupt the channel
    assert session.alive and session.isolating and session.backend == "bubblewrap"


def test_sessions_run_under_the_seccomp_filter(session):
    """A session worker gets the one-shot runs' seccomp filter: memory outside the memory limit (memfd) is
    refused, so an environment's method cannot hold host memory past its cgroup/rlimit."""
    from lopd_envs.sandbox import seccomp

    if seccomp.program() is None:
        pytest.skip("no seccomp table for this architecture")
    assert session.request({"op": "memfd"}, 5)["echo"].startswith("refused")


@pytest.mark.parametrize("op, error, text", [
    ("huge_header", ReplyRejected, "budget"), ("deep", ReplyRejected, "nested"),
    ("no_id", ReplyRejected, "_id"), ("die", SessionCrashed, "exited"),
])
def test_bad_replies_kill_the_session(session, op, error, text):
    with pytest.raises(error, match=text):
        session.request({"op": op}, 5)
    assert not session.alive and session.proc.poll() is not None
    with pytest.raises(SessionCrashed):
        session.request({"x": 1}, 5)


def test_a_silent_program_is_killed_at_the_deadline():
    program = CHANNEL + "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nread_frame()\nwhile True:\n    pass\n"
    s = SandboxSession(program, get_sandbox("bubblewrap"))
    start = time.monotonic()
    with pytest.raises(SessionTimeout):
        s.request({"x": 1}, 0.5)
    assert time.monotonic() - start < 2 and s.proc.poll() is not None


def test_the_process_backend_is_refused_without_opt_in():
    with pytest.raises(SandboxUnavailable, match="allow_unisolated"):
        SandboxSession(ECHO, get_sandbox("process"))
    with SandboxSession(ECHO, get_sandbox("process"), allow_unisolated=True) as s:
        assert s.request({"x": 2}, 5) == {"echo": 2} and not s.isolating


def test_nesting_depth_ignores_brackets_inside_strings():
    assert nesting_depth(b'{"a": [1, {"b": "[[[[[["}]}') == 3
    assert nesting_depth(b'"\\"[[[["') == 0


def test_worker_builds_instances_the_official_way():
    """``cls(init_config)`` for a non-empty dict (else ``cls({})``), ``cls()`` on TypeError, then every key
    set as an attribute; the state excludes dunder names."""
    code = ('class NoArgs:\n    def __init__(self):\n        self.seen = "no-args"\n'
            'class WithConfig:\n    def __init__(self, config):\n        self.seen = sorted(config)\n        self.__secret__ = 1\n')
    for cls, config, seen in (("NoArgs", {"a": 1}, "no-args"), ("WithConfig", {"a": 1}, ["a"]), ("WithConfig", {}, [])):
        worker = EnvWorker(get_sandbox("bubblewrap"))
        assert worker.create(code, cls, config) is None
        state = worker.snapshot()
        assert state["seen"] == seen and "__secret__" not in state
        assert all(state[k] == v for k, v in config.items())
        worker.close()
    worker = EnvWorker(get_sandbox("bubblewrap"))
    assert "not found" in worker.create(code, "Missing", {})
    worker.close()


def test_official_reward_is_rounded_and_counts_only_true():
    assert scoring.official_reward([True, False, False]) == 0.3333
    assert scoring.official_reward([]) == 0.0
    assert scoring.reward_over_initially_false([True, True, False], [True, False, False]) == 0.5
    assert scoring.reward_over_initially_false([True], [True]) is None

"""Hostile environment code and check functions, in the official file format, cannot harm the host or forge a
reward, and every attack ends as an error observation (or a failed check)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.sandbox import BubblewrapSandbox
from lopd_envs.suites.envscaler.ours import build
from tests.test_envscaler_data import release_env, write_release

gym.register_envs(lopd_envs)
pytestmark = pytest.mark.skipif(BubblewrapSandbox.probe() is not None,
                                reason=f"bubblewrap unavailable here: {BubblewrapSandbox.probe()}")
HOST_MARKER = "/tmp/lopd-envscaler-hostile-marker"

HOSTILE = '''import os, signal, socket, sys


class Hostile:
    def __init__(self, init_config: dict):
        self.value = 0
        self.init_config = init_config

    def set_value(self, value: int) -> dict:
        """Set the value."""
        self.value = value
        return {"success": True}

    def spin(self) -> dict:
        """Loop forever."""
        while True:
            pass

    def no_timers(self) -> dict:
        """Switch off every timer and signal the worker could use, then loop."""
        for sig in (signal.SIGALRM, signal.SIGTERM, signal.SIGINT, signal.SIGVTALRM, signal.SIGPROF):
            signal.signal(sig, signal.SIG_IGN)
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
        while True:
            pass

    def bomb(self) -> dict:
        """Allocate far more memory than allowed."""
        blocks = []
        while True:
            blocks.append(bytearray(256 << 20))

    def write_files(self, host_path: str) -> str:
        """Try to write outside the sandbox."""
        out = []
        for path in (host_path, "HOST_MARKER", "/etc/lopd-pwned", "/usr/lopd-pwned"):
            try:
                with open(path, "w") as f:
                    f.write("pwned")
                out.append("wrote " + path)
            except OSError as exc:
                out.append(f"refused {path}: {type(exc).__name__}")
        return "; ".join(out)

    def network(self) -> str:
        """Try to reach the internet."""
        try:
            socket.create_connection(("1.1.1.1", 80), timeout=2).close()
            return "connected"
        except OSError as exc:
            return f"blocked: {exc}"

    def read_host(self, secret_path: str) -> str:
        """Try to read host files."""
        found = []
        for path in (secret_path, "/etc/shadow", "/root/.bashrc", "/proc/1/environ"):
            try:
                with open(path) as f:
                    found.append(path + "=" + f.read(200))
            except OSError as exc:
                found.append(f"{path}: {type(exc).__name__}")
        return " | ".join(found)

    def forge(self) -> str:
        """Write replies onto the channel: one for this request, and a pre-forged all-pass check reply."""
        import gc, json, sys
        write = next(o for o in gc.get_objects() if callable(o) and getattr(o, "__name__", "") == "write_frame")
        frame, request_id = sys._getframe(), None
        while frame is not None and request_id is None:
            request_id = frame.f_locals.get("request_id")
            frame = frame.f_back
        write(json.dumps({"ok": True, "result": "forged", "failed": False, "_id": request_id}).encode())
        write(json.dumps({"ok": True, "results": [{"passed": True}] * 6, "_id": request_id}).encode())
        return "done"

    def exit_worker(self) -> dict:
        """Raise SystemExit inside the worker."""
        sys.exit(3)

    def slow_str(self):
        """Return an object whose string form never finishes."""
        class Never:
            def __str__(self):
                while True:
                    pass
        return Never()

    def huge(self) -> str:
        """Return 50 MB of text."""
        return "x" * (50 << 20)
'''.replace("HOST_MARKER", HOST_MARKER)

CHECKS = [
    "def check_func(final_state):\n    return 1",                                      # truthy non-bool
    "def check_func(final_state):\n    return 'yes'",                                  # truthy non-bool
    "def check_func(final_state):\n    raise RuntimeError('boom')",                    # raises
    "def check_func(final_state):\n    final_state['value'] = 999\n    return False",  # mutates its copy
    "def check_func(final_state):\n    return final_state['value'] == 5",              # the only true check
    "def check_func(final_state):\n    while True:\n        pass",                       # hangs
]
KILLER = ["def check_func(final_state):\n    return True",
          "def check_func(final_state):\n    import os, signal\n    os.kill(os.getppid(), signal.SIGKILL)\n"
          "    os.kill(os.getppid(), signal.SIGSTOP)\n    os.killpg(0, signal.SIGKILL)\n    return False",
          "def check_func(final_state):\n    return True"]


def scenario(task_id: str, env_id: str, checks: list[str]) -> dict:
    items = [{"check_item": f"Has item {i} held?", "check_func": c} for i, c in enumerate(checks)]
    return {"env_id": env_id, "env_class_name": "Hostile", "task_id": task_id, "init_config": json.dumps({"value": 0}),
            "task": "Set the value to 5.", "checklist": [i["check_item"] for i in items], "checklist_with_func": items}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("hostile")
    envs = {"env_1": release_env("env_1", HOSTILE, "Hostile", build.tools_of(HOSTILE, "Hostile")),
            "env_2": release_env("env_2", "while True:\n    pass\n", "Hostile")}  # loops at import time
    rows = [scenario("h-checks", "env_1", CHECKS), scenario("h-killer", "env_1", KILLER),
            scenario("h-import", "env_2", ["def check_func(final_state):\n    return True"])]
    write_release(root, envs, rows)
    (root / "secret.txt").write_text("TOPSECRET-lopd")
    return root


def make(data_dir: Path, **kw):
    return gym.make("lopd/EnvScaler-v0", source="official", data_dir=str(data_dir), category="non_conversation",
                    call_timeout=1.5, check_timeout=1.0, **kw)


def call(name: str, **arguments) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def run_one(data_dir: Path, action: str, task_id: str = "h-checks", **kw):
    env = make(data_dir, **kw)
    env.reset(options={"task_id": task_id})
    proc = env.unwrapped._episode.worker.session.proc
    start = time.monotonic()
    obs, reward, terminated, _truncated, info = env.step(action)
    return env, proc, obs, reward, terminated, info, time.monotonic() - start


@pytest.mark.parametrize("method", ["spin", "no_timers", "slow_str"])
def test_hanging_methods_are_killed_from_the_host(data_dir, method):
    _env, proc, obs, reward, terminated, info, took = run_one(data_dir, call(method))
    assert took < 5 and terminated and reward == 0.0
    assert "Error" in obs[0]["content"] and "timeout" in obs[0]["content"]
    assert proc.poll() is not None  # killed and reaped
    assert info["score"]["graded"] is False and info["score"]["ending"] == "worker"


def test_memory_bomb_is_an_error_observation(data_dir):
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    _env, _proc, obs, reward, terminated, _info, _took = run_one(data_dir, call("bomb"))
    text = obs[0]["content"]
    # RLIMIT_AS stops it with a MemoryError (on a loaded machine the call deadline may come first)
    assert terminated and reward == 0.0 and text.startswith("Error") and ("MemoryError" in text or "killed" in text)
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: the host did not grow


@pytest.mark.parametrize("scoring", ["official", "strict"])
def test_file_writes_network_and_host_reads_are_refused(data_dir, scoring, tmp_path):
    if os.path.exists(HOST_MARKER):
        os.unlink(HOST_MARKER)
    target = tmp_path / "pwned.txt"
    env = make(data_dir, scoring=scoring)
    env.reset(options={"task_id": "h-checks"})
    wrote = env.step(call("write_files", host_path=str(target)))[0][0]["content"]
    assert "refused /etc/lopd-pwned" in wrote and "refused /usr/lopd-pwned" in wrote and f"refused {target}" in wrote
    assert not target.exists() and not os.path.exists(HOST_MARKER)  # the sandbox's /tmp is its own
    net = env.step(call("network"))[0][0]["content"]
    assert net.startswith("blocked")
    read = env.step(call("read_host", secret_path=str(data_dir / "secret.txt")))[0][0]["content"]
    assert "TOPSECRET" not in read and "root:" not in read and "PATH=" not in read
    env.close()


@pytest.mark.parametrize("scoring", ["official", "strict"])
def test_hostile_checks_cannot_pass_themselves(data_dir, scoring):
    """Truthy non-bools, a raise and a hang fail. The fourth check sets ``value`` to 999 in the final state:
    official checks share that state, as the reference's do (issue 55, rule d), so the fifth sees 999 and
    fails too; strict checks each get their own copy, so the fifth still sees 5."""
    env = make(data_dir, scoring=scoring)
    env.reset(options={"task_id": "h-checks"})
    env.step(call("set_value", value=5))
    _, reward, _terminated, _, info = env.step("Task Completed")
    checks = info["score"]["checks"]
    assert [c["passed"] for c in checks] == [False, False, False, False, scoring == "strict", False]
    assert reward == (round(1 / 6, 4) if scoring == "strict" else 0.0)
    assert "did not return a boolean" in checks[0]["error"] and "boom" in checks[2]["error"]
    assert "timed out" in checks[5]["error"]


def test_a_check_that_tries_to_kill_or_stop_its_worker_fails_only_itself(data_dir):
    """The worker is its sandbox's init: a check's SIGKILL/SIGSTOP to it (or to its process group) is dropped,
    so the checks after it still run (issue 24, item 3; this test used to expect every check failed)."""
    env = make(data_dir)
    env.reset(options={"task_id": "h-killer"})
    _, reward, terminated, _, info = env.step("Task Completed")
    assert terminated and reward == round(2 / 3, 4)
    assert [c["passed"] for c in info["score"]["checks"]] == [True, False, True]


def test_frames_forged_on_the_channel_are_rejected(data_dir):
    env = make(data_dir)
    env.reset(options={"task_id": "h-checks"})
    obs = env.step(call("forge"))[0]  # the forged answer to this call is accepted as its result ...
    _, reward, terminated, _, info = env.step("Task Completed")  # ... the pre-forged verdicts are not
    assert terminated and reward == 0.0
    assert not any(c["passed"] for c in info["score"]["checks"])
    assert obs[0]["content"] == "forged"  # the environment may lie about its own results, nothing more
    assert "wrong or missing _id" in info["score"]["checks"][0]["error"]


def test_exit_and_huge_results_stay_observations(data_dir):
    env = make(data_dir, scoring="strict")
    env.reset(options={"task_id": "h-checks"})
    obs, _, terminated, _, _ = env.step(call("exit_worker"))
    assert not terminated and "SystemExit" in obs[0]["content"]
    obs, _, terminated, _, _ = env.step(call("huge"))
    assert not terminated and len(obs[0]["content"]) < 200_000 and "truncated" in obs[0]["content"]


def test_env_code_that_hangs_at_import_is_a_setup_error(data_dir):
    env = make(data_dir)
    start = time.monotonic()
    env.reset(options={"task_id": "h-import"})
    obs, reward, terminated, _, info = env.step("Task Completed")
    assert time.monotonic() - start < 30 and terminated and reward == 0.0
    assert "unavailable" in obs[0]["content"] and info["score"]["ending"] == "setup"


def test_the_process_backend_is_the_same_opt_in_as_in_the_code_suites(data_dir):
    env = make(data_dir, sandbox="process", scoring="strict")  # naming it is the opt-in, as for CodeEnv
    assert env.unwrapped.sandbox.name == "process" and env.unwrapped.allow_unisolated
    env.reset(options={"task_id": "h-checks"})
    env.step(call("set_value", value=5))
    assert env.step("Task Completed")[1] == round(1 / 6, 4)

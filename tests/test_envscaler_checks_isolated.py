"""EnvScaler's check functions are isolated from each other (issue 24, items 3 and 4): each has its own
deadline, a failing, hanging or hostile check fails only itself, and each starts from a clean private
``/tmp`` and ``/dev/shm`` with nothing an earlier check started still running. Hostile checks in the
official file format, played through ``gym.make``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.sandbox import BubblewrapSandbox, cgroup
from lopd_envs.suites.envscaler.ours import build
from tests.test_envscaler_data import CLASS_CODE, release_env, write_release

gym.register_envs(lopd_envs)
pytestmark = pytest.mark.skipif(BubblewrapSandbox.probe() is not None,
                                reason=f"bubblewrap unavailable here: {BubblewrapSandbox.probe()}")

GOOD = "def check_func(final_state):\n    return True"
HANG = "def check_func(final_state):\n    while True:\n        pass"
WRITE_TMP = ("def check_func(final_state):\n    open('/tmp/left-by-a', 'w').write('a')\n"
             "    open('/dev/shm/left-by-a', 'w').write('a')\n    import os\n    os.makedirs('/tmp/d/e')\n"
             "    os.chmod('/tmp/d', 0)\n    return True")
SEES_NOTHING = ("def check_func(final_state):\n    import os, time\n    time.sleep(0.6)\n"
                "    return os.listdir('/tmp') == [] and os.listdir('/dev/shm') == []")
FLOOD = ("def check_func(final_state):\n    import os\n    i = 0\n    while True:\n"
         "        os.close(os.open(f'/tmp/{i}', os.O_CREAT | os.O_WRONLY))\n        i += 1")
DAEMON = ("def check_func(final_state):\n    import os, time\n    if os.fork() == 0:\n        os.setsid()\n"
          "        time.sleep(0.3)\n        open('/tmp/late', 'w').write('x')\n        os._exit(0)\n    return True")
FORK_BOMB = ("def check_func(final_state):\n    import os, time\n    while True:\n        try:\n"
             "            if os.fork() == 0:\n                time.sleep(60)\n                os._exit(0)\n"
             "        except OSError:\n            break\n    return True")
#: A sibling that needs a process of its own (after the bomb has had time to use up the budget).
FORKS = ("def check_func(final_state):\n    import os, time\n    time.sleep(0.5)\n    pid = os.fork()\n"
         "    if pid == 0:\n        os._exit(0)\n    os.waitpid(pid, 0)\n    return True")
MEMORY_HOG = ("def check_func(final_state):\n    import os, time\n    for _ in range(8):\n        if os.fork() == 0:\n"
              "            block = bytearray(300 << 20)\n            for i in range(0, len(block), 4096):\n"
              "                block[i] = 1\n            time.sleep(60)\n    time.sleep(60)")
FORGED_VERDICT = ("def check_func(final_state):\n    import os\n    for fd in range(3, 64):\n        try:\n"
                  "            os.write(fd, b'[1, 2]')\n        except OSError:\n            pass\n    os._exit(0)")


def scenario(task_id: str, checks: list[str]) -> dict:
    items = [{"check_item": f"check {i}", "check_func": c} for i, c in enumerate(checks)]
    return {"env_id": "env_1", "env_class_name": "CounterService", "task_id": task_id, "init_config": json.dumps({}),
            "task": "Do nothing.", "checklist": [i["check_item"] for i in items], "checklist_with_func": items}


SCENARIOS = {
    "hang-first": [HANG, GOOD, GOOD, GOOD],
    "tmp": [WRITE_TMP, SEES_NOTHING],
    "daemon": [DAEMON, SEES_NOTHING],
    "flood": [FLOOD, SEES_NOTHING, GOOD],
    "fork-bomb": [FORK_BOMB, FORKS, FORKS],
    "memory": [MEMORY_HOG, GOOD, GOOD],
    "forged-verdict": [FORGED_VERDICT, GOOD],
}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("checks")
    envs = {"env_1": release_env("env_1", CLASS_CODE, "CounterService", build.tools_of(CLASS_CODE, "CounterService"))}
    write_release(root, envs, [scenario(task_id, checks) for task_id, checks in SCENARIOS.items()])
    return root


def graded(data_dir: Path, task_id: str, **kw) -> tuple[float, list[dict], float]:
    env = gym.make("lopd/EnvScaler-v0", source="official", data_dir=str(data_dir), category="non_conversation",
                   call_timeout=2.0, check_timeout=1.0, prestart=False, **kw)
    try:
        env.reset(options={"task_id": task_id})
        start = time.monotonic()
        _, reward, terminated, _, info = env.step("Task Completed")
        assert terminated and info["score"]["graded"], info["score"]
        return reward, info["score"]["checks"], time.monotonic() - start
    finally:
        env.close()


def test_a_hanging_check_fails_only_itself(data_dir):
    reward, checks, took = graded(data_dir, "hang-first")
    assert [c["passed"] for c in checks] == [False, True, True, True] and reward == 0.75
    assert "timed out" in checks[0]["error"] and took < 8


@pytest.mark.parametrize("task_id", ["tmp", "daemon"])
def test_each_check_starts_from_a_clean_private_tmp(data_dir, task_id):
    """What one check writes to /tmp or /dev/shm (itself or through a process it leaves running) is gone
    before the next one starts."""
    _reward, checks, _ = graded(data_dir, task_id)
    assert [c["passed"] for c in checks] == [True, True], checks


def test_a_check_that_floods_tmp_with_files_costs_no_sibling(data_dir):
    """Files created for a whole deadline are removed before the next check, within the host's budget."""
    _reward, checks, _ = graded(data_dir, "flood")
    assert [c["passed"] for c in checks] == [False, True, True], checks


def test_a_fork_bomb_leaves_the_next_checks_their_process_budget(data_dir):
    _reward, checks, _ = graded(data_dir, "fork-bomb")
    assert [c["passed"] for c in checks][1:] == [True, True], checks


@pytest.mark.skipif(cgroup.layout() is None, reason="per-sandbox memory cgroups need root and a writable cgroupfs")
def test_a_check_that_fills_the_sandbox_memory_fails_only_itself(data_dir):
    """Eight children of 300 MiB each are over the sandbox's 1 GiB: the kernel kills them, not the worker."""
    _reward, checks, _ = graded(data_dir, "memory")
    assert [c["passed"] for c in checks] == [False, True, True], checks


def test_a_check_writing_a_malformed_verdict_fails_only_itself(data_dir):
    _reward, checks, _ = graded(data_dir, "forged-verdict")
    assert [c["passed"] for c in checks] == [False, True], checks

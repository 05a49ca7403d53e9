"""Every id can be made in a fresh interpreter, both with the module prefix and after register_envs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from lopd_envs.registration import ENV_ENTRY_POINTS

# lopd's own data, asked for by name, where the official data is not on this machine
OFFLINE = {"lopd/EnvScaler-v0": {"source": "ours"}, "lopd/LiveCodeBench-v0": {"source": "bundled"}}


@pytest.mark.parametrize("env_id", sorted(ENV_ENTRY_POINTS))
def test_make_with_module_prefix_in_a_fresh_interpreter(env_id):
    code = ("import gymnasium as gym\n"
            f"env = gym.make('lopd_envs:{env_id}', **{OFFLINE.get(env_id, {})!r})\n"
            "obs, info = env.reset(seed=0)\n"
            "assert obs and info['task_id']\n"
            "print(info['task_id'])\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip()


def test_register_envs_convention():
    import gymnasium as gym

    import lopd_envs

    gym.register_envs(lopd_envs)
    assert set(ENV_ENTRY_POINTS) <= set(gym.registry)

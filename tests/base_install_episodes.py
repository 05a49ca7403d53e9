"""Run inside a venv that holds lopd's base install only (``pip install lopd``, no extras): one gold episode
each of BFCL-v3, ACEBench and HumanEval+, with torch not importable. Exits non-zero, with the reason, if any
episode does not reach reward 1 or if torch or the trainer's stack is importable. Run by
``tests/test_install_base.py`` and by ``.ci/run``; not collected by pytest (no ``test_`` prefix)."""

from __future__ import annotations

import importlib.util
import json
import sys

import gymnasium as gym

import lopd_envs

EPISODES = {  # id -> (make kwargs, task id); each answered with the env's own reference answer
    "lopd/BFCLv3-v0": ({"category": "simple"}, "simple_0"),
    "lopd/ACEBench-v0": ({"category": "normal_atom_bool", "language": "en"}, "normal_atom_bool_1"),
    "lopd/HumanEvalPlus-v0": ({"allow_unisolated": True}, "HumanEval/0"),
}
TRAINING_STACK = ("torch", "peft", "accelerate", "sentence_transformers", "hnswlib")


def main() -> int:
    present = [m for m in TRAINING_STACK if _importable(m)]
    if present:
        print(f"FAIL: the base install must not provide {present}", file=sys.stderr)
        return 1
    gym.register_envs(lopd_envs)
    rewards = {}
    for env_id, (kwargs, task_id) in EPISODES.items():
        env = gym.make(env_id, **kwargs)
        env.reset(options={"task_id": task_id})
        answer = env.unwrapped.reference_answer(env.unwrapped.task)
        _, reward, terminated, truncated, info = env.step(answer)
        rewards[env_id] = reward
        env.close()
        if reward != 1.0 or not (terminated or truncated):
            print(f"FAIL: {env_id} {task_id}: reward {reward} on its reference answer ({info.get('score')})",
                  file=sys.stderr)
            return 1
    print(json.dumps({"rewards": rewards, "torch_importable": False}))
    return 0


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing (e.g. lopd_train is absent)
        return False


if __name__ == "__main__":
    sys.exit(main())

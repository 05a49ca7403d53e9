"""lopd/BFCLv3-v0 as a Gymnasium env: the shared conformance checks, names, categories, missing data."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.suites.bfcl import CATEGORIES
from tests.conformance import Conformance

gym.register_envs(lopd_envs)
pytestmark = pytest.mark.usefixtures("bfcl_data")


class TestSimpleConformance(Conformance):
    env_id = "lopd/BFCLv3-v0"
    kwargs = {"category": "simple"}

    def text_action(self, info):
        return f"[{self.first_tool(info)}(x=1)]"


class TestJavaConformance(TestSimpleConformance):
    kwargs = {"category": "java"}


class TestMultiTurnConformance(Conformance):
    env_id = "lopd/BFCLv3-v0"
    kwargs = {"category": ["multi_turn_base", "multi_turn_miss_func"]}

    def structured_action(self, info):
        return {"role": "assistant", "content": "", "tool_calls": [{"name": "pwd", "arguments": {}}]}


class TestAllCategoriesConformance(Conformance):
    env_id = "lopd/BFCLv3-v0"
    kwargs = {"category": "all", "sanitize_tool_names": True}


def test_all_has_4441_tasks_with_official_ids():
    env = gym.make("lopd/BFCLv3-v0").unwrapped
    ids = [t.task_id for t in env.tasks]
    assert len(ids) == len(set(ids)) == 4441
    assert {"simple_30", "live_multiple_12-4-4", "multi_turn_base_75", "java_0"} <= set(ids)


def test_groups_and_lists_of_categories():
    env = gym.make("lopd/BFCLv3-v0", category=["java", "javascript"]).unwrapped
    assert len(env.tasks) == 150
    assert len(gym.make("lopd/BFCLv3-v0", category="multi_turn").unwrapped.tasks) == 800
    with pytest.raises(ValueError, match="multi_turn_base"):
        gym.make("lopd/BFCLv3-v0", category="multi_turn_bas")


def test_dotted_names_are_offered_and_accepted_in_both_spellings():
    env = gym.make("lopd/BFCLv3-v0", category="simple").unwrapped
    task = next(t for t in env.tasks if t.task_id == "simple_363")  # restaurant_search.find_closest
    _, info = env.reset(options={"task_id": task.task_id})
    assert info["tools"][0]["function"]["name"] == "restaurant_search.find_closest"
    sanitized = gym.make("lopd/BFCLv3-v0", category="simple", sanitize_tool_names=True).unwrapped
    _, info = sanitized.reset(options={"task_id": task.task_id})
    assert info["tools"][0]["function"]["name"] == "restaurant_search_find_closest"
    for name in ("restaurant_search.find_closest", "restaurant_search_find_closest"):
        env.reset(options={"task_id": task.task_id})
        call = {"name": name, "arguments": {"location": "Boston", "cuisine": "Sushi", "amenities": ["Patio"]}}
        _, reward, *_ = env.step({"role": "assistant", "content": "", "tool_calls": [call]})
        assert reward == 1.0, name


def test_the_official_prompt_opens_every_task():
    env = gym.make("lopd/BFCLv3-v0", category="java").unwrapped
    obs, info = env.reset(options={"task_id": "java_0"})
    assert obs[0]["role"] == "system" and obs[0]["content"].startswith("You are an expert in composing functions.")
    assert "Java 8 SDK syntax" in obs[0]["content"] and obs[-1]["role"] == "user"
    assert info["tools"][0]["function"]["parameters"]["properties"]["controller"]["type"] == "string"


def test_info_score_explains_a_failure():
    env = gym.make("lopd/BFCLv3-v0", category="simple").unwrapped
    env.reset(options={"task_id": "simple_0"})
    _, reward, terminated, _, info = env.step("[calculate_triangle_area(base='ten', height=5)]")
    assert terminated and reward == 0.0
    assert info["score"]["error_type"] == "type_error:simple" and "base" in info["score"]["error"][0]
    assert info["trace"].steps[0].action["name"] == "calculate_triangle_area"


def test_offline_without_data_is_one_clear_error(tmp_path):
    env = {**os.environ, "LOPD_OFFLINE": "1", "LOPD_DATA_DIR": str(tmp_path / "data"),
           "LOPD_CACHE": str(tmp_path / "cache")}
    code = ("import gymnasium as gym, lopd_envs\n"
            "gym.register_envs(lopd_envs)\n"
            "try:\n    gym.make('lopd/BFCLv3-v0', category='simple')\n"
            "except Exception as e:\n    print(type(e).__name__); print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("AssetMissing")
    for needle in ("data/BFCL_v3_simple.json", "bfcl-eval==2025.8.6.2", "LOPD_DATA_DIR", "LOPD_OFFLINE"):
        assert needle in out.stdout, needle


def test_every_category_makes_in_a_fresh_interpreter():
    code = ("import gymnasium as gym\n"
            f"for c in {list(CATEGORIES)!r}:\n"
            "    env = gym.make('lopd_envs:lopd/BFCLv3-v0', category=c)\n"
            "    obs, info = env.reset(seed=0)\n"
            "    assert info['category'] == c and obs, c\n"
            "print('ok', len(gym.make('lopd_envs:lopd/BFCLv3-v0', category='all').unwrapped.tasks))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, cwd="/")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok 4441"

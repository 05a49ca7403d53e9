"""LiveCodeBench: the official row format, safe private-test decoding, and its scoring rules."""

from __future__ import annotations

import base64
import json
import pickle
import zlib

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.sandbox import available_backends
from lopd_envs.suites.livecodebench import data as lcb_data
from lopd_envs.suites.livecodebench import judge as lcb_judge

gym.register_envs(lopd_envs)
needs_sandbox = pytest.mark.skipif(all(v is not None for v in available_backends().values()),
                                   reason="no sandbox backend works here")

SOLUTIONS = {
    "lopd_s001": "a, b = map(int, input().split())\nprint(a + b)",
    "lopd_s002": "import sys\nn = int(sys.stdin.readline())\ns = sys.stdin.readline().strip()\nprint(sum(c in 'aeiou' for c in s))",
    "lopd_s003": "n = int(input())\na = list(map(int, input().split()))\nprint(f'{sum(a) / n:.6f}')",
    "lopd_f001": "class Solution:\n    def countPairs(self, nums: List[int], target: int) -> int:\n"
                 "        return sum(nums[i] + nums[j] == target for i in range(len(nums)) for j in range(i + 1, len(nums)))",
    "lopd_f002": "class Solution:\n    def reverseWords(self, s: str) -> str:\n        return ' '.join(reversed(s.split()))",
    "lopd_f003": "class Solution:\n    def sortedSquares(self, nums: List[int]) -> List[int]:\n"
                 "        return tuple(sorted(x * x for x in nums))  # a tuple is accepted as a list",
}


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


@pytest.fixture(scope="module")
def env():
    return gym.make("lopd/LiveCodeBench-v0", source="samples")


def step(env, task_id, text):
    env.reset(options={"task_id": task_id})
    _, reward, terminated, _, info = env.step(text)
    assert terminated
    return reward, info["score"]


# ------------------------------------------------------------------------------ the format

def test_bundled_samples_are_in_the_official_format():
    rows = [json.loads(line) for line in lcb_data.SAMPLES.read_text().splitlines()]
    fields = {"question_title", "question_content", "platform", "question_id", "contest_id", "contest_date",
              "starter_code", "difficulty", "public_test_cases", "private_test_cases", "metadata"}
    assert rows and all(set(r) == fields for r in rows)
    kinds = {lcb_data.problem_from_row(r)["kind"] for r in rows}
    assert kinds == {"stdin", "functional"}


def test_private_tests_decode_from_json_and_from_compressed_pickle():
    tests = [{"input": "1\n", "output": "2\n", "testtype": "stdin"}]
    assert lcb_data.decode_private_tests(json.dumps(tests)) == tests
    assert lcb_data.decode_private_tests(lcb_data.encode_private_tests(tests)) == tests


class _Evil:
    def __reduce__(self):
        return (print, ("pwned by pickle",))


@pytest.mark.parametrize("payload", [_Evil(), {"not": "a string"}, [1, 2]])
def test_private_tests_never_run_pickled_code(payload, capsys):
    field = base64.b64encode(zlib.compress(pickle.dumps(payload))).decode()
    with pytest.raises((pickle.UnpicklingError, ValueError)):
        lcb_data.decode_private_tests(field)
    assert "pwned" not in capsys.readouterr().out


def test_release_versions_map_to_hub_files():
    assert lcb_data.release_files("release_v1") == ["test.jsonl"]
    assert lcb_data.release_files("release_v3") == ["test.jsonl", "test2.jsonl", "test3.jsonl"]
    assert lcb_data.release_files("v2") == ["test2.jsonl"]
    assert lcb_data.release_files("v1_v2") == ["test.jsonl", "test2.jsonl"]
    with pytest.raises(ValueError):
        lcb_data.release_files("latest")


def test_local_path_date_window_difficulty_and_categories(tmp_path):
    path = tmp_path / "test.jsonl"
    path.write_text(lcb_data.SAMPLES.read_text())
    all_ids = {t.task_id for t in gym.make("lopd/LiveCodeBench-v0", path=str(path)).unwrapped.tasks}
    assert len(all_ids) == 6
    window = gym.make("lopd/LiveCodeBench-v0", path=str(path), start_date="2024-07-01", end_date="2024-12-31")
    assert {t.task_id for t in window.unwrapped.tasks} == {"lopd_s002", "lopd_f001", "lopd_f002"}
    medium = gym.make("lopd/LiveCodeBench-v0", path=str(path), difficulty="medium")
    assert {t.task_id for t in medium.unwrapped.tasks} == {"lopd_s003", "lopd_f003"}
    functional = gym.make("lopd/LiveCodeBench-v0", path=str(path), category="functional")
    assert {t.category for t in functional.unwrapped.tasks} == {"functional"}


def test_prompt_shows_starter_code_or_stdin_format(env):
    obs, info = env.reset(options={"task_id": "lopd_f001"})
    assert "def countPairs" in obs[-1]["content"] and info["category"] == "functional"
    obs, _ = env.reset(options={"task_id": "lopd_s001"})
    assert "Read the inputs from stdin" in obs[-1]["content"]


# ------------------------------------------------------------------------------ comparisons

@pytest.mark.parametrize("got,want,ok", [
    ("8\n", "8", True), ("  8  \n\n", "8\n", True), ("2.5\n", "2.500000\n", True), ("1 2\n", "1  2", True),
    ("8\n9\n", "8\n", False), ("2.5000001", "2.500000", False), ("yes", "Yes", False), ("1e3", "1000", True),
])
def test_stdout_comparison_follows_livecodebench(got, want, ok):
    assert lcb_judge.stdout_matches(got, want)[0] is ok


def test_official_extraction_takes_the_last_fenced_block():
    text = "```python\nprint(1)\n```\nbetter:\n```python\nprint(2)\n```"
    assert lcb_judge.official_extract(text) == "print(2)"
    assert lcb_judge.official_extract("print(2)") == ""


# ---------------------------------------------------------------------------------- runs

@needs_sandbox
@pytest.mark.parametrize("task_id", sorted(SOLUTIONS))
@pytest.mark.parametrize("scoring", ["official", "strict"])
def test_reference_solutions_pass(task_id, scoring):
    env = gym.make("lopd/LiveCodeBench-v0", source="samples", scoring=scoring)
    reward, score = step(env, task_id, fenced(SOLUTIONS[task_id]))
    assert reward == 1.0 and all(r is True for r in score["results"]), score


@needs_sandbox
def test_wrong_answer_stops_at_the_first_failing_test(env):
    reward, score = step(env, "lopd_s001", fenced("a, b = map(int, input().split())\nprint(a - b)"))
    assert reward == 0.0 and score["results"] == [-2] and score["error_code"] == -2


@needs_sandbox
def test_runtime_error_and_compile_error(env):
    assert step(env, "lopd_f002", fenced("class Solution:\n    def reverseWords(self, s):\n        return 1 / 0"))[1][
        "results"] == [-4]
    reward, score = step(env, "lopd_f002", fenced("class Solution:\n    def reverseWords(self, s)\n"))
    assert reward == 0.0 and score["results"] == [-4]


@needs_sandbox
def test_time_limit_per_test():
    env = gym.make("lopd/LiveCodeBench-v0", source="samples", test_timeout=1)
    reward, score = step(env, "lopd_s001", fenced("while True:\n    pass"))
    assert reward == 0.0 and score["results"] == [-3]


@needs_sandbox
def test_stdin_buffer_fails_officially_but_works_in_strict():
    code = "import sys\na, b = map(int, sys.stdin.buffer.read().split())\nprint(a + b)"
    official = gym.make("lopd/LiveCodeBench-v0", source="samples")
    strict = gym.make("lopd/LiveCodeBench-v0", source="samples", scoring="strict")
    assert step(official, "lopd_s001", fenced(code))[0] == 0.0
    assert step(strict, "lopd_s001", fenced(code))[0] == 1.0


@needs_sandbox
def test_main_guard_is_run(env):
    code = "def main():\n    a, b = map(int, input().split())\n    print(a + b)\n\nif __name__ == '__main__':\n    main()"
    assert step(env, "lopd_s001", fenced(code))[0] == 1.0


@needs_sandbox
def test_unfenced_answer_fails_officially_and_is_read_in_strict():
    strict = gym.make("lopd/LiveCodeBench-v0", source="samples", scoring="strict")
    official = gym.make("lopd/LiveCodeBench-v0", source="samples")
    assert step(official, "lopd_s001", SOLUTIONS["lopd_s001"])[0] == 0.0
    assert step(strict, "lopd_s001", SOLUTIONS["lopd_s001"])[0] == 1.0


@needs_sandbox
def test_forged_records_on_stdout_do_not_pass(env):
    code = ("class Solution:\n    def countPairs(self, nums, target):\n"
            "        import os\n        for fd in range(3, 30):\n"
            "            try: os.write(fd, b'{\"i\":0,\"v\":2}\\n{\"end\":1}\\n')\n            except OSError: pass\n"
            "        return -1")
    assert step(env, "lopd_f001", fenced(code))[0] == 0.0

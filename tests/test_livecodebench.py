"""LiveCodeBench: the official row format, safe private-test decoding, and its scoring rules."""

from __future__ import annotations

import base64
import json
import pickle
import zlib
from pathlib import Path

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs.codeexec import valuecodec
from lopd_envs.sandbox import BubblewrapSandbox, available_backends, get_sandbox
from lopd_envs.suites.livecodebench import data as lcb_data
from lopd_envs.suites.livecodebench import harness as lcb_harness
from lopd_envs.suites.livecodebench import judge as lcb_judge
from lopd_envs.suites.livecodebench import libraries

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


def by_mode(task_id: str, answer: str) -> tuple[float, float]:
    """The answer's reward in official and in strict scoring."""
    return tuple(step(gym.make("lopd/LiveCodeBench-v0", source="samples", scoring=mode), task_id, answer)[0]
                 for mode in ("official", "strict"))


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
    assert lcb_data.decode_private_tests(base64.b64encode(zlib.compress(pickle.dumps(json.dumps(tests)))).decode()) == tests


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
def test_stdin_buffer_read_works_in_both_modes():
    code = "import sys\na, b = map(int, sys.stdin.buffer.read().split())\nprint(a + b)"
    assert by_mode("lopd_s001", fenced(code)) == (1.0, 1.0)


@needs_sandbox
def test_buffer_readline_repeats_the_first_line_officially_not_in_strict():
    """lopd_s002 reads two lines; the official mock's ``buffer.readline()`` returns the first one twice."""
    code = ("import sys\nn = int(sys.stdin.buffer.readline())\ns = sys.stdin.buffer.readline().decode().strip()\n"
            "print(sum(c in 'aeiou' for c in s))")
    assert by_mode("lopd_s002", fenced(code)) == (0.0, 1.0)


# ------------------------------------------- official verdicts of today's lcb_runner, as data

OFFICIAL = json.loads((Path(__file__).with_name("lcb_official_verdicts.json")).read_text())


@needs_sandbox
@pytest.mark.parametrize("case", OFFICIAL["cases"], ids=[c["name"] for c in OFFICIAL["cases"]])
def test_official_mode_gives_lcb_runners_verdicts(case):
    """stdin mock (``buffer``, ``readline``, ``readlines``, not iterable), ``from sys import stdin`` and the
    preamble's ``stdin``, ``exit``/``quit``, numpy answers, ``sNaN`` outputs, crashes: each result list as
    LiveCodeBench's own scorer gave it (see the data file's ``source``)."""
    if case["name"].startswith("numpy") and not libraries.numpy_folders():
        pytest.skip("numpy is not installed for the scorer's interpreter: LiveCodeBench's numpy cases cannot run")
    problem = {"question_id": case["name"], "kind": case["kind"], "fn_name": case["fn_name"],
               "inputs": case["inputs"], "outputs": case["outputs"]}
    details = lcb_judge.evaluate(problem, case["code"], get_sandbox())
    assert details["results"] == case["official"], details
    assert details["passed"] == case["passed"]


def test_the_official_verdict_data_covers_each_behaviour():
    names = {c["name"] for c in OFFICIAL["cases"]}
    assert {"buffer_read", "buffer_readline_twice_is_first_line", "readlines_is_split", "not_iterable",
            "read_twice_whole", "from_sys_import_stdin_readline", "from_sys_import_stdin_buffer",
            "preamble_stdin_no_import", "exit_after_print", "quit_after_print", "numpy_int_scalar",
            "numpy_array_two", "numpy_scalar_vs_list", "snan_output"} <= names
    assert {c["passed"] for c in OFFICIAL["cases"]} == {True, False}


# ------------------------------------------------------- the stdin mock itself (no sandbox needed)

def test_mock_stdin_behaves_as_lcb_runners():
    mock = lcb_harness._MockStdin("a\nb\n")
    assert mock.buffer.read() == mock.buffer.read() == b"a\nb\n"
    assert mock.buffer.readline() == mock.buffer.readline() == b"a\n"
    assert mock.readlines() == ["a", "b", ""]
    assert mock.read() == mock.read() == "a\nb\n"
    assert mock.readline() == "a\n" and mock.readline() == "b\n" and mock.readline() == ""
    with pytest.raises(TypeError):
        iter(mock)
    assert mock.tell() == 4  # anything else is the StringIO's


def test_original_stdin_object_is_patched_for_hoisted_imports():
    import io
    import sys

    original = io.TextIOWrapper(io.BytesIO(b""))
    seen = {}

    def program():
        seen["lines"] = [original.readline(), original.readline()]
        seen["all"] = (original.read(), original.readlines())
        seen["sys"] = sys.stdin.readline()
        try:
            original.readline()
        except StopIteration:
            seen["past_end"] = True

    lcb_harness._run_stdin_test(program, "x\ny", original)
    assert seen == {"lines": ["x", "y"], "all": ("x\ny", ["x", "y"]), "sys": "x\n", "past_end": True}
    assert original.read() == "" and "readline" not in vars(original)  # restored afterwards


# ------------------------------------------------------------------ numpy values and the official ==

def test_functional_verdict_follows_official_equality_with_numpy():
    np = pytest.importorskip("numpy", reason="numpy is needed to build numpy answers")
    verdict = lcb_judge.functional_verdict
    assert verdict(np.int64(3), "3") == [True]
    assert verdict(np.float32(0.5), "0.5") == [True]
    assert verdict(np.float32(0.1), "0.1") == [True]  # numpy 2 compares a Python float in float32
    assert verdict(np.float64(0.1) + np.float64(0.2), "0.3") == [False]
    assert verdict(np.int64(3), "[3]") == [True]  # broadcasting, as officially
    assert verdict(np.int64(3), "[3, 3]") == [True, -4]
    assert verdict(np.array([1, 2]), "[1, 2]") == [True, -4]  # truth of a 2-item array raises officially
    assert verdict(np.array([5]), "[5]") == [True]
    assert verdict(np.array([5]), "[6]") == [False]
    assert verdict([np.array([1, 2])], "[[1, 2]]") == [-4]
    assert verdict([np.int64(1), np.int64(2)], "[1, 2]") == [True]
    assert verdict(valuecodec.Opaque("x"), "1") == [False]
    assert verdict(1, "not json") == [-4]


def test_numpy_values_cross_the_codec_as_numpy():
    np = pytest.importorskip("numpy", reason="numpy is needed to build numpy answers")
    for value in (np.int64(3), np.float32(0.1), np.bool_(True), np.str_("ab"), np.array([[1.5, 2], [3, 4]]),
                  np.array([], dtype=np.int32), np.array(["a", "bc"])):
        back = valuecodec.loads(valuecodec.dumps(value))
        assert type(back) is type(value) and back.dtype == value.dtype
        assert np.array_equal(back, value)


@pytest.mark.parametrize("record", [
    '{"$":"ndarray","d":"|O","s":[1],"v":[1]}', '{"$":"ndarray","d":"(100000000,)i8","s":[1],"v":[1]}',
    '{"$":"ndarray","d":"<i8","s":[100000000000],"v":[1]}', '{"$":"ndarray","d":"<U100000000","s":[10],"v":[1]}',
    '{"$":"ndarray","d":"<i8","s":[2],"v":[1]}', '{"$":"ndarray","d":"<i8","s":[-1],"v":[1]}',
    '{"$":"npscalar","d":"<i8","v":"x"}', '{"$":"npscalar","d":"not a dtype","v":1}',
    '{"$":"ndarray","d":"[(\'a\', \'<i8\')]","s":[1],"v":[1]}', '{"$":"npscalar","d":"<M8[D]","v":1}'])
def test_crafted_numpy_records_are_opaque(record):
    assert isinstance(valuecodec.loads(record), valuecodec.Opaque)


def test_numpy_is_bound_read_only_into_bubblewrap_and_put_on_the_harness_path():
    if available_backends()["bubblewrap"] is not None:
        pytest.skip(f"bubblewrap unavailable here: {available_backends()['bubblewrap']}")
    if not libraries.numpy_folders():
        pytest.skip("numpy is not installed for the scorer's interpreter")
    base = BubblewrapSandbox()
    derived, path = libraries.with_numpy(base)
    assert path == [libraries.MOUNT] and derived is not base and libraries.with_numpy(base) == (derived, path)
    argv = derived.argv(Path("/tmp/x"), base.limits)
    for folder in libraries.numpy_folders():
        i = argv.index(folder)
        assert argv[i - 1] == "--ro-bind" and argv[i + 1] == f"{libraries.MOUNT}/{Path(folder).name}"
    assert "site-packages" not in " ".join(a for a in base.argv(Path("/tmp/x"), base.limits) if "numpy" in a)


# ------------------------------------------------------------- strict mode: what real judges accept

@needs_sandbox
@pytest.mark.parametrize("code", ["a, b = map(int, input().split())\nprint(a + b)\nexit()",
                                  "a, b = map(int, input().split())\nprint(a + b)\nquit()",
                                  "print(sum(map(int, stdin.read().split())))",
                                  "a, b = map(int, input().split())\nprint(reduce(add, [a, b]))",
                                  "from __future__ import annotations\nprint(sum(map(int, input().split())))",
                                  "import numpy as np\nprint(int(np.array(input().split(), dtype=int).sum()))"])
def test_strict_stdin_accepts_exit_quit_and_preamble_names(code):
    strict = gym.make("lopd/LiveCodeBench-v0", source="samples", scoring="strict")
    if "numpy" in code and not libraries.numpy_folders():
        pytest.skip("numpy is not installed for the scorer's interpreter")
    assert step(strict, "lopd_s001", fenced(code))[0] == 1.0


@needs_sandbox
def test_quit_fails_officially_and_works_in_strict_for_functional_problems():
    code = ("class Solution:\n    def reverseWords(self, s: str) -> str:\n        q = quit\n"
            "        return ' '.join(reversed(s.split())) if q is not None else ''")
    assert by_mode("lopd_f002", fenced(code)) == (0.0, 1.0)


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

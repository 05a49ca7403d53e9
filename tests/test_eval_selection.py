"""Issue 55 class 9: a ``lopd-eval`` selection that selects nothing (an unknown env, category or task id) is
refused before the first generation, naming the closest valid names, never dropped or found late."""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import pytest

from lopd_train.evaluation import EvalConfig, run_eval
from lopd_train.evaluation.selection import SelectionError, plan
from tests.fake_openai import FakeServer


class _Env:
    def __init__(self, ids):
        self.unwrapped = SimpleNamespace(tasks=[SimpleNamespace(task_id=t) for t in ids])
        self.closed = False

    def close(self):
        self.closed = True


TASKS = {"lopd/A-v0": ["simple_0", "simple_1", "simple_2"], "lopd/B-v0": ["b_0", "b_1"]}


def _plan(env_ids, wanted=None, limit=None):
    return plan(env_ids, wanted, limit, lambda e: _Env(TASKS[e]), TASKS)


def test_a_selection_keeps_the_benchmarks_order_then_the_limit():
    assert _plan(["lopd/A-v0"], ["simple_2", "simple_0"]) == {"lopd/A-v0": ["simple_0", "simple_2"]}
    assert _plan(["lopd/A-v0", "lopd/B-v0"], None, 1) == {"lopd/A-v0": ["simple_0"], "lopd/B-v0": ["b_0"]}


@pytest.mark.parametrize("envs,wanted,says", [
    (["lopd/A-v1"], None, r"--env 'lopd/A-v1': no such env; did you mean 'lopd/A-v0'"),
    (["lopd/A-v0"], ["simple_0", "simpel_1"], r"--tasks 'simpel_1': no such task in lopd/A-v0; did you mean 'simple_1'"),
    (["lopd/A-v0"], ["../../etc/passwd"], r"--tasks '../../etc/passwd': no such task"),
    # an id of one env leaves the other with nothing to score: refused, not a run scored on zero tasks
    (["lopd/A-v0", "lopd/B-v0"], ["simple_0"], r"--tasks selects no task of lopd/B-v0"),
])
def test_unknown_names_are_refused_with_the_closest(envs, wanted, says):
    with pytest.raises(SelectionError, match=says):
        _plan(envs, wanted)


def test_the_envs_own_refusal_names_the_closest_choice():
    def build(env_id):
        raise ValueError("unknown category 'simpel'; choose from: all, live, simple, multiple")

    with pytest.raises(SelectionError, match=r"--env lopd/A-v0: unknown category 'simpel'; did you mean 'simple'"):
        plan(["lopd/A-v0"], None, None, build, TASKS)


# ------------------------------------------------------------------------------------------ through run_eval

def _cfg(server, tmp_path, **kw):
    return EvalConfig(**{"model": "m", "backend": "openai", "base_url": server.url, "max_new_tokens": 8,
                         "output": str(tmp_path / "out"), "progress": False, **kw})


def test_a_typo_in_tasks_is_refused_before_any_request(bfcl_data, tmp_path):
    with FakeServer() as server:
        with pytest.raises(SelectionError, match=r"'simple_O'.*did you mean 'simple_0'"):
            run_eval(_cfg(server, tmp_path, env=["lopd/BFCLv3-v0"], category="simple", tasks=["simple_1", "simple_O"]))
        with pytest.raises(SelectionError, match=r"'\.\./\.\./etc/passwd': no such task"):
            run_eval(_cfg(server, tmp_path, env=["lopd/BFCLv3-v0"], category="simple", tasks=["../../etc/passwd"]))
    assert server.requests == [] and not (tmp_path / "out").exists()


def test_a_category_the_second_env_lacks_is_refused_before_the_first_env_generates(bfcl_data, tmp_path):
    with FakeServer() as server, pytest.raises(SelectionError, match=r"--env lopd/MBPPPlus-v0: unknown category 'simple'"):
        run_eval(_cfg(server, tmp_path, env=["lopd/BFCLv3-v0", "lopd/MBPPPlus-v0"], category="simple", limit=1))
    assert server.requests == [] and not (tmp_path / "out").exists()


def test_a_good_selection_scores_exactly_the_tasks_asked_for(bfcl_data, tmp_path):
    with FakeServer() as server:
        results = run_eval(_cfg(server, tmp_path, env=["lopd/BFCLv3-v0"], category="simple",
                                tasks=["simple_3", "simple_1"]))
    assert results["envs"]["lopd/BFCLv3-v0"]["n_records"] == 2


def test_the_command_line_says_it_in_one_line_and_exits_2(bfcl_data, tmp_path, monkeypatch):
    monkeypatch.delenv("LOPD_DATA_DIR", raising=False)
    code = ("import sys; from lopd_train.cli import eval_main; "
            "sys.exit(eval_main(['--model', 'm', '--backend', 'openai', '--base-url', 'http://127.0.0.1:9/v1', "
            f"'--env', 'lopd/BFCLv3-v0', '--category', 'simple', '--tasks', 'simpel_0', '--output', {str(tmp_path)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    err = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(err) == 1 and "did you mean 'simple_0'" in err[0], proc.stderr[-2000:]

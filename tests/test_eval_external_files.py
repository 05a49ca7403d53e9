"""Scoring what was generated elsewhere, and writing lopd's answers for the official tools (issue 52 item 4):
``lopd-eval --score-samples`` (evalplus samples), ``--score-bfcl`` (bfcl-eval result files), the ``official/``
files a run writes, evalplus's ``HUMANEVAL_OVERRIDE_PATH`` / ``MBPP_OVERRIDE_PATH``, and corrupt or hostile
files (one line each, nothing run outside the sandbox).

The round trips drive a real ``lopd-eval`` run (the env loop, records, results) with a scripted backend in
place of a model, then score the files it wrote and compare every record's verdict and the leaderboards."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import pytest

import lopd_envs
from lopd_envs import provenance
from lopd_envs.suites.evalplus import data as ep_data
from lopd_train import cli, evaluation
from lopd_train.evaluation.backends import Reply
from tests.scripted_backend import Scripted, gold_calls

gym.register_envs(lopd_envs)
HE_TASKS = ["HumanEval/0", "HumanEval/2", "HumanEval/53"]
BFCL_FILE = "BFCL_v3_simple_result.json"


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    try:
        code = cli.eval_main(argv)
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def problems(dataset: str) -> dict:
    return ep_data.load_problems(dataset, ep_data.dataset_path(dataset))


def complete(problem: dict) -> str:
    """A HumanEval+ canonical program (its canonical solution is the body after the prompt)."""
    return problem["prompt"] + problem["canonical_solution"]


def jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def records(folder: Path) -> dict[tuple[str, int], dict]:
    rows = [json.loads(line) for line in (folder / "records.jsonl").read_text().splitlines()]
    return {(r["task_id"], r["sample"]): r for r in rows}


def results(folder: Path) -> dict:
    return json.loads((folder / "results.json").read_text())


def lopd_run(monkeypatch, capsys, answer, out: Path, *args: str) -> dict:
    monkeypatch.setattr(evaluation, "make_backend", lambda cfg, spec: Scripted(answer))
    code, _, err = run(["--model", "org/scripted-model", "--backend", "openai", "--base-url", "http://127.0.0.1:9/v1",
                        "--output", str(out), "--no-progress", "--batch-size", "2", *args], capsys)
    assert code == 0, err
    return results(out)


# ------------------------------------------------------------------------------------------ evalplus samples


def test_canonical_solutions_score_one_and_wrong_ones_fail_in_each_layout(tmp_path, capsys):
    he, mbpp = problems("humaneval"), problems("mbpp")
    rows = [{"task_id": "HumanEval/0", "solution": complete(he["HumanEval/0"])},
            {"task_id": "HumanEval/53", "completion": he["HumanEval/53"]["canonical_solution"]}]  # prompt + body
    code, out, err = run(["--score-samples", str(jsonl(tmp_path / "he.jsonl", rows)), "--output",
                          str(tmp_path / "he"), "--no-progress"], capsys)
    assert code == 0, err
    table = results(tmp_path / "he")["envs"]["lopd/HumanEvalPlus-v0"]
    assert table["leaderboard"] == {"n_tasks": 2, "base": {"pass@1": 1.0}, "plus": {"pass@1": 1.0}}
    assert table["scored_from"]["tasks_missing"] == 162 and "plus pass@1 | 1.0000" in out

    mbpp_ids = list(mbpp)[:2]
    rows = [{"task_id": t, "solution": mbpp[t]["canonical_solution"]} for t in mbpp_ids]
    rows.append({"task_id": mbpp_ids[1], "solution": mbpp[mbpp_ids[1]]["canonical_solution"] + "\n" +
                 f"def {mbpp[mbpp_ids[1]]['entry_point']}(*a):\n    return None\n"})  # redefined: wrong
    assert run(["--score-samples", str(jsonl(tmp_path / "mbpp.jsonl", rows)), "--output", str(tmp_path / "mbpp"),
                "--no-progress"], capsys)[0] == 0
    table = results(tmp_path / "mbpp")["envs"]["lopd/MBPPPlus-v0"]["leaderboard"]
    assert table == {"n_tasks": 2, "base": {"pass@1": 0.75}, "plus": {"pass@1": 0.75}}  # (1 + 1/2) / 2
    assert [(r["task_id"], r["sample"], r["success"]) for r in records(tmp_path / "mbpp").values()] == \
        [(mbpp_ids[0], 0, True), (mbpp_ids[1], 0, True), (mbpp_ids[1], 1, False)]

    for task, code in (("HumanEval/0", complete(he["HumanEval/0"])),
                       ("HumanEval/2", he["HumanEval/2"]["prompt"] + "    return 0.0\n")):
        folder = tmp_path / "samples" / task.replace("/", "_")
        folder.mkdir(parents=True)
        (folder / "0.py").write_text(code)
    code, _, err = run(["--score-samples", str(tmp_path / "samples"), "--category", "base", "--output",
                        str(tmp_path / "out"), "--no-progress"], capsys)
    assert code == 0, err  # evalplus's folder layout, base tests only (evalplus's --base-only): no plus row
    assert results(tmp_path / "out")["envs"]["lopd/HumanEvalPlus-v0"]["leaderboard"] == \
        {"n_tasks": 2, "base": {"pass@1": 0.5}}


def he_answer(messages, n):
    """Canonical for HumanEval/0 and /53 (sample 0), nothing useful for HumanEval/2 and /53's second sample."""
    he = problems("humaneval")
    task = next(t for t in HE_TASKS if he[t]["prompt"].strip() in messages[-1]["content"])
    if task == "HumanEval/2" or (task == "HumanEval/53" and n == 1):
        return Reply("I think the answer is:\n```python\ndef wrong():\n    return 1\n```")
    return Reply(f"Here:\n```python\n{complete(he[task])}\n```\nDone.", tokens=7)


def test_a_run_writes_evalplus_samples_that_score_the_same(tmp_path, capsys, monkeypatch):
    run_out = tmp_path / "run"
    ran = lopd_run(monkeypatch, capsys, he_answer, run_out, "--env", "lopd/HumanEvalPlus-v0", "--tasks", *HE_TASKS,
                   "--samples", "2", "--temperature", "0.5")
    written = run_out / "official" / "humaneval.jsonl"
    lines = [json.loads(line) for line in written.read_text().splitlines()]
    assert [r["task_id"] for r in lines] == [t for t in HE_TASKS for _ in range(2)]
    assert lines[0]["solution"].startswith("from typing import List") and "```" not in lines[0]["solution"]
    raw = [json.loads(line) for line in (run_out / "official" / "humaneval.raw.jsonl").read_text().splitlines()]
    assert raw[0]["solution"].startswith("Here:\n```python")
    manifest = json.loads((run_out / "official" / "manifest.json").read_text())
    assert "3 of the 164 tasks" in manifest["notes"][0]
    assert manifest["files"][0]["command"] == f"evalplus.evaluate --dataset humaneval --samples {written}"

    code, _, err = run(["--score-samples", str(written), "--output", str(tmp_path / "scored"), "--no-progress"], capsys)
    assert code == 0, err
    scored = results(tmp_path / "scored")
    lb = ran["envs"]["lopd/HumanEvalPlus-v0"]["leaderboard"]
    assert lb == scored["envs"]["lopd/HumanEvalPlus-v0"]["leaderboard"]
    assert lb["plus"]["pass@1"] == pytest.approx((1 + 0 + 0.5) / 3)
    before, after = records(run_out), records(tmp_path / "scored")
    assert {k: r["success"] for k, r in before.items()} == {k: r["success"] for k, r in after.items()}
    assert after[("HumanEval/53", 1)]["source"] == f"{written}:6"


# ------------------------------------------------------------------------------------------ BFCL result files


BFCL_TASKS = ["simple_0", "simple_1", "simple_2", "simple_3", "irrelevance_0", "irrelevance_1",
              "multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]


def bfcl_answerer():
    env = gym.make("lopd/BFCLv3-v0", category=["simple", "irrelevance", "multi_turn_base"])
    tasks = {t.instruction: t for t in env.unwrapped.tasks if t.task_id in BFCL_TASKS}

    def answer(messages, n):
        first = next(m["content"] for m in messages if m["role"] == "user")
        task = tasks[first]
        tid = task.task_id
        if tid.startswith("multi_turn"):
            turn = sum(m["role"] == "user" for m in messages) - 1
            gold = task.data.answer[turn] if turn < len(task.data.answer) else []
            if messages[-1]["role"] == "tool" or not gold or tid == "multi_turn_base_2":
                return Reply("Done.")
            if tid == "multi_turn_base_1":  # native calls
                return Reply("", tool_calls=gold_calls(gold))
            return Reply("[" + ", ".join(gold) + "]")
        gold = env.unwrapped.reference_answer(task)
        if tid == "simple_1":  # native calls
            return Reply("", tool_calls=gold_calls(gold))
        if tid == "simple_2":
            return Reply("[no_such_function(x=1)]")
        if tid == "simple_3":  # calls as hermes text: the env reads them as an FC model's
            call = gold_calls(gold)[0]
            return Reply(f"<tool_call>{json.dumps({'name': call['name'], 'arguments': call['arguments']})}</tool_call>")
        if tid == "irrelevance_1":
            return Reply("[some_call(a=1)]")
        return Reply(gold if tid.startswith("simple") else "None of these functions fits.")
    return answer


def test_a_run_writes_bfcl_result_files_that_score_the_same(bfcl_data, tmp_path, capsys, monkeypatch):
    run_out = tmp_path / "run"
    ran = lopd_run(monkeypatch, capsys, bfcl_answerer(), run_out, "--env", "lopd/BFCLv3-v0", "--category", "simple",
                   "irrelevance", "multi_turn_base", "--tasks", *BFCL_TASKS)
    folder = run_out / "official" / "bfcl_result" / "org_scripted-model"
    files = sorted(p.name for p in folder.iterdir())
    assert files == ["BFCL_v3_irrelevance_result.json", "BFCL_v3_multi_turn_base_result.json",
                     "BFCL_v3_simple_result.json"]
    simple = {e["id"]: e["result"] for e in map(json.loads, (folder / files[2]).read_text().splitlines())}
    assert isinstance(simple["simple_0"], str) and isinstance(simple["simple_1"], list)
    assert isinstance(simple["simple_3"], list)  # hermes text: written as the FC calls the env read
    multi = {e["id"]: e["result"] for e in map(json.loads, (folder / files[1]).read_text().splitlines())}
    assert all(len(t) == 2 and t[-1] == "Done." for t in multi["multi_turn_base_0"])  # calls, then the end of turn
    assert isinstance(multi["multi_turn_base_1"][0][0], list)

    code, _, err = run(["--score-bfcl", str(run_out / "official" / "bfcl_result"), "--output", str(tmp_path / "s"),
                        "--no-progress"], capsys)
    assert code == 0, err
    before, after = records(run_out), records(tmp_path / "s")
    assert {k: r["success"] for k, r in before.items()} == {k: r["success"] for k, r in after.items()}
    assert {k: r["score"]["error_type"] for k, r in before.items()} == \
        {k: r["score"]["error_type"] for k, r in after.items()}
    assert [after[(t, 0)]["success"] for t in ("simple_0", "simple_1", "simple_2", "simple_3", "irrelevance_0",
                                               "irrelevance_1", "multi_turn_base_1", "multi_turn_base_2")] == \
        [True, True, False, True, True, False, True, False]
    lb = results(tmp_path / "s")["envs"]["lopd/BFCLv3-v0"]["leaderboard"]
    assert lb == ran["envs"]["lopd/BFCLv3-v0"]["leaderboard"]
    assert results(tmp_path / "s")["envs"]["lopd/BFCLv3-v0"]["scored_from"]["partial_categories"]["simple"] == [4, 400]


def write_bfcl(folder: Path, category: str, rows) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    return jsonl(folder / f"BFCL_v3_{category}_result.json", rows)


def test_bfcl_formats_and_the_multi_turn_runner_rules(bfcl_data, tmp_path, capsys):
    env = gym.make("lopd/BFCLv3-v0", category=["simple", "multi_turn_base"])
    task = {t.task_id: t for t in env.unwrapped.tasks}
    text = env.unwrapped.reference_answer(task["simple_0"])
    fc = [{c["name"]: json.dumps(c["arguments"])} for c in gold_calls(env.unwrapped.reference_answer(task["simple_1"]))]
    files = tmp_path / "res"
    write_bfcl(files, "simple", [{"id": "simple_0", "result": text}, {"id": "simple_1", "result": fc}])
    mt = task["multi_turn_base_1"].data.answer
    write_bfcl(files, "multi_turn_base", [
        {"id": "multi_turn_base_1", "result": [["[" + ", ".join(turn) + "]", "ok"] for turn in mt]},
        {"id": "multi_turn_base_2", "result": [["[ls()]"]]},  # fewer turns than the ground truth
        {"id": "multi_turn_base_3", "result": "Error during inference: boom"}])
    verdicts = {}
    for fmt in ("auto", "prompting", "fc"):
        out = tmp_path / fmt
        assert run(["--score-bfcl", str(files), "--bfcl-format", fmt, "--output", str(out), "--no-progress"],
                   capsys)[0] == 0
        verdicts[fmt] = {k[0]: (r["success"], r["score"]["error_type"]) for k, r in records(out).items()}
    assert verdicts["auto"]["simple_0"][0] and verdicts["prompting"]["simple_0"][0]
    assert verdicts["auto"]["simple_1"][0] and verdicts["fc"]["simple_1"][0]
    assert verdicts["fc"]["simple_0"] == (False, "ast_decoder:decoder_failed")  # an FC model's text is no call
    assert verdicts["prompting"]["simple_1"] == (False, "ast_decoder:decoder_failed")
    assert verdicts["auto"]["multi_turn_base_1"] == (True, None)
    assert verdicts["fc"]["multi_turn_base_1"] == (False, "multi_turn:empty_turn_model_response")
    assert verdicts["auto"]["multi_turn_base_2"] == (False, "multi_turn:force_terminated")
    assert verdicts["auto"]["multi_turn_base_3"] == (False, "multi_turn:inference_error")


# ------------------------------------------------------------------------------------------ override paths


def tiny_dataset(tmp_path: Path, dataset: str, n: int = 2) -> tuple[Path, list[str]]:
    """The first ``n`` rows of the real file, as evalplus's override files are (plain JSON Lines)."""
    with gzip.open(ep_data.dataset_path(dataset), "rt") as f:
        rows = [json.loads(next(f)) for _ in range(n)]
    return jsonl(tmp_path / f"{dataset}-mini.jsonl", rows), [r["task_id"] for r in rows]


@pytest.mark.parametrize("dataset,env_id,variable", [("humaneval", "lopd/HumanEvalPlus-v0", "HUMANEVAL_OVERRIDE_PATH"),
                                                     ("mbpp", "lopd/MBPPPlus-v0", "MBPP_OVERRIDE_PATH")])
def test_override_paths_replace_the_dataset_as_in_evalplus(tmp_path, capsys, monkeypatch, dataset, env_id, variable):
    import importlib

    assert getattr(importlib.import_module(f"evalplus.data.{dataset}"), variable, "absent") != "absent"  # its name
    path, ids = tiny_dataset(tmp_path, dataset)
    monkeypatch.setenv("LOPD_CACHE", str(tmp_path / "cache"))  # expected outputs of the small file go here
    monkeypatch.setenv(variable, str(path))
    env = gym.make(env_id)
    assert [t.task_id for t in env.unwrapped.tasks] == ids
    prov = provenance.of(env)
    assert prov["source"] == "override" and prov["origin"] == f"{variable}={path}"
    assert variable in env.unwrapped.data_origin
    problem = env.unwrapped.problems[ids[0]]
    solution = problem["canonical_solution"] if dataset == "mbpp" else complete(problem)
    samples = jsonl(tmp_path / "s.jsonl", [{"task_id": ids[0], "solution": solution}])
    code, out, err = run(["--score-samples", str(samples), "--output", str(tmp_path / "out"), "--no-progress"], capsys)
    assert code == 0, err
    res = results(tmp_path / "out")["envs"][env_id]
    assert res["provenance"]["source"] == "override" and res["leaderboard"]["plus"]["pass@1"] == 1.0
    assert "source **override**" in out  # results.md says the numbers are not the official release's
    monkeypatch.setenv(variable, str(tmp_path / "missing.jsonl"))
    code, _, err = run(["--score-samples", str(samples), "--output", str(tmp_path / "out2")], capsys)
    assert code == 2 and f"named by {variable}" in err and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------------------------------ bad files


BAD = {  # case -> (file name, its bytes, what the one line says after the file's name); sample files, then BFCL's
    "not-json": ("s.jsonl", '{"task_id": "HumanEval/0", "solution": "x"}\n{not json\n', ":2: corrupt JSON line"),
    "no-solution": ("s.jsonl", '{"task_id": "HumanEval/0"}\n', ":1: no 'solution' or 'completion'"),
    "solution-list": ("s.jsonl", '{"task_id": "HumanEval/0", "solution": ["a"]}\n', ":1: 'solution' must be a string"),
    "no-task-id": ("s.jsonl", '{"solution": "x"}\n', ":1: row lacks the field 'task_id'"),
    "task-id-int": ("s.jsonl", '{"task_id": 3, "solution": "x"}\n', ":1: field 'task_id' must be str"),
    "not-object": ("s.jsonl", '[1, 2]\n', ":1: a row must be a JSON object"),
    "deep": ("s.jsonl", "[" * 100_000 + "\n", ":1: corrupt JSON line"),
    "not-utf8": ("s.jsonl", b'{"task_id": "HumanEval/0", "solution": "\xff\xfe"}\n', ":1: not UTF-8"),
    "empty": ("s.jsonl", "\n\n", ": the file holds no samples"),
    "other-dataset": ("s.jsonl", '{"task_id": "Foo/1", "solution": "x"}\n', ":1: task 'Foo/1' is neither"),
    "truncated-gz": ("s.jsonl.gz", gzip.compress(b'{"task_id": "HumanEval/0", "solution": "x"}\n' * 50)[:40],
                     ": truncated or corrupt gzip"),
    "bfcl-twice": (BFCL_FILE, '{"id": "simple_0", "result": "[]"}\n' * 2, ":2: id 'simple_0' appears twice"),
    "bfcl-category": (BFCL_FILE, '{"id": "java_0", "result": "[]"}\n', ":1: id 'java_0' is not a task of simple"),
    "bfcl-no-result": (BFCL_FILE, '{"id": "simple_0"}\n', ":1: row lacks the field 'result'"),
    "bfcl-unknown-id": (BFCL_FILE, '{"id": "simple_99999", "result": "[]"}\n', ":1: no BFCL-v3 task 'simple_99999'"),
    "bfcl-not-json": (BFCL_FILE, '{"id": "simple_0", "result": \n', ":1: corrupt JSON line"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_one_line_naming_file_and_line(tmp_path, capsys, request, case):
    name, content, expected = BAD[case]
    if name == BFCL_FILE:
        request.getfixturevalue("bfcl_data")
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    flag = "--score-bfcl" if name == BFCL_FILE else "--score-samples"
    code, _, err = run([flag, str(path), "--output", str(tmp_path / "out")], capsys)
    assert code == 2 and "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert f"{path}{expected}" in err, err
    assert not (tmp_path / "out" / "records.jsonl").exists()


def test_bfcl_paths_that_are_not_result_files(bfcl_data, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.json").write_text("{}")
    odd = tmp_path / "BFCL_v3_exec_simple_result.json"
    odd.write_text('{"id": "exec_simple_0", "result": "[]"}\n')
    for path, expected in ((tmp_path / "empty", "no BFCL_v3_<category>_result.json file"),
                           (tmp_path / "absent", "no such file or folder"), (odd, "category lopd scores")):
        code, _, err = run(["--score-bfcl", str(path), "--output", str(tmp_path / "out")], capsys)
        assert code == 2 and expected in err and len(err.strip().splitlines()) == 1, err


def test_generation_settings_are_refused_when_scoring_files(tmp_path, capsys):
    samples = jsonl(tmp_path / "s.jsonl", [{"task_id": "HumanEval/0", "solution": "x"}])
    code, _, err = run(["--score-samples", str(samples), "--temperature", "0.5", "--output", str(tmp_path / "o")],
                       capsys)
    assert code == 2 and "--temperature does not apply when scoring files" in err
    code, out, _ = run(["--help"], capsys)
    assert code == 0 and "--score-samples" in out and "--score-bfcl" in out and "--bfcl-format" in out


def test_hostile_samples_run_only_in_the_sandbox(tmp_path, capsys):
    """Samples that write and delete files past the guard evalplus's harness puts up (``_io``, ``posix``), in a
    folder anyone may write to: under an isolating sandbox nothing reaches the host's files."""
    import shutil
    import tempfile

    from lopd_envs.sandbox import BACKENDS, ENV_BACKEND, ISOLATING

    choice = os.environ.get(ENV_BACKEND) or "auto"
    if choice not in ISOLATING and not (choice == "auto" and any(BACKENDS[n].probe() is None for n in ISOLATING)):
        pytest.skip("no isolating sandbox here: the samples would run unisolated, as the user asked")
    he = problems("humaneval")
    world = Path(tempfile.mkdtemp(prefix="lopd-hostile-"))  # in /tmp: reachable by the sandbox's own uid
    try:
        marker, victim = world / "written-by-a-sample", world / "victim"
        victim.mkdir()
        (victim / "keep").write_text("mine")
        for path, mode in ((world, 0o777), (victim, 0o777), (victim / "keep", 0o666)):
            path.chmod(mode)
        evil = f"import _io\n_io.FileIO({str(marker)!r}, 'w').write(b'escaped')\n" + complete(he["HumanEval/0"])
        wipe = f"    import posix\n    posix.unlink({str(victim / 'keep')!r})\n    return False\n"
        samples = jsonl(tmp_path / "s.jsonl", [{"task_id": "HumanEval/0", "solution": evil},
                                               {"task_id": "HumanEval/0", "completion": wipe}])
        assert run(["--score-samples", str(samples), "--output", str(tmp_path / "out"), "--no-progress"],
                   capsys)[0] == 0
        assert results(tmp_path / "out")["envs"]["lopd/HumanEvalPlus-v0"]["sandbox"]["isolating"]
        assert not marker.exists() and (victim / "keep").read_text() == "mine"
    finally:
        shutil.rmtree(world)


# ------------------------------------------------------------------------------------------ evalplus itself


@pytest.mark.slow
def test_evalplus_evaluate_agrees_with_lopd_both_ways(tmp_path, capsys, monkeypatch):
    """On a three-task override file (evalplus reads HUMANEVAL_OVERRIDE_PATH at import: a child process): a lopd-eval
    run writes official/humaneval.jsonl (every task, two samples each), hand-written ``completion`` samples are
    added, and evalplus.evaluate and lopd-eval --score-samples score that file: the same statuses per sample (so
    the same pass@1), equal to the run's own verdicts on its samples. evalplus runs code unsandboxed: only the
    dataset's canonical solutions and trivially wrong ones here. About 30 s (evalplus waits on its
    20-second stall checker before it exits)."""
    path, ids = tiny_dataset(tmp_path, "humaneval", 3)
    rows = {r["task_id"]: r for r in map(json.loads, path.read_text().splitlines())}
    monkeypatch.setenv("HUMANEVAL_OVERRIDE_PATH", str(path))
    monkeypatch.setenv("LOPD_CACHE", str(tmp_path / "cache"))

    def answer(messages, n):
        task = next(t for t in ids if rows[t]["prompt"].strip() in messages[-1]["content"])
        body = rows[task]["canonical_solution"] if n == 0 or task == ids[0] else "    return None\n"
        return Reply(f"```python\n{rows[task]['prompt']}{body}```")
    lopd_run(monkeypatch, capsys, answer, tmp_path / "run", "--env", "lopd/HumanEvalPlus-v0", "--samples", "2",
             "--temperature", "0.5")
    file = tmp_path / "samples.jsonl"
    file.write_text((tmp_path / "run" / "official" / "humaneval.jsonl").read_text() + "".join(
        json.dumps(s) + "\n" for s in ({"task_id": ids[1], "completion": rows[ids[1]]["canonical_solution"]},
                                       {"task_id": ids[2], "completion": rows[ids[1]]["canonical_solution"]})))
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg"), "OMP_NUM_THREADS": "1"}
    subprocess.run([sys.executable, "-m", "evalplus.evaluate", "--dataset", "humaneval", "--samples", str(file),
                    "--parallel", "1"], env=env, check=True, capture_output=True, timeout=600)
    official = json.loads((tmp_path / "samples_eval_results.json").read_text())["eval"]
    assert run(["--score-samples", str(file), "--output", str(tmp_path / "out"), "--no-progress"], capsys)[0] == 0
    theirs = {(t, i): (r["base_status"], r["plus_status"]) for t, rs in official.items() for i, r in enumerate(rs)}
    mine = {k: (r["score"]["base_status"], r["score"]["plus_status"]) for k, r in records(tmp_path / "out").items()}
    ran = {k: (r["score"]["base_status"], r["score"]["plus_status"]) for k, r in records(tmp_path / "run").items()}
    assert mine == theirs and {k: theirs[k] for k in ran} == ran
    assert sorted(theirs.values()).count(("pass", "pass")) == 5  # 2 + 1 + 1 of the run's, and ids[1]'s completion
    plus = [(len(rs), sum(r["base_status"] == r["plus_status"] == "pass" for r in rs)) for rs in official.values()]
    assert results(tmp_path / "out")["envs"]["lopd/HumanEvalPlus-v0"]["leaderboard"]["plus"] == \
        evaluation.leaderboards.mean_pass_at_k(plus) == {"pass@1": pytest.approx((1 + 2 / 3 + 1 / 3) / 3)}

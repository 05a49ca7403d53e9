"""lopd-eval end to end: a tiny random model on every env id through ``hf``, the same envs through ``openai``
against a fake OpenAI-compatible server (``tests/fake_openai.py``, through the real SDK), and kill -9 then --resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lopd_train import cli
from lopd_train.evaluation import EvalConfig, read_records, run_eval
from tests.fake_openai import FakeServer

ENVS = ["lopd/BFCLv3-v0", "lopd/ACEBench-v0", "lopd/EnvScaler-v0", "lopd/HumanEvalPlus-v0", "lopd/MBPPPlus-v0",
        "lopd/LiveCodeBench-v0"]
# lopd's own data only by name (missing official data is an error): EnvScaler's own environments and
# LiveCodeBench's bundled problems; every results.json says which data each env read
STAND_INS = ["--env-kwargs", json.dumps({"lopd/EnvScaler-v0": {"source": "ours"},
                                         "lopd/LiveCodeBench-v0": {"source": "bundled"}})]
OUTPUTS = ("records.jsonl", "results.json", "results.md", "results.png")
TIMING = {"batch_seconds"}


def _strip(records):
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


def _check_outputs(out: Path, n_per_env: int) -> dict:
    for name in OUTPUTS:
        assert (out / name).stat().st_size > 0, f"{name} missing"
    results = json.loads((out / "results.json").read_text())
    assert set(results["envs"]) == set(ENVS)
    for env_id, res in results["envs"].items():
        assert res["n_records"] == n_per_env, env_id
        assert res["leaderboard"] and res["data_sha256"] and res["scoring"] == "official"
        assert res["provenance"]["files"] and all(len(f["sha256"]) == 64 for f in res["provenance"]["files"])
    assert results["envs"]["lopd/EnvScaler-v0"]["provenance"]["source"] == "ours"
    assert results["envs"]["lopd/LiveCodeBench-v0"]["provenance"]["source"] == "bundled"
    assert results["envs"]["lopd/BFCLv3-v0"]["provenance"]["version"] == "bfcl-eval==2025.8.6.2"
    assert results["packages"]["torch"] and results["timings"]["total_seconds"] > 0
    records = read_records(out / "records.jsonl")
    assert {r["env"] for r in records} == set(ENVS)
    for r in records:
        assert r["scored"] and r["trace"]["task_id"] == r["task_id"] and r["messages"][0]["role"] in ("system", "user")
    return results


def test_tiny_model_on_every_env_through_hf(bfcl_data, tmp_path):
    out = tmp_path / "hf"
    assert cli.eval_main(["--model", "tiny-random", *(a for e in ENVS for a in ("--env", e)), *STAND_INS,
                          "--limit", "1", "--max-new-tokens", "12", "--output", str(out), "--no-progress"]) == 0
    results = _check_outputs(out, 1)
    assert results["model"]["base_sha256"] and results["backend"]["backend"] == "hf"
    code = results["envs"]["lopd/HumanEvalPlus-v0"]
    assert code["sandbox"] and "base" in code["leaderboard"]  # the sandbox that ran is on record
    assert "by_difficulty" in results["envs"]["lopd/LiveCodeBench-v0"]["leaderboard"]
    assert "summary" in results["envs"]["lopd/ACEBench-v0"]["leaderboard"]


# ----------------------------------------------------------------------------------------------- fake server

def test_every_env_through_openai_against_a_fake_server(bfcl_data, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_KEY", "sk-test")
    out = tmp_path / "openai"
    with FakeServer() as server:
        assert cli.eval_main(["--model", "served-model", "--backend", "openai", "--base-url", server.url,
                              "--api-key-env", "FAKE_KEY", *(a for e in ENVS for a in ("--env", e)), *STAND_INS, "--limit", "1",
                              "--max-new-tokens", "12", "--output", str(out), "--no-progress"]) == 0
    results = _check_outputs(out, 1)
    assert results["backend"]["native_tools"] is True and results["model"]["base_sha256"] is None
    assert all(r["path"] == "/v1/chat/completions" and r["auth"] == "Bearer sk-test" for r in server.requests)
    assert all(r["body"]["model"] == "served-model" and r["body"]["temperature"] == 0.0 for r in server.requests)
    records = {r["env"]: r for r in read_records(out / "records.jsonl")}
    bfcl = records["lopd/BFCLv3-v0"]
    tools = [r for r in server.requests if r["body"].get("tools")]
    assert tools, "native tools were never sent"
    offered = tools[0]["body"]["tools"][0]["function"]["name"]
    assert bfcl["trace"]["steps"][0]["action"]["name"] == offered  # the structured call reached the env
    assert bfcl["messages"][-1]["role"] in ("assistant", "tool")


def test_openai_falls_back_per_request_when_tools_are_refused_and_counts_it(bfcl_data, tmp_path):
    with FakeServer(reject_tools=True) as server:
        results = run_eval(EvalConfig(model="m", backend="openai", base_url=server.url, env=["lopd/BFCLv3-v0"],
                                      category="simple", limit=2, max_new_tokens=8, output=str(tmp_path / "o"),
                                      progress=False))
    backend = results["backend"]
    # no global switch: every request with tools is tried natively, and each refusal is sent again, that
    # request alone, with the text tool prompt; the counts are in results.json and on each record
    offered = [r for r in server.requests if r["body"].get("tools")]
    text = [r for r in server.requests if not r["body"].get("tools")]
    assert len(offered) == len(text) == backend["tool_requests"] == backend["text_fallbacks"] >= 2
    assert backend["native_tools"] is False and backend["requests"] == len(server.requests)
    assert all(r["body"]["messages"][0]["role"] == "system" for r in text)  # the text prompt lists the tools
    records = read_records(tmp_path / "o" / "records.jsonl")
    assert len(records) == 2 and all(r["scored"] and r["text_fallbacks"] >= 1 for r in records)
    assert sum(r["text_fallbacks"] for r in records) == backend["text_fallbacks"]


def test_a_run_with_records_needs_resume(bfcl_data, tmp_path):
    cfg = dict(model="tiny-random", env=["lopd/BFCLv3-v0"], category="simple", limit=1, max_new_tokens=4,
               output=str(tmp_path), progress=False)
    run_eval(EvalConfig(**cfg))
    with pytest.raises(FileExistsError, match="--resume"):
        run_eval(EvalConfig(**cfg))
    with pytest.raises(ValueError, match="different settings"):
        run_eval(EvalConfig(**{**cfg, "limit": 2}, resume=True))


# ----------------------------------------------------------------------------------------------- kill -9

# The child process's writer pauses after each durable write, so the kill lands while the run is surely
# still going (a tiny model could otherwise finish a short run between two polls); the records, the fsync
# and the resume are the real code paths.
_SLOWED_CHILD = ("import sys, time; from lopd_train import records as R; from lopd_train.cli import eval_main; "
                 "w = R.RecordWriter.write; R.RecordWriter.write = lambda self, rec: (w(self, rec), time.sleep({pause}))[0]; "
                 "sys.exit(eval_main(sys.argv[1:]))")


def _kill_9_then_resume(tmp_path: Path, limit: int, batch: int, tokens: int, kill_after: int, pause: float) -> None:
    """Run ``limit`` BFCL tasks whole; run them again in a child, kill -9 it once ``kill_after`` records are
    on disk, tear its last line, ``--resume``: the records and the leaderboard must equal the whole run's."""
    args = ["--model", "tiny-random", "--env", "lopd/BFCLv3-v0", "--category", "simple", "--limit", str(limit),
            "--batch-size", str(batch), "--max-new-tokens", str(tokens), "--no-progress"]
    whole = tmp_path / "whole"
    assert cli.eval_main([*args, "--output", str(whole)]) == 0
    cut = tmp_path / "cut"
    proc = subprocess.Popen([sys.executable, "-c", _SLOWED_CHILD.format(pause=pause), *args, "--output", str(cut)],
                            env=os.environ.copy(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    records = cut / "records.jsonl"
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if records.exists() and records.read_bytes().count(b"\n") >= kill_after:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run ended before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    written = len(read_records(records))
    assert kill_after <= written < limit
    with open(records, "ab") as fh:  # as if the kill had landed in the middle of a write
        fh.write(b'{"env": "lopd/BFCLv3-v0", "task_id": "simple_')
    assert cli.eval_main([*args, "--output", str(cut), "--resume"]) == 0
    assert len(read_records(records)) == limit
    assert _strip(read_records(records)) == _strip(read_records(whole / "records.jsonl"))
    a = json.loads((cut / "results.json").read_text())["envs"]
    b = json.loads((whole / "results.json").read_text())["envs"]
    assert a["lopd/BFCLv3-v0"]["leaderboard"] == b["lopd/BFCLv3-v0"]["leaderboard"]


def test_kill_9_then_resume_equals_an_uninterrupted_run(bfcl_data, tmp_path):
    """Fast: 3 one-at-a-time tasks of 8 tokens, killed after the first record."""
    _kill_9_then_resume(tmp_path, limit=3, batch=1, tokens=8, kill_after=1, pause=2.0)


@pytest.mark.slow
def test_kill_9_then_resume_equals_an_uninterrupted_run_batched(bfcl_data, tmp_path):
    """Slow: 8 tasks in batches of 2 with 32 tokens, killed mid-run (resume must redo whole batches)."""
    _kill_9_then_resume(tmp_path, limit=8, batch=2, tokens=32, kill_after=2, pause=0.5)

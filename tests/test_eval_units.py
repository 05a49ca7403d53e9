"""lopd-eval's parts without a model: durable records, model specs, the openai and vllm backends' code paths."""

from __future__ import annotations

import json
import sys
import types

import pytest

from lopd_train.evaluation import backends
from lopd_train.evaluation.spec import folder_sha256, resolve_model
from lopd_train.records import RecordWriter, read_records
from tests.fake_openai import TOOL_REFUSAL, FakeServer, completion

# ----------------------------------------------------------------------------------------------- records

def test_torn_last_line_is_ignored_and_cut_off(tmp_path):
    path = tmp_path / "records.jsonl"
    with RecordWriter(path) as w:
        w.write({"env": "e", "task_id": "a", "sample": 0})
        w.write({"env": "e", "task_id": "b", "sample": 0})
    with open(path, "ab") as fh:
        fh.write(b'{"env": "e", "task_id": "c", "sam')  # kill -9 in the middle of a write
    assert [r["task_id"] for r in read_records(path)] == ["a", "b"]
    assert [r["task_id"] for r in read_records(path, repair=True)] == ["a", "b"]
    with RecordWriter(path) as w:
        w.write({"env": "e", "task_id": "c", "sample": 0})
    assert [r["task_id"] for r in read_records(path)] == ["a", "b", "c"]


def test_a_bad_line_before_the_last_is_corruption(tmp_path):
    path = tmp_path / "records.jsonl"
    path.write_text('{"task_id": "a"}\nnot json\n{"task_id": "b"}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_records(path)


@pytest.mark.parametrize("bad", ["[1, 2]", "3", '"text"', "null", "[" * 100_000])
def test_a_line_that_is_json_but_not_an_object_is_damage_too(tmp_path, bad):
    path = tmp_path / "records.jsonl"
    path.write_text(f'{{"task_id": "a"}}\n{bad}\n{{"task_id": "b"}}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_records(path)
    path.write_text(f'{{"task_id": "a"}}\n{bad}\n')  # as the last line: a torn write, dropped
    assert read_records(path) == [{"task_id": "a"}]


# ----------------------------------------------------------------------------------------------- model specs

def test_adapter_folder_names_its_base(tmp_path):
    (tmp_path / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "tiny-random", "r": 8}))
    spec = resolve_model(str(tmp_path))
    assert (spec.kind, spec.base, spec.adapter) == ("adapter", "tiny-random", str(tmp_path))


def test_run_folder_prefers_exported_student_then_latest_checkpoint(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints" / "step-000002" / "student_adapter").mkdir(parents=True)
    (run / "checkpoints" / "step-000004" / "student_adapter").mkdir(parents=True)
    (run / "checkpoints" / "latest").write_text("step-000004")
    (run / "config.json").write_text(json.dumps({"model": "smollm2-135m-instruct"}))
    spec = resolve_model(str(run))
    assert spec.kind == "run-checkpoint" and spec.base == "smollm2-135m-instruct"
    assert spec.adapter.endswith("step-000004/student_adapter")
    (run / "student").mkdir()
    (run / "student" / "config.json").write_text("{}")
    spec = resolve_model(str(run))
    assert (spec.kind, spec.base, spec.adapter) == ("run-student", str(run / "student"), None)


def test_bad_specs_are_clear_errors(tmp_path):
    with pytest.raises(ValueError, match="no such GGUF"):
        resolve_model(str(tmp_path / "missing.gguf"))
    with pytest.raises(ValueError, match="not a LoRA adapter folder"):
        resolve_model("tiny-random", adapter=str(tmp_path))


def test_folder_hash_changes_with_weights(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"a")
    first = folder_sha256(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"b")
    assert folder_sha256(tmp_path) != first and folder_sha256(tmp_path / "nope") is None


# ----------------------------------------------------------------------------------------------- openai

def _ask(backend, tools=()):
    [reply] = backend.chat([backends.Conversation([{"role": "user", "content": "q"}], list(tools), seed=7)],
                           backends.Sampling(temperature=0.0))
    return reply


TEXT = completion({"role": "assistant", "content": "hi"}, tokens=1)
TOOL = [{"name": "f", "description": "d", "parameters": {"type": "object", "properties": {}}}]


def test_openai_retries_through_the_sdk_then_succeeds_and_counts_the_retries():
    with FakeServer(script=[(503, {}), (429, {}), (200, TEXT)]) as server:
        b = backends.OpenAIBackend(server.url, "m", max_retries=3)
        reply = _ask(b)
        b.close()
    assert reply.text == "hi" and reply.tokens == 1 and len(server.requests) == 3
    assert b.describe()["retries"] == 2 and b.describe()["requests"] == 1


def test_openai_gives_up_with_an_error_reply_not_a_score():
    with FakeServer(script=[(500, {})] * 2) as server:
        b = backends.OpenAIBackend(server.url, "m", max_retries=1)
        reply = _ask(b)
        b.close()
    assert reply.error and "gave up after 2 attempts" in reply.error and len(server.requests) == 2


def test_openai_a_refused_request_is_an_error_unless_it_is_a_tools_refusal_in_auto_mode():
    # a refused key fails every request alike: the run stops (not one error record per task)
    with FakeServer(script=[(401, {"error": {"message": "bad key"}})]) as server:
        b = backends.OpenAIBackend(server.url, "m", tool_mode="auto")
        with pytest.raises(backends.BackendError, match="HTTP 401: bad key"):
            _ask(b, TOOL)
        b.close()
    assert len(server.requests) == 1  # not retried, no fallback
    with FakeServer(reject_tools=True) as server:
        b = backends.OpenAIBackend(server.url, "m", tool_mode="native")
        reply = _ask(b, TOOL)
        b.close()
    assert reply.error == f"{b.url}: HTTP 400: tools are not supported" and b.describe()["text_fallbacks"] == 0


def test_openai_auto_mode_falls_back_per_request_and_reports_it(caplog):
    # the server takes tools on some requests only: each refused one is retried with the text prompt, the
    # others stay native, and describe() says "partly"
    with FakeServer(script=[(400, TOOL_REFUSAL)]) as server:
        b = backends.OpenAIBackend(server.url, "m", tool_mode="auto", concurrency=1)
        first, second = _ask(b, TOOL), _ask(b, TOOL)
        b.close()
    assert first.text_fallback and not first.tool_calls and "tools" not in server.requests[1]["body"]
    assert not second.text_fallback and second.tool_calls[0]["name"] == "f"
    assert server.requests[2]["body"]["tools"]  # no global switch after the refusal
    described = b.describe()
    assert described["text_fallbacks"] == 1 and described["tool_requests"] == 2 and described["native_tools"] == "partly"
    assert any("refused a request's native tools" in r.message and r.levelname == "WARNING" for r in caplog.records)


def test_openai_request_extra_reaches_the_body_but_cannot_replace_the_runs_own_fields():
    with FakeServer(script=[(200, TEXT)]) as server:
        b = backends.OpenAIBackend(server.url, "m", api_key="sk-x", extra_body={"repeat_penalty": 1.0, "top_k": 1})
        _ask(b)
        b.close()
    sent = server.requests[0]
    assert sent["body"]["repeat_penalty"] == 1.0 and sent["body"]["top_k"] == 1 and sent["body"]["temperature"] == 0.0
    assert sent["body"]["seed"] == 7 and sent["auth"] == "Bearer sk-x"
    assert b.describe()["request_extra"] == {"repeat_penalty": 1.0, "top_k": 1}
    with pytest.raises(backends.BackendError, match=r"\['seed', 'temperature'\]"):
        backends.OpenAIBackend("http://x/v1", "m", extra_body={"temperature": 1.0, "seed": 3, "x": 1})


def test_openai_messages_pair_tool_results_with_call_ids():
    wire = backends.openai_messages([
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "tool_calls": [{"name": "f", "arguments": {"a": 1}, "id": "c1"},
                                                            {"name": "g", "arguments": {}}]},
        {"role": "tool", "name": "f", "content": "1"}, {"role": "tool", "name": "g", "content": {"x": 2}}])
    assert wire[1]["tool_calls"][0] == {"id": "c1", "type": "function",
                                        "function": {"name": "f", "arguments": '{"a": 1}'}}
    assert [m.get("tool_call_id") for m in wire[2:]] == ["c1", wire[1]["tool_calls"][1]["id"]]
    assert wire[3]["content"] == '{"x": 2}'


# ----------------------------------------------------------------------------------------------- vllm

def test_vllm_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(backends.BackendError, match=r'pip install "lopd\[vllm\]"'):
        backends.import_vllm()


def _fake_vllm(calls):
    class SamplingParams:
        def __init__(self, **kw):
            self.kw = kw

    class LLM:
        def __init__(self, **kw):
            calls["init"] = kw

        def generate(self, prompts, params, lora_request=None, use_tqdm=True):
            calls["generate"] = (prompts, [p.kw for p in params], lora_request)
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(text=f"out{i}", token_ids=[1, 2])])
                    for i in range(len(prompts))]

    class LoRARequest:
        def __init__(self, name, int_id, path):
            self.args = (name, int_id, path)

    vllm = types.ModuleType("vllm")
    vllm.LLM, vllm.SamplingParams, vllm.__version__ = LLM, SamplingParams, "fake"
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    return {"vllm": vllm, "vllm.lora": lora, "vllm.lora.request": request}


def test_vllm_backend_sends_rendered_token_ids_and_the_lora_request(monkeypatch, tmp_path):
    from lopd_train import models

    calls = {}
    for name, mod in _fake_vllm(calls).items():
        monkeypatch.setitem(sys.modules, name, mod)
    (tmp_path / "adapter_config.json").write_text(json.dumps({"r": 12}))
    tok = models.byte_tokenizer()
    b = backends.VLLMBackend("/models/base", tok, adapter=str(tmp_path), seed=3)
    assert calls["init"]["enable_lora"] and calls["init"]["max_lora_rank"] == 16
    convs = [backends.Conversation([{"role": "user", "content": "hello"}], seed=7),
             backends.Conversation([{"role": "user", "content": "x" * 5000}], seed=8)]
    replies = b.chat(convs, backends.Sampling(temperature=0.0, max_new_tokens=4, max_sequence_tokens=1000))
    prompts, params, lora = calls["generate"]
    assert prompts == [{"prompt_token_ids": models.encode(tok, models.render_chat(tok, convs[0].messages))}]
    assert params[0]["seed"] == 7 and params[0]["temperature"] == 0.0 and params[0]["max_tokens"] == 4
    assert lora.args == ("eval-adapter", 1, str(tmp_path))
    assert replies[0].text == "out0" and replies[0].tokens == 2 and replies[1].overflow


# ----------------------------------------------------------------------------------------------- config

def test_config_file_sets_options_and_flags_win(tmp_path):
    from lopd_train import cli

    conf = tmp_path / "eval.toml"
    conf.write_text('model = "tiny-random"\nenv = ["lopd/BFCLv3-v0", "lopd/MBPPPlus-v0"]\nlimit = 3\n'
                    'backend = "openai"\nbase-url = "http://127.0.0.1:1/v1"\n')
    cfg, _ = cli.eval_config_from_args(["--config", str(conf), "--limit", "2"])
    assert cfg.env == ["lopd/BFCLv3-v0", "lopd/MBPPPlus-v0"] and cfg.limit == 2 and cfg.backend == "openai"
    conf.write_text('model = "m"\nenv = "lopd/BFCLv3-v0"\nlimitt = 3\n')
    with pytest.raises(SystemExit, match="unknown setting"):
        cli.eval_config_from_args(["--config", str(conf)])


@pytest.mark.parametrize("argv,why", [(["--samples", "4"], "needs --temperature"),
                                      (["--backend", "openai"], "needs --base-url")])
def test_inconsistent_options_are_refused(argv, why):
    from lopd_train import cli

    with pytest.raises(SystemExit, match=why):
        cli.eval_config_from_args(["--model", "m", "--env", "lopd/BFCLv3-v0", *argv])


def test_language_goes_only_to_envs_that_take_it():
    from lopd_train.evaluation import EvalConfig, env_kwargs

    cfg = EvalConfig(model="m", env=["lopd/ACEBench-v0", "lopd/BFCLv3-v0"], language="zh", category="a,b")
    assert env_kwargs(cfg, "lopd/ACEBench-v0") == {"category": ["a", "b"], "language": "zh"}
    assert env_kwargs(cfg, "lopd/BFCLv3-v0") == {"category": ["a", "b"]}


def test_a_llamacpp_server_that_cannot_start_says_why(tmp_path):
    """This venv has no llama_cpp: the helper reports the server's own error instead of waiting forever."""
    from lopd_train.evaluation.llamacpp_server import llamacpp_server

    with (pytest.raises(RuntimeError, match="llama_cpp"),
          llamacpp_server(sys.executable, tmp_path / "none.gguf", startup_timeout=120)):
        pass

"""Issue 55 class 8: ``lopd-eval``'s client does not trust the server. A malformed 200 answer, a server that
trickles bytes, a reply of tens of megabytes: each becomes a per-record error naming the server and what
was wrong (the run goes on; ``--resume`` retries those records), within the deadline and the size limit.
Content parts are joined as the OpenAI format defines. A server that cannot be reached stops the run."""

from __future__ import annotations

import json
import socket
import time

import pytest

from lopd_train.evaluation import EvalConfig, backends, openai_reply, read_records, run_eval
from tests.hostile_openai import HostileServer, huge, text, trickle_body, trickle_headers

GOLD = "[calculate_triangle_area(base=10, height=5)]"  # BFCL-v3 simple_0's answer

MALFORMED = {
    "not JSON": b"<html>502 Bad Gateway</html>",
    "truncated JSON": b'{"choices": [{"message": {"content": "hi"',
    "nested 100000 deep": b"[" * 100_000 + b"]" * 100_000,
    "nested 200 deep": b'{"choices": ' + b"[" * 200 + b"]" * 200 + b"}",
    "a JSON list": b"[1, 2]",
    "no choices": b'{"id": "x"}',
    "empty choices": b'{"choices": []}',
    "message a string": b'{"choices": [{"message": "hi"}]}',
    "content a number": text(42),
    "content a dict": text({"text": "hi"}),
    "a part without type": text([{"text": "hi"}]),
    "a text part without text": text([{"type": "text", "text": None}]),
    "tool_calls a string": b'{"choices": [{"message": {"content": null, "tool_calls": "f()"}}]}',
    "a tool call without function": b'{"choices": [{"message": {"tool_calls": [{"id": "c"}]}}]}',
    "an error with status 200": b'{"error": {"message": "model overloaded"}}',
}


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_body_is_a_bad_reply_never_a_crash(body):
    with pytest.raises(openai_reply.BadReply):
        openai_reply.parse(openai_reply.decode(body))


def test_content_parts_are_joined_and_other_parts_carry_no_text():
    parts = [{"type": "text", "text": "[calculate_triangle_area(base=10, "}, {"type": "refusal", "refusal": "no"},
             {"type": "text", "text": "height=5)]"}]
    assert openai_reply.parse(json.loads(text(parts))) == (GOLD, None, 3)
    assert openai_reply.parse(json.loads(text(None, tokens="7")))[0:3] == ("", None, 0)  # nonsense usage is 0


def _ask(url, timeout=30.0, retries=0, **kw):
    b = backends.OpenAIBackend(url, "m", timeout=timeout, max_retries=retries, tool_mode="text", **kw)
    try:
        [reply] = b.chat([backends.Conversation([{"role": "user", "content": "q"}], [], seed=1)], backends.Sampling())
    finally:
        b.close()
    return reply, b


@pytest.mark.parametrize("name", ["not JSON", "nested 100000 deep", "message a string", "content a dict",
                                  "an error with status 200"])
def test_the_backend_turns_a_malformed_answer_into_an_error_naming_the_server(name):
    with HostileServer(MALFORMED[name]) as server:
        reply, b = _ask(server.url)
    assert reply.error and reply.error.startswith(server.url + "/chat/completions: ") and not reply.text
    assert b.describe()["bad_replies"] == 1


@pytest.mark.parametrize("behaviour", [trickle_body, trickle_headers], ids=["body", "headers"])
def test_the_timeout_is_a_deadline_for_the_whole_request(behaviour):
    with HostileServer(behaviour) as server:
        t0 = time.monotonic()
        reply, _ = _ask(server.url, timeout=1.5, retries=3)  # retries do not extend the deadline
        took = time.monotonic() - t0
    assert "no complete reply within the 1.5 s deadline" in reply.error and took < 5, took


@pytest.mark.parametrize("declared", [True, False], ids=["content-length", "chunked"])
def test_a_48_mb_reply_is_refused(declared):
    with HostileServer(huge(48 << 20, declared)) as server:
        t0 = time.monotonic()
        reply, _ = _ask(server.url)
    assert "byte limit" in reply.error and not reply.text and time.monotonic() - t0 < 20


def test_an_unreachable_server_stops_the_run():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(backends.BackendError, match="cannot reach the server"):
        _ask(f"http://127.0.0.1:{port}/v1")


# --------------------------------------------------------------------------------------------- a whole run

def _cfg(url, out, **kw):
    return EvalConfig(**{"model": "m", "backend": "openai", "base_url": url, "env": ["lopd/BFCLv3-v0"],
                         "category": "simple", "limit": 3, "max_new_tokens": 16, "tool_mode": "text",
                         "request_timeout": 20.0, "max_retries": 0, "output": str(out), "progress": False, **kw})


def test_content_parts_score_as_the_text_they_join_to(bfcl_data, tmp_path):
    parts = [{"type": "text", "text": GOLD[:20]}, {"type": "text", "text": GOLD[20:]}]
    with HostileServer(text(parts)) as server:
        results = run_eval(_cfg(server.url, tmp_path, limit=None, tasks=["simple_0"]))
    [record] = read_records(tmp_path / "records.jsonl")
    assert record["reward"] == 1.0 and [m["content"] for m in record["messages"] if m["role"] == "assistant"] == [GOLD]
    assert results["envs"]["lopd/BFCLv3-v0"]["n_records"] == 1


def test_a_bad_reply_is_a_record_error_the_run_goes_on_and_resume_retries_it(bfcl_data, tmp_path):
    good = text("[f(x=1)]")
    with HostileServer(good, MALFORMED["message a string"], good) as server:
        results = run_eval(_cfg(server.url, tmp_path, batch_size=1))
        records = read_records(tmp_path / "records.jsonl")
        assert len(records) == 3 and [bool(r.get("error")) for r in records] == [False, True, False]
        bad = records[1]
        assert bad["error"].startswith(server.url) and "choices[0].message" in bad["error"] and not bad["scored"]
        env = results["envs"]["lopd/BFCLv3-v0"]
        assert env["n_records"] == 2 and env["n_errors"] == 1
        assert "Not scored" in (tmp_path / "results.md").read_text()
        results = run_eval(_cfg(server.url, tmp_path, batch_size=1, resume=True))
    assert len(server.requests) == 4  # only the errored record ran again
    env = results["envs"]["lopd/BFCLv3-v0"]
    assert env["n_records"] == 3 and env["n_errors"] == 0

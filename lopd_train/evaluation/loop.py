"""The evaluation's env loop: the same for every backend, which only generates.

Episodes run in lockstep batches: every live episode's conversation goes to the backend in one call (batched
generation, or concurrent requests), then the envs are stepped in parallel threads (code envs spend their
time in sandboxes, tool envs in their simulators). A conversation that outgrows the token budget answers empty turns (so the env ends and scores it; the
record is flagged ``overflow``). Structured tool calls (native tool calling) are passed to
the env as structured assistant messages, text as text; the env parses and scores both. A reply the
backend could not use (a server's malformed, late or oversized answer) ends its episode unscored, with the
error on the record: the other episodes go on, and ``--resume`` runs that one again.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import gymnasium as gym

from lopd_train.evaluation.backends import Backend, Conversation
from lopd_train.sampling import Sampling


@dataclass
class WorkItem:
    task_id: str
    sample: int
    seed: int
    order: int  # the task's position in the benchmark's own order (ACEBench groups conversations by it)


def _jsonable(value: Any) -> Any:
    import json

    return json.loads(json.dumps(value, default=str))


def run_chat_episodes(backend: Backend, envs: Sequence[gym.Env], items: Sequence[WorkItem], sampling: Sampling,
                      pool: ThreadPoolExecutor) -> list[dict[str, Any]]:
    """One episode per item (``len(items) <= len(envs)``), all in lockstep; returns one record each.

    A reply with an ``error`` ends that episode with ``error`` on its record (unscored; ``--resume`` retries
    it). A backend failure that no request gets past (server gone after its retries) raises
    :class:`~lopd_train.evaluation.backends.BackendError`: nothing of the batch is recorded, so ``--resume`` redoes it rather than keeping a
    score the model never earned."""
    t0 = time.time()
    envs = list(envs)[:len(items)]
    starts = list(pool.map(lambda k: envs[k].reset(seed=items[k].seed, options={"task_id": items[k].task_id}),
                           range(len(items))))
    convs = [Conversation(copy.deepcopy(obs), info.get("tools") or [], items[k].seed)
             for k, (obs, info) in enumerate(starts)]
    state = [{"done": False, "reward": 0.0, "info": info, "turns": 0, "truncated": False, "overflow": False,
              "tokens": 0, "text_fallbacks": 0, "error": None} for _, info in starts]
    while True:
        live = [k for k, s in enumerate(state) if not s["done"]]
        if not live:
            break
        replies = backend.chat([convs[k] for k in live], sampling)
        actions = {}
        for k, reply in zip(live, replies):
            st = state[k]
            if reply.error:  # this episode ends here, unscored; the others go on
                st.update(done=True, error=str(reply.error)[:2000])
                continue
            st["tokens"] += reply.tokens
            st["text_fallbacks"] += reply.text_fallback  # turns sent with the text tool prompt after a refusal
            if reply.overflow:  # no room left to answer: the env scores an empty answer, as the benchmark
                st["overflow"] = True  # would score a model that said nothing more (the record says why)
            message: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if reply.tool_calls:
                message["tool_calls"] = [{"name": c["name"], "arguments": c["arguments"], "id": c.get("id")}
                                         for c in reply.tool_calls]
                actions[k] = {"role": "assistant", "content": reply.text,
                              "tool_calls": [{"name": c["name"], "arguments": c["arguments"]}
                                             for c in reply.tool_calls]}
            else:
                actions[k] = reply.text
            convs[k].messages.append(message)
        stepped = list(pool.map(lambda k: (k, envs[k].step(actions[k])), list(actions)))  # noqa: B023 - mapped now
        for k, (obs, reward, terminated, truncated, info) in stepped:
            st = state[k]
            st["turns"] += 1
            st["info"] = info
            convs[k].messages.extend(copy.deepcopy(obs))
            if terminated or truncated:
                st.update(done=True, reward=float(reward), truncated=bool(truncated and not terminated))
    seconds = time.time() - t0
    records = []
    for k, item in enumerate(items):
        st, info = state[k], state[k]["info"]
        trace = info.get("trace")
        scored = "score" in info and not st["error"]
        records.append({
            "task_id": item.task_id, "sample": item.sample, "seed": item.seed, "order": item.order,
            "category": info.get("category", ""), "reward": st["reward"] if scored else 0.0,
            "success": bool(scored and getattr(trace, "success", False)), "scored": scored,
            "turns": st["turns"], "truncated": st["truncated"], "overflow": st["overflow"],
            "text_fallbacks": st["text_fallbacks"],
            "generated_tokens": st["tokens"], "score": _jsonable(info.get("score") or {}),
            "trace": trace.to_dict() if trace is not None else None,
            "messages": _jsonable(convs[k].messages), "batch_seconds": round(seconds, 3),
            **({"error": st["error"]} if st["error"] else {})})
    return records

"""Traces back as trajectories to score (cold start, the PIG diagnostic): replaying, apart from sampling."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

import gymnasium as gym

from lopd_train import models
from lopd_train.rollout.engine import Trajectory
from lopd_train.sampling import Sampling


def action_text(action: dict[str, Any], tool_syntax: str = "hermes") -> str:
    """A trace step's action as the assistant would have written it (a tool call in ``tool_syntax``)."""
    if "name" not in action:
        return str(action.get("text", ""))
    from lopd_envs.actions import ToolCall
    from lopd_envs.tools import render_python_calls

    if tool_syntax == "python":
        return render_python_calls([ToolCall(action["name"], dict(action.get("arguments") or {}))])
    call = {"name": action["name"], "arguments": action.get("arguments") or {}}
    return "<tool_call>\n" + json.dumps(call, ensure_ascii=False) + "\n</tool_call>"


SEQUENCE_KEY = "sequence"


def _prompt_digest(ids: Sequence[int]) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(list(map(int, ids))).encode()).hexdigest()


def attach_sequence(t: Trajectory) -> None:
    """Keep a rollout's exact token ids after its prompt (and their action mask) with its trace, under a digest of
    the prompt, so :func:`replay_trace` can give back exactly what was sampled (an experience's tokens, not a
    re-rendering of its actions)."""
    if t.trace is not None:
        t.trace.metadata[SEQUENCE_KEY] = {"prompt": _prompt_digest(t.input_ids[:t.prompt_len]),
                                          "ids": list(t.input_ids[t.prompt_len:]),
                                          "mask": list(t.action_mask[t.prompt_len:])}


TRANSCRIPT_KEY = "transcript"


def attach_transcript(trace, text: str) -> None:
    """Keep the rollout's full chat transcript with its trace, so the bank can give the encoder the
    reference's rendering of an experience (the trace's compact ``render()`` stays the bank's key)."""
    trace.metadata[TRANSCRIPT_KEY] = text


def replay_trace(env: gym.Env, tokenizer, trace, cfg: Sampling, group: int = 0) -> Trajectory:
    """A successful trace (e.g. a banked experience) as a trajectory the trainer can score: the env's own
    prompt for the task, then exactly the tokens the rollout sampled when the trace carries them
    (:func:`attach_sequence`) and this prompt is the one they followed. Otherwise one assistant turn per trace
    step (its action, as the student's tokens) and the step's recorded result as a tool message: approximate
    where a turn made several calls (each becomes its own turn) and where results were shortened when
    recorded. Used for cold start and the PIG diagnostic."""
    obs, info = env.reset(options={"task_id": trace.task_id})
    tools = info.get("tools") or []
    ids = models.encode(tokenizer, models.render_chat(tokenizer, obs, tools, text_tools=cfg.text_tools))
    prompt_len = len(ids)
    mask = [0] * len(ids)
    seq = trace.metadata.get(SEQUENCE_KEY) if isinstance(trace.metadata, dict) else None
    if seq and seq.get("prompt") == _prompt_digest(ids) and len(seq.get("ids", [])) == len(seq.get("mask", [])):
        ids, mask = ids + list(seq["ids"]), mask + list(seq["mask"])
        return Trajectory(env_id=trace.env_id, task_id=trace.task_id, task=trace.task, category=trace.category,
                          input_ids=ids, action_mask=mask, sample_logprobs=[0.0] * len(ids), prompt_len=prompt_len,
                          reward=float(trace.reward), success=bool(trace.success), trace=trace,
                          messages=copy.deepcopy(obs), tools=tools, group=group, turns=max(1, sum(
                              1 for a, b in zip([0] + seq["mask"], seq["mask"]) if b and not a)))
    for k, step in enumerate(trace.steps):
        toks = [*models.encode(tokenizer, action_text(step.action, cfg.text_tools.syntax)), tokenizer.eos_token_id]
        ids += toks
        mask += [1] * len(toks)
        if step.result and k + 1 < len(trace.steps):
            more = models.encode(tokenizer, models.continuation_text(
                tokenizer, [{"role": "tool", "name": step.action.get("name", "tool"), "content": step.result}]))
            ids += more
            mask += [0] * len(more)
    return Trajectory(env_id=trace.env_id, task_id=trace.task_id, task=trace.task, category=trace.category,
                      input_ids=ids, action_mask=mask, sample_logprobs=[0.0] * len(ids), prompt_len=prompt_len,
                      reward=float(trace.reward), success=bool(trace.success), trace=trace,
                      messages=copy.deepcopy(obs), tools=tools, group=group, turns=len(trace.steps))

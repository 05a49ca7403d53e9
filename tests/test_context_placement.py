"""Where a teacher's privileged context goes: inside the user message that carries the task's question, never
inside a few-shot demonstration (study v1 put it in the first user message, which with BFCL's ``few_shot``
prompt is the ``simple_0`` demonstration two turns before the task: issue 23).

Checked on the real BFCL-v3 few-shot prompt rendered by a real chat template (SmolLM2's, through the tiny
model's byte tokenizer), for latent placeholders and text contexts alike, and through an algorithm's own
``context_view``, the one path every teacher (LOPD and the text baselines) takes."""

from __future__ import annotations

import pytest

from lopd_train import models
from lopd_train.latent import context


def few_shot_opening():
    """The opening of a BFCL-v3 ``simple`` episode with two worked examples in front of the task."""
    import gymnasium as gym

    import lopd_envs

    gym.register_envs(lopd_envs)
    env = gym.make("lopd/BFCLv3-v0", category="simple", few_shot="simple_0,simple_1")
    obs, info = env.reset(options={"task_id": "simple_5"})
    env.close()
    return obs, info.get("tools") or []


def task_span(tok, ids: list[int]) -> tuple[int, int]:
    """Token span ``[start, end)`` of the last user message's content in a rendered prompt without any context
    block (byte tokenizer: the offsets of each id's decoded text give the token index of a character)."""
    offs, pos = [], 0
    for i in ids:
        offs.append(pos)
        pos += len(tok.decode([i]))
    text = tok.decode(ids)
    head = "<|im_start|>user\n"
    start = text.rindex(head) + len(head)
    end = text.index("<|im_end|>", start)
    return offs.index(start), offs.index(end)


def inserted_at(prompt: list[int], ids: list[int]) -> int:
    """Where a block was spliced into ``prompt`` to give ``ids`` (the longest common prefix)."""
    k = 0
    while k < len(prompt) and ids[k] == prompt[k]:
        k += 1
    assert ids[len(ids) - (len(prompt) - k):] == prompt[k:]  # everything after the block is the prompt's rest
    return k


def test_the_task_message_is_the_last_user_message_of_the_opening():
    obs, _ = few_shot_opening()
    k = context.task_message_index(obs)
    users = [i for i, m in enumerate(obs) if m["role"] == "user"]
    assert len(users) == 3 and k == users[-1]
    assert "simple_0" not in obs[k]["content"]  # not a demonstration: demonstrations come before, with answers
    assert obs[k - 1]["role"] == "assistant"
    with pytest.raises(ValueError):
        context.task_message_index([{"role": "system", "content": "s"}])


@pytest.mark.parametrize("kind", ["latent", "text"])
def test_context_lands_inside_the_task_turn_of_a_few_shot_prompt(kind):
    _, tok = models.tiny_model()
    obs, tools = few_shot_opening()
    prompt = models.encode(tok, models.render_chat(tok, obs, tools))
    kw = {"n_latent": 9} if kind == "latent" else {"text": "PRIVILEGED TEXT"}
    cp = context.context_prompt(tok, prompt, obs, tools, **kw)
    start, end = task_span(tok, prompt)
    block = range(cp.insert_at, cp.insert_at + cp.block_len)
    assert inserted_at(prompt, cp.input_ids) == cp.insert_at
    assert start <= cp.insert_at <= end  # the block opens the task's message, after every demonstration
    if kind == "latent":
        assert len(cp.positions) == 9 and all(p in block for p in cp.positions)
    text = tok.decode(cp.input_ids)
    demo_end = text.rindex("<|im_start|>assistant", 0, text.rindex("<|im_start|>user"))
    assert context.FRAMING_BEFORE not in text[:demo_end]  # no demonstration holds any of it
    question = obs[context.task_message_index(obs)]["content"]
    assert text[text.index(context.FRAMING_AFTER) + len(context.FRAMING_AFTER):].startswith(question)
    assert [i for k, i in enumerate(cp.input_ids) if k not in block] == prompt


@pytest.mark.parametrize("algo", ["lopd", "opsd", "sdpo", "sdft", "skill_sd"])
def test_every_teacher_view_puts_its_context_in_the_task_turn(tmp_path, algo):
    """Through ``Algorithm.context_view``, the method LOPD and every text baseline build the teacher's input
    with, on a real few-shot rollout prompt."""
    from lopd_train.algorithms import ALGORITHMS
    from lopd_train.config import TrainConfig
    from lopd_train.rollout.engine import Trajectory

    base, tok = models.tiny_model()
    policy = models.wrap_lora(base, {"student": models.lora_config(4, 8)})
    obs, tools = few_shot_opening()
    prompt = models.encode(tok, models.render_chat(tok, obs, tools))
    t = Trajectory(env_id="lopd/BFCLv3-v0", task_id="simple_5", task="t", category="simple",
                   input_ids=[*prompt, 70, 71, tok.eos_token_id], action_mask=[0] * len(prompt) + [1, 1, 1],
                   sample_logprobs=[0.0] * (len(prompt) + 3), prompt_len=len(prompt), messages=obs, tools=tools)
    cls = ALGORITHMS[algo]
    cfg = TrainConfig(model="tiny-random", algo=algo, lora_r=4, lora_alpha=8, num_latents=4, top_j=2)
    obj = cls.__new__(cls)  # only the teacher-view plumbing is exercised: no bank, retriever or optimiser
    obj.tokenizer, obj.cfg, obj.device = tok, cfg, next(policy.parameters()).device
    kw = {"n_latent": 8} if algo == "lopd" else {"text": "CONTEXT", "framing": getattr(cls, "framing", ("", ""))}
    positions, seqs, masks = obj.context_view([t], **kw)
    ids = seqs[0].tolist()
    start, end = task_span(tok, prompt)
    at = inserted_at(prompt, ids[:-3])
    assert start <= at <= end
    block = ids[at:len(ids) - 3 - (len(prompt) - at)]
    if algo == "lopd":
        assert len(positions) == 8 and all(at <= p < at + len(block) for p in positions)
    else:
        assert "CONTEXT" in tok.decode(block)
    assert ids[-3:] == [70, 71, tok.eos_token_id] and masks[0].tolist()[-3:] == [1, 1, 1]


@pytest.mark.parametrize("where", ["system", "demonstration", "task", "tools", "everywhere"])
def test_a_prompt_that_contains_the_placement_marker_still_gets_its_context_in_the_task_turn(where):
    """The task's turn is found by rendering the prompt with a marker at its start; a hostile task, tool
    description or demonstration holding that very marker text must not move the context to where it sits."""
    import copy

    _, tok = models.tiny_model()
    obs, tools = few_shot_opening()
    obs, tools = copy.deepcopy(obs), copy.deepcopy(tools)
    marks = [context._MARK, f"{context._MARK[:-1]}-1{context._MARK[-1]}"]
    planted = " ".join(marks)
    k = context.task_message_index(obs)
    if where in ("system", "everywhere"):
        obs[0]["content"] += planted
    if where in ("demonstration", "everywhere"):
        obs[1]["content"] = planted + obs[1]["content"]
    if where in ("task", "everywhere"):
        obs[k]["content"] += " " + planted
    if where in ("tools", "everywhere"):
        tools[0]["description"] = planted + tools[0].get("description", "")
    prompt = models.encode(tok, models.render_chat(tok, obs, tools))
    cp = context.context_prompt(tok, prompt, obs, tools, n_latent=5)
    header = models.encode(tok, "<|im_start|>user\n")  # found by tokens: the planted text is not single-byte
    start = max(i for i in range(len(prompt)) if prompt[i:i + len(header)] == header) + len(header)
    assert cp.insert_at == start and inserted_at(prompt, cp.input_ids) == start
    assert context.unused_mark(planted) not in planted

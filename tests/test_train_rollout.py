"""Rollouts keep the student's tokens exactly: no re-tokenisation across turns, sampler log-probs that
the trainer's forward pass reproduces, and a sequence that is the chat template's rendering."""

from __future__ import annotations

import pytest
import torch

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_envs.chat import TextTools
from lopd_train import models
from lopd_train.rollout.engine import SamplingConfig, make_envs, run_episodes
from lopd_train.scoring import student_logits


@pytest.fixture(scope="module")
def tiny():
    model, tok = models.tiny_model()
    tok.padding_side = "left"
    model.eval()
    return model, tok


def test_byte_tokenizer_round_trips_text_and_chat_markup(tiny):
    _, tok = tiny
    text = "<|im_start|>user\nnaïve 💡 {\"a\": 1}<|im_end|>\n"
    ids = models.encode(tok, text)
    assert tok.decode(ids) == text
    assert tok.convert_ids_to_tokens(ids[0]) == "<|im_start|>"


def test_continuation_text_is_what_the_template_appends_after_a_turn(tiny):
    _, tok = tiny
    cont = models.continuation_text(tok, [{"role": "tool", "name": "f", "content": "42"}])
    assert cont == "\n<|im_start|>tool\n42<|im_end|>\n<|im_start|>assistant\n"


def test_tools_go_into_the_system_prompt_when_the_template_ignores_them(tiny):
    _, tok = tiny
    tools = [{"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {}}}]
    text = models.render_chat(tok, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
                              tools)
    assert text.startswith("<|im_start|>system\nBe brief.\n\nYou may call the following functions:")
    assert "get_weather" in text and text.endswith("<|im_start|>assistant\n")


def test_multi_turn_sequence_is_the_template_rendering_of_the_conversation(tiny):
    model, tok = tiny
    envs = make_envs("lopd-test/Coin-v0", 3, category="all")
    torch.manual_seed(0)
    trajs = run_episodes(model, tok, envs, ["heads_0", "tails_1", "heads_2"],
                         SamplingConfig(max_new_tokens=12), groups=[0, 1, 2])
    for t in trajs:
        assert t.turns == 2 and len(t.input_ids) == len(t.action_mask) == len(t.sample_logprobs)
        # rebuild the conversation from the env's trace and render it with the template in one go
        texts = [s.action["text"] for s in t.trace.steps]
        msgs = [*t.messages, {"role": "assistant", "content": texts[0]},
                {"role": "tool", "name": "note", "content": f"noted {len(texts[0])} chars"},
                {"role": "assistant", "content": texts[1]}]
        rendered = models.render_chat(tok, msgs, t.tools, add_generation_prompt=False)
        # (a random model may sample <|endoftext|>, which the env-facing action text drops)
        assert tok.decode(t.input_ids).replace("<|endoftext|>", "") == rendered.removesuffix("\n")
        # the sampled tokens are exactly the assistant turns (each closed by the EOS token)
        sampled = [i for i, m in zip(t.input_ids, t.action_mask) if m]
        assert tok.decode(sampled, skip_special_tokens=True) == "".join(texts)


def test_sampler_logprobs_are_reproduced_by_the_training_forward_pass(tiny):
    model, tok = tiny
    envs = make_envs("lopd-test/Coin-v0", 4, category="all")
    torch.manual_seed(1)
    trajs = run_episodes(model, tok, envs, ["heads_0", "heads_1", "tails_0", "tails_3"],
                         SamplingConfig(max_new_tokens=10))

    class Wrapped:  # the training forward expects a peft-style model
        def __init__(self, m):
            self.m = m

        def get_base_model(self):
            return self.m

    for t in trajs:
        ids = torch.tensor(t.input_ids)
        mask = torch.tensor(t.action_mask)
        with torch.no_grad():
            logits = student_logits(Wrapped(model), ids, mask)
        recomputed = torch.log_softmax(logits, -1).gather(-1, ids[mask.bool()].unsqueeze(-1)).squeeze(-1)
        sampled = torch.tensor(t.sample_logprobs)[mask.bool()]
        assert torch.allclose(recomputed, sampled, atol=1e-4)


def test_episode_over_the_token_budget_stops_unscored(tiny):
    model, tok = tiny
    envs = make_envs("lopd-test/Coin-v0", 1, category="all")
    (t,) = run_episodes(model, tok, envs, ["heads_0"], SamplingConfig(max_new_tokens=8, max_sequence_tokens=10))
    assert t.truncated and t.turns == 1 and t.reward == 0.0 and not t.success


def test_no_second_tool_listing_when_the_env_prompt_already_has_one(tiny):
    _, tok = tiny
    tools = [{"type": "function", "function": {"name": "math.factorial", "description": "d", "parameters": {}}}]
    msgs = [{"role": "system", "content": "Here is a list of functions: [{'name': 'math.factorial'}]"},
            {"role": "user", "content": "5!"}]
    assert "You may call" not in models.render_chat(tok, msgs, tools)
    assert "You may call" in models.render_chat(tok, msgs, tools, text_tools=TextTools(prompt="always"))


def test_sampler_records_the_policy_top_m_at_temperature_one(tiny):
    model, tok = tiny
    envs = make_envs("lopd-test/Coin-v0", 2, category="all")
    torch.manual_seed(3)
    trajs = run_episodes(model, tok, envs, ["heads_0", "tails_0"], SamplingConfig(max_new_tokens=6, temperature=0.7,
                                                                                  top_m=5))
    for t in trajs:
        ids, mask = torch.tensor(t.input_ids), torch.tensor(t.action_mask)
        with torch.no_grad():
            logp = torch.log_softmax(model(ids.unsqueeze(0)).logits[0], -1)
        pos = torch.nonzero(mask).squeeze(-1) - 1
        assert t.topm_ids.shape == (t.n_actions, 5)
        assert torch.equal(t.topm_ids, logp[pos].topk(5, -1).indices)
        assert torch.allclose(t.topm_logprobs, logp[pos].topk(5, -1).values, atol=1e-4)
        assert torch.allclose(t.policy_logprobs, logp[pos].gather(-1, ids[mask.bool()].unsqueeze(-1)).squeeze(-1),
                              atol=1e-4)


def test_a_groups_shared_prompt_is_prefilled_once_and_changes_nothing(tiny, monkeypatch):
    """Duplicated prompts (a GRPO group) are run once; the completions and log-probs equal a plain
    ``generate``'s, greedy and sampled with the same seed."""
    model, tok = tiny
    a = models.encode(tok, models.render_chat(tok, [{"role": "user", "content": "flip a coin, twice"}]))
    b = models.encode(tok, models.render_chat(tok, [{"role": "user", "content": "heads?"}]))
    prompts = [a, a, a, b, b, a]
    for rows_seen in generate_like_plain(model, tok, prompts, monkeypatch):
        # the prefill ran on the 2 distinct prompts, then generate fed 6 rows of one token each
        assert rows_seen[0] == (2, len(a) - 1) and rows_seen[1] == (6, 1)


def generate_like_plain(model, tok, prompts, monkeypatch):
    """Generate ``prompts`` greedy and sampled (same seed) with the shared prefill and with a plain one, assert
    the completions and log-probs agree, and yield the shapes of the inputs the model saw with the shared one."""
    from lopd_train.rollout import engine as rollout

    rows_seen: list[tuple[int, ...]] = []

    def count(module, args, kwargs):
        if kwargs.get("input_ids") is not None:
            rows_seen.append(tuple(kwargs["input_ids"].shape))

    for cfg in (SamplingConfig(max_new_tokens=10, greedy=True), SamplingConfig(max_new_tokens=10, temperature=0.9)):
        rows_seen.clear()
        hook = model.register_forward_pre_hook(count, with_kwargs=True)
        torch.manual_seed(3)
        shared = rollout.generate(model, tok, prompts, cfg)
        hook.remove()
        yield list(rows_seen)
        monkeypatch.setattr(rollout, "prefill", plain_prefill)
        torch.manual_seed(3)
        plain = rollout.generate(model, tok, prompts, cfg)
        monkeypatch.undo()
        for (t1, l1, e1, _), (t2, l2, e2, _) in zip(shared, plain):
            assert t1 == t2 and e1 == e2
            assert torch.allclose(torch.tensor(l1), torch.tensor(l2), atol=1e-4)


def plain_prefill(model, prompts, pad, device):
    """Plain left padding and no cache: ``generate`` prefills every row itself."""
    from lopd_train.rollout.engine import layout

    ids, attn = layout(prompts, pad, 0)
    return ids.to(device), attn.to(device), None


def test_prefill_shares_nothing_when_every_prompt_is_distinct_and_short_in_common(tiny):
    from lopd_train.rollout.engine import prefill

    model, tok = tiny
    ids, _attn, cache = prefill(model, [[5, 6, 7], [5, 6, 8]], tok.pad_token_id, torch.device("cpu"))
    assert cache is None and ids.tolist() == [[5, 6, 7], [5, 6, 8]]
    ids, _attn, cache = prefill(model, [[5, 6, 7], [9, 6, 7, 1], [5, 6, 7]], tok.pad_token_id, torch.device("cpu"))
    assert cache.get_seq_length() == 3 and cache.layers[0].keys.shape[0] == 3


def test_a_long_common_prefix_is_prefilled_once_and_changes_nothing(tiny, monkeypatch):
    """Prompts that share a long head (the study's system prompt and few-shot demonstrations) but end
    differently, some of them duplicated: the head runs once for one row, each distinct remainder once, and
    the completions and log-probs equal a plain ``generate``'s, greedy and sampled with the same seed."""
    from lopd_train.rollout import engine as rollout

    model, tok = tiny
    system = {"role": "system", "content": "You answer with one tool call. " * 6}
    demo = [{"role": "user", "content": "an example question"}, {"role": "assistant", "content": "[f(x=1)]"}]
    a = models.encode(tok, models.render_chat(tok, [system, *demo, {"role": "user", "content": "heads or tails?"}]))
    b = models.encode(tok, models.render_chat(tok, [system, *demo, {"role": "user", "content": "q"}]))
    c = models.encode(tok, models.render_chat(tok, [system, *demo, {"role": "user", "content": "a longer question?!"}]))
    prompts = [a, b, a, c, b, a]
    head = rollout.common_prefix_length(prompts)
    assert head >= rollout.MIN_SHARED_PREFIX
    width = max(map(len, prompts))
    for rows_seen in generate_like_plain(model, tok, prompts, monkeypatch):
        assert rows_seen[:3] == [(1, head), (3, width - 1 - head), (6, 1)]  # head once, 3 remainders, then decode

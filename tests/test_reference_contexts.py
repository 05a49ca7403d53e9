"""The references' teacher prompts (issue 56, item 4) on the coin-flip env with the tiny model: SDPO's context
is another group success's response text in the reference's template, the prompt is rebuilt token by token as
the chat template renders the reference's messages, and the response ids are kept as sampled.

The same rendering for a real BFCL-v3 and HumanEval+ task with SmolLM2's tokenizer is
``tests/test_baseline_context_tokens.py``."""

from __future__ import annotations

from lopd_train import models
from lopd_train.algorithms import sdpo
from lopd_train.latent import context
from tests.test_algorithms_context import algo_setup


def test_sdpo_reference_context_and_teacher_ids_token_by_token(tmp_path):
    _, tok, cfg, trajs, algo = algo_setup(tmp_path, "sdpo", baseline_semantics="reference")
    heads = trajs[:3]  # rollout 0 succeeded, 1 and 2 failed
    ctxs = algo.contexts(heads)
    solution = context.strip_thinking(tok.decode(heads[0].input_ids[heads[0].prompt_len:], skip_special_tokens=True))
    prompt = heads[0].messages[-1]["content"]
    want = f"{prompt}\nCorrect solution:\n\n{solution}\n\nCorrectly solve the original question."
    assert ctxs[1].text == want and ctxs[1].source == "group"
    assert ctxs[2].text == want
    assert ctxs[0] is None or ctxs[0].source == "feedback"  # its own success is never its hint
    seqs, masks = algo.teacher_view([heads[1]], ctxs[1].text)
    msgs = [*heads[1].messages[:-1], {"role": "user", "content": want}]
    head = models.encode(tok, models.render_chat(tok, msgs, heads[1].tools, text_tools=cfg.text_tools))
    assert seqs[0].tolist() == head + list(heads[1].input_ids[heads[1].prompt_len:])
    assert masks[0].tolist() == [0] * len(head) + list(heads[1].action_mask[heads[1].prompt_len:])


def test_sdpo_feedback_only_without_a_solution_and_only_when_enabled(tmp_path):
    _, _tok, _cfg, trajs, algo = algo_setup(tmp_path, "sdpo", successes=(False,) * 6, baseline_semantics="reference")
    ctxs = algo.contexts(trajs[:3])
    fb = sdpo.feedback_text(trajs[0].trace)
    assert fb is not None and ctxs[0].source == "feedback"
    assert ctxs[0].text == context.sdpo_teacher_text(trajs[0].messages[-1]["content"], None, fb)
    _, _, _, trajs, algo = algo_setup(tmp_path / "off", "sdpo", successes=(False,) * 6,
                                      baseline_semantics="reference", sdpo_feedback=False)
    assert algo.contexts(trajs[:3]) == [None, None, None]


def test_reference_defaults_resolve_per_baseline(tmp_path):
    from lopd_train.algorithms.distill import resolve
    from lopd_train.algorithms.opsd import OPSD
    from lopd_train.algorithms.sdft import SDFT
    from lopd_train.algorithms.sdpo import SDPO
    from lopd_train.config import TrainConfig

    cfg = TrainConfig()
    s = resolve(SDPO, cfg)
    assert (s.teacher, s.ema_decay, s.loss, s.alpha, s.topk, s.tail, s.importance_clip) == (
        "ema", 0.95, "jsd", 0.5, 100, True, 2.0)
    o = resolve(OPSD, cfg)
    assert (o.teacher, o.loss, o.entry_clip, o.importance_clip) == ("base", "forward_kl", 0.05, 2.0)
    f = resolve(SDFT, cfg)
    assert (f.teacher, f.loss, f.topk, f.tail, f.importance_clip) == ("base", "jsd", 100, False, 2.0)
    v2 = resolve(SDPO, TrainConfig(baseline_semantics="v2"))
    assert (v2.teacher, v2.ema_decay, v2.loss, v2.importance_clip) == ("base", 0.99, "topk", None)
    assert (cfg.grpo.grpo_std, cfg.grpo.grpo_eps, cfg.grpo.grpo_loss_type) == ("unbiased", 1e-4, "dapo")

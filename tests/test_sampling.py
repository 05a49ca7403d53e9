"""Training rollouts sample as the authors' LOPD does (temperature 0.7, top-k 20, top-p 0.95 by default) and
record the untruncated, temperature-scaled policy's log-probability of each sampled token (what TRL and verl
recompute), so a truncation never enters an importance ratio."""

from __future__ import annotations

import torch

from lopd_train import models
from lopd_train.config import TrainConfig
from lopd_train.rollout.engine import SamplingConfig, generate


def test_the_default_training_sampling_is_the_references():
    s = TrainConfig().sampling()
    assert (s.temperature, s.top_k, s.top_p) == (0.7, 20, 0.95) and not s.greedy


def test_top_k_sampling_stays_in_the_top_k_and_records_the_untruncated_policy_logprob():
    torch.manual_seed(0)
    model, tok = models.tiny_model()
    tok.padding_side = "left"
    prompt = models.encode(tok, "hello there, agent")
    cfg = SamplingConfig(max_new_tokens=12, temperature=0.7, top_k=3, top_p=1.0)
    (toks, lps, _, _), = generate(model, tok, [prompt], cfg)
    ids = torch.tensor([prompt + toks])
    with torch.no_grad():  # [T, V]: the positions predicting each new token
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float()
    top3 = logits.topk(3, dim=-1).indices
    assert all(t in top3[k].tolist() for k, t in enumerate(toks))  # never outside the top-k
    want = torch.log_softmax(logits / 0.7, -1).gather(-1, torch.tensor(toks)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(lps), want, atol=1e-4)  # the untruncated scaled policy, not the top-k's
    renormalised = torch.log_softmax((logits / 0.7).gather(-1, top3), -1)  # what the truncated sampler drew from
    picked = renormalised.gather(-1, (top3 == torch.tensor(toks)[:, None]).long().argmax(-1, keepdim=True))[:, 0]
    assert (torch.tensor(lps) < picked - 1e-4).all()  # untruncated: strictly less mass than after truncation

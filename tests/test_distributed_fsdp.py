"""FSDP2 (``lopd_train.distributed.Sharded``): the backbone sharded per decoder layer, the adapters replicated.

Fast tests, in this process: what a launch's FSDP settings become (accelerate's own parser), the wrapping
plan (which modules get their own ``fully_shard``), the refusals, and the sharded tiny model on a one-rank
gloo group: sharded at rest, whole inside ``unsharded`` with the same outputs as the plain model, the LoRA
weights untouched by FSDP so the saved adapter is the plain model's file.

Slow test, two processes on CPU (gloo) launched with examples/accelerate/fsdp_cpu_2proc.yaml: 3 steps of GRPO
(with held-out evaluations, rank 0's) and of LOPD (cold start first, interrupted after step 2 and resumed)
under FSDP. Both ranks end with identical student, composer, anchor and Q-Former weights and β, each rank
held half of the backbone, and weights, β, checkpoint layout and held-out results equal those of the same
runs under DDP (the math is the same: the gathered layers are the layers).
"""

from __future__ import annotations

import json

import pytest
import torch

from lopd_train import distributed, models, statefile
from tests.test_distributed import accelerate_available, launch_runs, ranks

FSDP_ENV = {"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2", "FSDP_AUTO_WRAP_POLICY": "TRANSFORMER_BASED_WRAP",
            "FSDP_RESHARD_AFTER_FORWARD": "true", "ACCELERATE_MIXED_PRECISION": "no"}


@pytest.fixture
def fsdp_env(monkeypatch):
    for k in ("FSDP_TRANSFORMER_CLS_TO_WRAP", "FSDP_OFFLOAD_PARAMS", "ACCELERATE_USE_DEEPSPEED", "WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    for k, v in FSDP_ENV.items():
        monkeypatch.setenv(k, v)
    return monkeypatch


# ----------------------------------------------------------------------------- settings and refusals

def test_settings_from_a_launch(fsdp_env):
    fsdp_env.setenv("FSDP_TRANSFORMER_CLS_TO_WRAP", "LlamaDecoderLayer,Qwen3DecoderLayer")
    fsdp_env.setenv("FSDP_OFFLOAD_PARAMS", "true")
    fsdp_env.setenv("FSDP_RESHARD_AFTER_FORWARD", "false")
    s = distributed.fsdp_settings_from_environment()
    assert s == distributed.FSDPSettings(("LlamaDecoderLayer", "Qwen3DecoderLayer"), reshard_after_forward=False,
                                         offload_params=True)
    assert distributed.from_environment() is distributed.LOCAL  # one process: nothing to shard over


def test_no_fsdp_launch_means_no_settings(monkeypatch):
    monkeypatch.delenv("ACCELERATE_USE_FSDP", raising=False)
    assert distributed.fsdp_settings_from_environment() is None


@pytest.mark.parametrize("name, value, message", [
    ("FSDP_VERSION", "1", "fsdp_version: 2"),
    ("FSDP_AUTO_WRAP_POLICY", "SIZE_BASED_WRAP", "TRANSFORMER_BASED_WRAP"),
    ("ACCELERATE_MIXED_PRECISION", "bf16", "mixed_precision"),
])
def test_unsupported_settings_are_refused(fsdp_env, name, value, message):
    fsdp_env.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        distributed.from_environment()


def test_deepspeed_is_refused(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    with pytest.raises(NotImplementedError, match="DeepSpeed"):
        distributed.from_environment()


# ----------------------------------------------------------------------------- the wrapping plan

def tiny_policy(seed: int = 0, adapters=("student", "composer", "anchor")):
    torch.manual_seed(seed)
    model, tok = models.tiny_model(layers=3)
    policy = models.wrap_lora(model, {a: models.lora_config(4, 8) for a in adapters})
    with torch.no_grad():  # LoRA B starts at zero; make every adapter change the outputs
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.2)
    return policy, tok


def test_plan_shards_every_decoder_layer_then_the_rest():
    policy, _ = tiny_policy()
    base = policy.get_base_model()
    assert distributed.sharding_plan(base) == ["model.layers.0", "model.layers.1", "model.layers.2", ""]
    assert distributed.sharding_plan(base, ["LlamaDecoderLayer"]) == distributed.sharding_plan(base)
    with pytest.raises(ValueError, match="Qwen3DecoderLayer"):
        distributed.sharding_plan(base, ["Qwen3DecoderLayer"])
    with pytest.raises(ValueError, match="inside"):
        distributed.sharding_plan(base, ["LlamaDecoderLayer", "LlamaAttention"])
    with pytest.raises(ValueError, match="_no_split_modules"):
        distributed.sharding_plan(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_every_adapter_is_replicated():
    policy, _ = tiny_policy()
    names = {n for n, p in policy.named_parameters() if p in distributed.replicated_parameters(policy)}
    assert names and all("lora_" in n for n in names)
    for adapter in ("student", "composer", "anchor"):
        assert {n for n in names if f".{adapter}." in n} == {n for n, _ in policy.named_parameters()
                                                            if "lora_" in n and f".{adapter}." in n}


# ----------------------------------------------------------------------------- sharded, one rank, in process

@pytest.fixture
def one_rank_group(tmp_path):
    import torch.distributed as dist

    if dist.is_initialized():
        pytest.skip("a process group is already initialised in this process: the one-rank FSDP test NOT run")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def sharded(policy, settings=distributed.FSDPSettings()):
    """A :class:`~lopd_train.distributed.Sharded` over the current group without accelerate's state."""
    dist = distributed.Sharded.__new__(distributed.Sharded)
    dist.settings, dist.units, dist._depth = settings, [], 0
    dist.units = distributed.shard_backbone(policy, settings, torch.device("cpu"))
    return dist


def test_sharded_backbone_scores_like_the_plain_one(one_rank_group, tmp_path):
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor

    from lopd_train.scoring import score_group

    policy, _ = tiny_policy()
    plain, _ = tiny_policy()
    dist = sharded(policy)
    base = policy.get_base_model()
    assert [m for m in base.modules() if isinstance(m, FSDPModule)] == [base, *list(base.model.layers)]
    lora = [p for n, p in policy.named_parameters() if "lora_" in n]
    backbone = [p for n, p in policy.named_parameters() if "lora_" not in n]
    assert all(not isinstance(p, DTensor) for p in lora) and all(isinstance(p, DTensor) for p in backbone)

    seqs = [torch.tensor([5, 6, 7, 8, 9, 10, 11]), torch.tensor([5, 6, 7, 8, 12, 13])]
    masks = [torch.tensor([0, 0, 0, 0, 1, 1, 1]), torch.tensor([0, 0, 0, 0, 1, 1])]

    def passes(model):
        out = {}
        with torch.no_grad():
            out["teacher"] = score_group(model, seqs, masks, teacher=True)
        with models.adapter(model, "composer"):
            out["composer"] = score_group(model, seqs, masks)
        out["student"] = score_group(model, seqs, masks)
        loss = sum(s.float().pow(2).mean() + c.float().pow(2).mean()
                   for s, c in zip(out["student"], out["composer"]))
        loss.backward()
        return out

    with dist.unsharded(policy):
        assert not any(isinstance(p, DTensor) for p in policy.parameters())  # the whole backbone, gathered
        with dist.unsharded(policy):  # nested: the outer gathering serves
            got = passes(policy)
    assert all(isinstance(p, DTensor) for n, p in policy.named_parameters() if "lora_" not in n)  # sharded again
    want = passes(plain)
    for key in want:
        for a, b in zip(got[key], want[key]):
            assert torch.allclose(a, b, atol=1e-6), key
    for (n, p), (_, q) in zip(policy.named_parameters(), plain.named_parameters()):
        if "lora_" in n and q.grad is not None:
            assert torch.allclose(p.grad, q.grad, atol=1e-6), n  # the adapters' gradients: FSDP left them alone

    models.save_student_adapter(policy, "student", tmp_path / "sharded")  # outside a phase: no collective needed
    models.save_student_adapter(plain, "student", tmp_path / "plain")
    from safetensors.torch import load_file

    a, b = (load_file(tmp_path / d / "adapter_model.safetensors") for d in ("sharded", "plain"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_generation_never_syncs_the_ranks(one_rank_group, monkeypatch):
    """transformers syncs the ranks at every generated token for a module FSDP manages (``synced_gpus``): ranks
    generating different numbers of turns would then wait for each other forever. Rollouts say no."""
    from transformers.distributed.fsdp import is_fsdp_managed_module

    from lopd_train.rollout.engine import SamplingConfig, generate

    policy, tok = tiny_policy()
    dist = sharded(policy)
    base = policy.get_base_model()
    assert is_fsdp_managed_module(base)  # what would turn the per-token sync on
    seen = []
    real = base.generate
    monkeypatch.setattr(base, "generate", lambda *a, **kw: seen.append(kw.get("synced_gpus")) or real(*a, **kw))
    with dist.unsharded(policy):
        generate(policy, tok, [[5, 6, 7]], SamplingConfig(max_new_tokens=3))
    assert seen == [False]


def test_a_trainable_backbone_weight_is_refused(one_rank_group):
    policy, _ = tiny_policy()
    policy.get_base_model().model.norm.weight.requires_grad_(True)
    with pytest.raises(ValueError, match="only LoRA weights"):
        sharded(policy)


# ----------------------------------------------------------------------------- two processes, gloo

#: GRPO also evaluates on two held-out tasks every 8 rollouts: rank 0 alone evaluates, every rank gathers with it
HELDOUT = ["--eval-every-rollouts", "8", "--eval-tasks", "heads_0,tails_0", "--eval-batch-size", "2"]
RUNS = {"grpo": ["--algo", "grpo", "--steps", "3", *HELDOUT], "lopd": ["--algo", "lopd", "--steps", "3"]}


@pytest.mark.slow
@pytest.mark.skipif(not accelerate_available(), reason="accelerate's launcher is not installed: FSDP NOT tested")
def test_fsdp_two_ranks_agree_and_match_ddp(tmp_path):
    ddp = launch_runs(tmp_path / "ddp", RUNS, mode="ddp")
    first = launch_runs(tmp_path / "fsdp", {"grpo": RUNS["grpo"], "lopd": ["--algo", "lopd", "--steps", "2"]},
                        mode="fsdp")
    resumed = launch_runs(tmp_path / "fsdp", {"lopd": [*RUNS["lopd"], "--resume"]}, mode="fsdp")
    print(f"GRPO + LOPD, 3 steps each: DDP {ddp:.0f} s; FSDP {first:.0f} s (LOPD to step 2) + {resumed:.0f} s "
          "(LOPD resumed to step 3)")
    for name in RUNS:
        d0, _d1 = ranks(tmp_path / "ddp" / name)
        f0, f1 = ranks(tmp_path / "fsdp" / name)
        assert (d0["dist"], f0["dist"]) == ("Distributed", "Sharded")
        assert d0["sharded_fraction"] == 1.0 and 0.45 < f0["sharded_fraction"] < 0.55  # half the backbone each
        assert f0["weights"].keys() == f1["weights"].keys() == d0["weights"].keys()
        worst = 0.0
        for n in f0["weights"]:
            assert torch.equal(f0["weights"][n], f1["weights"][n]), (name, n)  # the ranks agree exactly
            worst = max(worst, float((f0["weights"][n] - d0["weights"][n]).abs().max()))
            assert torch.allclose(f0["weights"][n], d0["weights"][n], atol=1e-6, rtol=1e-5), (name, n)
        assert f0["beta"] == f1["beta"] and (f0["beta"] is None) == (d0["beta"] is None)
        if d0["beta"] is not None:
            assert abs(f0["beta"] - d0["beta"]) < 1e-6 and d0["beta"] > 0
        assert any(not torch.equal(w, d0["initial"][n]) for n, w in d0["weights"].items())  # it did train
        print(f"{name}: FSDP vs DDP, largest weight difference {worst:.2e}")

        # the checkpoint files are the DDP run's, key for key (resume and export read them)
        step = "checkpoints/step-000003"
        dt = statefile.load(tmp_path / "ddp" / name / step / "trainer")
        ft = statefile.load(tmp_path / "fsdp" / name / step / "trainer")
        assert dt.keys() == ft.keys() and dt["lora"].keys() == ft["lora"].keys()
        assert all(type(ft["lora"][k]) is torch.Tensor and ft["lora"][k].shape == dt["lora"][k].shape
                   for k in dt["lora"])
        assert sorted(p.name for p in (tmp_path / "fsdp" / name / step / "student_adapter").iterdir()) == \
            sorted(p.name for p in (tmp_path / "ddp" / name / step / "student_adapter").iterdir())
        state = [json.loads((tmp_path / m / name / step / "state.json").read_text()) for m in ("ddp", "fsdp")]
        assert state[0]["rollouts"] == state[1]["rollouts"]
    heldout = [[{k: r[k] for k in ("rollouts", "mean_reward", "n")} for r in
                map(json.loads, (tmp_path / m / "grpo" / "heldout.jsonl").read_text().splitlines())]
               for m in ("ddp", "fsdp")]
    assert len(heldout[1]) >= 3 and heldout[0] == heldout[1]  # the untrained student and later ones, greedy

"""``lopd-export``: the run's student merged and saved in the dtype it trained in, with a model card (base
model, algorithm, configuration, data provenance, results), and ``--push-to-hub`` as a real code path up to
the hub's offline error."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from lopd_train import models
from lopd_train.export import main, training_dtype

PROVENANCE = {"benchmark": "BFCL-v3", "source": "official", "version": "bfcl-eval==2025.8.6.2", "origin": "/d",
              "files": [{"path": "/d/data/BFCL_v3_simple.json", "bytes": 1, "sha256": "ab" * 32}]}


@pytest.fixture
def run(tmp_path):
    """A lopd-train run folder holding one checkpoint with a trained-looking (non-zero) student adapter."""
    torch.manual_seed(0)
    base, _ = models.load_backbone("tiny-random", torch.device("cpu"), "float32")
    peft_model = models.wrap_lora(base, {"student": models.lora_config(r=4, alpha=8)})
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # B starts at zero: make the adapter change the model
    folder = tmp_path / "run"
    ckpt = folder / "checkpoints" / "step-000002"
    models.save_student_adapter(peft_model, "student", ckpt / "student_adapter")
    (ckpt / "state.json").write_text("{}")
    (folder / "checkpoints" / "latest").write_text("step-000002")
    config = {"model": "tiny-random", "algo": "lopd", "env": "lopd/BFCLv3-v0", "dtype": "bfloat16", "lr": 1e-4}
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "provenance.json").write_text(json.dumps(PROVENANCE))
    (folder / "heldout.jsonl").write_text(json.dumps({"rollouts": 0, "step": 0, "mean_reward": 0.25,
                                                      "success_rate": 0.25, "n": 4, "rewards": {}}) + "\n")
    evals = tmp_path / "eval"
    evals.mkdir()
    (evals / "results.json").write_text(json.dumps({"envs": {"lopd/BFCLv3-v0": {"leaderboard": {"overall": 0.5}}}}))
    return folder, peft_model, evals


def test_export_keeps_the_training_dtype_and_the_merged_weights(run, capsys):
    folder, peft_model, evals = run
    assert main([str(folder), "--eval", str(evals)]) == 0
    student = folder / "student"
    weights = load_file(str(student / "model.safetensors"))
    assert {t.dtype for t in weights.values()} == {torch.bfloat16}  # not fp32: the run trained in bf16
    saved = json.loads((student / "config.json").read_text())
    assert saved.get("dtype", saved.get("torch_dtype")) == "bfloat16"
    merged = models.load_backbone(str(student), torch.device("cpu"), "float32")[0]
    ids = torch.tensor([[5, 17, 42, 9]])
    with torch.no_grad():
        expected = peft_model(input_ids=ids).logits
        with peft_model.disable_adapter():
            untrained = peft_model(input_ids=ids).logits
        got = merged(input_ids=ids).logits
    assert (expected - untrained).abs().max() > 0.5  # the adapter matters ...
    assert (got - expected).abs().max() < 0.1  # ... and is in the exported weights (bf16-rounded)


def test_the_model_card_names_base_algorithm_config_provenance_and_results(run):
    folder, _, evals = run
    main([str(folder), "--eval", str(evals)])
    card = (folder / "student" / "README.md").read_text()
    assert card.startswith("---\n") and "library_name: transformers" in card and "- lopd" in card
    assert "lopd-train --algo lopd" in card and "`tiny-random`" in card and '"lr": 0.0001' in card
    assert "source: **official**" in card and "ab" * 32 in card and "bfcl-eval==2025.8.6.2" in card
    assert '"mean_reward": 0.25' in card and '"overall": 0.5' in card and "bfloat16: the run's dtype" in card


def test_push_to_hub_is_a_real_path_up_to_the_offline_error(run, monkeypatch, capsys):
    folder, _, _ = run
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(SystemExit, match=r"lopd-export: cannot push .* to me/student: the hub is in offline mode"):
        main([str(folder), "--push-to-hub", "me/student"])
    assert (folder / "student" / "config.json").is_file()  # exported before the push was tried
    with pytest.raises(models.HubError, match="not an exported model folder"):
        models.push_to_hub(folder / "checkpoints", "me/student")


def test_the_dtype_rule():
    assert training_dtype({"dtype": "auto"}, "float16") == ("float16", "--dtype")
    assert training_dtype({"dtype": "auto", "resolved_dtype": "bfloat16"})[0] == "bfloat16"
    assert training_dtype({"dtype": "auto"}) == ("float32", "the run did not record its resolved dtype; fp32 assumed")


def test_lopd_train_exports_with_its_card_and_push_to_hub_reaches_the_hub_call(tmp_path, monkeypatch, bfcl_data):
    """The trainer's own export at the end of a run goes through lopd-export (dtype, card), and --push-to-hub
    is called on the exported folder (the hub call stubbed here; the test above runs it to the offline error)."""
    from lopd_train.config import TrainConfig
    from lopd_train.training.trainer import train

    pushed = []
    monkeypatch.setattr(models, "push_to_hub", lambda folder, repo, **k: pushed.append((folder, repo)) or "url")
    out = tmp_path / "run"
    cfg = TrainConfig(model="tiny-random", env="lopd/BFCLv3-v0", category="simple", tasks=["simple_0"], algo="grpo",
                      steps=1, tasks_per_step=1, group_size=2, max_new_tokens=8, lora_r=4, lora_alpha=8,
                      progress=False, output_dir=str(out), cold_start_steps=0, bank_mode="dynamic",
                      push_to_hub="me/student")
    result = train(cfg)
    card = (out / "student" / "README.md").read_text()
    assert "lopd-train --algo grpo" in card and "bfcl-eval==2025.8.6.2" in card and "float32" in card
    assert pushed == [(out / "student", "me/student")] and result["exported"] == str(out / "student")
    with pytest.raises(ValueError, match="needs --export"):
        TrainConfig(push_to_hub="me/student", export=False)

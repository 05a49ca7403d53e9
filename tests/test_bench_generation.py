"""benchmarks/generation.py: every variant decodes exactly the asked number of tokens (so their work is equal),
the forward hooks find the prefill and every decoding step, merging the LoRA changes the logits only by
float rounding, and the bounds' arithmetic. One smoke run on the tiny random model; nothing is timed."""

from __future__ import annotations

import pytest

from tests.bench_loader import load_benchmark

bench = load_benchmark("generation")


def test_decode_seconds_starts_after_the_last_prefill_forward():
    clock = bench.ForwardClock(module=None)
    clock.calls = [(0.0, 1.0, 64), (1.0, 1.5, 1), (1.5, 2.0, 1), (2.0, 2.25, 1)]
    assert clock.decode_seconds() == (1.25, 3)
    clock.calls = [(0.0, 1.0, 30), (1.0, 2.0, 1)]  # a shared prefill, then the last prompt token: still one step
    assert clock.decode_seconds() == (1.0, 1)
    clock.calls = [(0.0, 1.0, 30)]
    assert clock.decode_seconds() == (0.0, 0)


def test_bounds_scale_with_batch_until_compute_binds():
    shape = {"weight_bytes": 500e6, "matmul_params": 100e6, "kv_bytes_per_position": 0.0, "layers": 10,
             "hidden": 100}
    one = bench.bounds(shape, 1, 0, bandwidth=10e9, flops=100e9)
    assert one["memory_bound_tok_s"] == pytest.approx(20.0) and one["compute_bound_tok_s"] == pytest.approx(500.0)
    assert one["bound_by"] == "memory" and one["roofline_tok_s"] == pytest.approx(20.0)
    big = bench.bounds(shape, 32, 0, bandwidth=10e9, flops=100e9)
    assert big["memory_bound_tok_s"] == pytest.approx(640.0) and big["bound_by"] == "compute"
    shape["kv_bytes_per_position"] = 1e6  # the KV cache is read every step too
    kv = bench.bounds(shape, 8, 100, bandwidth=10e9, flops=100e9)
    assert kv["memory_bound_tok_s"] == pytest.approx(8 * 10e9 / (500e6 + 8 * 100 * 1e6))


def test_no_eos_proxy_hides_only_the_end_of_sequence_id():
    class Tok:
        eos_token_id, pad_token_id = 2, 0

        def decode(self, ids):
            return "x" * len(ids)
    proxy = bench.NoEOS(Tok())
    assert proxy.eos_token_id is None and proxy.pad_token_id == 0 and proxy.decode([1, 2]) == "xx"


def test_roofline_comes_from_the_median_of_the_bound_measurements():
    """A best-of would take the one read that met a quiet moment; the median of the reads and of the step's
    GEMM rates sets the bound, the range is kept beside it, and each round's fraction is taken against it."""
    import argparse

    shape = {"weight_bytes": 1e9, "matmul_params": 1e6, "kv_bytes_per_position": 0.0, "layers": 1, "hidden": 8,
             "tied_embeddings": True}
    args = argparse.Namespace(prompt_tokens=0, new_tokens=2)
    calls = {1: {bench.BASELINE: [{"wall_s": 1.0, "decode_s": 1.0, "decode_steps": 5},
                                  {"wall_s": 1.0, "decode_s": 1.0, "decode_steps": 10}]}}
    samples = {"bandwidth": [10e9, 20e9, 100e9], "gemm": {1: [1e12, 2e12, 3e12]}}
    row = bench.summarise(args, calls, shape, samples)["1"]
    assert row["bounds"]["memory_bound_tok_s"] == pytest.approx(20.0)  # the median read, not the best (100)
    assert row["bound_inputs"]["read_bandwidth_bytes_s"] == {"median": 20e9, "min": 10e9, "max": 100e9}
    assert row["roofline_range_tok_s"] == pytest.approx([10.0, 100.0])
    frac = row["variants"][bench.BASELINE]["decode_fraction_of_roofline"]
    assert frac == {"median": pytest.approx(0.375), "min": pytest.approx(0.25), "max": pytest.approx(0.5)}


def test_step_gemm_rates_run_the_models_own_linear_layers():
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    rates = bench.step_gemm_rates(model, batch=3, reps=4)
    assert len(rates) == 4 and all(r > 0 for r in rates)


def test_smoke_run_on_the_tiny_model_decodes_exactly_the_asked_tokens(tmp_path, capsys):
    import re

    out = tmp_path / "gen.json"
    variants = [v for v in bench.VARIANTS if v != bench.COMPILED]  # compiling takes minutes: its own test below
    result = bench.main(["--model", "tiny-random", "--batches", "1", "3", "--reps", "1", "--prompt-tokens", "48",
                         "--new-tokens", "5", "--bound-reps", "2", "--json", str(out), "--variants", *variants])
    text = capsys.readouterr().out
    number = r"[\d.]+ \([\d.]+-[\d.]+\)"
    assert re.search(rf"read bandwidth {number} GB/s \(median \(min-max\) of 2 reads", text)
    for b in ("1", "3"):
        assert re.search(rf"^\s+{b}  bounds: step GEMMs {number} GFLOP/s \(median \(min-max\) of 2\); memory \d+ "
                         rf"tok/s, compute \d+ tok/s -> roofline \d+ \(\d+-\d+\) tok/s", text, re.MULTILINE), b
        bound = result["summary"][b]["bound_inputs"]
        assert len(result["step_gemm_flops"][b]) == bound["gemm_timings"] == 2
        for v in variants:
            frac = result["summary"][b]["variants"][v]["decode_fraction_of_roofline"]
            assert 0 < frac["min"] <= frac["median"] <= frac["max"], (b, v)
    assert len(result["read_bandwidth_bytes_s"]) == 2
    assert re.search(r"^load average [\d. ]+ -> [\d. ]+; \d+ s; command:", text, re.MULTILINE)
    assert out.exists() and result["merge_max_logit_error"] < 1e-4
    shape = result["shape"]
    assert shape["tied_embeddings"] in (True, False) and shape["weight_bytes"] > 0
    for b in ("1", "3"):
        for variant in variants:
            (call,) = result["calls"][b][variant]
            # 5 new tokens: plain generate samples the first after its prefill, then 4 one-token steps; lopd's
            # sampler prefills all but the last prompt token, then 5 one-token steps (each step one token a row)
            assert call["decode_steps"] == (4 if variant == bench.BASELINE else 5), (b, variant)
            assert call["decode_s"] > 0 and call["wall_s"] >= call["decode_s"]
        row = result["summary"][b]
        assert "end_to_end_vs_hf" not in row["variants"][bench.BASELINE]
        assert set(row["variants"]["lopd, LoRA on"]) >= {"end_to_end_vs_hf", "decode_vs_hf"}
        assert "merge_plus_unmerge_s" in row["variants"]["lopd, LoRA merged"]
        assert "end_to_end_vs_today" not in row["variants"][bench.TODAY]
        for v in ("lopd, LoRA merged", "lopd, static cache"):
            assert set(row["variants"][v]) >= {"end_to_end_vs_today", "decode_vs_today"}, v
            assert row["variants"][v]["same_sampled_tokens_as_today"] in ("0/1", "1/1"), v
        assert "same_sampled_tokens_as_today" not in row["variants"]["lopd, LoRA off"]  # another function
    # the greedy check: the same function computed another way gives the same tokens on the tiny model
    assert set(result["greedy_check"]) == set(variants) - {bench.TODAY}  # the reference of the others
    for v in result["greedy_check"]:
        check = result["greedy_check"][v]
        assert check["reference"] == {bench.BASELINE: "lopd, LoRA off", "lopd, LoRA off": bench.BASELINE}.get(
            v, bench.TODAY), v
        assert check["rows"] == 3 and check["identical_rows"] == 3, v
    assert result["greedy_check"]["lopd, static cache"]["max_logprob_difference"] < 1e-4
    assert re.search(r"^greedy, batch 3, 5 new tokens: lopd, static cache vs lopd, LoRA on: identical tokens in "
                     r"3/3 rows, largest recorded log-prob difference", text, re.MULTILINE)
    assert result["summary"]["3"]["bounds"]["memory_bound_tok_s"] > result["summary"]["1"]["bounds"]["memory_bound_tok_s"]


@pytest.mark.parametrize("compiled", [False, True])
def test_static_cache_decodes_todays_greedy_tokens_and_restores_generate(compiled):
    """lopd's sampler decoding into a static cache (its shared prefill copied in), eager or through
    transformers' compiled step, gives the tokens today's dynamic cache gives, log-probs to float rounding;
    the policy's own ``generate`` is back afterwards. The compiled case traces with the ``eager`` backend (the
    same graph capture and cache handling, no code generation: seconds, not minutes)."""
    import torch

    from lopd_train import models
    from lopd_train.rollout.engine import SamplingConfig, generate

    torch.manual_seed(0)
    backbone, tok = models.tiny_model()
    policy = models.wrap_lora(backbone, {"student": models.lora_config(4, 8)})
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.05)
    policy.eval()
    prompts = [[*range(40, 80), 100 + i, 7 + i] for i in range(3)] + [[*range(40, 80), 100, 7]]
    cfg = SamplingConfig(max_new_tokens=6, temperature=0.0)
    config = None
    if compiled:
        config = bench.compile_config("cpu")
        config.backend = "eager"
    with models.adapter(policy, "student"):
        today = generate(policy, bench.NoEOS(tok), prompts, cfg)
        with bench.static_cache(policy, 6, config) as times:
            static = generate(policy, bench.NoEOS(tok), prompts, cfg)
    assert times["generate_s"] > 0
    assert "generate" not in vars(policy)
    assert hasattr(policy.get_base_model(), "_compiled_call") == compiled  # transformers did compile the step
    assert [t for t, *_ in static] == [t for t, *_ in today]
    assert all(len(t) == 6 for t, *_ in static)
    for (_, a, *_), (_, b, *_) in zip(static, today, strict=True):
        assert a == pytest.approx(b, abs=1e-4)

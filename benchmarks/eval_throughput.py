"""lopd-eval throughput: generated tokens/s and tasks/s of every backend available here, on the same tasks,
as ratios against the ``hf`` backend measured in the same run.

    python benchmarks/eval_throughput.py --model smollm2-135m-instruct --env lopd/BFCLv3-v0 --category simple \
        --limit 16 --batch-size 8 [--base-url http://127.0.0.1:8080/v1 --served-model smollm2] [--vllm]

``hf`` always runs; ``openai`` runs when ``--base-url`` names a server (vLLM serve, llama.cpp server, ...);
``vllm`` with ``--vllm`` when vLLM is importable. Greedy decoding, so every backend answers the same tasks
with comparable lengths; the time counted is the env loop's (model loading excluded).
"""

from __future__ import annotations

import argparse
import json
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
    args = p.parse_args()
    common = dict(model=args.model, env=[args.env], category=args.category, limit=args.limit,
                  batch_size=args.batch_size, max_new_tokens=args.max_new_tokens)
    rows = {"hf": measure(backend="hf", **common)}
    if args.base_url:
        rows["openai"] = measure(backend="openai", base_url=args.base_url, served_model=args.served_model,
                                 concurrency=args.batch_size, **common)
    if args.vllm:
        rows["vllm"] = measure(backend="vllm", **common)
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

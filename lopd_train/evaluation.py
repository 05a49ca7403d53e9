"""Evaluate any checkpoint on any lopd env: mean reward and success per env and category, as a table,
JSON and a bar chart. Greedy decoding by default (deterministic scores)."""

from __future__ import annotations

import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

from lopd_train import models
from lopd_train.rollout import SamplingConfig, make_envs, run_episodes, task_ids


def load_for_eval(model: str, adapter: str | None = None, device: str = "auto", dtype: str = "auto"):
    dev = models.default_device() if device == "auto" else torch.device(device)
    policy, tok = models.load_backbone(model, dev, dtype)
    if adapter:
        from peft import PeftModel

        policy = PeftModel.from_pretrained(policy, adapter).merge_and_unload()
    policy.eval()
    return policy, tok


def evaluate(policy, tokenizer, env_id: str, env_kwargs: dict[str, Any] | None = None, limit: int | None = None,
             batch_size: int = 8, sampling: SamplingConfig | None = None, task_list: list[str] | None = None,
             progress: bool = True) -> dict[str, Any]:
    from tqdm.auto import tqdm

    sampling = sampling or SamplingConfig(greedy=True)
    envs = make_envs(env_id, batch_size, **(env_kwargs or {}))
    tasks = task_list or task_ids(envs[0])
    if limit:
        tasks = tasks[:limit]
    rows = []
    t0 = time.time()
    with ThreadPoolExecutor(max_workers=batch_size) as pool, torch.no_grad():
        for i in tqdm(range(0, len(tasks), batch_size), desc=env_id, disable=not progress, unit="batch"):
            chunk = tasks[i:i + batch_size]
            trajs = run_episodes(policy, tokenizer, envs[:len(chunk)], chunk, sampling, seeds=[0] * len(chunk),
                                 pool=pool)
            rows += [{"task_id": t.task_id, "category": t.category, "reward": t.reward, "success": t.success,
                      "turns": t.turns, "action_tokens": t.n_actions} for t in trajs]
    for env in envs:
        env.close()
    by_cat: dict[str, list[float]] = defaultdict(list)
    for r in rows:
        by_cat[r["category"]].append(r["reward"])
    return {"env": env_id, "n": len(rows), "reward_mean": float(np.mean([r["reward"] for r in rows])) if rows else 0.0,
            "success_rate": float(np.mean([r["success"] for r in rows])) if rows else 0.0,
            "categories": {c: {"n": len(v), "reward_mean": float(np.mean(v))} for c, v in sorted(by_cat.items())},
            "seconds": time.time() - t0, "episodes": rows}


def table(results: list[dict[str, Any]]) -> str:
    lines = [f"{'env':28s} {'category':28s} {'n':>5s} {'reward':>7s}"]
    for res in results:
        for cat, c in res["categories"].items():
            lines.append(f"{res['env']:28s} {cat:28s} {c['n']:5d} {c['reward_mean']:7.3f}")
        lines.append(f"{res['env']:28s} {'(all)':28s} {res['n']:5d} {res['reward_mean']:7.3f}")
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], out: Path, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels, values = [], []
    for res in results:
        for cat, c in res["categories"].items():
            labels.append(f"{res['env'].split('/')[-1]}\n{cat}")
            values.append(c["reward_mean"])
    fig, ax = plt.subplots(figsize=(max(4, 1.2 * len(labels)), 3.5))
    ax.bar(range(len(values)), values)
    ax.set_xticks(range(len(values)), labels, fontsize=7)
    ax.set_ylim(0, 1)
    ax.set_ylabel("mean reward")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)

"""What a finished evaluation writes beside its records: a markdown table, a PNG bar chart, and the
provenance that makes a number reproducible (package versions)."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from lopd_train.evaluation import leaderboards

PACKAGES = ("lopd", "torch", "transformers", "peft", "gymnasium", "evalplus", "vllm", "requests", "numpy")


def package_versions() -> dict[str, str | None]:
    from lopd_train.training.software import versions

    return {"python": platform.python_version(), **versions(PACKAGES)}


def rows(results: dict[str, Any]) -> list[tuple[str, str, float, int, str]]:
    """(env, metric, value, n, note) for the table and the chart: each benchmark's headline, then its parts.
    ``n`` is the records behind the row (a category's own count where the table has it, else the env's).
    ``note`` says when a value counts categories that were not evaluated as 0 (the BFCL and ACEBench
    aggregations), so that a partial run's "overall" or "summary" cannot be read as the model's full score."""
    out = []
    for env_id, res in results["envs"].items():
        table = res["leaderboard"]
        name, value = leaderboards.headline(env_id, table)
        notes = dict(_notes(env_id, table))
        counts = _counts(env_id, table)
        out.append((env_id, name, value, res["n_records"], notes.get(name, "")))
        for metric, v in _parts(env_id, table):
            if metric != name:  # the headline is already the first row
                out.append((env_id, metric, v, counts.get(metric, res["n_records"]), notes.get(metric, "")))
    return out


def _notes(env_id: str, table: dict[str, Any]) -> list[tuple[str, str]]:
    benchmark = leaderboards.benchmark_name(env_id)
    if benchmark == "ACEBench":
        from lopd_envs.suites.acebench.data import AGENT, NORMAL, SPECIAL

        seen = set(table["categories"])
        groups = {"normal": NORMAL, "special": SPECIAL, "agent": AGENT}
        missing = {g: [c for c in cats if c not in seen] for g, cats in groups.items()}
        notes = [(g, f"{'partial' if len(m) < len(groups[g]) else 'not evaluated'}: missing categories count 0")
                 for g, m in missing.items() if m]
        if notes:
            notes.append(("summary", "partial: missing categories count 0"))
        return notes
    if benchmark != "BFCLv3":
        return []
    groups = {"overall": table["overall"], "non-live": table["non_live"]["overall"],
              "live": table["live"]["overall"], "multi-turn": table["multi_turn"]["overall"]}
    return [(metric, f"{'partial' if group['evaluated'] else 'not evaluated'}: missing categories count 0")
            for metric, group in groups.items() if group["missing"]]


def _counts(env_id: str, table: dict[str, Any]) -> dict[str, int]:
    """Records behind each per-category row, where the benchmark's table keeps them."""
    name = leaderboards.benchmark_name(env_id)
    if name in ("BFCLv3", "ACEBench"):
        return {c: int(v["total_count"]) for c, v in table["categories"].items() if "total_count" in v}
    if name == "LiveCodeBench":
        return {f"pass@1 {d}": int(v["n_tasks"]) for d, v in table["by_difficulty"].items()}
    if name == "EnvScaler":
        return {f"{c} mean reward": int(v["n"]) for c, v in table["categories"].items()}
    return {}


def _parts(env_id: str, table: dict[str, Any]) -> list[tuple[str, float]]:
    name = leaderboards.benchmark_name(env_id)
    if name == "BFCLv3":
        return ([("non-live", table["non_live"]["overall"]["accuracy"]), ("live", table["live"]["overall"]["accuracy"]),
                 ("multi-turn", table["multi_turn"]["overall"]["accuracy"])]
                + [(c, v["accuracy"]) for c, v in table["categories"].items() if not v["missing"]])
    if name == "ACEBench":
        return [(g, table[g]) for g in ("normal", "special", "agent")] + [
            (c, v["accuracy"]) for c, v in table["categories"].items()]
    if name in ("HumanEvalPlus", "MBPPPlus"):
        return [(f"{part} {k}", v) for part in ("base", "plus") for k, v in (table.get(part) or {}).items()]
    if name == "LiveCodeBench":
        return [(f"pass@1 {d}", v["pass@1"]) for d, v in table["by_difficulty"].items()]
    if name == "EnvScaler":
        return [("full-pass rate", table["full_pass_rate"])] + [
            (f"{c} mean reward", v["mean_reward"]) for c, v in table["categories"].items()]
    return [(c, v["accuracy"]) for c, v in table.get("categories", {}).items()]


def markdown(results: dict[str, Any]) -> str:
    model = results["model"]
    lines = [f"# lopd-eval: {model['spec']}" + (f" + {model['adapter']}" if model.get("adapter") else ""), "",
             f"backend `{results['backend']['backend']}`, temperature {results['sampling']['temperature']}, "
             f"{results['samples']} sample(s) per task", "",
             "| env | metric | value | records | note |", "|---|---|---:|---:|---|"]
    lines += [f"| {env} | {metric} | {value:.4f} | {n} | {note} |" for env, metric, value, n, note in rows(results)]
    errors = {env: res.get("n_errors", 0) for env, res in results["envs"].items() if res.get("n_errors")}
    if errors:
        lines += ["", "**Not scored** (the server's reply was unusable; `--resume` retries them): "
                  + ", ".join(f"{env} {n}" for env, n in errors.items()) + ". The table counts scored records only."]
    return "\n".join(lines) + "\n"


def plot(results: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = rows(results)
    labels = [f"{env.split('/')[-1]}\n{metric}" + ("*" if note else "") for env, metric, _, _, note in data]
    values = [v for _, _, v, _, _ in data]
    fig, ax = plt.subplots(figsize=(max(4, 0.9 * len(labels)), 3.8))
    ax.bar(range(len(values)), values)
    ax.set_xticks(range(len(values)), labels, fontsize=6, rotation=60, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("score")
    ax.set_title(results["model"]["spec"], fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)

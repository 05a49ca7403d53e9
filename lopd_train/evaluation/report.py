"""What a finished evaluation writes beside its records: a markdown table, a PNG bar chart, and the
provenance that makes a number reproducible (package versions)."""

from __future__ import annotations

import platform
from pathlib import Path
from typing import Any

from lopd_train.evaluation import leaderboards

PACKAGES = ("lopd", "torch", "transformers", "peft", "gymnasium", "evalplus", "vllm", "requests", "numpy")


def package_versions() -> dict[str, str | None]:
    from lopd_train.software import versions

    return {"python": platform.python_version(), **versions(PACKAGES)}


#: a group's rows the leaderboard computes although it counts categories that were not run as 0
RULE = {"BFCLv3": "bfcl-eval's rule", "ACEBench": "ACEBench's rule"}

#: BFCL-v3's groups and the categories under each (bfcl-eval's generate_leaderboard_csv)
BFCL_GROUPS = {"non-live": ("simple", "java", "javascript", "multiple", "parallel", "parallel_multiple",
                            "irrelevance"),
               "live": ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple",
                        "live_irrelevance", "live_relevance"),
               "multi-turn": ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param",
                              "multi_turn_long_context")}


def rows(results: dict[str, Any]) -> list[tuple[str, str, float | None, int, str]]:
    """(env, metric, value, n, note) for the table and the chart: each benchmark's headline, then its parts.
    ``n`` is the records behind the row (a category's or group's own count where the table has it, else the
    env's). ``value`` is ``None`` for a group none of whose categories was run: its 0 would read as a score.
    ``note`` says when a value counts categories that were not run as 0 (the BFCL and ACEBench aggregations,
    named), so that a partial run's "overall" or "summary" cannot be read as the model's full score."""
    out = []
    for env_id, res in results["envs"].items():
        table = res["leaderboard"]
        name, value = leaderboards.headline(env_id, table)
        notes = dict(_notes(env_id, table))
        counts = _counts(env_id, table)
        out.append((env_id, name, value, res["n_records"], notes.get(name, "")))
        for metric, v in _parts(env_id, table):
            if metric != name:  # the headline is already the first row
                note = notes.get(metric, "")
                out.append((env_id, metric, None if note == NOT_RUN else v, counts.get(metric, res["n_records"]),
                            note))
    return out


NOT_RUN = "not run: no category of this group was evaluated"


def _notes(env_id: str, table: dict[str, Any]) -> list[tuple[str, str]]:
    benchmark = leaderboards.benchmark_name(env_id)
    if benchmark == "ACEBench":
        from lopd_envs.suites.acebench.data import AGENT, NORMAL, SPECIAL

        seen = set(table["categories"])
        groups = {"normal": NORMAL, "special": SPECIAL, "agent": AGENT}
        missing = {g: [c for c in cats if c not in seen] for g, cats in groups.items()}
        notes = [(g, _partial(benchmark, len(groups[g]) - len(m), len(groups[g])) if len(m) < len(groups[g])
                  else NOT_RUN) for g, m in missing.items() if m]
        if notes:
            total = sum(len(c) for c in groups.values())
            notes.append(("summary", _partial(benchmark, total - sum(len(m) for m in missing.values()), total)))
        return notes
    if benchmark != "BFCLv3":
        return []
    cats = table["categories"]
    groups = {**BFCL_GROUPS, "overall": tuple(cats)}
    notes = []
    for metric, members in groups.items():
        ran = sum(cats[c]["evaluated"] for c in members if c in cats)
        if ran < len(members):
            notes.append((metric, _partial(benchmark, ran, len(members)) if ran or metric == "overall" else NOT_RUN))
    return notes


def _partial(benchmark: str, ran: int, total: int) -> str:
    return f"partial ({ran} of {total} categories run): the others count 0, {RULE[benchmark]}"


def _counts(env_id: str, table: dict[str, Any]) -> dict[str, int]:
    """Records behind each per-category row, where the benchmark's table keeps them."""
    name = leaderboards.benchmark_name(env_id)
    if name in ("BFCLv3", "ACEBench"):
        counts = {c: int(v["total_count"]) for c, v in table["categories"].items()
                  if "total_count" in v and v.get("evaluated", True)}
        if name == "BFCLv3":  # a group counts the records of its categories that were run
            counts.update({g: sum(counts.get(c, 0) for c in cats) for g, cats in BFCL_GROUPS.items()})
        else:
            from lopd_envs.suites.acebench.data import AGENT, NORMAL, SPECIAL

            groups = {"normal": NORMAL, "special": SPECIAL, "agent": AGENT}
            counts.update({g: sum(counts.get(c, 0) for c in cats) for g, cats in groups.items()})
        return counts
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
    lines += [f"| {env} | {metric} | {'not run' if value is None else f'{value:.4f}'} | {n} | {note} |"
              for env, metric, value, n, note in rows(results)]
    data = [line for line in map(data_line, results["envs"].items()) if line]
    if data:
        lines += ["", "**Data**: " + "; ".join(data) + "."]
    errors = {env: res.get("n_errors", 0) for env, res in results["envs"].items() if res.get("n_errors")}
    if errors:
        lines += ["", "**Not scored** (the server's reply was unusable; `--resume` retries them): "
                  + ", ".join(f"{env} {n}" for env, n in errors.items()) + ". The table counts scored records only."]
    return "\n".join(lines) + "\n"


def data_line(item: tuple[str, dict[str, Any]]) -> str:
    """What an env's numbers were computed on, when it is not the official release (MBPP+'s pre-release
    standing in for v0.2.0, bundled or lopd's own data): said in results.md, not only in results.json."""
    env_id, res = item
    prov = res.get("provenance") or {}
    if not prov or prov.get("source") == "official":
        return ""
    origin = res.get("data_origin") or ""
    stood_for = origin[origin.find("(stand-in for "):] if "(stand-in for " in origin else ""
    return (f"{env_id} ran on {prov.get('benchmark', '')} `{prov.get('version', '')}`, source "
            f"**{prov['source']}**" + (f" {stood_for}" if stood_for else "") + ", not the official release")


def plot(results: dict[str, Any], out: Path) -> None:
    import matplotlib.pyplot as plt

    fig = figure(results)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def figure(results: dict[str, Any]):
    """One bar per row with its value and its n written on it, so that a chart of zeros is not an empty
    frame; partial rows (categories not run counted 0) hatched and in the legend; rows never run labelled
    "not run" where their bar would be."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    data = rows(results)
    labels = [f"{env.split('/')[-1]}\n{metric}" for env, metric, _, _, _ in data]
    fig, ax = plt.subplots(figsize=(max(5, 0.9 * len(labels)), 4.2))
    for i, (_, _, value, n, note) in enumerate(data):
        if value is None:
            ax.text(i, 0.02, "not run", ha="center", va="bottom", rotation=90, fontsize=7, color="0.4")
            continue
        partial = note.startswith("partial")
        ax.bar(i, value, color="tab:orange" if partial else "tab:blue", hatch="//" if partial else None,
               edgecolor="black", linewidth=0.5)
        ax.text(i, value + 0.01, f"{value:.3f}\nn={n}", ha="center", va="bottom", fontsize=6)
    ax.set_xticks(range(len(labels)), labels, fontsize=6, rotation=60, ha="right")
    ax.set_xlim(-0.6, len(labels) - 0.4)
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("score")
    ax.set_title(results["model"]["spec"], fontsize=9)
    ax.legend(handles=[Patch(color="tab:blue", label="scored on what was run"),
                       Patch(facecolor="tab:orange", hatch="//", edgecolor="black",
                             label="partial: categories not run count 0 (the leaderboard's rule)")],
              fontsize=6, loc="upper right")
    fig.tight_layout()
    return fig

"""The decisive test's report (issue 57): is there a task-specific latent channel at all?

Reads the arms that ``benchmarks/results/decisive_test/run.sh`` ran with ``benchmarks/privileged_gain.py`` (each a
results folder: ``results.json`` and ``records/cold_start_<steps>.jsonl``, the per-trajectory NLLs), recomputes
every interval from the records, and writes ``results.md`` and ``decisive_test.png`` into ``--out``:

* per arm and cold-start budget: the PIG of the task's own latents against no context, and of text, zero,
  random and another task's latents (95% bootstrap over trajectories), on all tokens and on the decisive ones;
* the decisive quantity: own latents minus another task's latents, per trajectory, the interval resampling
  tasks (a task's trajectories together: a small model's successes of one task are often the same call);
* the teacher's sampled success with each context.

**A task-specific channel exists** when, for some arm and budget, that paired difference's interval lies above
0. The report says plainly which way it came out. Example::

    python benchmarks/decisive_test.py benchmarks/results/decisive_test/{qformer-self,qformer-exclude,perceiver-self}
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.pig_figure import pig_axes, save_pig_figure  # noqa: E402

CONTROLS = ("text", "zero", "random", "other")


def arm_rows(folder: Path) -> list[dict]:
    """One row per measured cold-start budget of an arm, every figure recomputed from its records."""
    from lopd_train.latent import diagnostics

    report = json.loads((folder / "results.json").read_text())
    rows = []
    for point in report["cold_start"]:
        steps = int(point["cold_start_steps"])
        path = folder / "records" / f"cold_start_{steps}.jsonl"
        if not path.exists():
            continue  # a point measured before records were kept: not part of this report
        recs = diagnostics.read_records(path)
        row = {"arm": folder.name, "steps": steps, "trajectories": len(recs),
               "tasks": len({r.task_id for r in recs}), "sampled_success": point.get("sampled_success"),
               "pairing": report.get("pairing", {}), "config": report.get("arm", {})}
        for decisive in (False, True):
            tag = "@decisive" if decisive else ""
            row["latent" + tag] = diagnostics.bootstrap_gain(recs, "latent", decisive=decisive)
            for c in CONTROLS:
                row[c + tag] = diagnostics.bootstrap_gain(recs, c, decisive=decisive)
            row["own_minus_other" + tag] = diagnostics.paired_gain(recs, "latent", "other", decisive=decisive,
                                                                   by_task=True)
        rows.append(row)
    return rows


def verdict(rows: list[dict]) -> tuple[bool, str]:
    """Whether any arm's own-minus-other interval (tasks resampled) lies above 0, and the sentence that says so."""
    found = [r for r in rows if r["own_minus_other"]["low"] > 0]
    if found:
        best = max(found, key=lambda r: r["own_minus_other"]["low"])
        return True, (f"A task-specific latent channel exists: with `{best['arm']}` after {best['steps']} cold-start "
                      f"steps the task's own latents beat another task's by {gain(best['own_minus_other'])} nats "
                      f"per token (interval over tasks above 0).")
    if not rows:
        return False, "No arm has been measured yet."
    best = max(rows, key=lambda r: r["own_minus_other"]["pig"])
    return False, (f"No task-specific latent channel was found: no arm's own-minus-other interval lies above 0 "
                   f"(largest: `{best['arm']}` at {best['steps']} steps, {gain(best['own_minus_other'])}).")


def gain(g: dict) -> str:
    return f"{g['pig']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]"


def render(rows: list[dict]) -> str:
    _exists, sentence = verdict(rows)
    lines = ["# The decisive test: a task-specific latent channel?", "", f"**{sentence}**", "",
             "PIG = NLL(no context) - NLL(context), nats per sampled token of held-back successful trajectories "
             "(never in the bank); [95% bootstrap interval over trajectories]. *own - other*: the task's own "
             "latents against another task's on the same trajectory, the interval resampling tasks. Decisive: "
             "tokens where the student's greedy choice differs from the trajectory's. Every figure is recomputed "
             "from `<arm>/records/cold_start_<steps>.jsonl`.", "",
             "## All tokens", "",
             "| arm | steps | trajectories / tasks | own latents | text | zero | random | another task's | own - other |",
             "|---|---:|---:|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['steps']} | {r['trajectories']} / {r['tasks']} | {gain(r['latent'])} | "
                     + " | ".join(gain(r[c]) for c in CONTROLS) + f" | **{gain(r['own_minus_other'])}** |")
    lines += ["", "## Decisive tokens", "",
              "| arm | steps | own latents | text | zero | random | another task's | own - other |",
              "|---|---:|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['arm']} | {r['steps']} | {gain(r['latent@decisive'])} | "
                     + " | ".join(gain(r[c + '@decisive']) for c in CONTROLS)
                     + f" | {gain(r['own_minus_other@decisive'])} |")
    lines += ["", "## The teacher's sampled success on the held-back tasks", "",
              "| arm | steps | no context | text | own latents | another task's latents |", "|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        s = r["sampled_success"]
        if s:
            lines.append(f"| {r['arm']} | {r['steps']} | {s['none']:.3f} | {s['text']:.3f} | {s['latent']:.3f} | "
                         f"{s.get('other', float('nan')):.3f} |")
    lines += ["", "## The arms", "", "| arm | composer | cold-start pairing | J | cold-start lr | batch | "
              "same-task fraction of the pairs | own row retrieved |", "|---|---|---|---:|---:|---:|---:|---:|"]
    seen = set()
    for r in rows:
        if r["arm"] in seen:
            continue
        seen.add(r["arm"])
        c, p = r["config"], r["pairing"]
        lines.append(f"| {r['arm']} | {c.get('composer')} | {c.get('cold_start_retrieval')} | {c.get('top_j')} | "
                     f"{c.get('cold_start_lr')} | {c.get('cold_start_batch_size')} | "
                     f"{p.get('cold_start_same_task_fraction', float('nan')):.2f} | "
                     f"{p.get('cold_start_own_row_fraction', float('nan')):.2f} |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict], path: Path) -> None:
    arms = sorted({r["arm"] for r in rows})
    fig, ax = pig_axes(figsize=(7, 3.8))
    for k, arm in enumerate(arms):
        mine = sorted((r for r in rows if r["arm"] == arm), key=lambda r: r["steps"])
        x = [r["steps"] + 6 * (k - len(arms) / 2) for r in mine]  # a small offset so the bars do not overlap
        for name, style in (("own_minus_other", "-o"), ("latent", ":s")):
            y = [r[name]["pig"] for r in mine]
            err = [[r[name]["pig"] - r[name]["low"] for r in mine], [r[name]["high"] - r[name]["pig"] for r in mine]]
            label = f"{arm}: own - other" if name == "own_minus_other" else f"{arm}: own vs none"
            ax.errorbar(x, y, yerr=err, fmt=style, capsize=3, label=label, color=f"C{k}")
    save_pig_figure(fig, ax, path, ylabel="nats / token", legend_size=7)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("arms", nargs="+", help="results folders of benchmarks/privileged_gain.py, one per arm")
    p.add_argument("--out", default=None, help="where results.md and the plot go (default: the arms' parent)")
    args = p.parse_args(argv)
    folders = [Path(a) for a in args.arms]
    missing = [str(f) for f in folders if not (f / "results.json").exists()]
    if missing:
        p.error(f"no results.json in {', '.join(missing)}")
    rows = [r for f in folders for r in arm_rows(f)]
    out = Path(args.out) if args.out else folders[0].parent
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.md").write_text(render(rows))
    (out / "results.json").write_text(json.dumps({"verdict": verdict(rows)[0], "rows": rows}, indent=2))
    if rows:
        plot(rows, out / "decisive_test.png")
    print(verdict(rows)[1])
    return 0


if __name__ == "__main__":
    sys.exit(main())

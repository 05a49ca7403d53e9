"""Privileged-information gain (PIG) of LOPD's teacher: does its context know anything the student does not?

On a setting (env, prompt, model: a lopd-train config), this script

1. builds a reference bank (the base model samples ``--samples`` times on each of ``--pool`` training tasks;
   ``--hold-back`` successes never enter it) exactly as a reference-mode run does (``Trainer.build_bank``);
2. measures, on the held-back successes, the frozen teacher's NLL per token without context and with the
   retrieved experiences as text, for each ``--formats`` x ``--top-j`` (the text pilot: which setting gives a
   clearly positive text PIG);
3. cold-starts the composer in segments and, at each of ``--cold-start`` steps (e.g. 0,50,200,1000), measures
   the latent PIG against its controls (zero latents, random latents, another task's latents) and the text
   upper bound, all with 95% bootstrap intervals, on all tokens and on the decisive ones;
4. optionally (``--success-samples N``) the teacher's sampled success rate with no context, text and latents,
   and with latents composed from another task's experiences (the control).

Writes ``results.json``, ``results.md`` and ``pig_vs_cold_start.png`` into ``--out``. The cold start is long on a
CPU (1,000 steps are hours), so the state (bank, held-back successes, composer and its optimiser, the report so
far) is saved every ``--save-every`` steps, and ``--resume`` goes on from there after a kill: the same bank, the
same held-back successes, the composer where it stopped. Example (the pilot)::

    python benchmarks/privileged_gain.py --config examples/study_v2/lopd.toml --pool 24 --samples 4 \\
        --hold-back 12 --cold-start 0,50,200 --out benchmarks/results/privileged_gain
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.pig_figure import pig_axes, save_pig_figure  # noqa: E402


def count(minimum: int):
    """An argparse type: an integer >= ``minimum``."""
    def parse_count(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is below {minimum}")
        return value
    return parse_count


def counts(minimum: int):
    """An argparse type: a comma-separated list of integers >= ``minimum``, e.g. ``0,50,200``."""
    one = count(minimum)
    return lambda text: [one(part.strip()) for part in text.split(",")]


def formats(text: str) -> list[str]:
    from lopd_train.latent.context import EXPERIENCE_FORMATS

    names = [part.strip() for part in text.split(",")]
    bad = [n for n in names if n not in EXPERIENCE_FORMATS]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown format(s) {bad}; choose from {list(EXPERIENCE_FORMATS)}")
    return names


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="a lopd-train config (TOML) of the setting")
    p.add_argument("--out", required=True, help="results folder")
    p.add_argument("--pool", type=count(1), default=24,
                   help="training tasks the bank is built on (the config's first N)")
    p.add_argument("--samples", type=count(1), default=4, help="base-model samples per task in the bank")
    p.add_argument("--hold-back", type=count(1), default=12, help="held-back successes PIG is measured on")
    p.add_argument("--formats", type=formats, default="trace,chat", help="experience renderings for the text pilot")
    p.add_argument("--top-j", type=counts(1), default="1,3", help="experiences per task for the text pilot")
    p.add_argument("--cold-start", type=counts(0), default="0,50,200",
                   help="cold-start steps at which latent PIG is measured")
    p.add_argument("--success-samples", type=count(0), default=0,
                   help="teacher samples per task for sampled success")
    p.add_argument("--threads", type=count(0), default=0, help="torch threads (0: default)")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    p.add_argument("--save-every", type=count(1), default=25, help="cold-start steps between saved states")
    p.add_argument("--per-task", type=count(1), default=1,
                   help="held-back successes per task at most (the task keeps one in the bank)")
    p.add_argument("--bank-from", default=None, metavar="DIR",
                   help="another run's results folder: use its bank, held-back successes and text pilot (arms "
                        "of one comparison measured on one fixed bank); --pool, --samples, --hold-back and "
                        "--per-task are then taken from it")
    p.add_argument("--build-only", action="store_true",
                   help="build the bank, hold back, run the text pilot, then stop (for --bank-from)")
    p.add_argument("--resume", action="store_true",
                   help="go on from the state saved in --out (same bank, held-back successes and composer); the "
                        "other arguments must be those of the first run")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    import dataclasses

    import torch

    from lopd_train.cli import load_config_file
    from lopd_train.config import TrainConfig
    from lopd_train.experience.build import HELD_BACK, read_held_back
    from lopd_train.latent import diagnostics
    from lopd_train.rollout.replay import replay_trace
    from lopd_train.training import allocator
    from lopd_train.training.trainer import Trainer

    allocator.configure()  # LOPD_MALLOC, as lopd-train (glibc's defaults unless LOPD_MALLOC=keep)
    if args.threads:
        torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    values = load_config_file(args.config)
    for kv in args.set:
        k, v = kv.split("=", 1)
        field = {f.name: f for f in dataclasses.fields(TrainConfig)}[k]
        # a list or table setting (no plain default) stays text: the config reads "a,b" and JSON itself
        values[k] = v if field.default in (None, dataclasses.MISSING) else type(field.default)(v)
    source = None
    if args.bank_from:
        source = json.loads((Path(args.bank_from) / "results.json").read_text())
        args.pool, args.samples, args.hold_back = source["pool"], source["samples"], len(source["held_back"])
        args.per_task = source.get("per_task", 1)
    values.update(algo="lopd", bank_mode="reference", bank=None, bank_samples=args.samples,
                  pig_trajectories=args.hold_back, pig_per_task=args.per_task,
                  pig_every=1,  # > 0: the bank holds successes back
                  output_dir=str(out / "run"), eval_every_rollouts=0, tensorboard=False, export=False,
                  allow_empty_cold_start=True)
    run, saved = out / "run", out / "state"
    state = load_state(saved, args) if args.resume else None
    if run.exists():
        shutil.rmtree(run)
    if state is None and source is not None:  # a new arm: the other run's bank and held-back successes
        saved.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(args.bank_from) / "state" / BANK, saved / BANK)
        shutil.copyfile(Path(args.bank_from) / "state" / HELD_BACK, saved / HELD_BACK)
    if state is not None or source is not None:  # the saved bank (its rollouts already counted in its provenance)
        values["bank"] = str(saved / BANK)
    cfg = TrainConfig(**values)
    t0 = time.time()
    trainer = Trainer(cfg)
    trainer.task_pool = trainer.task_pool[:args.pool]
    trainer.build_bank()
    prov = trainer.bank.provenance()
    algo = trainer.algo
    held_path = saved / HELD_BACK if state is not None or source is not None else run / HELD_BACK
    held = [replay_trace(trainer.envs[0], trainer.tokenizer, tr, cfg.sampling()) for tr in read_held_back(held_path)]
    if not held:
        raise SystemExit("no successes could be held back (each needs a task with two distinct successes): raise "
                         "--samples or --pool")
    if state is None:
        saved.mkdir(exist_ok=True)
        if source is None:
            shutil.copyfile(run / HELD_BACK, saved / HELD_BACK)
            trainer.bank.snapshot(saved / BANK)
        report = {"config": args.config, "pool": args.pool, "samples": args.samples, "per_task": args.per_task,
                  "bank": prov, "held_back": [t.task_id for t in held], "bank_seconds": round(time.time() - t0, 1),
                  "text_pilot": source["text_pilot"] if source is not None else [], "cold_start": [],
                  "bank_from": args.bank_from, "set": args.set,
                  "arm": {"composer": cfg.lopd.composer, "cold_start_retrieval": cfg.lopd.cold_start_retrieval,
                          "top_j": cfg.experience.top_j, "cold_start_lr": cfg.lopd.cold_start_lr,
                          "cold_start_batch_size": cfg.lopd.cold_start_batch_size}}
        done = 0
    else:
        restore(algo, state)
        report, done = state["report"], int(state["done"])
        print(f"resumed at {done} cold-start steps ({saved})", flush=True)
    from lopd_train import software  # each start's versions, with the cold-start steps it starts from

    report.setdefault("software", []).append({"cold_start_steps": done, **software.snapshot()})
    print(f"bank: {len(trainer.bank)} experiences from {prov['rollouts']} rollouts ({prov['successes']} successes); "
          f"{len(held)} held back", flush=True)

    # 2. the text pilot: which rendering and how many experiences give the teacher the most
    for fmt in args.formats if not report["text_pilot"] else []:
        for j in args.top_j:
            algo.cfg = dataclasses.replace(cfg, experience_format=fmt, top_j=j)
            exps = trainer.retriever.retrieve([t.task for t in held], k=j)
            same = sum(e.task_id == t.task_id for t, es in zip(held, exps) for e in es) / max(1, sum(map(len, exps)))
            recs = diagnostics.teacher_nll(algo, held, exps, conditions=("none", "text"))
            row = {"format": fmt, "top_j": j, "same_task_fraction": same,
                   **diagnostics.summary(recs, ("none", "text"))}
            report["text_pilot"].append(row)
            print(f"text PIG {fmt} J={j}: {row['text']['pig']:+.3f} [{row['text']['low']:+.3f}, "
                  f"{row['text']['high']:+.3f}] nats/token (decisive {row['text@decisive']['pig']:+.3f}); "
                  f"same-task experiences {same:.0%}", flush=True)
    algo.cfg = cfg
    write(out, report)  # the text pilot stands on its own
    save_state(saved, args, algo, report, done)  # and a kill from here on keeps it and the bank
    if args.build_only:
        trainer.close()
        return 0

    # 3. latent PIG against its controls, at each cold-start budget
    exps = trainer.retriever.retrieve([t.task for t in held], k=cfg.experience.top_j)
    others = diagnostics.other_task_experiences(held, exps)
    data = trainer.cold_start_data()
    from lopd_train.algorithms.lopd import cold_start_pairs, pairing_stats

    ok = [t for t in data if t.success and t.n_actions > 0]
    report["pairing"] = pairing_stats(cold_start_pairs(trainer.retriever, ok, cfg.experience.top_j,
                                                         cfg.lopd.cold_start_retrieval))
    print(f"cold-start pairs ({cfg.lopd.cold_start_retrieval}): {report['pairing']}", flush=True)
    measured = {int(r["cold_start_steps"]) for r in report["cold_start"]}
    for target in sorted(set(args.cold_start)):
        if target in measured:
            continue
        t1 = time.time()
        while done < target:  # in chunks, each saved; a chunk's batch order is seeded by where it starts
            n = min(args.save_every, target - done) if args.save_every > 0 else target - done
            algo.cfg = dataclasses.replace(cfg, cold_start_steps=n, seed=cfg.seed + done)
            algo.cold_start(data, progress=cfg.progress)
            algo.cfg = cfg
            done += n
            save_state(saved, args, algo, report, done)
        recs = diagnostics.teacher_nll(algo, held, exps, others)
        records = out / "records"
        records.mkdir(exist_ok=True)  # every interval recomputes from these
        diagnostics.write_records(records / f"cold_start_{done}.jsonl", recs)
        row = {"cold_start_steps": done, **diagnostics.summary(recs),
               "own_minus_other": diagnostics.paired_gain(recs, "latent", "other", by_task=True),
               "own_minus_other@decisive": diagnostics.paired_gain(recs, "latent", "other", by_task=True,
                                                                   decisive=True),
               "held_back_tasks": len({r.task_id for r in recs})}
        if args.success_samples:
            # no context and the text do not depend on the composer: measured at the first point, then reused
            fixed = report.setdefault("sampled_success_fixed", {})
            for k in ("none", "text"):
                if k not in fixed:
                    fixed[k] = diagnostics.sampled_success(algo, trainer.envs[0], held, exps, kind=k,
                                                           samples=args.success_samples)
            row["sampled_success"] = {**fixed, "latent": diagnostics.sampled_success(
                algo, trainer.envs[0], held, exps, kind="latent", samples=args.success_samples)}
            # the control: latents composed, for the same task, from another task's experiences
            row["sampled_success"]["other"] = diagnostics.sampled_success(
                algo, trainer.envs[0], held, others, kind="latent", samples=args.success_samples)
        row["seconds"] = round(time.time() - t1, 1)
        report["cold_start"].append(row)
        save_state(saved, args, algo, report, done)
        d = row["own_minus_other"]
        print(f"cold start {done}: latent PIG {row['latent']['pig']:+.3f} [{row['latent']['low']:+.3f}, "
              f"{row['latent']['high']:+.3f}]; zero {row['zero']['pig']:+.3f}, random {row['random']['pig']:+.3f}, "
              f"other {row['other']['pig']:+.3f}; text {row['text']['pig']:+.3f}; own - other {d['pig']:+.3f} "
              f"[{d['low']:+.3f}, {d['high']:+.3f}] (tasks resampled)", flush=True)
        write(out, report)
    trainer.close()
    write(out, report)
    return 0


BANK = "bank.sqlite"
#: the arguments a resumed run must share with the first (what the saved bank and held-back successes came from)
SAME = ("config", "pool", "samples", "hold_back", "set", "per_task", "bank_from")


def save_state(saved: Path, args, algo, report: dict, done: int) -> None:
    """The composer after ``done`` cold-start steps (its encoder LoRA lives in the policy, its Q-Former and
    optimisers in the algorithm's state, as a trainer checkpoint keeps them), atomically, as a trainer
    checkpoint is written: tensors and plain data (state.safetensors + state.json), never a pickle."""
    from lopd_train import models, statefile

    lora = models.adapter_state(algo.policy)
    statefile.save(saved / "state", {"done": done, "lora": lora, "algo": algo.state_dict(), "report": report,
                                     "args": {k: getattr(args, k) for k in SAME}})


def restore(algo, state: dict) -> None:
    """Put the saved composer back: the policy's LoRA weights (the composer's encoder adapter among them), then
    the algorithm's state (Q-Former, its snapshot, optimisers, beta)."""
    from lopd_train import models

    models.load_adapter_state(algo.policy, state["lora"])
    algo.load_state_dict(state["algo"])


def load_state(saved: Path, args) -> dict | None:
    """The saved state, or None (nothing saved yet: start afresh); refuses a state of other arguments, and a
    state.pt of the earlier pickle format (reading a pickle can run code)."""
    from lopd_train import statefile

    if not statefile.exists(saved / "state"):
        if (saved / "state.pt").exists():
            raise SystemExit(f"--resume: {saved / 'state.pt'} is of the earlier pickle format, which is no longer "
                             "read (loading a pickle can run code); rerun without --resume to start afresh")
        print(f"--resume: nothing saved in {saved}; starting afresh", flush=True)
        return None
    try:
        state = statefile.load(saved / "state")
    except statefile.StateFileError as exc:
        raise SystemExit(f"--resume: {exc}; rerun without --resume to start afresh") from None
    differ = {k: (v, getattr(args, k)) for k, v in state["args"].items() if v != getattr(args, k)}
    if differ:
        raise SystemExit(f"--resume: the saved state was made with other arguments {differ} (saved, now); "
                         "rerun with those, or without --resume to start afresh")
    return state


def fmt_gain(g: dict) -> str:
    return f"{g['pig']:+.3f} [{g['low']:+.3f}, {g['high']:+.3f}]"


def write(out: Path, report: dict) -> None:
    (out / "results.json").write_text(json.dumps(report, indent=2))
    prov = report["bank"]
    lines = ["# Privileged-information gain (PIG)", "",
             f"Config `{report['config']}`; bank: {prov.get('entries')} experiences from {prov.get('rollouts')} "
             f"rollouts of `{prov.get('model')}` on {report['pool']} training tasks x {report['samples']} samples "
             f"({prov.get('successes')} successes); PIG measured on {len(report['held_back'])} held-back successes "
             "(never in the bank). PIG = NLL(no context) - NLL(context), nats per sampled token; "
             "[95% bootstrap interval over trajectories]; decisive: tokens where the student's greedy choice "
             "differs from the trajectory's.", "", "## Text pilot (no training)", "",
             "| format | J | same-task experiences | NLL none | NLL text | PIG text | PIG text (decisive) |",
             "|---|---:|---:|---:|---:|---|---|"]
    for r in report["text_pilot"]:
        lines.append(f"| {r['format']} | {r['top_j']} | {r['same_task_fraction']:.0%} | {r['text']['nll_none']:.3f} | "
                     f"{r['text']['nll']:.3f} | {fmt_gain(r['text'])} | {fmt_gain(r['text@decisive'])} |")
    lines += ["", "## Latent PIG against its controls, by cold-start steps", "",
              "| cold-start steps | latent | zero | random | other task | text (upper bound) | latent (decisive) |",
              "|---:|---|---|---|---|---|---|"]
    for r in report["cold_start"]:
        lines.append(f"| {r['cold_start_steps']} | {fmt_gain(r['latent'])} | {fmt_gain(r['zero'])} | "
                     f"{fmt_gain(r['random'])} | {fmt_gain(r['other'])} | {fmt_gain(r['text'])} | "
                     f"{fmt_gain(r['latent@decisive'])} |")
    if any("sampled_success" in r for r in report["cold_start"]):
        lines += ["", "Teacher's sampled success on the held-back tasks:", "",
                  "| cold-start steps | no context | text | latents | another task's latents |",
                  "|---:|---:|---:|---:|---:|"]
        for r in report["cold_start"]:
            s = r.get("sampled_success")
            if s:
                other = f"{s['other']:.3f}" if "other" in s else "not measured"
                lines.append(f"| {r['cold_start_steps']} | {s['none']:.3f} | {s['text']:.3f} | {s['latent']:.3f} "
                             f"| {other} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    rows = report["cold_start"]
    if rows:
        fig, ax = pig_axes(figsize=(6, 3.6))
        x = [r["cold_start_steps"] for r in rows]
        for name in ("latent", "zero", "random", "other", "text"):
            y = [r[name]["pig"] for r in rows]
            lo = [r[name]["pig"] - r[name]["low"] for r in rows]
            hi = [r[name]["high"] - r[name]["pig"] for r in rows]
            ax.errorbar(x, y, yerr=[lo, hi], marker="o", capsize=3, label=name)
        save_pig_figure(fig, ax, out / "pig_vs_cold_start.png", ylabel="PIG (nats / token)", legend_size=8)


if __name__ == "__main__":
    sys.exit(main())

"""``lopd-export``: a finished (or interrupted) ``lopd-train`` run's student as a shareable model folder:
merged weights in the dtype it trained in, a model card (base model, algorithm, configuration, data
provenance, held-out and ``lopd-eval`` results), and optionally pushed to the Hugging Face hub.

    lopd-export runs/my-run                               # -> runs/my-run/student/ (README.md = the card)
    lopd-export runs/my-run --eval evals/run --push-to-hub me/smollm2-bfcl-lopd

The student is the newest complete checkpoint's adapter merged into the base model (what ``lopd-train``'s own
export does at the end of a run). Its dtype: ``--dtype``, else the run's ``dtype`` when it named one, else the
``resolved_dtype`` the run recorded, else fp32 (the card says which rule chose it).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lopd_train.usage import one_line_errors, one_line_parser

DTYPES = ("auto", "float32", "bfloat16", "float16")


def latest_adapter(run: Path) -> Path:
    """The student adapter of the run's newest complete checkpoint."""
    ckpts = run / "checkpoints"
    pointer = ckpts / "latest"
    candidates = [ckpts / pointer.read_text().strip()] if pointer.is_file() else []
    candidates += sorted(ckpts.glob("step-*"), reverse=True)
    for ckpt in candidates:
        if (ckpt / "state.json").is_file() and (ckpt / "student_adapter").is_dir():
            return ckpt / "student_adapter"
    raise FileNotFoundError(f"{run}: no complete checkpoint with a student_adapter/ (is this a lopd-train run?)")


def training_dtype(config: dict[str, Any], requested: str = "auto") -> tuple[str, str]:
    """``(dtype, why)``: the dtype to export in and the rule that chose it."""
    if requested != "auto":
        return requested, "--dtype"
    if config.get("dtype") not in (None, "auto"):
        return str(config["dtype"]), "the run's dtype"
    if config.get("resolved_dtype"):
        return str(config["resolved_dtype"]), "the dtype the run recorded"
    return "float32", "the run did not record its resolved dtype; fp32 assumed"


def heldout_results(run: Path) -> list[dict[str, Any]]:
    """The run's held-out evaluations (``heldout.jsonl``): rollouts, mean reward, success rate, tasks."""
    path = run / "heldout.jsonl"
    if not path.is_file():
        return []
    from lopd_train.records import read_records

    rows = read_records(path)
    return [{k: r.get(k) for k in ("rollouts", "step", "mean_reward", "success_rate", "n")} for r in rows]


def eval_results(folder: Path) -> dict[str, Any]:
    """A ``lopd-eval`` output's headline tables (``results.json``): each env's leaderboard."""
    results = json.loads((folder / "results.json").read_text())
    return {env: info.get("leaderboard") for env, info in results.get("envs", {}).items()}


def export_run(run: Path, out: Path | None = None, dtype: str = "auto", eval_dirs: Sequence[Path] = ()) -> Path:
    """Merge, cast, and write the card; returns the exported folder."""
    from lopd_train import models

    run = Path(run)
    config = json.loads((run / "config.json").read_text())
    chosen, why = training_dtype(config, dtype)
    provenance_path = run / "provenance.json"
    provenance = json.loads(provenance_path.read_text()) if provenance_path.is_file() else None
    results: dict[str, Any] = {}
    if held := heldout_results(run):
        results["held_out"] = held
    for folder in eval_dirs:
        results[f"lopd-eval {Path(folder).name}"] = eval_results(Path(folder))
    card = models.model_card(config.get("model", "?"), config.get("algo", "?"), config.get("env", "?"),
                             config, provenance, results or None, dtype=f"{chosen}: {why}")
    return models.export_merged(config["model"], latest_adapter(run), Path(out) if out else run / "student",
                                dtype=chosen, card=card)


def export_trained(run: Path, policy, push_to_hub: str | None = None) -> Path:
    """The end of a training run: the student in the dtype it trained in (not fp32 whatever it was), with its
    model card, into ``run/student``; pushed to the hub when asked."""
    from lopd_train import models

    dtype = str(next(policy.parameters()).dtype).removeprefix("torch.")
    exported = export_run(run, run / "student", dtype=dtype)
    if push_to_hub:
        print(f"pushed: {models.push_to_hub(exported, push_to_hub)}", flush=True)
    return exported


@one_line_errors
def main(argv: Sequence[str] | None = None) -> int:
    summary = (__doc__ or "").split("\n\n")[0]
    parser = one_line_parser(argparse.ArgumentParser(prog="lopd-export", description=summary,
                                                     formatter_class=argparse.RawDescriptionHelpFormatter))
    parser.add_argument("run", help="a lopd-train run folder")
    parser.add_argument("--out", help="where to write the model folder (default: RUN/student)")
    parser.add_argument("--dtype", choices=DTYPES, default="auto",
                        help="weights dtype (default auto: the dtype the run trained in)")
    parser.add_argument("--eval", action="append", default=[], metavar="DIR",
                        help="a lopd-eval output folder whose results go into the card (repeatable)")
    parser.add_argument("--push-to-hub", metavar="REPO_ID", help="upload the folder to this hub model repository")
    parser.add_argument("--private", action="store_true", help="create the hub repository as private")
    parser.add_argument("--token-env", metavar="VAR", help="environment variable holding a hub token with write "
                                                           "access (default: the logged-in token)")
    args = parser.parse_args(argv)
    from lopd_train import models

    if not (Path(args.run) / "config.json").is_file():
        parser.error(f"{args.run} is not a lopd-train run folder (no config.json in it)")
    folder = export_run(Path(args.run), args.out, args.dtype, [Path(d) for d in args.eval])
    print(f"exported: {folder}")
    if args.push_to_hub:
        token = os.environ.get(args.token_env) if args.token_env else None
        if args.token_env and not token:
            raise SystemExit(f"lopd-export: --token-env {args.token_env}: that environment variable is not set")
        try:
            url = models.push_to_hub(folder, args.push_to_hub, token=token, private=args.private)
        except models.HubError as exc:
            raise SystemExit(f"lopd-export: {exc}") from None
        print(f"pushed: {url}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Command lines: ``lopd-train`` (train a student with LOPD or a baseline) and ``lopd-eval``.

Both read one typed configuration (:mod:`lopd_train.config`): every knob is a field of a section there,
``--config FILE`` (TOML or JSON, keys as the field names) sets them, and flags given on the command line win
over the file; choices are checked before anything is loaded.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

from lopd_train import config
from lopd_train.trainer import TrainConfig

TRAIN_EPILOG = """\
examples:
  # the README main job: a short LOPD run of SmolLM2-135M-Instruct on BFCL-v3 (CPU, 2 cores)
  lopd-train --config examples/smollm2_bfcl_lopd.toml
  # continue after an interruption (same folder)
  lopd-train --output-dir runs/lopd-smollm2-bfcl --resume
  # the policy-gradient baseline
  lopd-train --env lopd/BFCLv3-v0 --algo grpo --output-dir runs/grpo
  # every knob from a file (TOML or JSON); flags override it
  lopd-train --config my_run.toml --steps 20

method (docs/design.md section 7): the student samples on-policy; successful traces enter the experience bank;
the top-J experiences are retrieved per task; the composer (backbone + its own LoRA, then a Q-Former with K
queries) turns each into K latent tokens; the frozen backbone with those J*K tokens in front is the teacher,
which reads them at a placeholder inside its task's user turn and re-scores the student's tokens; the student
minimises reverse KL over the teacher's top-M tokens + tail; the composer minimises, per rollout, the same KL
plus the privileged margin beta*(m - delta) and an anchor to its cold-started latents; beta follows dual
ascent. A cold-start phase first fits the composer on successful trajectories (--cold-start-steps).
"""


def load_config_file(path: str) -> dict[str, Any]:
    """A TOML or JSON file of training settings (keys: the option names), checked against ``TrainConfig``."""
    try:
        return config.load_settings(path, TrainConfig)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None


def train_parser() -> argparse.ArgumentParser:
    """``lopd-train``'s parser: every ``TrainConfig`` field as a flag, grouped by section in ``--help``."""
    from lopd_train.algorithms import algorithms_help

    p = config.build_parser(
        config.TRAIN_SECTIONS, "lopd-train", "Train an LLM agent on a lopd env with LOPD (Latent On-Policy "
        "Self-Distillation) or a baseline.",
        TRAIN_EPILOG + "\nalgorithms (--algo) and what each one's teacher sees:\n" + algorithms_help()
        + "\nLOPD ablations: --freeze-composer (keep the cold-started composer), --no-use-margin, --margin m\n")
    p.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its latest "
                   "checkpoint (weights, optimisers, beta, bank, RNG, rollout count), with its saved config.json "
                   "under --config and the flags")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    return p


def config_from_args(argv: list[str] | None = None) -> tuple[TrainConfig, argparse.Namespace]:
    """The run's settings: a resumed run's saved ``config.json``, then ``--config``, then the flags; checked
    (choices, types) before anything is loaded."""
    parser = train_parser()
    args = parser.parse_args(argv)
    base: dict[str, Any] = {}
    if args.resume and not args.config and args.output_dir:
        saved = Path(args.output_dir) / "config.json"
        if saved.exists():  # a resumed run continues with its own settings unless told otherwise
            base = json.loads(saved.read_text())
    try:
        return config.parse(TrainConfig, parser, argv, base)
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"lopd-train: {exc}") from None


def quiet_known_warnings() -> None:
    """Deprecation notices from peft/transformers internals that a user cannot act on."""
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)


def train_main(argv: list[str] | None = None) -> int:
    cfg, args = config_from_args(argv)
    quiet_known_warnings()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from lopd_train.algorithms.lopd import ColdStartError
    from lopd_train.trainer import train

    try:
        result = train(cfg, resume=args.resume)
    except ColdStartError as e:  # a configuration problem with a remedy, not a crash: say it plainly
        raise SystemExit(f"lopd-train: {e}") from None
    last = result.get("last") or {}
    print(json.dumps({"output_dir": cfg.output_dir, "step": result["step"], "rollouts": result["rollouts"],
                      "reward_mean_last": last.get("reward_mean"), "exported": result["exported"]}))
    return 0


EVAL_EPILOG = """\
examples:
  lopd-eval --model smollm2-135m-instruct --env lopd/BFCLv3-v0 --category simple --limit 50 --output evals/bfcl
  lopd-eval --model runs/my-run --env lopd/HumanEvalPlus-v0 --env lopd/MBPPPlus-v0 --output evals/code
  lopd-eval --model Qwen/Qwen3-4B --backend openai --base-url http://127.0.0.1:8000/v1 --env lopd/ACEBench-v0
  lopd-eval --output evals/bfcl --resume ...            # continue after an interruption (same settings)
  lopd-eval --config my_eval.toml                        # keys: the option names (model, env = [...], ...)

outputs in --output: records.jsonl (one line per task and sample, append-only), results.json (scores with
each leaderboard's own aggregation, model/adapter/data hashes, settings, package versions, timings),
results.md (table), results.png (bar chart).
"""


def eval_parser() -> argparse.ArgumentParser:
    """``lopd-eval``'s parser: every ``EvalConfig`` field as a flag, grouped by section in ``--help``."""
    p = config.build_parser(config.EVAL_SECTIONS, "lopd-eval", "Score a model (a checkpoint, a lopd-train run, or "
                            "a served model) on lopd envs with each benchmark's own leaderboard aggregation.",
                            EVAL_EPILOG, dict_settings=config.EVAL_JSON)
    p.add_argument("--out", help=argparse.SUPPRESS)  # the earlier single-JSON output, still written when given
    return p


def eval_config_from_args(argv: list[str] | None = None):
    from lopd_train.evaluation import EvalConfig

    parser = eval_parser()
    try:
        cfg, args = config.parse(EvalConfig, parser, argv)
    except (ValueError, TypeError) as exc:
        raise SystemExit(f"lopd-eval: {exc}") from None
    if args.out and "--output" not in (argv if argv is not None else sys.argv[1:]):
        cfg.output = str(Path(args.out).with_suffix("")) + "-eval"  # the earlier interface: records beside it
    return cfg, args


def eval_main(argv: list[str] | None = None) -> int:
    cfg, args = eval_config_from_args(argv)
    quiet_known_warnings()
    from lopd_train import evaluation

    results = evaluation.run_eval(cfg)
    print(evaluation.report.markdown(results))
    if args.out:
        evaluation.write_legacy_summary(results, evaluation.read_records(Path(cfg.output) / "records.jsonl"),
                                        Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(train_main())

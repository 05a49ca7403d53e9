"""Command lines: ``lopd-train`` (train a student with LOPD or a baseline) and ``lopd-eval``.

Both read one typed configuration (:mod:`lopd_train.config`): every knob is a field of a section there,
``--config FILE`` (TOML or JSON, keys as the field names) sets them, and flags given on the command line win
over the file; choices are checked before anything is loaded.
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lopd_train import config
from lopd_train.config import TrainConfig
from lopd_train.experience.build import HELD_BACK, build
from lopd_train.usage import UsageError, one_line_errors, one_line_parser

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


def run_errors() -> tuple[type[BaseException], ...]:
    """The exceptions of ``lopd-train`` that are a user's mistake about a setting or a file, each with its
    remedy (everything else is a bug and stays a traceback)."""
    from lopd_envs.trace import TraceError
    from lopd_train.algorithms.lopd import ColdStartError
    from lopd_train.errors import RunError
    from lopd_train.experience.bank import BankFileError
    from lopd_train.records import RecordsError
    from lopd_train.training.heldout import StartPointError

    return ColdStartError, BankFileError, TraceError, RecordsError, StartPointError, RunError


def no_space(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)


def load_config_file(path: str) -> dict[str, Any]:
    """A TOML or JSON file of training settings (keys: the option names), checked against ``TrainConfig``."""
    try:
        return config.load_settings(path, TrainConfig)
    except ValueError as exc:
        raise UsageError(f"lopd-train: {exc}") from None
    except OSError as exc:
        raise UsageError(f"lopd-train: --config {path}: {exc.strerror or exc}") from None


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
                   "under --config and the flags; settings that define the run (env, algo, model, data, ...) "
                   "cannot change: only its length, reporting and resources may (run.json)")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    return one_line_parser(p)


def config_from_args(argv: list[str] | None = None) -> tuple[TrainConfig, argparse.Namespace]:
    """The run's settings: a resumed run's saved ``config.json``, then ``--config``, then the flags; checked
    (choices, types) before anything is loaded."""
    parser = train_parser()
    args = parser.parse_args(argv)
    base: dict[str, Any] = {}
    if args.resume and not args.config and args.output_dir:
        saved = Path(args.output_dir) / "config.json"
        if saved.exists():  # a resumed run continues with its own settings unless told otherwise
            try:
                base = json.loads(saved.read_text())
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                raise UsageError(f"lopd-train: {saved} is not readable JSON ({exc}); restore it or pass the "
                                 "run's settings with --config") from None
            if not isinstance(base, dict):
                raise UsageError(f"lopd-train: {saved} must hold a JSON object of settings")
    try:
        return config.parse(TrainConfig, parser, argv, base)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"lopd-train: {exc}") from None
    except OSError as exc:  # --config FILE that cannot be read
        raise UsageError(f"lopd-train: {exc.filename or '--config'}: {exc.strerror or exc}") from None


def quiet_known_warnings() -> None:
    """Deprecation notices from peft/transformers internals that a user cannot act on."""
    warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)


@one_line_errors
def train_main(argv: list[str] | None = None) -> int:
    cfg, args = config_from_args(argv)
    quiet_known_warnings()
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from lopd_train.training import allocator
    from lopd_train.training.trainer import train

    try:
        allocator.configure()  # LOPD_MALLOC (training/allocator.py; glibc's defaults unless LOPD_MALLOC=keep)
    except ValueError as e:
        raise UsageError(f"lopd-train: {e}") from None
    try:
        result = train(cfg, resume=args.resume)
    except run_errors() as e:  # bad settings or files, a folder in use, a full disk: each with a remedy
        raise UsageError(f"lopd-train: {e}") from None
    except OSError as e:
        if no_space(e):
            raise UsageError(f"lopd-train: no space left on {e.filename or cfg.output_dir}: free some space and "
                             "--resume (the last complete checkpoint is kept)") from None
        raise
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
  lopd-eval --score-samples samples.jsonl --output evals/he-scored   # an evalplus samples file, no model
  lopd-eval --score-bfcl result/my-model --output evals/bfcl-scored  # bfcl-eval's result files, no model

outputs in --output: records.jsonl (one line per task and sample, append-only), results.json (scores with
each leaderboard's own aggregation, model/adapter/data hashes, settings, package versions, timings),
results.md (table), results.png (bar chart); after a run on HumanEval+, MBPP+ or BFCL-v3, official/ holds the
answers as evalplus samples (humaneval.jsonl, mbpp.jsonl) and bfcl-eval result files
(bfcl_result/<model>/BFCL_v3_<category>_result.json), with manifest.json, for the official tools.
HUMANEVAL_OVERRIDE_PATH / MBPP_OVERRIDE_PATH (evalplus's variables) replace the dataset file, as in evalplus.

a local server (README "Serving the model yourself"): llama.cpp through llama-cpp-python, in a venv of its own
(its PyPI release is a source build: 20 min on 2 busy cores, 185 MB), serving the bundled SmolLM2 GGUF:
  python3 -m venv ~/venv-llamacpp && ~/venv-llamacpp/bin/pip install "llama-cpp-python[server]"
  GGUF=$(python -m lopd_train.evaluation.gguf_f32)   # F32 copy of the hf backend's weights; --bundled: the Q4_1
  ~/venv-llamacpp/bin/python -m llama_cpp.server --model "$GGUF" --model_alias smollm2 --host 127.0.0.1 \\
      --port 8000 --n_ctx 4096 --n_threads 2 --n_threads_batch 2 &
  lopd-eval --model smollm2 --backend openai --base-url http://127.0.0.1:8000/v1 --tool-mode text \\
      --request-extra '{"repeat_penalty": 1.0}' --env lopd/BFCLv3-v0 --category simple --output evals/llamacpp
greedy: lopd sends temperature 0 and top_p 1; llama.cpp adds repeat_penalty 1.1 unless the request says 1.0
(--request-extra: JSON merged into every request's body, recorded in results.json). The GGUF's own chat
template gives the hf backend's prompts and text replies (--tool-mode text); for native tools= add
--chat_format chatml-function-calling to the server (--tool-mode native). LOPD_LLAMACPP_PYTHON=
~/venv-llamacpp/bin/python pytest --runslow tests/test_eval_llamacpp.py runs this against the hf backend.
vLLM and SGLang (GPU; not run here) apply the model's generation_config.json (Qwen2.5: repetition_penalty
1.05) unless told not to, and parse tool calls only with a parser named (without one, vLLM refuses tools=
with HTTP 400 and --tool-mode auto falls back to text, counted in results.json):
  vllm serve Qwen/Qwen2.5-7B-Instruct --port 8000 --generation-config vllm --enable-auto-tool-choice \\
      --tool-call-parser hermes
  python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct --port 30000 --sampling-defaults openai \\
      --tool-call-parser qwen25
"""


def eval_parser() -> argparse.ArgumentParser:
    """``lopd-eval``'s parser: every ``EvalConfig`` field as a flag, grouped by section in ``--help``."""
    p = config.build_parser(config.EVAL_SECTIONS, "lopd-eval", "Score a model (a checkpoint, a lopd-train run, or "
                            "a served model) on lopd envs with each benchmark's own leaderboard aggregation.",
                            EVAL_EPILOG)
    p.add_argument("--out", help=argparse.SUPPRESS)  # the earlier single-JSON output, still written when given
    from lopd_train.evaluation.external import add_arguments

    add_arguments(p)  # --score-samples, --score-bfcl: score files generated elsewhere
    return one_line_parser(p)


def eval_config_from_args(argv: list[str] | None = None, parser: argparse.ArgumentParser | None = None):
    from lopd_train.evaluation import EvalConfig

    parser = parser or eval_parser()
    try:
        cfg, args = config.parse(EvalConfig, parser, argv)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"lopd-eval: {exc}") from None
    except OSError as exc:  # --config FILE that cannot be read
        raise UsageError(f"lopd-eval: {exc.filename or '--config'}: {exc.strerror or exc}") from None
    if args.out and "--output" not in (argv if argv is not None else sys.argv[1:]):
        cfg.output = str(Path(args.out).with_suffix("")) + "-eval"  # the earlier interface: records beside it
    return cfg, args


@one_line_errors
def eval_main(argv: list[str] | None = None) -> int:
    from lopd_train.evaluation import external

    parser = eval_parser()
    given = parser.parse_args(argv)  # --help and argparse's own errors first
    if external.wanted(given):  # score files generated elsewhere: no model, no generation
        from lopd_train.evaluation import report

        print(report.markdown(external.main(parser, argv, given)))
        return 0
    cfg, args = eval_config_from_args(argv, parser)
    quiet_known_warnings()
    from lopd_train import evaluation
    from lopd_train.errors import RunLockedError
    from lopd_train.evaluation.backends import BackendError
    from lopd_train.evaluation.selection import SelectionError
    from lopd_train.records import RecordsError
    from lopd_train.runlock import FolderLock

    try:
        with FolderLock(cfg.output, "lopd-eval"):  # one evaluation per output folder
            results = evaluation.run_eval(cfg)
            from lopd_train.evaluation.official_files import write_official_files

            write_official_files(cfg, cfg.output)  # official/: evalplus samples, bfcl-eval result files
    except (RecordsError, RunLockedError, SelectionError, BackendError) as e:
        # a damaged records.jsonl on --resume (which line), a folder in use, an env, category or task that does
        # not exist, a dead server or a refused key: the user's to fix, one line
        raise UsageError(f"lopd-eval: {e}") from None
    print(evaluation.report.markdown(results))
    if args.out:
        evaluation.write_legacy_summary(results, evaluation.read_records(Path(cfg.output) / "records.jsonl"),
                                        Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(train_main())


# ------------------------------------------------------------------------------- lopd bank build

def bank_parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(
        prog="lopd bank build",
        description="Build a reference experience bank: the base model samples --samples times on each training "
                    "task with the run's sampling (temperature, top-k, top-p), and the bank keeps the successes "
                    "(failures too with --keep-failures) keyed by the task instruction, with its provenance. Give "
                    "it to lopd-train with --bank FILE; its rollouts count in the run's budget. Every other option "
                    "is lopd-train's (--config FILE, --env, --category, --tasks, --model, --temperature, ...; "
                    "--eval-tasks are left out of the bank).",
        epilog="example: lopd bank build --out banks/simple.sqlite --samples 4 --config run.toml")


def _add_bank_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, help="the bank file to write (e.g. bank.sqlite)")
    p.add_argument("--samples", type=int, default=4, help="samples per task (default 4)")
    p.add_argument("--keep-failures", action="store_true", help="keep failed samples too, flagged")
    p.add_argument("--hold-back", type=int, default=0, help="successes held back for the PIG diagnostic: never "
                   "among the bank's experiences, stored in the bank file and handed to every run given --bank "
                   f"(also written beside the bank as {HELD_BACK}; default 0)")


@one_line_errors
def bank_main(argv: Sequence[str] | None = None) -> int:
    """``lopd bank build ...`` (the ``lopd`` command finds it through the ``lopd.commands`` entry point: the
    environments' package never imports the trainer). ``argv`` starts with the verb, ``build``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] != ["build"]:
        asked = argv[:1] in (["-h"], ["--help"])
        print("usage: lopd bank build --out FILE [--samples K] [--keep-failures] [--hold-back N] [lopd-train "
              "options]\n\n  build  sample the base model on the training tasks into a reference experience bank "
              "(lopd bank build --help)", file=sys.stdout if asked else sys.stderr)
        return 0 if asked else 2
    return bank_build_main(argv[1:])


def bank_build_main(argv: Sequence[str] | None = None) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from lopd_train import models
    from lopd_train.experience.bank import ExperienceBank
    from lopd_train.rollout.engine import make_envs, task_ids
    from lopd_train.training.envs import run_env_kwargs
    from lopd_train.training.heldout import disjoint_task_pools

    p = one_line_parser(bank_parser())
    _add_bank_options(p)
    args, rest = p.parse_known_args(argv)
    if args.samples < 1:
        p.error("--samples must be at least 1")
    if args.hold_back < 0:
        p.error("--hold-back must be 0 or more")
    cfg, _ = config_from_args(list(rest))
    out = Path(args.out)
    if out.exists():
        p.error(f"{out} exists: a bank is built once; choose another --out or remove it")
    envs = make_envs(cfg.env, cfg.tasks_per_step * cfg.group_size, **run_env_kwargs(cfg))  # as lopd-train's
    tasks = cfg.tasks or task_ids(envs[0])
    if cfg.eval_tasks:
        tasks = disjoint_task_pools(tasks, cfg.eval_tasks, explicit_train=bool(cfg.tasks))
    model, tokenizer = models.load_backbone(cfg.model, models.default_device(), cfg.dtype)
    out.parent.mkdir(parents=True, exist_ok=True)
    # built under a temporary name and renamed when complete: a build that dies (hours of sampling on a CPU)
    # leaves no half bank at --out to be mistaken for a built one, and the next attempt is not refused
    partial = out.with_name(f".{out.name}.partial")
    for stale in out.parent.glob(f"{partial.name}*"):
        stale.unlink()
    bank = ExperienceBank(partial)
    done = False
    try:
        with ThreadPoolExecutor(max_workers=max(1, cfg.env_workers)) as pool:
            prov = build(model, tokenizer, envs, pool, cfg, bank, tasks, args.samples,
                         keep_failures=args.keep_failures, seed=cfg.seed, progress=cfg.progress,
                         hold_back=args.hold_back, held_back_path=out.parent / HELD_BACK if args.hold_back else None)
        bank.seal()  # readable from a read-only folder, or as a lone copy of the file
        done = True
    finally:
        bank.close()  # the last connection: SQLite folds its write-ahead log into the file
        for env in envs:
            env.close()
        if done:
            os.replace(partial, out)
        for stale in out.parent.glob(f"{partial.name}*"):
            stale.unlink()
    print(f"{out}: {prov['entries']} experiences from {prov['rollouts']} rollouts on {len(tasks)} tasks "
          f"({prov['successes']} successes, {len(prov['held_back'])} held back)")
    return 0

"""Command lines: ``lopd-train`` (train a student with LOPD or a baseline) and ``lopd-eval``.

Every knob of ``lopd-train`` is a field of :class:`lopd_train.trainer.TrainConfig`; ``--config FILE`` (TOML or
JSON, keys as the field names) sets them, and flags given on the command line win over the file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

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

method (DESIGN.md section 7): the student samples on-policy; successful traces enter the experience bank;
the top-J experiences are retrieved per task; the composer (backbone + its own LoRA, then a Q-Former with K
queries) turns each into K latent tokens; the frozen backbone with those J*K tokens in front is the teacher,
which reads them at a placeholder inside its task's user turn and re-scores the student's tokens; the student
minimises reverse KL over the teacher's top-M tokens + tail; the composer minimises, per rollout, the same KL
plus the privileged margin beta*(m - delta) and an anchor to its cold-started latents; beta follows dual
ascent. A cold-start phase first fits the composer on successful trajectories (--cold-start-steps).
"""


def _type_of(f: dataclasses.Field) -> Any:
    name = str(f.type).replace(" ", "")
    for t in ("bool", "int", "float", "str"):
        if name.startswith(t):
            return {"bool": bool, "int": int, "float": float, "str": str}[t]
    return str


def load_config_file(path: str) -> dict[str, Any]:
    text = Path(path).read_text()
    if path.endswith(".json"):
        data = json.loads(text)
    else:
        import tomllib

        data = tomllib.loads(text)
    known = {f.name for f in dataclasses.fields(TrainConfig)}
    out = {}
    for k, v in data.items():
        key = k.replace("-", "_")
        if key not in known:
            raise SystemExit(f"{path}: unknown setting {k!r}")
        out[key] = json.dumps(v) if key == "env_kwargs" and isinstance(v, dict) else v
    return out


def train_parser() -> argparse.ArgumentParser:
    from lopd_train.algorithms import algorithms_help

    p = argparse.ArgumentParser(prog="lopd-train", description="Train an LLM agent on a lopd env with LOPD "
                                "(Latent On-Policy Self-Distillation) or a baseline.",
                                epilog=TRAIN_EPILOG + "\nalgorithms (--algo) and what each one's teacher sees:\n"
                                + algorithms_help() + "\nLOPD ablations: --freeze-composer (keep the cold-started "
                                "composer), --no-use-margin, --margin m\n",
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", help="TOML or JSON file of settings (keys: the option names below)")
    p.add_argument("--resume", action="store_true", help="continue the run in --output-dir from its latest "
                   "checkpoint (weights, optimisers, beta, bank, RNG, rollout count)")
    p.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    for f in dataclasses.fields(TrainConfig):
        flag = "--" + f.name.replace("_", "-")
        typ = _type_of(f)
        helptext = f"{f.metadata.get('help', '')} (default: {f.default})"
        if typ is bool:
            p.add_argument(flag, dest=f.name, action=argparse.BooleanOptionalAction, default=None, help=helptext)
        else:
            p.add_argument(flag, dest=f.name, type=typ, default=None, help=helptext)
    return p


def config_from_args(argv: list[str] | None = None) -> tuple[TrainConfig, argparse.Namespace]:
    args = train_parser().parse_args(argv)
    values: dict[str, Any] = {}
    if args.resume and not args.config and args.output_dir:
        saved = Path(args.output_dir) / "config.json"
        if saved.exists():  # a resumed run continues with its own settings unless told otherwise
            values.update(json.loads(saved.read_text()))
    if args.config:
        values.update(load_config_file(args.config))
    for f in dataclasses.fields(TrainConfig):
        v = getattr(args, f.name)
        if v is not None:
            values[f.name] = v
    return TrainConfig(**values), args


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
    p = argparse.ArgumentParser(prog="lopd-eval", description="Score a model (a checkpoint, a lopd-train run, or a "
                                "served model) on lopd envs with each benchmark's own leaderboard aggregation.",
                                epilog=EVAL_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    a = p.add_argument
    a("--config", help="TOML or JSON file of settings (keys: the option names); flags override it")
    a("--model", help="HF id or folder, LoRA adapter folder, .gguf, the smollm2-135m-instruct alias, or a "
      "lopd-train run folder (its student/ or latest checkpoint); with --backend openai: the served model name")
    a("--adapter", help="a LoRA adapter folder to apply (vllm: through LoRARequest; hf: merged)")
    a("--env", action="append", help="env id (lopd/BFCLv3-v0 ...); repeat for several")
    a("--category", help="benchmark category, comma-separated, or 'all' (default)")
    a("--language", help="benchmark language where the env has several (ACEBench: en, zh)")
    a("--data-dir", help="benchmark data folder")
    a("--env-kwargs", help="extra gym.make keyword arguments (JSON)")
    a("--limit", type=int, help="first N tasks per env (the benchmark's order)")
    a("--tasks", help="comma-separated task ids")
    a("--samples", type=int, help="samples per task (pass@k with the unbiased estimator); needs --temperature")
    a("--temperature", type=float, help="sampling temperature (default 0: greedy)")
    a("--max-new-tokens", type=int, help="tokens per turn at most (default 256)")
    a("--max-sequence-tokens", type=int, help="episode token budget for hf/vllm (default 4096)")
    a("--batch-size", type=int, help="episodes in lockstep: one batched generate or that many requests (default 8)")
    a("--backend", choices=["hf", "vllm", "openai"], help="generation backend (default hf)")
    a("--base-url", help="OpenAI-compatible server, e.g. http://127.0.0.1:8000/v1 (--backend openai)")
    a("--api-key-env", help="environment variable holding the server's API key")
    a("--served-model", help="model name to send to the server (default: --model)")
    a("--concurrency", type=int, help="concurrent requests (openai; default 8)")
    a("--request-timeout", type=float, help="seconds per request (openai; default 120)")
    a("--max-retries", type=int, help="retries with exponential backoff (openai; default 5)")
    a("--tool-mode", choices=["auto", "native", "text"], help="openai: native tools=, our text tool prompt, or "
      "auto (native unless the server rejects it)")
    a("--tool-syntax", help="tool-call syntax asked for in the text prompt: hermes or python")
    a("--tool-prompt", help="tools in our system prompt: auto, always, never")
    a("--device", help="torch device (hf)")
    a("--dtype", help="weights dtype")
    a("--seed", type=int, help="base seed (each task and sample gets its own)")
    a("--output", help="output folder (default: eval)")
    a("--out", help=argparse.SUPPRESS)  # the earlier single-JSON output, still written when given
    a("--resume", action="store_true", default=None, help="skip records already in --output/records.jsonl")
    a("--no-progress", dest="progress", action="store_false", default=None, help="no progress bar")
    return p


def eval_config_from_args(argv: list[str] | None = None):
    from lopd_train.evaluation import EvalConfig

    args = eval_parser().parse_args(argv)
    known = {f.name for f in dataclasses.fields(EvalConfig)}
    values: dict[str, Any] = {}
    if args.config:
        for k, v in load_settings(args.config).items():
            key = k.replace("-", "_")
            if key not in known:
                raise SystemExit(f"{args.config}: unknown setting {k!r}")
            values[key] = [v] if key == "env" and isinstance(v, str) else v
    for name, v in vars(args).items():
        if v is None or name in ("config", "out"):
            continue
        if name == "env_kwargs":
            v = json.loads(v)
        elif name == "tasks":
            v = v.split(",")
        values[name] = v
    if not values.get("model"):
        raise SystemExit("lopd-eval: --model is required (or model = ... in --config)")
    if args.out and "output" not in values:  # the earlier interface: records go beside the JSON it names
        values["output"] = str(Path(args.out).with_suffix("")) + "-eval"
    try:
        return EvalConfig(**values), args
    except ValueError as exc:
        raise SystemExit(f"lopd-eval: {exc}") from exc


def load_settings(path: str) -> dict[str, Any]:
    text = Path(path).read_text()
    if path.endswith(".json"):
        return json.loads(text)
    import tomllib

    return tomllib.loads(text)


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

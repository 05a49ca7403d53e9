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
which reads them at a placeholder inside its first user turn and re-scores the student's tokens; the student
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
    p = argparse.ArgumentParser(prog="lopd-train", description="Train an LLM agent on a lopd env with LOPD "
                                "(Latent On-Policy Self-Distillation) or a baseline.", epilog=TRAIN_EPILOG,
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
    from lopd_train.trainer import train

    result = train(cfg, resume=args.resume)
    last = result.get("last") or {}
    print(json.dumps({"output_dir": cfg.output_dir, "step": result["step"], "rollouts": result["rollouts"],
                      "reward_mean_last": last.get("reward_mean"), "exported": result["exported"]}))
    return 0


def eval_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="lopd-eval", description="Score a model (or a training run's student) on "
                                "lopd envs: a table on stdout, JSON and a bar chart.")
    p.add_argument("--model", required=True, help="model spec: alias, .gguf, folder (e.g. runs/x/student) or hub id")
    p.add_argument("--adapter", help="a LoRA adapter folder to merge first (e.g. runs/x/checkpoints/step-N/"
                   "student_adapter)")
    p.add_argument("--env", action="append", required=True, help="env id; repeat for several")
    p.add_argument("--category", default="all", help="benchmark category (comma-separated, or 'all')")
    p.add_argument("--data-dir", help="benchmark data folder")
    p.add_argument("--env-kwargs", default="{}", help="extra gym.make keyword arguments (JSON)")
    p.add_argument("--limit", type=int, help="first N tasks per env only")
    p.add_argument("--tasks", help="comma-separated task ids")
    p.add_argument("--batch-size", type=int, default=8, help="episodes run in lockstep (batched generation)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="tokens per turn at most")
    p.add_argument("--max-sequence-tokens", type=int, default=4096, help="episode token budget")
    p.add_argument("--sample", action="store_true", help="sample at --temperature instead of greedy decoding")
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature with --sample")
    p.add_argument("--tool-syntax", default="hermes", help="tool-call syntax asked for: hermes or python")
    p.add_argument("--tool-prompt", default="auto", help="tools in our system prompt: auto, always, never")
    p.add_argument("--device", default="auto", help="torch device")
    p.add_argument("--dtype", default="auto", help="weights dtype")
    p.add_argument("--out", default="eval_results.json", help="JSON output (a PNG chart is written beside it)")
    p.add_argument("--seed", type=int, default=0, help="torch seed (for --sample)")
    return p


def eval_main(argv: list[str] | None = None) -> int:
    args = eval_parser().parse_args(argv)
    quiet_known_warnings()
    import torch

    from lopd_train import evaluation
    from lopd_train.rollout import SamplingConfig

    torch.manual_seed(args.seed)
    policy, tok = evaluation.load_for_eval(args.model, args.adapter, args.device, args.dtype)
    sampling = SamplingConfig(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                              greedy=not args.sample, max_sequence_tokens=args.max_sequence_tokens,
                              tool_syntax=args.tool_syntax, tool_prompt=args.tool_prompt)
    kwargs = json.loads(args.env_kwargs)
    cats = args.category.split(",")
    kwargs.setdefault("category", cats[0] if len(cats) == 1 else cats)
    if args.data_dir:
        kwargs.setdefault("data_dir", args.data_dir)
    results = [evaluation.evaluate(policy, tok, env_id, kwargs, args.limit, args.batch_size, sampling,
                                   args.tasks.split(",") if args.tasks else None) for env_id in args.env]
    print(evaluation.table(results))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"model": args.model, "adapter": args.adapter, "results": results}, indent=2))
    evaluation.plot(results, out.with_suffix(".png"), args.model)
    return 0


if __name__ == "__main__":
    sys.exit(train_main())

"""Train with TRL's GRPOTrainer on a lopd env through TRL's ``environment_factory`` (lopd_train.integrations.trl_env).

    pip install "lopd[trl]"
    python examples/trl_environment_factory.py                    # tiny random model, 3 steps on a CPU: ~20 s
    python examples/trl_environment_factory.py --model Qwen/Qwen2.5-0.5B-Instruct --category multi_turn_base \\
        --tasks multi_turn_base_0,multi_turn_base_1 --steps 50 --max-completion-length 1024

TRL generates and runs the rollouts itself: the model reaches the task's functions through the two tools of a
``LopdEnvironment`` (``call_function``, ``reply``), TRL executes the calls and feeds the results back until the
model answers without a call; the reward is the lopd env's own score (``lopd_env_reward``). The tokenizer gets
TRL's Qwen2.5 chat template when TRL cannot parse its own tool calls. The default tiny random model only shows
the wiring (its text is noise and scores 0); a real model learns from the same loop.
"""

from __future__ import annotations

import argparse
import json
import os

import torch


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny-random", help="HF id or folder, .gguf, or an alias of lopd_train.models")
    p.add_argument("--env", default="lopd/BFCLv3-v0")
    p.add_argument("--category", default="simple", help="comma-separated categories ('' for the env's default)")
    p.add_argument("--env-kwargs", default="{}", help='more gym.make options, JSON: \'{"allow_unisolated": true}\'')
    p.add_argument("--tasks", default="simple_0,simple_1", help="comma-separated task ids ('' for all)")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=2, help="rollouts per device and step")
    p.add_argument("--num-generations", type=int, default=2, help="rollouts per task (a GRPO group)")
    p.add_argument("--max-completion-length", type=int, default=48, help="tokens per rollout, tool results included")
    p.add_argument("--max-tool-calls", type=int, default=8, help="tool-calling rounds per rollout")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", default="runs/trl-environment-factory")
    args = p.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is marked experimental in TRL

    from trl import GRPOConfig, GRPOTrainer

    from lopd_train import models
    from lopd_train.integrations.trl_env import lopd_environment_inputs, tool_chat_template

    torch.manual_seed(args.seed)
    device = models.default_device()
    model, tokenizer = models.load_backbone(args.model, device, "auto")
    tool_chat_template(tokenizer)
    env_kwargs = {**({"category": args.category.split(",")} if args.category else {}), **json.loads(args.env_kwargs)}
    inputs = lopd_environment_inputs(args.env, tasks=args.tasks.split(",") if args.tasks else None,
                                     seed=args.seed, **env_kwargs)
    config = GRPOConfig(output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
                        num_generations=args.num_generations, max_completion_length=args.max_completion_length,
                        max_tool_calling_iterations=args.max_tool_calls, learning_rate=args.lr, beta=0.0,
                        logging_steps=1, report_to="none", save_strategy="no", seed=args.seed,
                        use_cpu=device.type == "cpu", bf16=device.type == "cuda" and torch.cuda.is_bf16_supported())
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, **inputs)
    try:
        trainer.train()
    finally:
        inputs["environment_factory"].close()
    steps = [h for h in trainer.state.log_history if "reward" in h]
    for h in steps:
        print({k: round(v, 4) for k, v in h.items() if k.startswith(("reward", "tools/", "lopd_env_reward"))})
    return steps


if __name__ == "__main__":
    main()

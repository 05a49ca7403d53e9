"""Train with TRL's GRPOTrainer on a single-turn lopd env through plain ``reward_funcs``
(lopd_train.integrations.trl_reward).

    pip install "lopd[trl]"
    python examples/trl_reward_funcs.py                           # tiny random model, 3 steps on a CPU: ~20 s
    python examples/trl_reward_funcs.py --model Qwen/Qwen2.5-0.5B-Instruct --env lopd/MBPPPlus-v0 --num-tasks 64 \\
        --steps 100 --max-completion-length 512
    python examples/trl_reward_funcs.py --env lopd/BFCLv3-v0 --category simple,parallel --num-tasks 32

TRL samples one answer per prompt; ``lopd_reward(env_id)`` plays each as a one-turn episode of the task named in
the row's ``task_id`` column and returns the env's own score (HumanEval+/MBPP+: the tests pass in lopd's
sandbox; BFCL-v3: the official AST checker). The default tiny random model only shows the wiring (its text is
noise and scores 0); a real model learns from the same loop.
"""

from __future__ import annotations

import argparse
import json

import torch


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny-random", help="HF id or folder, .gguf, or an alias of lopd_train.models")
    p.add_argument("--env", default="lopd/HumanEvalPlus-v0")
    p.add_argument("--category", default="", help="comma-separated categories ('' for the env's default)")
    p.add_argument("--env-kwargs", default="{}", help='more gym.make options, JSON: \'{"allow_unisolated": true}\'')
    p.add_argument("--tasks", default="", help="comma-separated task ids (default: the first --num-tasks)")
    p.add_argument("--num-tasks", type=int, default=2)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=2, help="completions per device and step")
    p.add_argument("--num-generations", type=int, default=2, help="completions per task (a GRPO group)")
    p.add_argument("--max-completion-length", type=int, default=48)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--output-dir", default="runs/trl-reward-funcs")
    args = p.parse_args(argv)

    from trl import GRPOConfig, GRPOTrainer

    from lopd_train import models
    from lopd_train.integrations.trl_reward import lopd_prompts, lopd_reward

    torch.manual_seed(args.seed)
    device = models.default_device()
    model, tokenizer = models.load_backbone(args.model, device, "auto")
    env_kwargs = {**({"category": args.category.split(",")} if args.category else {}), **json.loads(args.env_kwargs)}
    dataset = lopd_prompts(args.env, tasks=args.tasks.split(",") if args.tasks else None, **env_kwargs)
    if not args.tasks:
        dataset = dataset.select(range(min(args.num_tasks, len(dataset))))
    reward = lopd_reward(args.env, **env_kwargs)
    config = GRPOConfig(output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
                        num_generations=args.num_generations, max_completion_length=args.max_completion_length,
                        learning_rate=args.lr, beta=0.0, logging_steps=1, report_to="none", save_strategy="no",
                        seed=args.seed, use_cpu=device.type == "cpu",
                        bf16=device.type == "cuda" and torch.cuda.is_bf16_supported())
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, train_dataset=dataset,
                          reward_funcs=reward)
    try:
        trainer.train()
    finally:
        reward.close()
    steps = [h for h in trainer.state.log_history if "reward" in h]
    for h in steps:
        print({k: round(v, 4) for k, v in h.items() if k.startswith(("reward", "lopd_reward"))})
    return steps


if __name__ == "__main__":
    main()

"""Train a model with TRL's GRPOTrainer on a lopd env (lopd_train.integrations.trl).

    pip install "lopd[trl]"
    python examples/trl_grpo_lopd_env.py --env lopd/BFCLv3-v0 --category simple,irrelevance --steps 20
    python examples/trl_grpo_lopd_env.py --model Qwen/Qwen3-0.6B --env lopd/HumanEvalPlus-v0 --lora-r 16

Each GRPO sample is a whole lopd episode played with the model being trained (multi-turn, token ids kept as
sampled, the env's answers masked out of the loss); the reward is the env's own score. On CPUs the default
SmolLM2-135M alias runs a few steps in minutes; on GPUs pass any Hugging Face causal LM.
"""

from __future__ import annotations

import argparse
import os

import torch


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="HF id or folder, .gguf, or the alias")
    p.add_argument("--env", default="lopd/BFCLv3-v0")
    p.add_argument("--category", default="simple,irrelevance")
    p.add_argument("--tasks", help="comma-separated task ids (default: every task of the categories)")
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=4, help="episodes per device and step")
    p.add_argument("--num-generations", type=int, default=2, help="episodes per task (a GRPO group)")
    p.add_argument("--max-new-tokens", type=int, default=128, help="tokens per turn")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--lora-r", type=int, default=0, help="train a LoRA of this rank (0: every weight)")
    p.add_argument("--output-dir", default="runs/trl-grpo")
    args = p.parse_args()
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # rollout_func is marked experimental in TRL

    from trl import GRPOConfig, GRPOTrainer

    from lopd_train import models
    from lopd_train.integrations.trl import lopd_grpo_inputs

    device = models.default_device()
    model, tokenizer = models.load_backbone(args.model, device, "auto")
    cats = args.category.split(",")
    inputs = lopd_grpo_inputs(args.env, tokenizer, tasks=args.tasks.split(",") if args.tasks else None,
                              max_new_tokens=args.max_new_tokens, category=cats[0] if len(cats) == 1 else cats)
    peft_config = None
    if args.lora_r:
        from peft import LoraConfig

        peft_config = LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    config = GRPOConfig(output_dir=args.output_dir, max_steps=args.steps, per_device_train_batch_size=args.batch_size,
                        num_generations=args.num_generations, learning_rate=args.lr, temperature=1.0,
                        logging_steps=1, report_to="none", save_strategy="no", beta=0.0,
                        use_cpu=device.type == "cpu", bf16=device.type == "cuda" and torch.cuda.is_bf16_supported())
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=config, peft_config=peft_config, **inputs)
    trainer.train()
    trainer.save_model(args.output_dir)
    inputs["rollout_func"].close()
    print({k: v for k, v in trainer.state.log_history[-2].items() if "reward" in k})


if __name__ == "__main__":
    main()

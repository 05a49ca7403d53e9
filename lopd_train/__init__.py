"""lopd_train: Latent On-Policy Self-Distillation (LOPD) and its baselines for lopd envs.

    lopd-train --env lopd/BFCLv3-v0 --category simple --model smollm2-135m-instruct --algo lopd
"""

__version__ = "0.1.0"

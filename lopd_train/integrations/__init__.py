"""Adapters that let other trainers use lopd envs and rollouts (``lopd_train.integrations.trl``: TRL)."""

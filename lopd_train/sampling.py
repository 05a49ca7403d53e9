"""The rollout sampler's settings: one small record at the base of ``lopd_train``, so the configuration that
builds it and the rollout engines that read it both import it downwards."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SamplingConfig:
    max_new_tokens: int = 128
    temperature: float = 1.0
    greedy: bool = False
    max_sequence_tokens: int = 2048
    tool_syntax: str = "hermes"
    tool_prompt: str = "auto"
    top_m: int = 0  # also record the policy's top-M tokens and log-probs (temperature 1) at each sampled token
    top_k: int = 0  # sample among the k most likely tokens only (0: all)
    top_p: float = 1.0  # nucleus sampling: the smallest set of tokens holding this much probability (1: all)

"""How a policy is sampled: one small record at the base of ``lopd_train``, read by the training rollouts
(:mod:`lopd_train.rollout`), the held-out evaluation and every ``lopd-eval`` backend alike, so the configuration
that builds it and everything that reads it import it downwards and nothing converts between two kinds."""

from __future__ import annotations

from dataclasses import dataclass

from lopd_envs.chat import TextTools


@dataclass
class Sampling:
    """Temperature 0 (``lopd-eval``'s greedy) sets ``greedy``; ``greedy`` decodes greedily whatever the
    temperature (a training run's greedy cold-start batches keep theirs for the recorded log-probs)."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    greedy: bool = False
    max_sequence_tokens: int = 2048
    tool_syntax: str = "hermes"
    tool_prompt: str = "auto"
    top_m: int = 0  # also record the policy's top-M tokens and log-probs (temperature 1) at each sampled token
    top_k: int = 0  # sample among the k most likely tokens only (0: all)
    top_p: float = 1.0  # nucleus sampling: the smallest set of tokens holding this much probability (1: all)
    seed: int = 0  # lopd-eval's base seed (each task and sample gets its own)

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            self.greedy = True

    @property
    def text_tools(self) -> TextTools:
        return TextTools(self.tool_syntax, self.tool_prompt)


SamplingConfig = Sampling  # the rollout engine's name for it

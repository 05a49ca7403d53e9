"""Rollout, the first step of the pipeline (**rollout** → experience → latent context → update → training
loop): the student plays episodes of a lopd env and every sampled token id is kept exactly as sampled.
``engine.py`` holds the episode loop, batched HF generation, prefill and the :class:`Trajectory` record;
``vllm.py`` the colocated vLLM engine that can sample instead of HF ``generate``."""

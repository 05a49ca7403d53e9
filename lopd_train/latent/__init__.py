"""Latent context, the third step of the pipeline (rollout → experience → **latent context** → update →
training loop): what the teacher reads. ``context.py`` renders retrieved experiences as text and places a
context (text or a run of latent placeholders) inside the task's user turn; ``composer.py`` turns experiences
into latent tokens (encoder LoRA + Q-Former); ``diagnostics.py`` measures how much the teacher gains from its
context (the privileged-information-gain diagnostic)."""

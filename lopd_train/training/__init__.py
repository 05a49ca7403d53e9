"""Training, the last step of the pipeline (rollout → experience → latent context → update → **training
loop**): ``trainer.py`` runs the loop (rollouts, bank, algorithm update, logging); ``checkpoints.py`` writes
and restores its state atomically; ``heldout.py`` evaluates the student on held-out tasks during a run;
``runrecord.py`` says what a run folder's run is. What the loop shares with other steps (distributed ranks,
tracking, software records, state files) lives at the base of :mod:`lopd_train`."""

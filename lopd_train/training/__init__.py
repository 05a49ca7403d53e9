"""Training, the last step of the pipeline (rollout → experience → latent context → update → **training
loop**): ``trainer.py`` runs the loop (rollouts, bank, algorithm update, logging); ``checkpoints.py`` writes
and restores its state atomically; ``distributed.py`` spreads it over ranks (DDP-style or FSDP);
``heldout.py`` evaluates the student on held-out tasks during a run; ``tracking.py`` logs metrics and
rollout tables (TensorBoard, trackio, wandb); ``software.py`` records the versions each start ran on."""

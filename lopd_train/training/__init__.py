"""Training, the last step of the pipeline (rollout → experience → latent context → update → **training
loop**): ``trainer.py`` runs the loop (rollouts, bank, algorithm update, logging); ``checkpoints.py`` writes
and restores its state atomically; ``heldout.py`` evaluates the student on held-out tasks during a run;
``runrecord.py`` says what a run folder's run is. What the loop shares with other steps (distributed ranks,
tracking, software records, state files) lives at the base of :mod:`lopd_train`.

Run folder::

    run.json           what the run is (env, algo, model, defining settings, data hashes), written once:
                       ``--resume`` refuses other settings or data (:mod:`lopd_train.training.runrecord`)
    .lock              held by the one process working in the folder (:mod:`lopd_train.runlock`)
    config.json        the resolved configuration
    software.jsonl     the interpreter, package versions and lopd commit, a line per start or resume
    metrics.jsonl      one JSON object per step (and the cold start)
    tb/                TensorBoard events
    bank.sqlite        the live experience bank (every insert is durable)
    reward_curve.png   mean reward against rollouts
    checkpoints/step-NNNNNN/   trainer.safetensors + trainer.json (LoRA weights, compressor, optimisers, β,
                               probes, RNG: no pickle), student_adapter/ (peft folder), bank.sqlite (snapshot,
                               restored as it is on resume), state.json
    checkpoints/latest the name of the newest complete checkpoint (replaced atomically)
    student/           the exported student: merged weights, a plain transformers folder
"""

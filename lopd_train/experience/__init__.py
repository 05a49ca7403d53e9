"""Experience, the second step of the pipeline (rollout → **experience** → latent context → update → training
loop): successful trajectories are kept and retrieved again for a task. ``bank.py`` holds the persistent
experience bank, ``retriever.py`` its dense retriever; ``build.py`` builds a fixed reference bank by sampling the base model
before training (``lopd bank build``)."""

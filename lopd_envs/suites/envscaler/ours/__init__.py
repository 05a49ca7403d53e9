"""lopd's own environments and scenarios in EnvScaler's exact file format (the offline default data of
``lopd/EnvScaler-v0``): eight stateful environments (``src/``), 46 scenarios (``scenarios.py``), and the
files ``build.py`` writes from them (``lopd_ours_*.json``, ``splits.json``)."""

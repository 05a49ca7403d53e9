#!/usr/bin/env bash
# PIG curve's 1,000-step point: a fresh run at bf82301 (the commit of the 0/50/200 points), into its own folder;
# 200 again as a reproducibility check of the committed row, the text pilot checks the bank and held-back set.
# Resumable (state every 25 steps). PIG_WORKTREE: a worktree at bf82301; PYTHON: an interpreter with lopd[train];
# THREADS: torch threads (1 beside a study lane, 2 alone on the 2 cores; the
# thread count changes float sums, not the procedure: STATUS.md says from which step it ran at which).
cd "${PIG_WORKTREE:-/work/pig}" || exit 1
export LOPD_DATA_DIR="${LOPD_DATA_DIR:-/work/shared/data}" OMP_NUM_THREADS="${THREADS:-1}"
exec "${PYTHON:-/work/study-v2/.venv/bin/python}" benchmarks/privileged_gain.py --config examples/study_v2/base.toml \
  --pool 32 --samples 4 --hold-back 12 --cold-start 200,1000 --formats chat,trace --top-j 1,3 --success-samples 4 \
  --threads "${THREADS:-1}" --save-every 25 --resume --out benchmarks/results/pig_1000

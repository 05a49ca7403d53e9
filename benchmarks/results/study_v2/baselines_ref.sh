#!/usr/bin/env bash
# Issue 56's evidence: SDPO and SDFT as their references run them (--baseline-semantics reference; no bank, so the
# whole 512-rollout budget trains), seeds 0-2, on study v2's setting (same pool, held-out tasks, budget, sampling,
# float32), each run's 0-rollout points adopted from lopd-sN as every v2 run did. Resumable: rerun after a kill
# or in a new session (finished runs are skipped, partial ones resumed from their last checkpoint).
# WT: the pinned worktree (made here if missing); PYTHON: an interpreter with lopd[train] (run with PYTHONPATH=WT).
# Then copy $WT/benchmarks/results/study_v2/runs/{sdpo,sdft}-ref-s* into main (without checkpoints/ and bank files)
# and rerun `python benchmarks/sample_efficiency.py --only-report` there.
set -euo pipefail
MAIN=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
WT=${WT:-/work/baselines-ref}
PIN=39917953fb44b6d4faec11fbe463cfbfe4154d04  # the reference semantics, and no bank for SDPO/SDFT under them
[ -d "$WT" ] || git -C "$MAIN" worktree add --detach "$WT" "$PIN"
cd "$WT"
[ "$(git rev-parse HEAD)" = "$PIN" ] || { echo "$WT is not at $PIN" >&2; exit 1; }
R=benchmarks/results/study_v2
mkdir -p "$R/runs"
for s in 0 1 2; do [ -d "$R/runs/lopd-s$s" ] || cp -r "$MAIN/$R/runs/lopd-s$s" "$R/runs/"; done  # point 0
export OMP_NUM_THREADS=1 PYTHONPATH="$WT" LOPD_DATA_DIR="${LOPD_DATA_DIR:-/work/shared/data}"
for s in 0 1 2; do
  echo "=== $(date -u +%FT%T) seed $s"
  "${PYTHON:-/work/venv/bin/python}" benchmarks/sample_efficiency.py --resume --jobs 2 --algos lopd,sdpo-ref,sdft-ref --seeds $s
done

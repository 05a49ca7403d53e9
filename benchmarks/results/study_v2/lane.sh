#!/usr/bin/env bash
# A lane: wait for pid $1 (the run this lane already has going, or 0), then run "variant seed" items in turn.
# Each item names lopd too, so that a new run takes its 0-rollout points from lopd-sN (done) instead of
# evaluating the untrained model again; lopd-sN is skipped as done (it is never started twice: lane 1 finishes
# lopd-s2 before anything names seed 2).
cd "${STUDY_WORKTREE:-/work/study-v2}" && . .venv/bin/activate  # the pinned worktree (7783378: c680056 with f48942a)
export OMP_NUM_THREADS=1
wait_pid=$1; shift
while [ "$wait_pid" != 0 ] && kill -0 "$wait_pid" 2>/dev/null; do sleep 30; done
for a in "$@"; do
  set -- $a
  echo "=== $(date -u +%FT%T) $1 s$2"
  case $1 in lopd*|grpo) algos=$1 ;; *) algos=lopd,$1 ;; esac
  python benchmarks/sample_efficiency.py --resume --jobs 2 --algos $algos --seeds $2
done
echo "=== $(date -u +%FT%T) lane done"

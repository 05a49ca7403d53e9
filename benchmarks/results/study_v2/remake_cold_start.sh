#!/usr/bin/env bash
# Re-make lopd-sN's cold-start checkpoint (not in git; lost with a machine) from lopd-sN's own config into a
# scratch folder (--resume: a stopped re-make goes on from its last save, every 25 cold-start steps), stop as
# soon as checkpoints/cold-start is written, put it where the ablations fork from (runs/lopd-sN/checkpoints/),
# then run the given lane items ("variant seed") with lane.sh, and give each forked run the re-made cold start's
# records (splice_cold_start.py: a fork copies them from lopd-sN's folder, whose records are the original
# cold start's). The held-out points are taken from lopd-sN (--eval-start-from), not evaluated again.
# Usage: remake_cold_start.sh SEED ["lopd-m0.1 0" ...]      (from anywhere; the worktree: STUDY_WORKTREE)
set -uo pipefail
seed=$1; shift
LANE="$(cd "$(dirname "$0")" && pwd)/lane.sh"
cd "${STUDY_WORKTREE:-/work/study-v2}" && . .venv/bin/activate
export OMP_NUM_THREADS=1
S=scratch/lopd-s$seed-cs; R=benchmarks/results/study_v2/runs/lopd-s$seed
if [ ! -f "$R/checkpoints/cold-start/state.json" ]; then
  echo "=== $(date -u +%FT%T) re-make lopd-s$seed's cold start in $S"
  lopd-train --config "benchmarks/results/study_v2/configs/lopd-s$seed.toml" --output-dir "$S" \
    --eval-start-from "$R" --resume >> "scratch/remake_cs$seed.log" 2>&1 &
  pid=$!
  while kill -0 $pid 2>/dev/null && [ ! -f "$S/checkpoints/cold-start/state.json" ]; do sleep 20; done
  sleep 20; kill $pid 2>/dev/null; wait $pid
  [ -f "$S/checkpoints/cold-start/state.json" ] || { echo "no cold-start checkpoint in $S" >&2; exit 1; }
  mkdir -p "$R/checkpoints" && cp -r "$S/checkpoints/cold-start" "$R/checkpoints/"
  echo "=== $(date -u +%FT%T) cold start in place"
fi
[ $# -gt 0 ] || exit 0
"$LANE" 0 "$@"; rc=$?
for item in "$@"; do  # "variant seed" -> runs/variant-sSEED
  set -- $item; run=benchmarks/results/study_v2/runs/$1-s$2
  [ -f "$run/metrics.jsonl" ] && python "$(dirname "$LANE")/splice_cold_start.py" "$S" "$run"
done
exit $rc

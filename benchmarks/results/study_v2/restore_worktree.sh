#!/usr/bin/env bash
# Re-make the study's pinned worktree on a new machine (the worktree, its venv and checkpoints are not in git).
# The runs use 7783378 = c680056 + f48942a cherry-picked; that commit is on no branch, so it is re-made here
# with the original author and committer dates, which gives back the same commit id (checked below).
# Then: a venv, and the finished runs copied in from main (a new arm takes its 0-rollout point from lopd-sN;
# a partial run in main is not copied: without its checkpoint it restarts from zero).
# Usage: benchmarks/results/study_v2/restore_worktree.sh [WORKTREE]   (default /work/study-v2)
set -euo pipefail
MAIN=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
WT=${1:-/work/study-v2}
PIN=778337857736b3a609c8b3ac107c466324fc4c48
git -C "$MAIN" worktree add --detach "$WT" c680056
cd "$WT"
git cherry-pick --no-commit f48942a
GIT_AUTHOR_NAME="$(git -C "$MAIN" log -1 --format=%an f48942a)" GIT_AUTHOR_EMAIL="$(git -C "$MAIN" log -1 --format=%ae f48942a)" \
GIT_COMMITTER_NAME="$(git -C "$MAIN" log -1 --format=%an f48942a)" GIT_COMMITTER_EMAIL="$(git -C "$MAIN" log -1 --format=%ae f48942a)" \
GIT_AUTHOR_DATE="1796488980 +0000" GIT_COMMITTER_DATE="1796488988 +0000" \
  git commit -q -C f48942a --no-verify
[ "$(git rev-parse HEAD)" = "$PIN" ] || { echo "re-made commit $(git rev-parse HEAD) is not $PIN" >&2; exit 1; }
python3 -m venv .venv && .venv/bin/pip install -q torch==2.13.0 && .venv/bin/pip install -q -e ".[train]"
R=benchmarks/results/study_v2; mkdir -p "$R/runs" scratch
cp -r "$MAIN/$R/configs" "$R/"
for run in "$MAIN/$R"/runs/*; do
  # finished runs only: the last held-out point is the budget's (512 rollouts)
  python3 -c "import json,sys; p=[json.loads(l) for l in open(sys.argv[1])]; sys.exit(0 if p and max(x['milestone'] for x in p)>=512 else 1)" \
    "$run/heldout.jsonl" 2>/dev/null && cp -r "$run" "$R/runs/"
done
echo "worktree $WT at $PIN; runs: $(ls "$R/runs" | tr '\n' ' ')"

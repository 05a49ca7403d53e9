#!/usr/bin/env bash
# The decisive test of issue 57: is there a task-specific latent channel at all with SmolLM2-135M?
# One fixed bank and held-back set (built once into shared/), then three arms after 200 cold-start steps at the
# authors' settings (J = 3, K = 32, batch 8, lr 1e-5, clips 30/3, AdamW weight decay 0.01):
#   qformer-self      the Q-Former, cold start on the authors' pairing (own row allowed)
#   qformer-exclude   the Q-Former, cold start on study v2's pairing (own row excluded): the control
#   perceiver-self    the authors' Perceiver resampler, the authors' pairing
# Every stage resumes (--resume; state every 25 steps): rerun this script after a kill or in a new session.
# PIG_WORKTREE: a git worktree at the pinned commit; PYTHON: an interpreter with lopd[train].
# STAGES: which stages to run (default "build arms"); "long" runs the best arm and its control on to 1,000 steps
# (BEST=qformer|perceiver, default qformer).
set -u
cd "${PIG_WORKTREE:-/work/pig57c}" || exit 1
export LOPD_DATA_DIR="${LOPD_DATA_DIR:-/work/shared/data}" PYTHONPATH="$PWD"
# every training task's frozen prompt head cached (40 x ~30 MB), not the default 1 GiB's ~33 (an LRU thrash)
export LOPD_PREFIX_CACHE_MB="${LOPD_PREFIX_CACHE_MB:-2048}"
PY="${PYTHON:-/work/venv/bin/python}"
R=benchmarks/results/decisive_test
# 35 tasks the base model solves greedily (study v2's point 0: 25 of the 120 held-out, 10 of the 32-task pool)
# and 5 pool tasks it solves in some samples: tasks with successes to hold back. The study's held-out list is
# replaced (no held-out evaluation runs here).
TASKS=simple_4,simple_12,simple_33,simple_84,simple_139,simple_147,simple_198,simple_256,simple_377,simple_392,simple_27,simple_30,simple_36,simple_37,simple_38,simple_43,simple_46,simple_47,simple_49,simple_52,simple_62,simple_63,simple_88,simple_97,simple_98,simple_105,simple_107,simple_179,simple_205,simple_251,simple_270,simple_297,simple_315,simple_368,simple_379,simple_19,simple_53,simple_114,simple_149,simple_339
COMMON=(--config examples/study_v2/base.toml --set "tasks=$TASKS" --set eval_tasks=simple_399 --set top_j=3
        --save-every 25 --resume)
stage() { case " ${STAGES:-build arms} " in *" $1 "*) return 0;; esac; return 1; }
arm() {  # name, threads, cold-start points, --set overrides...
  local name=$1 threads=$2 points=$3; shift 3
  OMP_NUM_THREADS=$threads "$PY" benchmarks/privileged_gain.py "${COMMON[@]}" --threads "$threads" \
    --bank-from $R/shared --cold-start "$points" --success-samples 4 --out $R/$name "$@" >>$R/$name.log 2>&1
}
if stage build; then
  OMP_NUM_THREADS=2 "$PY" benchmarks/privileged_gain.py "${COMMON[@]}" --threads 2 --pool 40 --samples 6 \
    --hold-back 48 --per-task 2 --formats chat --top-j 1,3 --build-only --out $R/shared >>$R/shared.log 2>&1 || exit 1
fi
if stage arms; then
  # The Q-Former arms' 0-step point was measured at fb5127c (records/cold_start_0.jsonl, committed): the same
  # untrained composer and LoRA, checked equal tensor by tensor, so these arms measure 200 steps only.
  # all three at once, one thread each (a cold-start step keeps ~2 GB alive on a CPU: one group at a time)
  arm qformer-self 1 200 --set cold_start_retrieval=self &
  arm qformer-exclude 1 200 --set cold_start_retrieval=exclude &
  arm perceiver-self 1 0,200 --set composer=perceiver --set cold_start_retrieval=self &
  wait
fi
if stage long; then
  best=${BEST:-qformer}; extra=(); [ "$best" = perceiver ] && extra=(--set composer=perceiver)
  arm $best-self 1 200,1000 --set cold_start_retrieval=self "${extra[@]}" &
  arm $best-exclude 1 200,1000 --set cold_start_retrieval=exclude "${extra[@]}" &
  wait
fi

#!/usr/bin/env bash
# The GPU checks of issue 23, as one script for a lent GPU machine with no network (the device tool: one H200,
# its own Python with torch, transformers, peft, accelerate and sentence-transformers; nothing can be fetched).
#
#   bash benchmarks/gpu_check.sh            # on the GPU machine: logs and JSON in $RESULTS, packed into
#                                           # $OUT/gpu_check.tgz after every step when $OUT is set (the tool)
#   DRY=1 bash benchmarks/gpu_check.sh      # the same steps on this CPU at toy sizes (to check the script)
#   SKIP="generation" bash benchmarks/gpu_check.sh   # leave out the named steps
#
# What it needs beside the tree (prepared on a machine with pip; see benchmarks/results/gpu_check/README.md):
#   .whl/      wheels the GPU machine lacks: gymnasium, farama-notifications, and chroma-hnswlib (hnswlib's API,
#              with the cp312 wheel hnswlib itself does not publish)
#   .devcheck/smollm2-tokenizer/   SmolLM2's tokenizer files (no weights)
#   .devcheck/minilm/              all-MiniLM-L6-v2's sentence-transformers files without its weights: a random
#              MiniLM of the same shape is built there and named by $LOPD_EMBEDDER (retrieval is then random,
#              which costs the same; the 90 MB weights do not fit the 64 MiB the tool carries)
#
# Steps, in order of value, each under its own time limit so that one failure leaves the others' results:
#   1. the GPU tests (tests/test_gpu_config.py): one step of the Qwen3 config on CUDA in bf16, and every algorithm
#      two steps plus a resume on CUDA (LOPD with its bank, cold start, probe NLL and PIG metric);
#   2. a random Qwen3-4B (benchmarks/random_model.py; the shapes are the published ones);
#   3. trainer_step.py at the CPU study's shape (4 tasks x 2 rollouts, J = 1), to set beside the CPU figures;
#   4. benchmarks/trainer_step.py on it at the reference's shape (32 tasks x 1 rollout, J = 3): LOPD's update
#      against GRPO's, the goal's ratios, on the hardware the reference uses;
#   5. benchmarks/generation.py on it: tokens/s at batch 1, 8, 32 (HF generate and lopd's sampler).
# Results (runs 1-2 of session 23, runs 3-4 of session 24; 15 device minutes each): benchmarks/results/gpu_check/README.md.
# REF_LIMIT=390 SKIP="tests trainer_step_study generation" runs step 4 alone with room for its warm-up (HF generate of 32 x 256);
# REF_REPS=3 REF_LIMIT=540 gives it three timed rounds (~75 s each on an H200).
# Not here: vLLM (its wheel is ~400 MB, over what the tool carries) and real Qwen3 weights (no network).
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${RESULTS:-/tmp/gpu-check}
rm -rf "$RESULTS" && mkdir -p "$RESULTS"
SITE=/tmp/gpu-check-site
export PYTHONUNBUFFERED=1

if [ "${DRY:-0}" = 1 ]; then
  PY=${PY:-python}; DEV=cpu; DTYPE=float32; SHAPE=tiny; T=3
  REF="--tasks 4 --group 1 --top-j 3 --prompt-tokens 128 --completion-tokens 16 --experience-tokens 64"
  STUDY="--tasks 2 --group 2 --prompt-tokens 128 --completion-tokens 16 --top-j 1 --experience-tokens 64"
  GEN="--batches 1 4 --prompt-tokens 64 --new-tokens 8 --reps 1"
  TESTS="-k gpu_config_parses"
else
  PY=${PY:-python3}; DEV=cuda; DTYPE=bfloat16; SHAPE=qwen3-4b; T=1
  REF="--tasks 32 --group 1 --top-j 3 --prompt-tokens 1024 --completion-tokens 256 --experience-tokens 512"
  STUDY="--tasks 4 --group 2 --prompt-tokens 850 --completion-tokens 26 --top-j 1 --experience-tokens 128"
  GEN="--batches 1 8 32 --prompt-tokens 256 --new-tokens 32 --reps 1"
  TESTS="-k cuda"
fi
limit() { awk -v s="$1" -v t="$T" 'BEGIN { printf "%d", s * t }'; }  # seconds (DRY: this CPU is slower)
step() {  # step NAME SECONDS COMMAND...: run, log to $RESULTS/NAME.log, record the exit status
  local name=$1 secs=$2; shift 2
  case " ${SKIP:-} " in *" $name "*) echo "=== $name: skipped (SKIP)" | tee -a "$RESULTS/steps.txt"; return 0;; esac
  echo "=== $name ($(date -u +%T), limit ${secs}s): $*" | tee -a "$RESULTS/steps.txt"
  timeout "$secs" "$@" > "$RESULTS/$name.log" 2>&1
  local rc=$?
  echo "=== $name: exit $rc ($(date -u +%T))" | tee -a "$RESULTS/steps.txt"
  tail -n 25 "$RESULTS/$name.log"
  if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu_check.tgz" -C "$RESULTS" .; fi  # one file back, whatever stops us
  return 0
}

# 0. the machine and the packages
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"
  $PY -V; } > "$RESULTS/machine.txt" 2>&1
if [ "${DRY:-0}" != 1 ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .whl/*.whl \
    || { echo "the wheels did not install" | tee -a "$RESULTS/steps.txt"; exit 1; }
  export PYTHONPATH="$SITE:$PWD"
fi
$PY -c "import importlib.metadata as m
for p in ('torch','transformers','peft','accelerate','sentence-transformers','gymnasium','chroma-hnswlib','hnswlib'):
    try: print(p, m.version(p))
    except m.PackageNotFoundError: print(p, '-')
import torch; print('cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')" \
  >> "$RESULTS/machine.txt" 2>&1
cat "$RESULTS/machine.txt"

# the retriever's embedder: MiniLM's shape and tokenizer, random weights
EMB=/tmp/gpu-check-minilm
rm -rf "$EMB" && cp -r .devcheck/minilm "$EMB"
$PY -c "import sys; from transformers import BertConfig, BertModel
BertModel(BertConfig.from_pretrained(sys.argv[1])).save_pretrained(sys.argv[1])" "$EMB" >> "$RESULTS/machine.txt" 2>&1
export LOPD_EMBEDDER=$EMB

# 1. the GPU tests (on a CPU they are skipped but the config still parses)
step tests "$(limit 180)" $PY -m pytest -v -p no:cacheprovider -n 4 tests/test_gpu_config.py -rA $TESTS

# 2. a random model of the reference's size
MODEL=/tmp/gpu-check-$SHAPE
step model "$(limit 60)" $PY benchmarks/random_model.py "$SHAPE" --tokenizer .devcheck/smollm2-tokenizer \
  --out "$MODEL" --dtype "$DTYPE"

# 3. the CPU study's shape, on the GPU (fast: first)
# shellcheck disable=SC2086
step trainer_step_study "$(limit 240)" $PY benchmarks/trainer_step.py --model "$MODEL" --device "$DEV" \
  --dtype "$DTYPE" --algos grpo lopd --reps 2 --profile 25 $STUDY --json "$RESULTS/trainer_step_study.json"
# 4. LOPD's update against GRPO's at the reference's shape
# shellcheck disable=SC2086
step trainer_step_reference "$(limit "${REF_LIMIT:-170}")" $PY benchmarks/trainer_step.py --model "$MODEL" --device "$DEV" \
  --dtype "$DTYPE" --algos grpo lopd --reps "${REF_REPS:-1}" --gradient-checkpointing $REF --json "$RESULTS/trainer_step_reference.json"

# 5. generation tokens/s at batch 1, 8, 32
# shellcheck disable=SC2086
step generation "$(limit 110)" $PY benchmarks/generation.py --model "$MODEL" --device "$DEV" --dtype "$DTYPE" \
  $GEN --json "$RESULTS/generation.json"

echo "done ($(date -u +%T))" | tee -a "$RESULTS/steps.txt"

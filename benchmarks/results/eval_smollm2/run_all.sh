#!/bin/bash
# The full SmolLM2-135M-Instruct evaluations of benchmarks/results/eval_smollm2/ (hf backend, greedy, CPU).
# Resumable: run it again after an interruption (every command has --resume; the records already written
# are kept and skipped). Run from the repository root; benchmark data from $LOPD_DATA_DIR.
set -u
R=benchmarks/results/eval_smollm2
# one torch thread: on an oversubscribed machine two OpenMP threads spin-wait on each other most of the time
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} MKL_NUM_THREADS=${MKL_NUM_THREADS:-1}
lopd-eval --model smollm2-135m-instruct --env lopd/BFCLv3-v0 --category simple --backend hf --temperature 0 \
    --batch-size 8 --max-new-tokens 256 --output $R/bfcl_simple --resume
lopd-eval --model smollm2-135m-instruct --env lopd/HumanEvalPlus-v0 --category plus --backend hf --temperature 0 \
    --batch-size 8 --max-new-tokens 512 --output $R/humanevalplus --resume
lopd-eval --model smollm2-135m-instruct --env lopd/ACEBench-v0 --category normal --language en --backend hf \
    --temperature 0 --batch-size 8 --max-new-tokens 256 --output $R/acebench_en_normal --resume

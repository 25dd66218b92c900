#!/usr/bin/env bash
# The GPU check in one go: the GPU tests, then the engine benchmark.
# Needs vLLM importable (PYTHONPATH) and make_model.py; see docs/gpu.md for staging.
#   MAKE_MODEL  path to make_model.py (writes the LightOnOCR-2-1B-shaped folders)
#   OCRWATCH_CORPUS  folder of real scans for the tests
#   OUT  where logs and results go (default ./gpu-out)
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
MODELS=${MODELS:-/tmp/ocrwatch-models}
export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv | tee "$OUT/gpu.txt"

[ -f "$MODELS/full/config.json" ] || python3 "$MAKE_MODEL" "$MODELS/full" >"$OUT/make_model.log" 2>&1
[ -f "$MODELS/tiny/model.safetensors" ] || python3 "$MAKE_MODEL" "$MODELS/tiny" --tiny >>"$OUT/make_model.log" 2>&1

start=$(date +%s)
TINY=""; [ "${RUN_TINY:-1}" = 1 ] && TINY="$MODELS/tiny"
OCRWATCH_GPU_MODEL="$MODELS/full" OCRWATCH_GPU_TINY_MODEL="$TINY" \
    timeout "${TESTS_TIMEOUT:-220}" python3 -m pytest tests/gpu -v -rs -s -p no:cacheprovider -o timeout=150 \
    >"$OUT/pytest_gpu.log" 2>&1
echo "gpu tests: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
grep -E "PASSED|FAILED|ERROR|SKIPPED|passed|failed|corpus:|asleep:|woke|stopped:|Error" "$OUT/pytest_gpu.log" | tail -n 30

[ "${SKIP_BENCH:-0}" = 1 ] && exit 0
start=$(date +%s)
timeout "${BENCH_TIMEOUT:-330}" python3 benchmarks/gpu_engine.py "$MODELS/full" \
    --out "$OUT/gpu_engine.txt" --json "$OUT/gpu_engine.json" --raw-log "$OUT/raw_vllm.log" \
    ${BENCH_ARGS:-} >"$OUT/bench.log" 2>&1
echo "benchmark: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
grep -v "EngineCore\|^INFO\|^WARNING\|^\[W" "$OUT/bench.log" | tail -n 25


#!/usr/bin/env bash
# The GPU checks, from the repository root: the engine benchmark, the daemon benchmark and
# the GPU tests, each whole, in the order STAGES names (default: "engine daemon tests";
# "start" runs benchmarks/gpu_start.py, where a start spends its time; "shared" runs
# benchmarks/gpu_shared.py, the daemon on a card another program shares; "remote" runs
# benchmarks/gpu_remote.py, which needs the wheels of benchmarks/gpu_wheels.sh; "router"
# runs it with --router (vllm-router's wheel among the wheels too); "scan"
# runs benchmarks/gpu_scan.py, pages turned upright before vLLM, on OCRWATCH_CORPUS).
# Needs vLLM importable (PYTHONPATH) and make_model.py; see docs/gpu.md for staging.
#   MAKE_MODEL       path to make_model.py (writes the LightOnOCR-2-1B-shaped folders)
#   OCRWATCH_CORPUS  folder of real scans for the tests
#   OUT              where logs and results go (default ./gpu-out)
#   TESTS_K          a pytest -k expression: the tests stage runs only those GPU tests
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
MODELS=${MODELS:-/tmp/ocrwatch-models}
export VLLM_USE_FLASHINFER_SAMPLER=${VLLM_USE_FLASHINFER_SAMPLER:-0} PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv | tee -a "$OUT/gpu.txt"

[ -f "$MODELS/full/config.json" ] || python3 "$MAKE_MODEL" "$MODELS/full" >"$OUT/make_model.log" 2>&1
[ -f "$MODELS/tiny/model.safetensors" ] || python3 "$MAKE_MODEL" "$MODELS/tiny" --tiny >>"$OUT/make_model.log" 2>&1

# pip writes each module's bytecode when it installs a package; a site-packages tree
# unpacked by hand has none, and every first import would compile thousands of modules.
# Compile it once, as pip would have, and say how long that took.
SITE=$(python3 -c "import importlib.util as u, os; print(os.path.dirname(os.path.dirname(u.find_spec('vllm').origin)))" 2>/dev/null)
if [ -n "$SITE" ] && [ -w "$SITE" ] && [ ! -f "$SITE/.ocrwatch-bytecode" ]; then
    t=$(date +%s)
    python3 -m compileall -q -j 0 "$SITE" >/dev/null 2>&1
    touch "$SITE/.ocrwatch-bytecode"
    echo "bytecode for $SITE, as pip install writes it: $(( $(date +%s) - t )) s" | tee -a "$OUT/summary.txt"
fi

# Where a vLLM start spends its time, from vLLM's own log lines.
start_times() {
    grep -aE "Loading weights took|Model loading took|Dynamo bytecode transform|torch.compile took|torch.compile takes|Compiling a graph|Directly load the compiled graph|Memory profiling takes|Graph capturing finished|init engine .* took|cache directory|capture sizes|Cudagraph" "$1" \
        | sed -E 's/^.*(INFO|WARNING)[^]]*\] //' | head -n 60
}

for stage in ${STAGES:-engine daemon tests}; do
    start=$(date +%s)
    case $stage in
    engine)
        timeout "${ENGINE_TIMEOUT:-560}" python3 benchmarks/gpu_engine.py "$MODELS/full" \
            --out "$OUT/gpu_engine.txt" --json "$OUT/gpu_engine.json" --raw-log "$OUT/raw_vllm.log" \
            ${ENGINE_ARGS:-} >"$OUT/engine.log" 2>&1
        echo "engine benchmark: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
        { echo "== engine (first start, then the second)"; start_times "$OUT/engine.log"
          echo "== plain vLLM runs"; start_times "$OUT/raw_vllm.log"; } >>"$OUT/start_times.txt"
        grep -av "EngineCore\|^INFO\|^WARNING\|^\[W\|^(EngineCore" "$OUT/engine.log" | tail -n 30
        ;;
    start)
        timeout "${START_TIMEOUT:-560}" python3 benchmarks/gpu_start.py "$MODELS/full" \
            --out "$OUT/gpu_start.txt" --json "$OUT/gpu_start.json" --log "$OUT/starts.log" \
            ${START_ARGS:-} >"$OUT/start_bench.log" 2>&1
        echo "start benchmark: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
        grep -av "EngineCore\|^INFO\|^WARNING\|^\[W\|^(EngineCore" "$OUT/start_bench.log" | tail -n 45
        ;;
    daemon)
        timeout "${DAEMON_TIMEOUT:-560}" python3 benchmarks/gpu_daemon.py "$MODELS/full" \
            --out "$OUT/gpu_daemon.txt" --json "$OUT/gpu_daemon.json" \
            --plain-log "$OUT/plain_vllm.log" ${DAEMON_ARGS:-} >"$OUT/daemon_bench.log" 2>&1
        echo "daemon benchmark: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
        cp /tmp/ocrwatch-daemon-bench/daemon.log "$OUT/daemon.log" 2>/dev/null
        cp /tmp/ocrwatch-daemon-bench/metrics_in_flight.txt "$OUT/" 2>/dev/null
        { echo "== daemon"; start_times "$OUT/daemon.log"; } >>"$OUT/start_times.txt"
        grep -av "EngineCore\|^INFO\|^WARNING\|^\[W\|^(EngineCore" "$OUT/daemon_bench.log" | tail -n 25
        ;;
    scan)
        # The daemon turning corpus pages upright (rotate_pages on and off) before vLLM.
        timeout "${SCAN_TIMEOUT:-500}" python3 benchmarks/gpu_scan.py "$MODELS/full" \
            --corpus "${OCRWATCH_CORPUS:?the scan stage needs OCRWATCH_CORPUS}" \
            --out "$OUT/gpu_scan.txt" --json "$OUT/gpu_scan.json" >"$OUT/scan_bench.log" 2>&1
        echo "scan benchmark: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
        cp /tmp/ocrwatch-scan-bench/daemon-rotate-*.log "$OUT/" 2>/dev/null
        grep -av "EngineCore\|^INFO\|^WARNING\|^\[W\|^(EngineCore" "$OUT/scan_bench.log" | tail -n 25
        ;;
    shared)
        # The daemon on a card another program shares, and from stopped to read.
        timeout "${SHARED_TIMEOUT:-400}" python3 benchmarks/gpu_shared.py "$MODELS/full" \
            --out "$OUT/gpu_shared.txt" --json "$OUT/gpu_shared.json" >"$OUT/shared_bench.log" 2>&1
        echo "shared-card benchmark: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
        cp /tmp/ocrwatch-shared-bench/daemon_shared.log "$OUT/daemon_shared.log" 2>/dev/null
        grep -av "EngineCore\|^INFO\|^WARNING\|^\[W\|^(EngineCore" "$OUT/shared_bench.log" | tail -n 40
        ;;
    remote)
        # The remote engine against `vllm serve` on the same drop; the embedded daemon's
        # figure from the daemon stage, when it ran first, gives the ratio.
        timeout "${REMOTE_TIMEOUT:-560}" python3 benchmarks/gpu_remote.py "$MODELS/full" \
            --out "$OUT/remote.txt" --embedded-json "$OUT/gpu_daemon.json" \
            --work /tmp/ocrwatch-remote-bench ${REMOTE_ARGS:-} >"$OUT/remote_bench.log" 2>&1
        echo "remote benchmark: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
        grep -av "EngineCore\|^INFO\|^WARNING\|^\[W\|^(EngineCore\|^(APIServer" "$OUT/remote_bench.log" | tail -n 25
        ;;
    router)
        # Two (ROUTER_N) servers on one GPU behind vllm-router, beside one server of the
        # whole budget: the plain client and the daemon against each (gpu_remote.py --router).
        timeout "${ROUTER_TIMEOUT:-540}" python3 benchmarks/gpu_remote.py "$MODELS/full" \
            --router "${ROUTER_N:-2}" --out "$OUT/gpu_router.txt" \
            --work /tmp/ocrwatch-router-bench ${ROUTER_ARGS:-} >"$OUT/router_bench.log" 2>&1
        echo "router benchmark: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
        cp /tmp/ocrwatch-router-bench/*.log "$OUT/" 2>/dev/null
        grep -av "EngineCore\|^INFO\|^WARNING\|^\[W\|^(EngineCore\|^(APIServer" "$OUT/router_bench.log" | tail -n 40
        ;;
    tests)
        TINY=""; [ "${RUN_TINY:-1}" = 1 ] && TINY="$MODELS/tiny"
        # The kernels vLLM compiles at a first start stay in the user's caches, as on a
        # desktop (the tests' own HOMEs would start each engine with empty ones).
        TRITON=${TRITON_CACHE_DIR:-$HOME/.triton/cache} VCACHE=${VLLM_CACHE_ROOT:-$HOME/.cache/vllm}
        mkdir -p "$TRITON" "$VCACHE"
        TRITON_CACHE_DIR=$TRITON VLLM_CACHE_ROOT=$VCACHE \
        OCRWATCH_GPU_MODEL="$MODELS/full" OCRWATCH_GPU_TINY_MODEL="$TINY" \
            timeout "${TESTS_TIMEOUT:-300}" python3 -m pytest tests/gpu ${TESTS_K:+-k "$TESTS_K"} -v -rs -s -p no:cacheprovider \
            -o timeout=200 >"$OUT/pytest_gpu.log" 2>&1
        echo "gpu tests: exit $? after $(( $(date +%s) - start )) s" | tee -a "$OUT/summary.txt"
        grep -aE "PASSED|FAILED|ERROR|SKIPPED|passed|failed|corpus:|asleep:|woke|stopped:|Error" \
            "$OUT/pytest_gpu.log" | tail -n 30
        ;;
    esac
done

#!/usr/bin/env bash
# benchmarks/gpu_remote.py on the lent GPU machine, in one call, from the repository root.
# Before it (here): bash benchmarks/gpu_wheels.sh, and copy ../shared/gpu/make_model.py
# into .gpu/; vLLM staged as ../shared/gpu/README.md says (its part1 in .gpu/ unless
# /tmp/site already holds vLLM from an earlier call). Carry [".gpu", ".whl"].
# Extra arguments go to gpu_remote.py (e.g. --embedded 2.9, --gpus 2).
# Results: $OUT/remote.txt (also benchmarks/results/remote.txt there) and the logs.
set -euo pipefail
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
if [ ! -d /tmp/site/vllm ]; then
    if ! ls /root/stage/*.part0 .gpu/*.part1 >/dev/null 2>&1; then
        echo "STAGE_LOST: stage vLLM's part0 first (../shared/gpu/README.md)"; exit 3
    fi
    cat /root/stage/*.part0 .gpu/*.part1 > /root/stage/s.tar.xz
    mkdir -p /tmp/site
    python3 -c "import tarfile; tarfile.open('/root/stage/s.tar.xz').extractall('/tmp/site')"
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
MODELS=${MODELS:-/tmp/ocrwatch-models}
[ -f "$MODELS/full/config.json" ] || python3 "${MAKE_MODEL:-.gpu/make_model.py}" "$MODELS/full" \
    >"$OUT/make_model.log" 2>&1
WORK=/tmp/ocrwatch-remote-bench
rm -rf "$WORK"
status=0
python3 benchmarks/gpu_remote.py "$MODELS/full" --out "$OUT/remote.txt" --work "$WORK" "$@" \
    2>&1 | tee "$OUT/gpu_remote.log" || status=$?
cp "$OUT/remote.txt" benchmarks/results/remote.txt 2>/dev/null || true
for log in "$WORK"/vllm_serve_*.log; do
    if [ -f "$log" ]; then tail -c 2000000 "$log" > "$OUT/$(basename "$log")"; fi
done
for d in "$WORK"/daemon_*; do
    if [ -f "$d/daemon.log" ]; then tail -c 2000000 "$d/daemon.log" > "$OUT/$(basename "$d").log"; fi
done
exit "$status"

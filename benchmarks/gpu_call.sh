#!/usr/bin/env bash
# One call on the lent GPU machine, from the repository root: vLLM unpacked when it is not
# there yet (its part0 staged in /root/stage by an earlier call, part1 in $GPU_DIR, as
# ../shared/gpu/README.md says), the daemon's wheels installed (benchmarks/gpu_wheels.sh,
# in $WHL_DIR), then gpu_run.sh's STAGES. The reports land in $OUT, the logs in one
# archive (the device tool brings back at most 8 files).
#   GPU_DIR   folder with vLLM's part1 and make_model.py (default .gpu)
#   WHL_DIR   folder with the wheels (default .whl; skipped when absent)
#   LIMIT     seconds gpu_run.sh may take in all (default: what is left of 575 s after
#             the unpacking and installing), so the reports come back within a 600 s call
set -uo pipefail
BEGUN=$(date +%s)
SITE=${SITE:-/tmp/site}
GPU_DIR=${GPU_DIR:-.gpu}
WHL_DIR=${WHL_DIR:-.whl}
FINAL=${OUT:-$PWD/gpu-out}
mkdir -p "$FINAL"
if [ ! -d "$SITE/vllm" ]; then
    if ! ls /root/stage/*.part0 "$GPU_DIR"/*.part1 >/dev/null 2>&1; then
        echo "STAGE_LOST: stage vLLM's part0 first (../shared/gpu/README.md)"; exit 3
    fi
    t=$(date +%s)
    cat /root/stage/*.part0 "$GPU_DIR"/*.part1 > /root/stage/s.tar.xz
    mkdir -p "$SITE"
    python3 -c "import tarfile; tarfile.open('/root/stage/s.tar.xz').extractall('$SITE')"
    rm -f /root/stage/s.tar.xz
    echo "vLLM unpacked in $(( $(date +%s) - t )) s"
fi
# Wheels and Tesseract's data: from $WHL_DIR, and what an earlier call staged beside
# vLLM's part0 in /root/stage (the 64 MiB a call carries does not hold them all at once).
wheels=$(ls "$WHL_DIR"/*.whl /root/stage/*.whl 2>/dev/null)
if [ -n "$wheels" ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" $wheels
fi
for data in "$WHL_DIR/tessdata.tar.xz" /root/stage/tessdata.tar.xz; do
    if [ -f "$data" ] && [ ! -d /tmp/tessdata ]; then tar -xJf "$data" -C /tmp; fi
done
if [ -d /tmp/tessdata ]; then export TESSDATA_PREFIX=/tmp/tessdata; fi
if [ -f "$GPU_DIR/make_model.py" ]; then cp "$GPU_DIR/make_model.py" /tmp/make_model.py; fi
export PYTHONPATH=$SITE:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
# Before any engine starts: every module the daemon loads is importable here (a wheel
# missing from benchmarks/gpu_wheels.sh would otherwise end a run minutes in).
if ! python3 -c "import ocrwatch.daemon, ocrwatch.cli, ocrwatch.engines.remote, \
        ocrwatch.engines.vllm, ocrwatch.results.pdfout, ocrwatch.scan.prepare, \
        ocrwatch.core.textutil, psutil, httpx, pikepdf, pypdfium2, rapidfuzz, pynvml, \
        tesserocr"; then
    echo "PREFLIGHT: a module the daemon needs is missing (benchmarks/gpu_wheels.sh)"; exit 4
fi
RUN=/tmp/ocrwatch-gpu-out
rm -rf "$RUN" && mkdir -p "$RUN"
LIMIT=${LIMIT:-$(( 575 - ($(date +%s) - BEGUN) ))}
echo "gpu_run.sh may take $LIMIT s"
OUT=$RUN MAKE_MODEL=/tmp/make_model.py timeout "$LIMIT" bash benchmarks/gpu_run.sh
echo "gpu_run.sh: exit $?"
for f in gpu_daemon.txt gpu_daemon.json gpu_shared.txt gpu_shared.json remote.txt summary.txt \
         pytest_gpu.log gpu_scan.txt gpu_scan.json gpu_router.txt metrics_in_flight.txt; do
    if [ -f "$RUN/$f" ]; then cp "$RUN/$f" "$FINAL/"; fi
done
tar -czf "$FINAL/logs.tar.gz" -C "$RUN" .

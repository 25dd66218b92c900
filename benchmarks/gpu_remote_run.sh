#!/usr/bin/env bash
# benchmarks/gpu_remote.py on the lent GPU machine in one call, from the repository root,
# staging included (gpu_run.sh's "remote" stage does the measuring).
# Before it, here: bash benchmarks/gpu_wheels.sh (the daemon's wheels into .whl/) and
# cp ../shared/gpu/make_model.py .gpu/; vLLM staged as ../shared/gpu/README.md says (its
# part1 in .gpu/, unless /tmp/site holds vLLM from an earlier call). Carry [".gpu", ".whl"].
#   STAGES="daemon remote"   also runs gpu_daemon.py first, for the embedded engine's ratio
#   REMOTE_ARGS="--embedded 2.9"   or give that figure by hand; "--gpus 2 [--dp]" for two GPUs
# Results in $OUT: remote.txt (copied to benchmarks/results/remote.txt), logs.
set -euo pipefail
SITE=${SITE:-/tmp/site}  # where vLLM and the wheels are unpacked
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
if [ ! -d "$SITE/vllm" ]; then
    if ! ls /root/stage/*.part0 .gpu/*.part1 >/dev/null 2>&1; then
        echo "STAGE_LOST: stage vLLM's part0 first (../shared/gpu/README.md)"; exit 3
    fi
    cat /root/stage/*.part0 .gpu/*.part1 > /root/stage/s.tar.xz
    mkdir -p "$SITE"
    python3 -c "import tarfile; tarfile.open('/root/stage/s.tar.xz').extractall('$SITE')"
fi
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" .whl/*.whl
export PYTHONPATH=$SITE:$PWD VLLM_USE_FLASHINFER_SAMPLER=0 PYTHONUNBUFFERED=1
# gpu_run.sh writes a dozen files; $OUT gets the reports and one archive of the logs
# (the device tool brings back at most 8 files).
RUN=/tmp/ocrwatch-gpu-out
rm -rf "$RUN" && mkdir -p "$RUN"
OUT=$RUN MAKE_MODEL=${MAKE_MODEL:-.gpu/make_model.py} STAGES=${STAGES:-remote} \
    bash benchmarks/gpu_run.sh || true  # its stages say how they ended in summary.txt
for log in /tmp/ocrwatch-remote-bench/vllm_serve_*.log; do
    if [ -f "$log" ]; then cp "$log" "$RUN/"; fi
done
for d in /tmp/ocrwatch-remote-bench/daemon_*; do
    if [ -f "$d/daemon.log" ]; then cp "$d/daemon.log" "$RUN/remote_$(basename "$d").log"; fi
done
status=0
for report in remote.txt gpu_daemon.txt gpu_daemon.json summary.txt; do
    if [ -f "$RUN/$report" ]; then cp "$RUN/$report" "$OUT/"; fi
done
tar -czf "$OUT/gpu-logs.tar.gz" -C "$RUN" .
if [ -f "$RUN/remote.txt" ]; then
    cp "$RUN/remote.txt" benchmarks/results/remote.txt
else
    echo "no report: see remote_bench.log in $OUT/gpu-logs.tar.gz"; status=1
fi
exit "$status"

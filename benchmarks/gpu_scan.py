"""What turning pages upright costs the daemon with the embedded vLLM engine, on one GPU.

    python3 benchmarks/gpu_scan.py MODEL_DIR --corpus DIR [--out FILE] [--tokens 500]

The drop: every page of the corpus (a PDF's pages drawn at 200 dpi) as scanned and fed
turned 90, 180 and 270 degrees clockwise, JPEG at quality 92 (``benchmarks/cases.py``'s
turn). The same drop is read by two runs of ``ocrwatch run`` with ``engine = "vllm"``,
each in a process of its own after a warm-up file: ``rotate_pages = true`` (the default:
Tesseract's orientation detection through tesserocr on each page before the engine sees
it) and ``rotate_pages = false`` (pages read as fed, what the engine alone would be
given); blank pages and skew are checked in both. Each is timed from the drop to the last
sidecar; what the index recorded as turned is compared with how each page was fed. The
model is LightOnOCR-2-1B-shaped with random weights (``load_format = "dummy"``): every
page writes exactly ``--tokens`` tokens, so the text is noise and the time is the real
model's. Tesseract's data (``osd``, ``eng``) comes from ``TESSDATA_PREFIX``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _common, cases  # noqa: E402
from benchmarks._drop import query, run_daemon_on_drop, vllm_lines  # noqa: E402
from benchmarks.gpu_engine import Sampler, emit, gpu_facts, used_mib  # noqa: E402
from benchmarks.orientation import pages as corpus_pages  # noqa: E402
from ocrwatch.engines.base import gpu_preparers  # noqa: E402

GIB = 1024.0
FED = (0, 90, 180, 270)  # degrees clockwise each page is fed turned by
CARD_GB = 16.0


def make_drop(corpus: Path, folder: Path) -> dict[str, int]:
    """Each corpus page fed four ways, as ``NAME.turnDEG.jpg``; name -> pages (1)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, int] = {}
    with tempfile.TemporaryDirectory(prefix="ocrwatch-gpu-scan-") as tmp:
        for name, path, _langs in corpus_pages(_common.corpus(corpus), Path(tmp)):
            stem = name.rsplit(".", 1)[0]
            with Image.open(path) as opened:
                image = opened.convert("RGB")
                dpi = opened.info.get("dpi", (300, 300))
            for clockwise in FED:
                turned = image if clockwise == 0 else image.transpose(cases.TRANSPOSE[clockwise])
                out = f"{stem}.turn{clockwise}.jpg"
                turned.save(folder / out, "JPEG", quality=92, dpi=tuple(round(d) for d in dpi))
                files[out] = 1
    return files


def recorded_turns(database: Path) -> dict[str, int]:
    """Each dropped file's recorded turn (degrees clockwise) of its one page."""
    rows = query(database, "SELECT j.display, p.turned FROM pages p JOIN jobs j "
                           "ON j.id = p.job_id WHERE j.state = 'done'")
    return {Path(str(display)).name: int(turned or 0) for display, turned in rows}


def run(model: str, folder: Path, files: dict[str, int], tokens: int, work: Path,
        sampler: Sampler, rotate: bool, timeout: float) -> dict[str, Any]:
    shutil.rmtree(work, ignore_errors=True)
    lines = [f"rotate_pages = {'true' if rotate else 'false'}", *vllm_lines(model, tokens),
             "torch_compile = false", "idle_sleep_seconds = 0.0", "idle_stop_seconds = 0.0",
             f"card_gb = {CARD_GB}"]
    result = run_daemon_on_drop(lines, folder, files, work, 1.0, sampler, timeout)
    turns = recorded_turns(work / "index.sqlite3")
    right, wrong, left = 0, [], []
    for name in files:
        fed = int(name.rsplit(".turn", 1)[1].split(".")[0])
        want = (360 - fed) % 360  # fed 90 clockwise is turned back 270 clockwise
        got = turns.get(name)
        if got == want:
            right += 1
        elif got == 0:
            left.append(name)
        else:
            wrong.append(f"{name}: {got}")
    result.update(rotate=rotate, right=right, wrong=len(wrong), left=len(left),
                  wrong_pages=wrong, left_pages=left)
    shutil.copy(work / "daemon.log", work.parent / f"daemon-rotate-{'on' if rotate else 'off'}.log")
    return result


def report(meta: dict[str, Any], runs: list[dict[str, Any]]) -> str:
    base = meta.get("baseline_mib") or 0
    lines = [
        "ocrwatch GPU scan benchmark: turning pages upright before the vLLM engine reads them",
        f"date: {meta['date']}  machine: {meta['gpu']}  cpu cores: {meta['cores']}  "
        f"vLLM {meta['vllm']}  preparers: {meta['preparers']}",
        f"model: LightOnOCR-2-1B shape, random weights (load_format=dummy), bf16; "
        f"{meta['tokens']} output tokens a page (ignore_eos); planned for a 16 GB card",
        f"drop: {meta['files']} files: the corpus's {meta['files'] // len(FED)} pages, each as "
        "scanned and turned 90, 180 and 270 degrees clockwise (JPEG q92); settle_seconds 1.0",
        f"Tesseract data: {meta['tessdata']}",
        "",
        "| run | pages | seconds | pages/s | peak card memory | turned back right | "
        "wrong | left as fed |",
        "|---|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in runs:
        peak = "n/a" if r["peak_mib"] is None else f"{(r['peak_mib'] - base) / GIB:.2f} GiB"
        name = "rotate_pages = true (default)" if r["rotate"] else "rotate_pages = false"
        lines.append(f"| {name} | {r['pages']} | {r['seconds']} | {r['rate']:.2f} | {peak} | "
                     f"{r['right']} | {r['wrong']} | {r['left']} |")
    on = next((r for r in runs if r["rotate"]), None)
    off = next((r for r in runs if not r["rotate"]), None)
    lines.append("")
    if on and off:
        lines.append(f"with orientation / without: {on['rate'] / off['rate']:.2f}x pages/s "
                     f"({on['seconds']} s against {off['seconds']} s for the drop)")
    if on:
        lines.append(f"rotate_pages on: left as fed {on['left_pages'] or 'none'}; turned "
                     f"wrong {on['wrong_pages'] or 'none'}")
    for r in runs:
        lines.append(f"rotate_pages {'on' if r['rotate'] else 'off'}: first file (engine start "
                     f"included) {r['first_file_s']} s after launch; failed files "
                     f"{r['failed']} {r['errors']}")
    lines.append(f"memory figures are what each run added to the card; {base} MiB were in use "
                 "before the benchmark started")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="LightOnOCR-shaped model folder")
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--work", type=Path, default=Path("/tmp/ocrwatch-scan-bench"))
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    parser.add_argument("--timeout", type=float, default=240.0)
    args = parser.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    folder = args.work / "drop"
    files = make_drop(args.corpus, folder)
    meta: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "tokens": args.tokens,
                            "files": len(files), "cores": os.cpu_count(),
                            "preparers": {"rotate_pages on": gpu_preparers(True),
                                          "off": gpu_preparers(False)}, "baseline_mib": used_mib(),
                            "tessdata": os.environ.get("TESSDATA_PREFIX", "the system's")}
    meta.update(gpu_facts())
    sampler = Sampler()
    saved: dict[str, Any] = {"meta": meta, "runs": []}
    try:
        for rotate in (True, False):
            sampler.settle(3.0)
            saved["runs"].append(run(args.model, folder, files, args.tokens,
                                     args.work / f"rotate-{'on' if rotate else 'off'}",
                                     sampler, rotate, args.timeout))
            print("run:", json.dumps(saved["runs"][-1]), flush=True)
            if args.json:
                args.json.write_text(json.dumps(saved, indent=1))
    finally:
        sampler.stop()
    emit(report(meta, saved["runs"]), args.out, args.json, saved)


if __name__ == "__main__":
    main()

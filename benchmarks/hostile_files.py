"""Files built to be slow: how long ocrwatch takes to prepare them, beside the plain way.

The attack files are those of the tests (``tests/reliability/attack_files.py``): one-page
PDFs of raw bytes with 10 MB and 1 MB of text, 100,000 and 30,000 text objects, a page of
125,760 visible characters, and a progressive JPEG with thousands of extra scans.

- a PDF: ocrwatch's preparation of its pages as the daemon does it (the text layer
  checked, the page drawn when the layer is refused), in a process of its own for its
  peak RSS, beside poppler's ``pdftotext`` extracting the same page's text, no check
  (the strongest plain way to get a PDF's text);
- the JPEG: ocrwatch's refusal from the bytes (scans counted), beside Pillow decoding it
  (what ocrwatch did before).

Each figure is the median of ``--runs`` runs (default 3). ``--before DIR`` also times
the preparation with the ocrwatch of another checkout (an earlier commit), once per file,
stopped after ``--before-timeout`` seconds.

    python benchmarks/hostile_files.py
    python benchmarks/hostile_files.py --scans 50000 --out /tmp/h.txt
    git worktree add /tmp/old 01f4d00 && python benchmarks/hostile_files.py --before /tmp/old
"""

from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if __package__ in (None, ""):
    sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "reliability"))

import attack_files  # type: ignore[import-not-found]  # noqa: E402

from benchmarks._common import header, median, save  # noqa: E402

PREPARE = """
import json, sys, time
from pathlib import Path
from ocrwatch.config import Config
from ocrwatch.pages.decode import iter_pages
path = Path(sys.argv[1])
config = Config(inbox=[path.parent], database=path.parent / "db.sqlite3", engine="fake")
start = time.monotonic()
taken = [p.text is not None for p in iter_pages(path, config, 1540, text_layer=True)]
# VmHWM: this process's own peak (ru_maxrss also carries the parent's RSS at the fork).
peak = int(next(l for l in open("/proc/self/status") if l.startswith("VmHWM:")).split()[1])
print(json.dumps({"seconds": time.monotonic() - start, "taken": taken,
                  "rss_mb": peak / 1024}))
"""

PDFS: dict[str, Callable[[], bytes]] = {
    "10 MB of text": lambda: attack_files.text_wall(10_000_000),
    "1 MB of text": lambda: attack_files.text_wall(1_000_000),
    "100,000 text objects": lambda: attack_files.text_objects(100_000),
    "30,000 text objects": lambda: attack_files.text_objects(30_000),
    "125,760 visible characters": attack_files.dense_page,
}


def _ocrwatch(path: Path, timeout: float, root: Path = ROOT) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", PREPARE, str(path)], cwd=root, text=True,
                          capture_output=True, timeout=timeout, check=True,
                          env={**os.environ, "PYTHONPATH": str(root)})
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _pdftotext(path: Path, timeout: float) -> float:
    start = time.monotonic()
    subprocess.run(["pdftotext", str(path), "-"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=timeout, check=False)
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--scans", type=int, default=20_000)
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--before", type=Path, help="a checkout of an earlier ocrwatch")
    parser.add_argument("--before-timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    poppler = shutil.which("pdftotext") is not None
    lines = header("Files built to be slow: preparation time and peak memory",
                   [f"median of {args.runs} runs each; ocrwatch in a process of its own "
                    "(peak RSS: its VmHWM)"])
    lines += ["", f"{'PDF':<28} {'bytes':>9} {'ocrwatch s':>11} {'peak MB':>8} "
                  f"{'layer':>8} {'pdftotext s':>12} {'ratio':>7}"
                  + (f" {'before s':>9}" if args.before else "")]
    with tempfile.TemporaryDirectory(prefix="ocrwatch-hostile-") as tmp:
        for name, make in PDFS.items():
            path = Path(tmp) / "attack.pdf"
            path.write_bytes(make())
            runs = [_ocrwatch(path, args.timeout) for _ in range(args.runs)]
            seconds = median([float(r["seconds"]) for r in runs])  # type: ignore[arg-type]
            peak = median([float(r["rss_mb"]) for r in runs])  # type: ignore[arg-type]
            layer = "taken" if runs[0]["taken"] == [True] else "OCR"
            plain = (median([_pdftotext(path, args.timeout) for _ in range(args.runs)])
                     if poppler else float("nan"))
            line = (f"{name:<28} {path.stat().st_size:>9} {seconds:>11.2f} {peak:>8.0f} "
                    f"{layer:>8} {plain:>12.2f} {seconds / plain:>7.2f}")
            if args.before:
                try:
                    old = _ocrwatch(path, args.before_timeout, args.before.resolve())
                    line += f" {float(old['seconds']):>9.2f}"  # type: ignore[arg-type]
                except subprocess.TimeoutExpired:
                    line += f" {'>' + format(args.before_timeout, '.0f'):>9}"
            lines.append(line)
        from PIL import Image

        from ocrwatch.core.errors import InputError
        from ocrwatch.pages.decode import check_scans

        bomb = attack_files.scan_bomb(args.scans)
        path = Path(tmp) / "bomb.jpg"
        path.write_bytes(bomb)
        refusals = []
        for _ in range(args.runs):
            start = time.monotonic()
            try:
                check_scans(path)
            except InputError:
                refusals.append(time.monotonic() - start)
        decodes = []
        for _ in range(args.runs):
            start = time.monotonic()
            with Image.open(io.BytesIO(bomb)) as image:
                image.load()
            decodes.append(time.monotonic() - start)
        refused = median(refusals) if len(refusals) == args.runs else float("nan")
        lines += ["", f"a progressive JPEG, 2000x2000, with {args.scans} extra scans "
                      f"({len(bomb)} bytes):",
                  f"  ocrwatch refuses it from its bytes in {refused * 1000:.1f} ms "
                  f"(every run refused: {len(refusals) == args.runs})",
                  f"  Pillow decodes it in {median(decodes):.2f} s "
                  f"({median(decodes) / max(refused, 1e-9):.0f}x)"]
    print("\n".join(lines))
    target = save("hostile_files.txt", lines, args.out)
    print(f"written to {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Peak memory to read one file, per page kind, next to OCRmyPDF.

    python3 benchmarks/memory.py [--corpus ../shared/corpus] [--repeat 3]
                                 [--out benchmarks/results/memory.txt]

Each run is a fresh process tree: ``ocrwatch add --engine tesseract`` (its own index, the
outputs it writes by default, pages turned upright as by default) and ``ocrmypdf -l eng``
(a searchable PDF; ``--image-dpi 300`` for images without a resolution), without and with
``--rotate-pages`` (what ocrwatch's default does), and, for images, the plain
``tesseract FILE stdout -l eng`` command: the floor of what reading the page costs. The
peak is the largest sum of RSS over the process and all its children, sampled every
20 ms with psutil (a child that lives less than that may be missed). Medians over
``--repeat`` runs; the ratio is ocrwatch's median over OCRmyPDF's. OCRmyPDF comes from
the ``bench`` extra (``pip install -e .[bench]``).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]


def tree_peak(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, float]:
    """(peak RSS of the whole tree in MB, seconds) of running ``argv``."""
    began = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    top = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        total = 0
        with contextlib.suppress(psutil.Error):  # a child that ended meanwhile
            for member in [top, *top.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += member.memory_info().rss
        peak = max(peak, total)
        time.sleep(0.02)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited with {proc.returncode}")
    return peak // (1 << 20), time.monotonic() - began


def ocrwatch_run(path: Path, work: Path) -> tuple[int, float]:
    home = work / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OCRWATCH_", "XDG_"))}
    env.update({"HOME": str(home), "XDG_RUNTIME_DIR": str(work / "run"),
                "PYTHONPATH": str(ROOT)})
    (work / "run").mkdir(mode=0o700)
    inbox = work / "inbox"
    inbox.mkdir()
    shutil.copy(path, inbox / path.name)
    return tree_peak([sys.executable, "-m", "ocrwatch", "add", "--engine", "tesseract",
                      "--database", str(work / "index.sqlite3"), "--inbox", str(inbox),
                      str(inbox / path.name)], env, work)


def ocrmypdf_run(path: Path, work: Path, rotate: bool = False) -> tuple[int, float]:
    ocrmypdf = Path(sys.executable).with_name("ocrmypdf")
    argv = [str(ocrmypdf), "-q", "-l", "eng", "--output-type", "pdf",
            *(["--rotate-pages"] if rotate else [])]
    if path.suffix.lower() != ".pdf":
        argv += ["--image-dpi", "300"]
    return tree_peak([*argv, str(path), str(work / "out.pdf")], dict(os.environ), work)


def tesseract_run(path: Path, work: Path) -> tuple[int, float]:
    env = dict(os.environ, OMP_THREAD_LIMIT="1")
    return tree_peak(["tesseract", str(path), "stdout", "-l", "eng"], env, work)


def _version(argv: list[str]) -> str:
    """The first line ``argv`` prints, named by its program; "?" when it cannot run."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return f"{Path(argv[0]).name} ?"
    first = (out.stdout or out.stderr).strip().splitlines()
    line = first[0] if first else "?"
    return line if line.lower().startswith(Path(argv[0]).name.lower()) else (
        f"{Path(argv[0]).name} {line}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    kinds = {"one-page JPEG scan": "ehri_eng_03.jpg", "one-page TIFF scan": "ocrd_deu_00.tif",
             "4-page scanned PDF": "ehri_eng_multipage_4p.pdf"}
    rows = []
    for kind, name in kinds.items():
        figures: dict[str, list[tuple[int, float]]] = {"ocrwatch": [], "OCRmyPDF": [],
                                                       "rotating": [], "tesseract": []}
        runs = [("ocrwatch", ocrwatch_run), ("OCRmyPDF", ocrmypdf_run),
                ("rotating", lambda p, w: ocrmypdf_run(p, w, rotate=True))]
        if not name.endswith(".pdf") and shutil.which("tesseract"):
            runs.append(("tesseract", tesseract_run))
        for _ in range(args.repeat):
            for label, run in runs:
                work = Path(tempfile.mkdtemp(prefix="memory-"))
                try:
                    # Resolved: each command runs in a folder of its own.
                    figures[label].append(run((args.corpus / name).resolve(), work))
                finally:
                    shutil.rmtree(work, ignore_errors=True)
        mine = statistics.median(f[0] for f in figures["ocrwatch"])
        theirs = statistics.median(f[0] for f in figures["OCRmyPDF"])
        secs = [statistics.median(f[1] for f in figures[k]) for k in ("ocrwatch", "OCRmyPDF")]
        rotating = statistics.median(f[0] for f in figures["rotating"])
        plain = (f"{statistics.median(f[0] for f in figures['tesseract']):.0f}"
                 if figures["tesseract"] else "-")
        rows.append(f"| {kind} | {mine:.0f} | {theirs:.0f} | {mine / theirs:.2f} | "
                    f"{rotating:.0f} | {mine / rotating:.2f} | {plain} | {secs[0]:.1f} | "
                    f"{secs[1]:.1f} |")
        print(rows[-1], flush=True)
    commit = _version(["git", "-C", str(ROOT), "describe", "--always", "--dirty"])[4:]
    text = "\n".join([
        f"# peak RSS of the whole process tree (psutil, 20 ms samples), medians of "
        f"{args.repeat} runs; Tesseract, English; a 2-core machine shared with other work",
        f"# ocrwatch at {commit}, "
        f"{_version([str(Path(sys.executable).with_name('ocrmypdf')), '--version'])}, "
        f"{_version(['tesseract', '--version'])}; "
        f"corpus {os.path.relpath(args.corpus, ROOT)}",
        "ocrwatch turns pages upright by default (rotate_pages, Tesseract's OSD); OCRmyPDF "
        "does with --rotate-pages",
        "| page kind | ocrwatch add, MB | OCRmyPDF, MB | ratio | OCRmyPDF --rotate-pages, "
        "MB | ratio | plain tesseract, MB | ocrwatch s | OCRmyPDF s |",
        "|---|---|---|---|---|---|---|---|---|", *rows, ""])
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""ocrwatch's Tesseract engine against plain ``tesseract`` and OCRmyPDF, on the same pages.

Each page of a set in the corpus's layout (``benchmarks/heldout_set.py`` makes one; the
corpus itself works too) is read three ways, with the same language data:

- ocrwatch as the daemon reads it: decoded (:func:`ocrwatch.pages.decode.iter_pages`),
  prepared with every default on (blank check, straightening, orientation, the script
  check) and read by the Tesseract engine through :func:`ocrwatch.pipeline.read`;
- plain ``tesseract FILE stdout -l LANGS``;
- OCRmyPDF as its users run it: ``ocrmypdf --rotate-pages --deskew --sidecar TXT -l LANGS``
  (``--image-dpi 300`` where the image says no resolution, or says one OCRmyPDF refuses
  as not credible, a camera's 72 dpi: run again with it, as its message tells its users).

CER after normalisation (:func:`benchmarks._common.score`) per page, the mean per class,
and ratios against each tool. CPU time, not wall time (the machine is shared): ocrwatch's
is the process's own CPU time over its reading (every thread), the others' their child
processes' (``RUSAGE_CHILDREN``).

    python benchmarks/heldout.py --set /tmp/heldout [--classes receipt fax-standard]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from PIL import Image

if __package__ in (None, ""):  # run as a file: the repository is the package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common

os.environ.setdefault("OMP_THREAD_LIMIT", "1")


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def plain(path: Path, langs: str) -> tuple[str, float]:
    before = _children_cpu()
    done = subprocess.run(["tesseract", str(path), "stdout", "-l", langs],
                          capture_output=True, text=True, check=False, timeout=600)
    return done.stdout, _children_cpu() - before


def ocrmypdf(path: Path, langs: str, work: Path) -> tuple[str, float, str]:
    """OCRmyPDF's sidecar text for ``path``, the CPU of the run that made it, and how it
    went: "ok"; "dpi": refused for a resolution it does not believe (a camera's 72 dpi
    stamp) and run again with ``--image-dpi 300``, as its message tells its users to;
    "failed": no sidecar (its text is then empty: a failed baseline, reported)."""
    sidecar, pdf = work / "sidecar.txt", work / "out.pdf"
    with Image.open(path) as opened:
        has_dpi = bool(opened.info.get("dpi"))
    status = "ok"
    for dpi in ([] if has_dpi else ["--image-dpi", "300"]), ["--image-dpi", "300"]:
        sidecar.unlink(missing_ok=True)
        command = [sys.executable, "-m", "ocrmypdf", "--rotate-pages", "--deskew", "--sidecar",
                   str(sidecar), "-l", langs, "--jobs", "1", "--quiet", *dpi, str(path),
                   str(pdf)]
        before = _children_cpu()
        done = subprocess.run(command, capture_output=True, text=True, check=False,
                              timeout=600)
        cpu = _children_cpu() - before
        if sidecar.exists() or dpi or "DpiError" not in done.stderr:
            break
        status = "dpi"
    if not sidecar.exists():
        return "", cpu, "failed"
    return sidecar.read_text("utf-8", errors="replace"), cpu, status


def run(folder: Path, classes: list[str] | None) -> list[dict[str, object]]:
    from ocrwatch import pipeline
    from ocrwatch.config import Config
    from ocrwatch.context import scan_for
    from ocrwatch.engines.tesseract import TesseractEngine
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.scan.prepare import ScanPrep

    rows: list[dict[str, object]] = []
    engines: dict[str, tuple[Config, TesseractEngine, ScanPrep]] = {}
    with tempfile.TemporaryDirectory(prefix="ocrwatch-heldout-") as tmp:
        for item in _common.corpus(folder):
            if classes and item.kind not in classes:
                continue
            langs = item.languages or "eng"
            if langs not in engines:
                config = Config(languages=langs.split("+"))
                # Prepared as the daemon prepares for Tesseract (context.scan_for): with
                # the script check, whose OSD runs after an unsure reading, and the turn
                # of a page its lines do not tell left to its reading (pipeline.read).
                engines[langs] = (config, TesseractEngine(config),
                                  scan_for(config, "tesseract"))
            config, engine, prep = engines[langs]
            truth = item.truth.read_text("utf-8")
            started = time.process_time()
            texts: list[str] = []
            for page in iter_pages(item.path, config, None):
                (result,), _ = pipeline.read(engine, "tesseract", [prep.prepare(page)], prep)
                texts.append(result.text)
            own_cpu = time.process_time() - started
            own = "\n".join(texts)
            plain_text, plain_cpu = plain(item.path, langs)
            ocrmypdf_text, ocrmypdf_cpu, ocrmypdf_run = ocrmypdf(item.path, langs, Path(tmp))
            row: dict[str, object] = {
                "file": item.path.name, "kind": item.kind,
                "ocrwatch": _common.score(truth, own).cer,
                "tesseract": _common.score(truth, plain_text).cer,
                "ocrmypdf": _common.score(truth, ocrmypdf_text).cer,
                "cpu ocrwatch": own_cpu, "cpu tesseract": plain_cpu,
                "cpu ocrmypdf": ocrmypdf_cpu, "ocrmypdf run": ocrmypdf_run,
                "pages": len(texts), "garbage": sum(map(_garbage, texts)),
                "garbage tesseract": int(_garbage(plain_text)),
                "garbage ocrmypdf": int(_garbage(ocrmypdf_text))}
            rows.append(row)
            print("  ".join(f"{k}={v:.3f}" if isinstance(v, float) else f"{k}={v}"
                            for k, v in row.items()), flush=True)
        for _, engine, prep in engines.values():
            prep.close()
            engine.close()
    return rows


def _garbage(text: str) -> bool:
    """Whether a reading holds more characters of non-words than of words (the issue's
    "no page whose sidecar holds more non-word characters than words")."""
    from ocrwatch.core.wordlike import wordlike_share

    return bool(text.split()) and wordlike_share(text) < 0.5


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}" if b else ("=" if a == b else "inf")


def report(rows: list[dict[str, object]]) -> list[str]:
    lines = _common.header(
        "ocrwatch (Tesseract engine, every default on) against plain tesseract and "
        "OCRmyPDF (--rotate-pages --deskew --sidecar), per class", [
            f"plain: {_common.tesseract_cli_version()}; ocrmypdf: "
            + subprocess.run([sys.executable, "-m", "ocrmypdf", "--version"],
                             capture_output=True, text=True, check=False).stdout.strip(),
            "CER: Levenshtein edits / reference characters after NFKC and whitespace "
            "folding; a class's CER is the mean of its pages'; best = the better of "
            "plain and OCRmyPDF",
            "CPU: seconds of CPU per page (ocrwatch: its process; the others: their "
            "processes), median"])
    by_kind: dict[str, list[dict[str, object]]] = defaultdict(list)
    for row in rows:
        by_kind[str(row["kind"])].append(row)
    lines += ["", "| class | pages | CER ocrwatch | CER tesseract | CER ocrmypdf | "
              "x tesseract | x ocrmypdf | x best |", "|---|--:|--:|--:|--:|--:|--:|--:|"]

    def mean(rs: list[dict[str, object]], key: str) -> float:
        return sum(float(str(r[key])) for r in rs) / len(rs)

    for kind, rs in [*sorted(by_kind.items()), ("**overall**", rows)]:
        own, cli, omp = (mean(rs, k) for k in ("ocrwatch", "tesseract", "ocrmypdf"))
        lines.append(f"| {kind} | {len(rs)} | {own:.4f} | {cli:.4f} | {omp:.4f} | "
                     f"{_ratio(own, cli)} | {_ratio(own, omp)} | {_ratio(own, min(cli, omp))} |")
    cpu = {k: _common.median([float(str(r[f"cpu {k}"])) for r in rows])
           for k in ("ocrwatch", "tesseract", "ocrmypdf")}
    lines += ["", "CPU s/page (median): " + ", ".join(f"{k} {v:.2f}" for k, v in cpu.items())
              + f"; ocrwatch / tesseract {_ratio(cpu['ocrwatch'], cpu['tesseract'])}"]
    runs = {how: [str(r["file"]) for r in rows if r["ocrmypdf run"] == how]
            for how in ("dpi", "failed")}
    lines += ["", f"OCRmyPDF: {len(runs['dpi'])} files refused for their stamped resolution "
              "and run again with --image-dpi 300, as its message says"
              + (f" ({', '.join(runs['dpi'])})" if runs["dpi"] else "")
              + f"; {len(runs['failed'])} without a sidecar (counted as CER 1)"
              + (f" ({', '.join(runs['failed'])})" if runs["failed"] else "")]
    pages = sum(int(str(r["pages"])) for r in rows)
    lines += ["", "readings holding more characters of non-words than of words: ocrwatch "
              f"{sum(int(str(r['garbage'])) for r in rows)} of {pages} pages; per file: "
              f"tesseract {sum(int(str(r['garbage tesseract'])) for r in rows)}, ocrmypdf "
              f"{sum(int(str(r['garbage ocrmypdf'])) for r in rows)} of {len(rows)} files"]
    garbage = [str(r["file"]) for r in rows if int(str(r["garbage"]))]
    if garbage:
        lines.append("  ocrwatch's: " + ", ".join(garbage))
    worst = sorted(rows, key=lambda r: -float(str(r["ocrwatch"])) / max(
        1e-4, min(float(str(r["tesseract"])), float(str(r["ocrmypdf"])))))[:8]
    lines += ["", "pages furthest over the better of the two (ocrwatch / best):"]
    for r in worst:
        best = min(float(str(r["tesseract"])), float(str(r["ocrmypdf"])))
        lines.append(f"- {r['file']} ({r['kind']}): {float(str(r['ocrwatch'])):.4f} against "
                     f"{best:.4f} ({_ratio(float(str(r['ocrwatch'])), best)})")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--set", type=Path, required=True, metavar="DIR")
    parser.add_argument("--classes", nargs="*", metavar="KIND")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    lines = report(run(args.set, args.classes))
    print("\n".join(lines))
    print(f"written: {_common.save('heldout.txt', lines, args.out)}")


if __name__ == "__main__":
    main()

"""Accuracy of the daemon's text against plain ``tesseract`` on a folder of real scans.

Every ``X.ext`` with an ``X.gt.txt`` beside it is read twice:

- by ocrwatch itself: ``ocrwatch add`` in a child process, with a temporary home,
  database and output folder, so the corpus folder is only ever read;
- by the ``tesseract`` command on the original file (PDF pages rasterised first with
  pypdfium2 at the daemon's own ``pdf_dpi``, one command per page).

Both get the same languages: the file's row in ``manifest.tsv`` (``--languages auto``)
or ``--languages``. Prints character error rate (NFKC, whitespace folded, exact
Levenshtein) and word recall per file and overall, time per page, and exits 1 when the
daemon's overall CER is more than ``--max-ratio`` times plain Tesseract's.

    python benchmarks/accuracy.py --corpus ../shared/corpus
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import (
    Item,
    Score,
    corpus,
    header,
    save,
    score,
    tesseract_cli_version,
)

# Tesseract's OpenMP threads make it several times slower on few cores (design notes);
# both sides run single-threaded so the times compare like with like. Text is unchanged.
_ENV_BOTH = {"OMP_THREAD_LIMIT": "1"}


@dataclass
class Result:
    item: Item
    languages: str
    pages: int
    daemon: Score
    plain: Score
    daemon_seconds: float  # job queued -> done inside the daemon (decode, OCR, sidecars, index)
    daemon_wall: float  # the whole `ocrwatch add` command, Python start included
    plain_seconds: float  # every `tesseract` command (and PDF rasterising)
    daemon_text: str
    plain_text: str


def _isolated_env(root: Path, workers: int) -> dict[str, str]:
    """The environment of a user who has never run ocrwatch, living under ``root``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OCRWATCH_")}
    env.update(_ENV_BOTH)
    home = root / "home"
    for var, sub in (("XDG_CONFIG_HOME", ".config"), ("XDG_DATA_HOME", ".local/share"),
                     ("XDG_STATE_HOME", ".local/state"), ("XDG_CACHE_HOME", ".cache"),
                     ("XDG_RUNTIME_DIR", "run")):
        (home / sub).mkdir(parents=True, exist_ok=True, mode=0o700)
        env[var] = str(home / sub)
    env["HOME"] = str(home)
    env["OCRWATCH_WORKERS"] = str(workers)
    return env


def run_daemon(item: Item, languages: str, engine: str, root: Path,
               workers: int) -> tuple[str, int, float, float]:
    """Text, pages, seconds inside the daemon and wall seconds of ``ocrwatch add``."""
    database = root / "ocrwatch.sqlite3"
    cmd = [sys.executable, "-m", "ocrwatch", "add", "--engine", engine,
           "--languages", languages.replace("+", ","), "--database", str(database),
           "--inbox", str(root / "inbox"), "--output-dir", str(root / "out"), str(item.path)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=_isolated_env(root, workers), capture_output=True,
                          text=True, check=False)
    wall = time.perf_counter() - start
    conn = sqlite3.connect(database)
    try:
        row = conn.execute(
            "SELECT state, reason, pages, txt_path, created, finished FROM jobs WHERE path = ?",
            (os.fsencode(item.path.absolute()),),
        ).fetchone()
    finally:
        conn.close()
    if row is None or row[0] != "done":
        reason = row[1] if row else proc.stderr.strip()[-2000:]
        raise SystemExit(f"ocrwatch could not read {item.path.name}: {reason}")
    _, _, pages, txt_path, created, finished = row
    text = Path(os.fsdecode(txt_path)).read_text(encoding="utf-8")
    return text, int(pages), float(finished) - float(created), wall


def rasterise(pdf: Path, dpi: int, folder: Path) -> list[Path]:
    """Each PDF page as a PNG at ``dpi``, drawn as the daemon draws it (pypdfium2)."""
    import pypdfium2 as pdfium

    doc = pdfium.PdfDocument(str(pdf))
    out = []
    try:
        for index in range(len(doc)):
            page = doc[index]
            image = page.render(scale=dpi / 72.0, draw_annots=True).to_pil().convert("RGB")
            page.close()
            target = folder / f"{pdf.stem}-{index + 1:04d}.png"
            image.save(target, dpi=(dpi, dpi))  # lets tesseract know the resolution
            out.append(target)
    finally:
        doc.close()
    return out


def run_plain(item: Item, languages: str, pdf_dpi: int, root: Path) -> tuple[str, float]:
    """Text and seconds of the ``tesseract`` command on the original (or its pages)."""
    folder = root / "plain" / item.path.name
    folder.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, **_ENV_BOTH}
    start = time.perf_counter()
    inputs = (rasterise(item.path, pdf_dpi, folder) if item.path.suffix.lower() == ".pdf"
              else [item.path])
    texts = []
    for n, source in enumerate(inputs):
        base = folder / f"out-{n}"
        proc = subprocess.run(["tesseract", str(source), str(base), "-l", languages],
                              env=env, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"tesseract failed on {source}: {proc.stderr.strip()}")
        texts.append(base.with_suffix(".txt").read_text(encoding="utf-8"))
    return "\n\f".join(texts), time.perf_counter() - start


def _ratio(daemon: float, plain: float) -> str:
    if plain == 0:
        return "=" if daemon == 0 else "inf"
    return f"{daemon / plain:.2f}"


def table(results: list[Result]) -> list[str]:
    lines = [
        "| file | lang | pages | CER ocrwatch | CER tesseract | ratio | recall ocrwatch "
        "| recall tesseract | s/page ocrwatch | s/page tesseract |",
        "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|",
    ]
    for r in results:
        lines.append(
            f"| {r.item.path.name} | {r.languages} | {r.pages} | {r.daemon.cer:.4f} "
            f"| {r.plain.cer:.4f} | {_ratio(r.daemon.cer, r.plain.cer)} "
            f"| {r.daemon.recall:.3f} | {r.plain.recall:.3f} "
            f"| {r.daemon_seconds / r.pages:.2f} | {r.plain_seconds / r.pages:.2f} |"
        )
    d = sum((r.daemon for r in results), Score(0, 0, 0, 0))
    p = sum((r.plain for r in results), Score(0, 0, 0, 0))
    pages = sum(r.pages for r in results)
    lines.append(
        f"| **overall** | | {pages} | **{d.cer:.4f}** | **{p.cer:.4f}** "
        f"| **{_ratio(d.cer, p.cer)}** | {d.recall:.3f} | {p.recall:.3f} "
        f"| {sum(r.daemon_seconds for r in results) / pages:.2f} "
        f"| {sum(r.plain_seconds for r in results) / pages:.2f} |"
    )
    return lines


def _daemon_tesseract() -> str:
    try:
        import tesserocr

        return str(tesserocr.tesseract_version().splitlines()[0])
    except ImportError:
        return "tesserocr not installed"


def _data_sources(languages: set[str]) -> str:
    from ocrwatch.engines.tesseract import available_languages

    have = available_languages()
    wanted = sorted({lang for langs in languages for lang in langs.split("+")})
    return ", ".join(f"{lang}={have[lang].parent}" if lang in have else f"{lang}=MISSING"
                     for lang in wanted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR",
                        help="folder of X.ext + X.gt.txt pairs (manifest.tsv optional)")
    parser.add_argument("--engine", default="tesseract", help="ocrwatch engine (default "
                        "tesseract; the comparison with plain tesseract is made either way)")
    parser.add_argument("--languages", default="auto", metavar="auto|LANGS",
                        help="auto: each file's language from manifest.tsv, else eng; or "
                             "Tesseract languages for every file, e.g. eng+deu")
    parser.add_argument("--files", nargs="*", metavar="NAME", help="only these files")
    parser.add_argument("--workers", type=int, default=1,
                        help="daemon pages at once (default 1, like the one tesseract command)")
    parser.add_argument("--max-ratio", type=float, default=1.10,
                        help="fail when overall CER is more than this times tesseract's")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="where to save the report (default benchmarks/results/"
                             "accuracy.txt)")
    args = parser.parse_args(argv)

    from ocrwatch.config import Config

    pdf_dpi = Config().pdf_dpi
    items = corpus(args.corpus)
    if args.files:
        items = [i for i in items if i.path.name in set(args.files)]
    if not items:
        print(f"no X.ext + X.gt.txt pairs in {args.corpus}", file=sys.stderr)
        return 2

    def langs_of(item: Item) -> str:
        if args.languages == "auto":
            return item.languages or "eng"
        return str(args.languages).replace(",", "+")

    results: list[Result] = []
    with tempfile.TemporaryDirectory(prefix="ocrwatch-accuracy-") as tmp:
        root = Path(tmp)
        for item in items:
            languages = langs_of(item)
            truth = item.truth.read_text(encoding="utf-8")
            text, pages, inside, wall = run_daemon(item, languages, args.engine, root,
                                                   args.workers)
            plain, plain_seconds = run_plain(item, languages, pdf_dpi, root)
            result = Result(item, languages, pages, score(truth, text), score(truth, plain),
                            inside, wall, plain_seconds, text, plain)
            results.append(result)
            print(f"{item.path.name}: CER {result.daemon.cer:.4f} ocrwatch, "
                  f"{result.plain.cer:.4f} tesseract", file=sys.stderr, flush=True)

    d = sum((r.daemon for r in results), Score(0, 0, 0, 0))
    p = sum((r.plain for r in results), Score(0, 0, 0, 0))
    ok = d.cer <= args.max_ratio * p.cer
    n_pdf = sum(1 for r in results if r.item.path.suffix.lower() == ".pdf")
    lines = header(
        f"ocrwatch accuracy: {len(results)} files from {args.corpus}",
        [
            f"ocrwatch: engine {args.engine}, {_daemon_tesseract()} (tesserocr), "
            f"{args.workers} page(s) at once; data {_data_sources({r.languages for r in results})}",
            f"plain:    {tesseract_cli_version()} command, `tesseract FILE OUT -l LANGS`, "
            "system tessdata",
            f"PDFs ({n_pdf}): pages rasterised with pypdfium2 at {pdf_dpi} dpi (the daemon's "
            "pdf_dpi), `tesseract` run per page; rasterising counts in its time",
            "both: OMP_THREAD_LIMIT=1; languages from manifest.tsv" if args.languages == "auto"
            else f"both: OMP_THREAD_LIMIT=1; languages {args.languages}",
            "CER: Levenshtein edits / reference characters after NFKC and whitespace folding; "
            "overall = total edits / total reference characters",
            "recall: share of the reference's words (casefolded, as a multiset) in the output",
            "s/page ocrwatch: job queued -> done inside the daemon (decode, OCR, sidecars, "
            "index); s/page tesseract: the commands' wall time",
        ],
    )
    lines += ["", *table(results), ""]
    total_wall = sum(r.daemon_wall for r in results)
    lines.append(f"`ocrwatch add` wall time, Python start and engine set-up included: "
                 f"{total_wall / sum(r.pages for r in results):.2f} s/page "
                 f"({total_wall:.1f} s for {len(results)} files)")
    worst = sorted(results, key=lambda r: r.daemon.edits - r.plain.edits, reverse=True)[:3]
    lines.append("largest gaps, ocrwatch minus tesseract in edits: " + ", ".join(
        f"{r.item.path.name} ({r.daemon.edits - r.plain.edits:+d})" for r in worst))
    verdict = "PASS" if ok else "FAIL"
    lines.append(f"requirement, overall CER at most {args.max_ratio:.2f} x plain tesseract's: "
                 f"{verdict} ({d.cer:.4f} vs {p.cer:.4f}, ratio {_ratio(d.cer, p.cer)})")
    print("\n".join(lines))
    target = save("accuracy.txt", lines, args.out)
    print(f"saved to {target}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""Accuracy of the daemon's text against plain ``tesseract`` on a folder of real scans.

Every ``X.ext`` with an ``X.gt.txt`` beside it is read twice:

- by ocrwatch itself: ``ocrwatch add`` in a child process, with a temporary home,
  database and output folder, so the corpus folder is only ever read;
- by the ``tesseract`` command on the original file (PDF pages rasterised first with
  pypdfium2 at the daemon's own ``pdf_dpi``, one command per page).

Both get the same languages: the file's row in ``manifest.tsv`` (``--languages auto``)
or ``--languages``. Prints character error rate (NFKC, whitespace folded, exact
Levenshtein) and word recall per file and overall, time per page.

Besides the corpus as it is, cases built from its pages (benchmarks/cases.py) show how
documents unlike the corpus fare: each image page at 100 and at 150 dpi with no
resolution in the file, with a 72 dpi stamp, and as a phone photo; and each ground
truth drawn as a born-digital PDF with DejaVu Sans. Exits 1 unless, in every case, the
mean CER is at most ``--max-ratio`` times plain Tesseract's, and born-digital PDFs come
out with CER <= 0.01 at >= 50 pages/s.

Scanner realities (``--scan``): every corpus page turned 90, 180 and 270 degrees (a
sheet fed sideways or upside down), skewed 2 and 5 degrees (fed crooked), and both
(upside down and 3 degrees, on its side and 7 degrees the other way), PDF pages
drawn at ``pdf_dpi`` into a multi-page TIFF first. Each variant's CER is set against the
same file's upright CER (goal: within ``--max-turn-ratio``, 1.1x), plain ``tesseract``'s
CER on the variant is shown beside it, and the cost of preparing a page (ink coverage,
then straightening and orientation as ``ScanPrep.upright`` runs them) is timed on its
own, in this process, beside the daemon's s/page.
With ``--pdf``, the searchable PDF is written too and ``pdftotext`` (default mode) of it
is scored beside the ``.txt``. ``--quick`` takes four files of the corpus.

    python benchmarks/accuracy.py --corpus ../shared/corpus
    python benchmarks/accuracy.py --corpus ../shared/corpus --cases dpi100 --limit 3
    python benchmarks/accuracy.py --corpus ../shared/corpus --scan --pdf [--quick]
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import cases
from benchmarks._common import (
    Item,
    Score,
    corpus,
    header,
    joined_hyphens,
    median,
    save,
    score,
    tesseract_cli_version,
)

CASES = {
    "corpus": "the corpus files as they are",
    "dpi100": "each image page at 100 dpi, no resolution in the file (PNG)",
    "dpi150": "each image page at 150 dpi, no resolution in the file (PNG)",
    "stamp72": "each image page's own pixels with a 72 dpi stamp (PNG)",
    "dpi600": "each image page enlarged to 600 dpi (LANCZOS) with 600 dpi in the file (PNG)",
    "phone": "each image page as a phone photo: turned 0.5-2 degrees, light falling to 60% "
             "across the page, slight blur, JPEG quality 85, 72 dpi",
    "faint": "each image page's print at half its darkness on blue-grey paper with grain "
             "(a faint typescript), no resolution in the file (PNG)",
    "born-digital": "each ground truth drawn as a PDF with DejaVu Sans (fpdf2), the text "
                    "layer real",
    "turn90": "each page turned 90 degrees clockwise (PNG; PDF pages as a TIFF at pdf_dpi)",
    "turn180": "each page turned 180 degrees (upside down)",
    "turn270": "each page turned 270 degrees clockwise",
    "skew2": "each page turned 2 degrees counter-clockwise on white (fed crooked)",
    "skew5": "each page turned 5 degrees counter-clockwise on white",
    "turn180skew3": "each page upside down and fed crooked: turned 180 degrees, then 3 "
                    "degrees counter-clockwise on white",
    "turn270skew-7": "each page on its side and fed crooked: turned 270 degrees clockwise, "
                     "then 7 degrees clockwise on white",
}
SCAN_CASES = ("turn90", "turn180", "turn270", "skew2", "skew5", "turn180skew3", "turn270skew-7")
_SCAN_CASE = re.compile(r"(?:turn(\d+))?(?:skew(-?[\d.]+))?")
QUICK_FILES = ("ehri_eng_03.jpg", "tapus_06.jpg", "ocrd_deu_02.jpg", "tess_eurotext.tif")
BORN_DIGITAL_MAX_CER = 0.01
BORN_DIGITAL_MIN_PAGES_PER_S = 50.0

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
    layer: Score | None = None  # pdftotext (default mode) of the searchable PDF
    joined: Score | None = None  # the .txt with line-end hyphens joined, as pdftotext does
    turned: tuple[int, ...] = ()  # each page's recorded turn
    skews: tuple[float, ...] = ()  # each page's recorded straightening


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


@dataclass
class Run:
    """What one ``ocrwatch add`` of a file gave."""

    text: str
    pages: int
    inside: float  # seconds, job queued -> done inside the daemon
    wall: float  # seconds of the whole command
    txt_path: Path
    turned: tuple[int, ...]
    skews: tuple[float, ...]


def run_daemon(item: Item, languages: str, engine: str, root: Path,
               workers: int, *, pdf: bool = False) -> tuple[str, int, float, float]:
    """Text, pages, seconds inside the daemon and wall seconds of ``ocrwatch add``."""
    run = run_daemon_full(item, languages, engine, root, workers, pdf=pdf)
    return run.text, run.pages, run.inside, run.wall


def run_daemon_full(item: Item, languages: str, engine: str, root: Path,
                    workers: int, *, pdf: bool = False) -> Run:
    database = root / "ocrwatch.sqlite3"
    cmd = [sys.executable, "-m", "ocrwatch", "add", "--engine", engine,
           "--languages", languages.replace("+", ","), "--database", str(database),
           "--inbox", str(root / "inbox"), "--output-dir", str(root / "out"), str(item.path)]
    env = _isolated_env(root, workers)
    if pdf:
        env.update(OCRWATCH_OUTPUTS="md,txt,pdf", OCRWATCH_PDFA="never")
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True,
                          text=True, check=False)
    wall = time.perf_counter() - start
    conn = sqlite3.connect(database)
    try:
        row = conn.execute(
            "SELECT state, reason, pages, txt_path, created, finished, id FROM jobs "
            "WHERE path = ?", (os.fsencode(item.path.absolute()),),
        ).fetchone()
        prep = conn.execute("SELECT turned, skew FROM pages WHERE job_id = ? ORDER BY page",
                            (row[6],)).fetchall() if row else []
    finally:
        conn.close()
    if row is None or row[0] != "done":
        reason = row[1] if row else proc.stderr.strip()[-2000:]
        raise SystemExit(f"ocrwatch could not read {item.path.name}: {reason}")
    _, _, pages, txt_path, created, finished, _ = row
    txt = Path(os.fsdecode(txt_path))
    text = txt.read_text(encoding="utf-8")
    return Run(text, int(pages), float(finished) - float(created), wall, txt,
               tuple(int(t) for t, _ in prep), tuple(float(k) for _, k in prep))


def pdf_layer_text(txt: Path) -> str:
    """``pdftotext`` (its default mode, as viewers' copy and paste read) of the PDF that
    was written beside ``txt``."""
    pdf = txt.with_suffix(".ocr.pdf")
    return subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True,
                          check=True).stdout


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


def build_case(case: str, items: list[Item], folder: Path) -> list[Item]:
    """The case's files, written under ``folder``, each with its original's ground truth."""
    if case == "corpus":
        return items
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for n, item in enumerate(items):
        stem = item.path.name.rsplit(".", 1)[0]
        if case == "born-digital":
            path = cases.born_digital([item.truth.read_text(encoding="utf-8")],
                                      folder / f"{stem}.born-digital.pdf")
        elif case in SCAN_CASES:
            path = _scan_variant(case, item.path, folder, stem)
        elif item.path.suffix.lower() == ".pdf":
            continue  # the derived image cases start from single images
        elif case in ("dpi100", "dpi150"):
            path = cases.low_resolution(item.path, folder / f"{stem}.{case}.png",
                                        int(case[3:]))
        elif case == "dpi600":
            path = cases.enlarged(item.path, folder / f"{stem}.dpi600.png", 600)
        elif case == "stamp72":
            path = cases.stamped(item.path, folder / f"{stem}.stamp72.png")
        elif case == "phone":
            path = cases.phone_photo(item.path, folder / f"{stem}.phone.jpg", seed=n)
        elif case == "faint":
            path = cases.faint(item.path, folder / f"{stem}.faint.png", seed=n)
        else:
            raise ValueError(case)
        out.append(Item(path, item.truth, item.languages, item.kind))
    if case == "born-digital" and len(items) > 1:
        # Every ground truth in one PDF: pages per second once a file's fixed costs
        # (hashing, sidecars, index) are shared by many pages.
        texts = [i.truth.read_text(encoding="utf-8") for i in items]
        truth = folder / "all.gt.txt"
        truth.write_text("\n".join(texts), encoding="utf-8")
        path = cases.born_digital(texts, folder / "all.born-digital.pdf")
        out.append(Item(path, truth, "+".join(sorted({lang for i in items for lang in
                                                       (i.languages or "eng").split("+")})),
                        "born-digital book"))
    return out


def _scan_variant(case: str, src: Path, folder: Path, stem: str) -> Path:
    """The file turned or skewed; a PDF's pages drawn first, the result a TIFF."""
    from ocrwatch.config import Config

    match = _SCAN_CASE.fullmatch(case)
    assert match, case
    turn, skew = match.groups()

    def one(page: Path, out: Path) -> Path:
        if turn:
            page = cases.turned(page, out.with_suffix(".turned.png") if skew else out, int(turn))
        return cases.skewed(page, out, float(skew)) if skew else page

    if src.suffix.lower() != ".pdf":
        return one(src, folder / f"{stem}.{case}.png")
    from PIL import Image

    drawn = folder / f"{stem}-drawn"
    drawn.mkdir(exist_ok=True)
    pages = [Image.open(one(p, p.with_suffix(f".{case}.png")))
             for p in rasterise(src, Config().pdf_dpi, drawn)]
    out = folder / f"{stem}.{case}.tif"
    pages[0].save(out, save_all=True, append_images=pages[1:], compression="tiff_deflate",
                  dpi=(Config().pdf_dpi,) * 2)
    return out


def prep_costs(paths: list[Path]) -> dict[str, list[float]]:
    """Seconds per page of each preparation step, measured here on each file's pages."""
    from ocrwatch.config import Config
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.scan import faint, inkcover
    from ocrwatch.scan.prepare import ScanPrep

    prep = ScanPrep(Config(languages=["eng"]))
    out: dict[str, list[float]] = {"ink coverage": [], "straightening and orientation": [],
                                   "all": []}
    for path in paths:
        for page in iter_pages(path, Config(), None):
            # The daemon's own steps (scan/prepare.py): ink and faint marks measured in one
            # pass, then straightened and turned.
            t0 = time.perf_counter()
            inkcover.measure_depths(page.image, (inkcover.INK_DEPTH, faint.FAINT_DEPTH))
            t1 = time.perf_counter()
            prep.upright(page.image)
            t2 = time.perf_counter()
            out["ink coverage"].append(t1 - t0)
            out["straightening and orientation"].append(t2 - t1)
            out["all"].append(t2 - t0)
    prep.close()
    return out


def scan_report(by_case: dict[str, list[Result]], max_ratio: float) -> tuple[list[str], bool]:
    """Each turned or skewed file's CER against its upright CER."""
    upright = {r.item.path.name: r for r in by_case.get("corpus", [])}
    present = [c for c in SCAN_CASES if by_case.get(c)]
    lines = ["", "## scanner realities: turned and skewed pages against the upright page", "",
             f"goal: each variant's CER <= {max_ratio:.2f} x the upright page's "
             "(+0.002 for rounding on near-perfect pages); turn = what ocrwatch recorded "
             "(degrees clockwise), skew = the straightening it recorded; plain = the "
             "`tesseract` command on the variant", "",
             "| file | upright CER | " + " | ".join(
                 f"{c} CER (ratio) | {c} plain" for c in present) + " | recorded |",
             "|---|--:|" + "--:|--:|" * len(present) + "---|"]
    ok_all, misses, ratios = True, [], []
    for name, up in upright.items():
        cells, recorded = [f"{up.daemon.cer:.4f}"], []
        for case in present:
            match = [r for r in by_case[case]
                     if r.item.path.name.startswith(name.rsplit(".", 1)[0] + ".")]
            if not match:
                cells += ["-", "-"]
                continue
            r = match[0]
            ratio = r.daemon.cer / up.daemon.cer if up.daemon.cer else float("inf")
            ok = r.daemon.cer <= max_ratio * up.daemon.cer + 0.002
            ok_all &= ok
            ratios.append(ratio if up.daemon.cer else 1.0)
            if not ok:
                misses.append(f"{name} {case} ({r.daemon.cer:.4f} vs {up.daemon.cer:.4f})")
            ran = bool(r.plain_seconds or r.plain_text)
            cells += [f"{r.daemon.cer:.4f} ({_ratio(r.daemon.cer, up.daemon.cer)})"
                      + ("" if ok else " MISS"), f"{r.plain.cer:.4f}" if ran else "-"]
            recorded.append(f"{case}: turn {','.join(map(str, r.turned))} skew "
                            f"{','.join(f'{k:g}' for k in r.skews)}")
        lines.append(f"| {name} | " + " | ".join(cells) + " | " + "; ".join(recorded) + " |")
    lines += ["", f"median ratio {median(ratios):.3f}, worst {max(ratios, default=0):.3f}; "
              f"within the goal: {len(ratios) - len(misses)} of {len(ratios)}; misses: "
              + (", ".join(misses) or "none")]
    return lines, ok_all


def layer_report(by_case: dict[str, list[Result]]) -> list[str]:
    """pdftotext (default mode) of each searchable PDF against the file's .txt."""
    lines = ["", "## the searchable PDF's text layer: `pdftotext` (default mode) against the "
             ".txt", "", "pdftotext's default mode joins a word hyphenated at a line's end "
             "(\"gentle-\" / \"men\" -> \"gentlemen\") whatever the PDF holds; the ground "
             "truth keeps the hyphen. \"joined\": the .txt with that same join, so its ratio "
             "shows what the layer's geometry costs (reading order, words split or merged).",
             "", "| case | file | CER .txt | CER pdftotext | ratio | CER .txt joined | "
             "ratio to joined |", "|---|---|--:|--:|--:|--:|--:|"]
    worst, within, within_joined, total = 0.0, 0, 0, 0
    for case, results in by_case.items():
        for r in results:
            if r.layer is None:
                continue
            total += 1
            ratio = r.layer.cer / r.daemon.cer if r.daemon.cer else (
                1.0 if r.layer.cer == 0 else float("inf"))
            worst = max(worst, ratio)
            within += r.layer.cer <= 1.1 * r.daemon.cer + 0.002
            joined = r.joined.cer if r.joined is not None else r.daemon.cer
            within_joined += r.layer.cer <= 1.1 * joined + 0.002
            lines.append(f"| {case} | {r.item.path.name} | {r.daemon.cer:.4f} "
                         f"| {r.layer.cer:.4f} | {_ratio(r.layer.cer, r.daemon.cer)} "
                         f"| {joined:.4f} | {_ratio(r.layer.cer, joined)} |")
    lines += ["", f"within 1.1x of the .txt (+0.002): {within} of {total}; worst ratio "
              f"{worst:.3f}; within 1.1x of the joined .txt (+0.002): {within_joined} of "
              f"{total}"]
    return lines


def _mean_cer(results: list[Result], daemon: bool) -> float:
    values = [(r.daemon if daemon else r.plain).cer for r in results]
    return sum(values) / len(values) if values else 0.0


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
        ran = bool(r.plain_seconds or r.plain_text)  # plain tesseract was run on it
        lines.append(
            f"| {r.item.path.name} | {r.languages} | {r.pages} | {r.daemon.cer:.4f} "
            f"| {f'{r.plain.cer:.4f}' if ran else '-'} "
            f"| {_ratio(r.daemon.cer, r.plain.cer) if ran else '-'} "
            f"| {r.daemon.recall:.3f} | {f'{r.plain.recall:.3f}' if ran else '-'} "
            f"| {r.daemon_seconds / r.pages:.2f} "
            f"| {f'{r.plain_seconds / r.pages:.2f}' if ran else '-'} |"
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


def _commit() -> str:
    """The commit the benchmark ran at (and whether the tree had changes)."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "-C", str(here), "rev-parse", "--short", "HEAD"],
                              capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(here), "status", "--porcelain",
                                "--untracked-files=no"], capture_output=True, text=True,
                               check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return head + (" with uncommitted changes" if dirty else "")


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
    repo = Path(__file__).resolve().parent.parent

    def shown(folder: Path) -> Path:  # inside the checkout: relative to it
        return folder.relative_to(repo) if folder.is_relative_to(repo) else folder

    return ", ".join(f"{lang}={shown(have[lang].parent)}" if lang in have
                     else f"{lang}=MISSING" for lang in wanted)


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
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES),
                        metavar="CASE", help=f"which cases (default all: {', '.join(CASES)})")
    parser.add_argument("--limit", type=int, default=0, metavar="N",
                        help="only the first N corpus files (0: all), to iterate quickly")
    parser.add_argument("--workers", type=int, default=1,
                        help="daemon pages at once (default 1, like the one tesseract command)")
    parser.add_argument("--max-ratio", type=float, default=1.0,
                        help="fail when a case's mean CER is more than this times "
                             "tesseract's (default 1.0)")
    parser.add_argument("--scan", action="store_true",
                        help="scanner realities: the corpus upright and its pages turned "
                             "90/180/270 and skewed 2/5 degrees (the cases "
                             + ", ".join(SCAN_CASES) + ")")
    parser.add_argument("--quick", action="store_true",
                        help=f"only {', '.join(QUICK_FILES)}")
    parser.add_argument("--pdf", action="store_true",
                        help="write the searchable PDF too and score pdftotext of it")
    parser.add_argument("--plain-variants", action="store_true",
                        help="also run plain tesseract on the turned and skewed pages "
                             "(default: on the upright corpus only, to save time)")
    parser.add_argument("--max-turn-ratio", type=float, default=1.1,
                        help="goal for a turned or skewed page's CER over its upright "
                             "CER (default 1.1)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE",
                        help="where to save the report (default benchmarks/results/"
                             "accuracy.txt)")
    args = parser.parse_args(argv)

    from ocrwatch.config import Config

    pdf_dpi = Config().pdf_dpi
    items = corpus(args.corpus)
    if args.scan:
        args.cases = ["corpus", *SCAN_CASES]
    if args.quick:
        args.files = [*(args.files or []), *QUICK_FILES]
    if args.files:
        items = [i for i in items if i.path.name in set(args.files)]
    if args.limit:
        items = items[:args.limit]
    if not items:
        print(f"no X.ext + X.gt.txt pairs in {args.corpus}", file=sys.stderr)
        return 2

    def langs_of(item: Item) -> str:
        if args.languages == "auto":
            return item.languages or "eng"
        return str(args.languages).replace(",", "+")

    by_case: dict[str, list[Result]] = {}
    with tempfile.TemporaryDirectory(prefix="ocrwatch-accuracy-") as tmp:
        root = Path(tmp)
        for case in args.cases:
            case_root = root / case
            case_root.mkdir()
            results = by_case.setdefault(case, [])
            for item in build_case(case, items, case_root / "files"):
                languages = langs_of(item)
                truth = item.truth.read_text(encoding="utf-8")
                run = run_daemon_full(item, languages, args.engine, case_root, args.workers,
                                      pdf=args.pdf)
                text, pages, inside, wall = run.text, run.pages, run.inside, run.wall
                if case in SCAN_CASES and not args.plain_variants:
                    plain, plain_seconds = "", 0.0
                else:
                    plain, plain_seconds = run_plain(item, languages, pdf_dpi, case_root)
                result = Result(item, languages, pages, score(truth, text),
                                score(truth, plain), inside, wall, plain_seconds, text,
                                plain, turned=run.turned, skews=run.skews)
                if args.pdf:
                    result.layer = score(truth, pdf_layer_text(run.txt_path))
                    result.joined = score(truth, joined_hyphens(text))
                results.append(result)
                print(f"{case} {item.path.name}: CER {result.daemon.cer:.4f} ocrwatch, "
                      + (f"{result.plain.cer:.4f} tesseract" if plain_seconds else
                         "tesseract not run"), file=sys.stderr, flush=True)

    all_results = [r for rs in by_case.values() for r in rs]
    n_pdf = sum(1 for r in all_results if r.item.path.suffix.lower() == ".pdf")
    lines = header(
        f"ocrwatch accuracy: {len(items)} files from {args.corpus}, cases "
        f"{', '.join(args.cases)}",
        [
            f"commit:   {_commit()}",
            f"ocrwatch: engine {args.engine}, {_daemon_tesseract()} (tesserocr), "
            f"{args.workers} page(s) at once; data "
            f"{_data_sources({r.languages for r in all_results})}",
            f"plain:    {tesseract_cli_version()} command, `tesseract FILE OUT -l LANGS`, "
            "system tessdata",
            f"PDFs ({n_pdf}): pages rasterised with pypdfium2 at {pdf_dpi} dpi (the daemon's "
            "pdf_dpi), `tesseract` run per page; rasterising counts in its time",
            "both: OMP_THREAD_LIMIT=1; languages from manifest.tsv" if args.languages == "auto"
            else f"both: OMP_THREAD_LIMIT=1; languages {args.languages}",
            "CER: Levenshtein edits / reference characters after NFKC and whitespace folding; "
            "mean = mean of the files' CERs; pooled = total edits / total reference characters",
            "recall: share of the reference's words (casefolded, as a multiset) in the output",
            "s/page ocrwatch: job queued -> done inside the daemon (decode, OCR or text layer, "
            "sidecars, index); s/page tesseract: the commands' wall time",
            *[f"case {name}: {CASES[name]}" for name in args.cases],
        ],
    )
    summary = ["| case | files | pages | mean CER ocrwatch | mean CER tesseract | ratio "
               "| pooled CER ocrwatch | pooled CER tesseract | pages/s ocrwatch | verdict |",
               "|---|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    verdicts: list[bool] = []
    for case, results in by_case.items():
        if not results:
            continue
        lines += ["", f"## case {case}: {CASES[case]}", "", *table(results), ""]
        total_wall = sum(r.daemon_wall for r in results)
        lines.append(f"`ocrwatch add` wall time, Python start and engine set-up included: "
                     f"{total_wall / sum(r.pages for r in results):.2f} s/page "
                     f"({total_wall:.1f} s for {len(results)} files)")
        worst = sorted(results, key=lambda r: r.daemon.edits - r.plain.edits, reverse=True)[:3]
        lines.append("largest gaps, ocrwatch minus tesseract in edits: " + ", ".join(
            f"{r.item.path.name} ({r.daemon.edits - r.plain.edits:+d})" for r in worst))
        d = sum((r.daemon for r in results), Score(0, 0, 0, 0))
        p = sum((r.plain for r in results), Score(0, 0, 0, 0))
        mean_d, mean_p = _mean_cer(results, True), _mean_cer(results, False)
        pages = sum(r.pages for r in results)
        inside = sum(r.daemon_seconds for r in results)
        rate = pages / inside if inside else float("inf")
        ok = mean_d <= args.max_ratio * mean_p
        note = f"mean CER <= {args.max_ratio:.2f} x tesseract's"
        if case == "born-digital":
            worst_cer = max(r.daemon.cer for r in results)
            rates = [r.pages / r.daemon_seconds for r in results if r.daemon_seconds]
            book = [r for r in results if r.item.kind == "born-digital book"]
            if book and book[0].daemon_seconds:  # many pages: a file's fixed costs shared
                rate = book[0].pages / book[0].daemon_seconds
            ok = worst_cer <= BORN_DIGITAL_MAX_CER and rate >= BORN_DIGITAL_MIN_PAGES_PER_S
            note = (f"every file CER <= {BORN_DIGITAL_MAX_CER} (worst {worst_cer:.4f}) and "
                    f">= {BORN_DIGITAL_MIN_PAGES_PER_S:.0f} pages/s ({rate:.1f} on "
                    f"{book[0].pages if book else pages} pages in one file; median of the "
                    f"files {median(rates):.1f}, where one file's fixed costs weigh on 1-2 "
                    "pages)")
        if case in SCAN_CASES:  # judged against the upright page below, not plain tesseract
            summary.append(f"| {case} | {len(results)} | {pages} | {mean_d:.4f} | - | - "
                           f"| {d.cer:.4f} | - | {rate:.2f} | see the scanner table |")
            continue
        verdicts.append(ok)
        verdict = "PASS" if ok else "FAIL"
        lines.append(f"requirement, {note}: {verdict} (mean {mean_d:.4f} vs {mean_p:.4f}, "
                     f"ratio {_ratio(mean_d, mean_p)}; pooled {d.cer:.4f} vs {p.cer:.4f})")
        summary.append(f"| {case} | {len(results)} | {pages} | {mean_d:.4f} | {mean_p:.4f} "
                       f"| {_ratio(mean_d, mean_p)} | {d.cer:.4f} | {p.cer:.4f} "
                       f"| {rate:.2f} | {verdict} |")
    lines += ["", "## summary", "", *summary]
    if any(by_case.get(c) for c in SCAN_CASES):
        scan_lines, scan_ok = scan_report(by_case, args.max_turn_ratio)
        lines += scan_lines
        verdicts.append(scan_ok)
        costs = prep_costs([i.path for i in items])
        reading = [r.daemon_seconds / r.pages for r in by_case.get("corpus", [])]
        lines += ["", "## cost of preparing a page (measured here, one thread, each step "
                  "on every upright corpus page)", "",
                  "| step | median ms/page | max ms/page |", "|---|--:|--:|"]
        lines += [f"| {step} | {median(v) * 1000:.0f} | {max(v, default=0) * 1000:.0f} |"
                  for step, v in costs.items()]
        lines.append(f"| (reading by the daemon, for scale: s/page median) | "
                     f"{median(reading) * 1000:.0f} | {max(reading, default=0) * 1000:.0f} |")
    if args.pdf:
        lines += layer_report(by_case)
    ok = all(verdicts)
    print("\n".join(lines))
    target = save("accuracy.txt", lines, args.out)
    print(f"saved to {target}", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The searchable PDF: what writing it costs per page, and how well its text layer fits.

Synthetic pages of known text (Pillow's built-in font, every word drawn on its own, so
each word's true box is known) at 200 dpi, saved as PNG. For each page:

- ocrwatch, Tesseract engine: the engine's read (with its word boxes), then the PDF
  written alone (timed), plain and PDF/A (pikepdf), and Ghostscript's PDF/A of the plain
  PDF beside it;
- ocrwatch, model path: the known text as the model's reading, placed on Tesseract's
  word boxes by alignment (the layout pass and alignment timed with the writing);
- plain alternative: the ``tesseract`` command writing ``txt`` and writing ``pdf`` on the
  same page; the difference is what Tesseract's own PDF costs.

The layer's text is compared with the truth (CER of ``pdftotext``'s output, whitespace
folded) and every word's box from ``pdftotext -bbox`` with its true box (distance of the
centres, in points). Medians over the pages.

Then the size of the searchable PDF against the original's, with ``pdfa = "auto"``
(PDF/A-2b by pikepdf, streams kept), for real scans of the corpus (``../shared/corpus``:
its JPEGs, a PNG made losslessly from one of them, its PDFs), side by side with the same
file's plain PDF (no PDF/A), the text layer's own bytes, and Ghostscript's PDF/A of the
plain PDF (the route ``pdfa = "auto"`` took before).

    python benchmarks/pdf_output.py [--pages 12] [--corpus ../shared/corpus] [--sizes-only]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from html import unescape
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from PIL import Image, ImageDraw, ImageFont

from benchmarks import cases
from benchmarks._common import header, levenshtein, median, normalize, save

DPI = 200
WORDS = [
    "the", "harbour", "office", "opens", "at", "nine", "and", "closes", "at", "five", "every",
    "weekday", "except", "public", "holidays", "when", "ships", "arrive", "late", "invoices",
    "are", "paid", "within", "thirty", "days", "of", "receipt", "please", "quote", "the",
    "reference", "number", "shown", "above", "on", "every", "letter", "sent", "to", "us",
]


@dataclass(frozen=True)
class TruthWord:
    text: str
    box: tuple[float, float, float, float]  # points, y down from the top of the page


def synthetic_page(lines: list[str], *, size: int = 44, width: int = 1700
                   ) -> tuple[Image.Image, list[TruthWord]]:
    """A white page with ``lines`` drawn word by word; each word's ink box in points."""
    font = ImageFont.load_default(size=size)
    height = max(600, 200 + len(lines) * int(size * 1.7))
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    space = draw.textlength(" ", font=font)
    truth = []
    y = 100
    for line in lines:
        x = 110.0
        for word in line.split():
            left, top, right, bottom = draw.textbbox((x, y), word, font=font)
            draw.text((x, y), word, fill="black", font=font)
            scale = 72 / DPI
            truth.append(TruthWord(word, (left * scale, top * scale, right * scale,
                                          bottom * scale)))
            x += draw.textlength(word, font=font) + space
        y += int(size * 1.7)
    return image, truth


def degrade(image: Image.Image, seed: int) -> Image.Image:
    """A poor scan of ``image``: a third of the resolution and back (blur), grain, and
    JPEG artefacts; Tesseract misreads some words of it."""
    import io
    import random

    from PIL import ImageFilter

    small = image.resize((image.width // 3, image.height // 3), Image.Resampling.BILINEAR)
    image = small.resize(image.size, Image.Resampling.BILINEAR).filter(
        ImageFilter.GaussianBlur(1.2))
    rng = random.Random(seed)
    noise = cases.noise_image(image.size, 40, rng).convert("RGB")
    image = Image.blend(image, noise, 0.18 + rng.random() * 0.04)
    buf = io.BytesIO()
    image.save(buf, "JPEG", quality=25)
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def page_lines(seed: int, count: int = 6) -> list[str]:
    out = []
    for n in range(count):
        start = (seed * 7 + n * 5) % len(WORDS)
        out.append(" ".join(WORDS[(start + k) % len(WORDS)] for k in range(6 + (seed + n) % 4)))
    return out


def bbox_words(pdf: Path) -> list[list[TruthWord]]:
    """``pdftotext -bbox`` of ``pdf``: each page's words and their boxes in points."""
    out = subprocess.run(["pdftotext", "-bbox", str(pdf), "-"], capture_output=True,
                         text=True, check=True, timeout=120).stdout
    pages = []
    for page in re.findall(r"<page [^>]*>(.*?)</page>", out, re.S):
        words = []
        for x0, y0, x1, y1, text in re.findall(
                r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">'
                r"(.*?)</word>", page):
            words.append(TruthWord(unescape(text), (float(x0), float(y0), float(x1),
                                                    float(y1))))
        pages.append(words)
    return pages


def word_offsets(found: list[TruthWord], truth: list[TruthWord]) -> list[float]:
    """For each true word, the distance (points) from its centre to the centre of the
    layer's word with the same text nearest in reading order; inf when there is none."""
    offsets = []
    used: set[int] = set()
    for k, word in enumerate(truth):
        best = None
        for j, cand in enumerate(found):
            if j in used or cand.text.strip(".,") != word.text.strip(".,"):
                continue
            if best is None or abs(j - k) < abs(best - k):
                best = j
        if best is None:
            offsets.append(float("inf"))
            continue
        used.add(best)
        offsets.append(_centre_distance(found[best].box, word.box))
    return offsets


def _centre_distance(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    ax, ay = (a[0] + a[2]) / 2, (a[1] + a[3]) / 2
    bx, by = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
    return float(((ax - bx) ** 2 + (ay - by) ** 2) ** 0.5)


def pdf_text(pdf: Path) -> str:
    return subprocess.run(["pdftotext", str(pdf), "-"], capture_output=True, text=True,
                          check=True, timeout=120).stdout


def cer(truth: str, found: str) -> float:
    ref, hyp = normalize(truth), normalize(found)
    return levenshtein(ref, hyp) / max(1, len(ref))


def _time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _measure_page(n: int, tmp: Path, engine: Any, gs: str | None,
                  rows: dict[str, list[float]], poor: bool) -> None:
    import img2pdf

    from ocrwatch.core.domain import Page
    from ocrwatch.results import pdfout
    from ocrwatch.results.align import place_text

    lines = page_lines(n)
    image, truth = synthetic_page(lines, size=30 if poor else 44)
    if poor:
        image = degrade(image, n)
    src = tmp / f"page{n}.png"
    image.save(src, dpi=(DPI, DPI))
    page = Page(src, 0, image, DPI)
    truth_text = "\n".join(lines)
    start = time.perf_counter()
    (read,) = engine.recognize([page])
    rows["read"].append(time.perf_counter() - start)
    plain, pdfa, model = tmp / f"p{n}.pdf", tmp / f"a{n}.pdf", tmp / f"m{n}.pdf"
    rows["pdf"].append(_time(lambda: pdfout.write(
        src, [read.layout], plain, is_pdf=False, pdfa=False, render=list,
        open_source=lambda: src.open("rb"))))
    rows["pdfa"].append(_time(lambda: pdfout.write(
        src, [read.layout], pdfa, is_pdf=False, pdfa=True, render=list,
        open_source=lambda: src.open("rb"))))
    if gs:
        rows["pdfa_gs"].append(_time(lambda: pdfout.to_pdfa(plain, tmp / f"g{n}.pdf", gs)))

    def model_path() -> None:
        placed, _ = place_text(truth_text, engine.layout(page))
        pdfout.write(src, [placed], model, is_pdf=False, pdfa=False, render=list,
                     open_source=lambda: src.open("rb"))

    rows["model_pdf"].append(_time(model_path))
    rows["img2pdf"].append(_time(lambda: (tmp / f"i{n}.pdf").write_bytes(
        img2pdf.convert(str(src)))))
    base = tmp / f"t{n}"
    env = dict(os.environ, OMP_THREAD_LIMIT="1")
    for kind in ("txt", "pdf"):
        rows[f"tess_{kind}"].append(_time(lambda kind=kind: subprocess.run(  # type: ignore[misc]
            ["tesseract", str(src), str(base), kind], env=env, check=True,
            capture_output=True)))
    for key, pdf in (("tess", plain), ("model", model), ("cli", base.with_suffix(".pdf"))):
        rows[f"cer_{key}"].append(cer(truth_text, pdf_text(pdf)))
        rows[f"off_{key}"].extend(word_offsets(bbox_words(pdf)[0], truth))


def run(pages: int, out: Path | None) -> list[str]:
    from ocrwatch.config import Config
    from ocrwatch.engines.tesseract import TesseractEngine
    from ocrwatch.results import pdfout

    gs = pdfout.ghostscript()
    engine = TesseractEngine(Config(workers=1))
    lines = header("Searchable PDF: cost per page and fit of the text layer", [
        f"{pages} synthetic pages of each kind (1700 px wide, 6 lines, {DPI} dpi PNG), one "
        "at a time, OMP_THREAD_LIMIT=1; 'poor' pages: 30 px text, a third of the "
        "resolution and back, grain, JPEG quality 25",
        "the model path is given the page's true text, as a model that reads it perfectly",
        "the tesseract command's times include starting it and loading its model",
        f"Ghostscript: {'yes' if gs else 'not installed'}; tesseract command: "
        f"{shutil.which('tesseract') or 'not installed'}",
    ])
    try:
        for poor in (False, True):
            rows: dict[str, list[float]] = {k: [] for k in (
                "read", "pdf", "pdfa", "pdfa_gs", "model_pdf", "img2pdf", "tess_txt", "tess_pdf",
                "cer_tess", "cer_model", "cer_cli", "off_tess", "off_model", "off_cli")}
            with tempfile.TemporaryDirectory(prefix="ocrwatch-pdfbench-") as tmp_name:
                for n in range(pages):
                    _measure_page(n, Path(tmp_name), engine, gs, rows, poor)
            lines += _table("poor scans" if poor else "clean pages", rows)
    finally:
        engine.close()
    save("pdf_output.txt", lines, out)
    return lines


def _table(title: str, rows: dict[str, list[float]]) -> list[str]:
    def ms(key: str) -> str:
        return f"{median(rows[key]) * 1000:.0f}" if rows[key] else "-"

    def offs(key: str) -> str:
        values = rows[f"off_{key}"]
        missing = sum(1 for v in values if v == float("inf"))
        finite = sorted(v for v in values if v != float("inf"))
        p95 = finite[int(0.95 * (len(finite) - 1))] if finite else float("nan")
        return (f"{median(finite):.2f} | {p95:.2f} | {max(finite):.2f} | "
                f"{missing} of {len(values)}")

    tess_pdf_cost = median(rows["tess_pdf"]) - median(rows["tess_txt"])
    ours = median(rows["read"]) + median(rows["pdf"])
    return [
        "",
        f"## {title}",
        "",
        "| step | median ms/page |",
        "|---|--:|",
        f"| ocrwatch Tesseract read (with word boxes) | {ms('read')} |",
        f"| ocrwatch PDF writing alone (pikepdf + img2pdf) | {ms('pdf')} |",
        f"| ocrwatch PDF/A writing alone (pikepdf, validated; pdfa = \"auto\") | {ms('pdfa')} |",
        f"| Ghostscript PDF/A of the plain PDF (the route before) | {ms('pdfa_gs')} |",
        f"| ocrwatch model path: Tesseract word boxes + alignment + PDF | {ms('model_pdf')} |",
        f"| plain `img2pdf` of the page (no text layer) | {ms('img2pdf')} |",
        f"| `tesseract page.png out txt` | {ms('tess_txt')} |",
        f"| `tesseract page.png out pdf` | {ms('tess_pdf')} |",
        f"| difference pdf - txt (Tesseract's PDF cost; noisy) | {tess_pdf_cost * 1000:.0f} |",
        "",
        f"Searchable PDF from the PNG, end to end: ocrwatch read + PDF {ours * 1000:.0f} ms "
        f"against `tesseract ... pdf` {median(rows['tess_pdf']) * 1000:.0f} ms "
        f"({ours / median(rows['tess_pdf']):.2f}x); the text layer over plain img2pdf: "
        f"{(median(rows['pdf']) - median(rows['img2pdf'])) * 1000:.0f} ms.",
        "",
        "| layer | CER vs truth (median) | offset median pt | p95 pt | max pt | words missing |",
        "|---|--:|--:|--:|--:|--:|",
        f"| ocrwatch, Tesseract engine | {median(rows['cer_tess']):.4f} | {offs('tess')} |",
        f"| ocrwatch, model text on Tesseract boxes | {median(rows['cer_model']):.4f} | "
        f"{offs('model')} |",
        f"| `tesseract ... pdf` | {median(rows['cer_cli']):.4f} | {offs('cli')} |",
    ]


def _sources(corpus: Path, tmp: Path) -> list[tuple[str, Path]]:
    """JPEG scans, a PNG made losslessly from the first, and the PDFs of the corpus."""
    jpegs = sorted(p for p in corpus.glob("*.jp*g"))[:4]
    out = [("JPEG", p) for p in jpegs]
    if jpegs:
        png = tmp / (jpegs[0].stem + ".png")
        with Image.open(jpegs[0]) as im:
            im.save(png, optimize=True)
        out.append(("PNG", png))
    out += [("PDF", p) for p in sorted(corpus.glob("*.pdf"))]
    return out


def sizes(corpus: Path) -> list[str]:
    """The searchable PDF's size against the original's, pdfa = "auto", real scans."""
    from contextlib import AbstractContextManager
    from typing import BinaryIO

    from ocrwatch.config import Config
    from ocrwatch.core.layout import PageLayout
    from ocrwatch.engines.tesseract import TesseractEngine
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.results import pdfout

    gs = pdfout.ghostscript()
    config = Config(workers=1)
    engine = TesseractEngine(config)
    rows = ["", "## Size of the searchable PDF against the original (pdfa = \"auto\")", "",
            f"Corpus: {corpus.name}; Ghostscript: {gs or 'not installed'}; sizes in bytes; "
            "'layer' is the plain PDF minus the same PDF without a text layer.", "",
            "| input | file | original | no layer | plain PDF | layer | PDF/A (auto) | "
            "auto / original | auto / (original + layer) | PDF/A by Ghostscript | "
            "Ghostscript / original | PDF/A? |",
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|"]
    ratios: dict[str, list[float]] = {}
    try:
        with tempfile.TemporaryDirectory(prefix="ocrwatch-pdfsize-") as tmp_name:
            tmp = Path(tmp_name)
            for kind, src in _sources(corpus, tmp):
                is_pdf = kind == "PDF"
                pages = list(iter_pages(src, config, None))
                layouts: list[PageLayout | None] = [engine.layout(p) for p in pages]

                def opener(path: Path = src) -> AbstractContextManager[BinaryIO]:
                    return path.open("rb")

                def render(path: Path = src) -> list[Any]:
                    return list(iter_pages(path, config, None))

                bare, plain, auto = tmp / "bare.pdf", tmp / "plain.pdf", tmp / "auto.pdf"
                pdfout.write(src, [None] * len(layouts), bare, is_pdf=is_pdf, pdfa=False,
                             render=render, open_source=opener)
                pdfout.write(src, layouts, plain, is_pdf=is_pdf, pdfa=False, render=render,
                             open_source=opener)
                notes = pdfout.write(src, layouts, auto, is_pdf=is_pdf, pdfa=True,
                                     render=render, open_source=opener)
                is_pdfa = not any(n.startswith("not PDF/A") for n in notes)
                original, layer = src.stat().st_size, plain.stat().st_size - bare.stat().st_size
                got = auto.stat().st_size
                ghost = "-"
                ghost_ratio = "-"
                if gs:
                    gpdf = tmp / "gs.pdf"
                    pdfout.to_pdfa(plain, gpdf, gs)
                    ghost = str(gpdf.stat().st_size)
                    ghost_ratio = f"{gpdf.stat().st_size / original:.2f}x"
                ratios.setdefault(kind, []).append(got / original)
                verdict = "yes" if is_pdfa else "no: " + notes[-1]
                rows.append(f"| {kind} | {src.name} | {original} | {bare.stat().st_size} | "
                            f"{plain.stat().st_size} | {layer} | {got} | "
                            f"{got / original:.3f}x | {got / (original + layer):.3f}x | "
                            f"{ghost} | {ghost_ratio} | {verdict} |")
    finally:
        engine.close()
    rows += ["", "Median PDF/A (auto) / original: " + ", ".join(
        f"{kind} {median(v):.3f}x" for kind, v in ratios.items()) + "."]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=12)
    parser.add_argument("--corpus", type=Path,
                        default=Path(__file__).resolve().parents[2] / "shared" / "corpus")
    parser.add_argument("--sizes-only", action="store_true",
                        help="only the size table (real scans of the corpus)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    if args.sizes_only:
        lines = header("Searchable PDF: size against the original", [
            "each corpus file read with Tesseract for its word boxes, then written three "
            "ways"]) + sizes(args.corpus)
        save("pdf_size.txt", lines, args.out)
    else:
        lines = run(args.pages, args.out)
        if args.corpus.is_dir():
            lines += sizes(args.corpus)
            save("pdf_output.txt", lines, args.out)
    print("\n".join(lines))


if __name__ == "__main__":
    main()

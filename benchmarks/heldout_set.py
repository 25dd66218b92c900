"""A held-out-style set of pages, made reproducibly from the corpus and a few fonts.

No public set of receipts, faxes or forms can be fetched here, so each class is made:
from the corpus's scans where a class is a way of scanning (a fax, a phone photo, faint
print on tinted paper), and drawn with the DejaVu fonts where a class is a kind of
document the corpus lacks (receipts, dot-matrix print, forms, two-column pages), their
words taken from the corpus's ground truth. The same seed gives the same files. It is a
stand-in for users' documents, not a sample of them: drawn pages are cleaner than
printed and scanned ones.

    python benchmarks/heldout_set.py --corpus ../shared/corpus --out /tmp/heldout

writes, in the corpus's layout, ``NAME.ext`` with ``NAME.gt.txt`` beside it and a
``manifest.tsv`` whose ``kind`` is the class, so that :func:`benchmarks._common.corpus`
reads it. ``turned`` pages are upright pages of the other classes fed sideways or upside
down; every other page lies upright.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from PIL import Image, ImageDraw, ImageFilter, ImageFont

if __package__ in (None, ""):  # run as a file: the repository is the package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common, cases

FONTS = Path("/usr/share/fonts/truetype/dejavu")  # Debian fonts-dejavu-core
MONO, SANS, SERIF = (FONTS / f"DejaVu{n}.ttf" for n in ("SansMono", "Sans", "Serif"))
# Corpus scans the scanned classes are made from (English and French typescripts and print).
SOURCES = ("tess_8071_093.3B.tif", "ehri_eng_03.jpg", "ehri_eng_04.jpg", "tapus_01.jpg",
           "tapus_06.jpg", "ehri_dan_00.jpg")
LANGS = {"tess_8071_093.3B.tif": "eng", "ehri_eng_03.jpg": "eng", "ehri_eng_04.jpg": "eng",
         "tapus_01.jpg": "fra", "tapus_06.jpg": "fra", "ehri_dan_00.jpg": "dan"}


@dataclass(frozen=True)
class Made:
    name: str
    kind: str
    language: str
    path: Path
    truth: str


def _vocabulary(corpus: Path) -> list[str]:
    """Words of the English ground truth, letters only, 3-12 long."""
    text = " ".join((corpus / n).with_name(Path(n).stem + ".gt.txt").read_text("utf-8")
                    for n in SOURCES if LANGS[n] == "eng")
    return sorted({w for w in re.findall(r"[A-Za-z]{3,12}", text)})


def _draw_lines(lines: list[str], font: Path, size: int, width: int, margin: int,
                leading: float = 1.5) -> Image.Image:
    face = ImageFont.truetype(str(font), size)
    height = 2 * margin + round(len(lines) * size * leading)
    image = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(image)
    for n, line in enumerate(lines):
        draw.text((margin, margin + round(n * size * leading)), line, font=face, fill=0)
    return image


def receipt_lines(rng: random.Random, words: list[str], width: int = 32) -> list[str]:
    """A till receipt's rows: description, quantity and price on one line."""
    lines = ["SUPERMARKET " + rng.choice(words).upper(), f"Store {rng.randint(10, 999)}", ""]
    total = 0.0
    for _ in range(rng.randint(12, 22)):
        name = " ".join(rng.choice(words) for _ in range(rng.randint(1, 2)))[:16].upper()
        qty, price = rng.randint(1, 4), rng.randint(49, 2999) / 100
        total += qty * price
        right = f"{qty} {price * qty:7.2f}"
        lines.append(name + " " * max(1, width - len(name) - len(right)) + right)
    lines += ["", "TOTAL" + " " * (width - 5 - 8) + f"{total:8.2f}",
              f"CARD {rng.randint(1000, 9999)}", "THANK YOU"]
    return lines


def receipt(rng: random.Random, words: list[str], out: Path) -> tuple[Path, str]:
    """A thermal receipt at 203 dpi (80 mm paper), DejaVu Sans Mono, grey print."""
    lines = receipt_lines(rng, words)
    image = _draw_lines(lines, MONO, 22, 576, 24, 1.35)
    image = image.point(lambda v: 255 - round((255 - v) * 0.75))  # thermal print's grey
    image.save(out, "PNG", dpi=(203, 203))
    return out, "\n".join(lines)


def dot_matrix(rng: random.Random, words: list[str], out: Path) -> tuple[Path, str]:
    """An invoice from a 9-pin printer: rows of round dots on a grid, a worn ribbon."""
    lines = receipt_lines(rng, words, width=60)
    face = _draw_lines(lines, MONO, 30, 1500, 60, 1.6)
    pitch = 3  # pixels between dot centres (about 67 dots an inch at 200 dpi)
    image = Image.new("L", face.size, 255)
    draw = ImageDraw.Draw(image)
    px = face.load()
    assert px is not None
    for y in range(0, face.height, pitch):
        for x in range(0, face.width, pitch):
            value = px[x, y]
            if isinstance(value, (int, float)) and value < 128:
                ink = rng.randint(40, 110)
                draw.ellipse((x - 1.2, y - 1.2, x + 1.2, y + 1.2), fill=ink)
    image.filter(ImageFilter.GaussianBlur(0.6)).save(out, "PNG", dpi=(200, 200))
    return out, "\n".join(lines)


def form(rng: random.Random, words: list[str], out: Path) -> tuple[Path, str]:
    """A filled-in form at 100 dpi: labels, values in boxes, two to a row."""
    labels = ["Name", "Address", "City", "Account", "Date", "Reference", "Phone", "Amount",
              "Signature", "Department"]
    lines, rows = ["APPLICATION FORM " + rng.choice(words).upper()], []
    for n in range(0, len(labels), 2):
        pair = []
        for label in labels[n:n + 2]:
            value = " ".join(rng.choice(words).capitalize() for _ in range(rng.randint(1, 2)))
            if label in ("Account", "Amount", "Phone", "Date"):
                value = str(rng.randint(10000, 999999))
            pair.append((label, value))
        rows.append(pair)
        lines.append("  ".join(f"{label}: {value}" for label, value in pair))
    scale = 100 / 300
    image = Image.new("L", (850, 1100), 255)
    draw = ImageDraw.Draw(image)
    head = ImageFont.truetype(str(SANS), round(48 * scale))
    face = ImageFont.truetype(str(SANS), round(34 * scale))
    draw.text((60, 50), lines[0], font=head, fill=0)
    y = 120
    for pair in rows:
        x = 60
        for label, value in pair:
            draw.text((x, y), label + ":", font=face, fill=0)
            draw.rectangle((x + 110, y - 6, x + 370, y + 24), outline=0, width=1)
            draw.text((x + 116, y), value, font=face, fill=30)
            x += 400
        y += 60
    image.save(out, "PNG", dpi=(100, 100))
    return out, "\n".join(lines)


def two_columns(text: str, out: Path) -> tuple[Path, str]:
    """A two-column page at 300 dpi in DejaVu Serif 10 pt: the text's first half in the
    left column, its second half in the right, read column after column."""
    face = ImageFont.truetype(str(SERIF), 40)
    column = 1050
    words = text.split()

    def wrap(chunk: list[str]) -> list[str]:
        lines, line = [], ""
        for word in chunk:
            trial = f"{line} {word}".strip()
            if face.getlength(trial) > column and line:
                lines.append(line)
                line = word
            else:
                line = trial
        return [*lines, line] if line else lines

    left = wrap(words[: len(words) // 2])[:60]
    right = wrap(words[len(words) // 2:])[:60]
    image = Image.new("L", (2480, 3508), 255)
    draw = ImageDraw.Draw(image)
    for n, line in enumerate(left):
        draw.text((150, 200 + n * 52), line, font=face, fill=0)
    for n, line in enumerate(right):
        draw.text((1280, 200 + n * 52), line, font=face, fill=0)
    image.save(out, "PNG", dpi=(300, 300))
    return out, "\n".join([*left, *right])


def perspective_photo(src: Path, out: Path, seed: int) -> Path:
    """A phone photo (:func:`cases.phone_photo`) taken from a little off square: one edge
    of the page nearer the lens than the other."""
    cases.phone_photo(src, out, seed)
    rng = random.Random(seed)
    with Image.open(out) as opened:
        image = opened.convert("RGB")
    w, h = image.size
    k = rng.uniform(0.03, 0.06)
    # The far edge drawn narrower: its corners pulled in by k of the width.
    quad = (0, 0, w * k, h, w * (1 - k), h, w, 0) if rng.random() < 0.5 else (
        w * k, 0, 0, h, w, h, w * (1 - k), 0)
    image = image.transform((w, h), Image.Transform.QUAD, quad,
                            Image.Resampling.BICUBIC, fillcolor=(120, 110, 100))
    image.save(out, "JPEG", quality=85, dpi=(72, 72))
    return out


def make(corpus: Path, out: Path, seed: int = 1) -> list[Made]:
    """Every page of the set, written into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    words = _vocabulary(corpus)
    made: list[Made] = []

    def add(name: str, kind: str, lang: str, build: Callable[[Path], tuple[Path, str]],
            suffix: str) -> None:
        path, truth = build(out / f"{name}{suffix}")
        made.append(Made(name, kind, lang, path, truth))

    def truth_of(source: str) -> str:
        return (corpus / source).with_name(Path(source).stem + ".gt.txt").read_text("utf-8")

    for n in range(4):
        add(f"receipt_{n}", "receipt", "eng", lambda p: receipt(rng, words, p), ".png")
        add(f"dotmatrix_{n}", "dot-matrix", "eng", lambda p: dot_matrix(rng, words, p), ".png")
        add(f"form_{n}", "form-100dpi", "eng", lambda p: form(rng, words, p), ".png")
    def from_text(source: str, p: Path) -> tuple[Path, str]:
        return two_columns(truth_of(source), p)

    def fax(src: Path, fine: bool, p: Path) -> tuple[Path, str]:
        return cases.fax(src, p, fine=fine), truth_of(src.name)

    def tinted(src: Path, k: int, p: Path) -> tuple[Path, str]:
        return cases.faint(src, p, seed=k, darkness=0.6), truth_of(src.name)

    def photo(src: Path, k: int, p: Path) -> tuple[Path, str]:
        return perspective_photo(src, p, seed=k), truth_of(src.name)

    for n, source in enumerate(SOURCES[:3]):
        add(f"twocol_{n}", "two-column", "eng", partial(from_text, source), ".png")
    for n, source in enumerate(SOURCES):
        src, lang = corpus / source, LANGS[source]
        add(f"faxstd_{n}", "fax-standard", lang, partial(fax, src, False), ".tif")
        add(f"faxfine_{n}", "fax-fine", lang, partial(fax, src, True), ".tif")
        add(f"tinted_{n}", "tinted-faint", lang, partial(tinted, src, n), ".png")
        add(f"photo_{n}", "phone-photo", lang, partial(photo, src, n), ".jpg")
    # Upright pages of each drawn and scanned kind, fed turned.
    for n, (base, fed) in enumerate((("receipt_0", 180), ("form_0", 90), ("dotmatrix_0", 270),
                                     ("twocol_0", 90), ("faxstd_0", 180), ("photo_1", 270))):
        item = next(m for m in made if m.name == base)
        with Image.open(item.path) as opened:
            across, down = (round(float(v)) for v in opened.info.get("dpi", (300, 300)))
            path = out / f"turned_{n}.png"
            opened.transpose(cases.TRANSPOSE[fed]).save(
                path, "PNG", dpi=(down, across) if fed in (90, 270) else (across, down))
        made.append(Made(f"turned_{n}", "turned", item.language, path, item.truth))
    for item in made:
        item.path.with_name(item.name + ".gt.txt").write_text(item.truth + "\n", "utf-8")
    rows = ["file\tkind\tlanguage"] + [f"{m.path.name}\t{m.kind}\t{m.language}" for m in made]
    (out / "manifest.tsv").write_text("\n".join(rows) + "\n", "utf-8")
    return made


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument("--out", type=Path, required=True, metavar="DIR")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    made = make(args.corpus, args.out, args.seed)
    for item in made:
        print(f"{item.path.name:20} {item.kind:14} {item.language}")
    print(f"{len(made)} pages in {args.out}; read with benchmarks/heldout.py "
          f"({len(_common.corpus(args.out))} with ground truth)")


if __name__ == "__main__":
    main()

"""Pages not in the corpus: typeset anew, scanned as a desk scanner would, with ground truth.

The corpus has 25 pages; rules found on them may fit only them. This writes a folder of
pages laid out in ways the corpus does not have (a letter with its address on the right,
two columns, small print, a typewriter page double spaced), in other fonts (Debian's
fonts-urw-base35, fonts-liberation, fonts-dejavu), in English, German, French and Danish
(the words of the corpus's ground truths, de-hyphenated and set again), on tinted, grainy
paper, blurred a little and saved as JPEG at 300 dpi. The folder reads like the corpus
(``X.jpg``, ``X.gt.txt``, ``manifest.tsv``), so every benchmark that takes ``--corpus``
takes it::

    python benchmarks/made_pages.py --out /tmp/made
    python benchmarks/accuracy.py --corpus /tmp/made --scan --pdf \
        --out benchmarks/results/accuracy-made.txt

The pages are the same for the same ``--seed``.
"""

from __future__ import annotations

import argparse
import itertools
import random
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageChops, ImageDraw, ImageFilter, ImageFont

if __package__ in (None, ""):  # run as a file: the repository's packages importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import cases
from benchmarks._common import corpus, joined_hyphens

DPI = 300
A4 = (2480, 3508)  # pixels at 300 dpi
MARGIN = 250  # pixels: about 21 mm
FONTS = {
    "serif": "/usr/share/fonts/opentype/urw-base35/C059-Roman.otf",
    "palatino": "/usr/share/fonts/opentype/urw-base35/P052-Roman.otf",
    "bookman": "/usr/share/fonts/opentype/urw-base35/URWBookman-Light.otf",
    "sans": "/usr/share/fonts/truetype/liberation/LiberationSans-Regular.ttf",
    "dejavu-serif": "/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
    "mono": "/usr/share/fonts/opentype/urw-base35/NimbusMonoPS-Regular.otf",
}
# Which corpus ground truths give each language its words.
SOURCES = {
    "eng": ("tess_8071_093.3B", "ehri_eng_03", "ehri_eng_04"),
    "deu": ("ocrd_deu_00", "ocrd_deu_02", "ehri_deu_06"),
    "fra": ("tapus_01", "tapus_06", "tapus_03", "tapus_00"),
    "dan": ("ehri_dan_00",),
}
# (layout, font, points, language): twelve pages, none laid out as a corpus page is.
PLAN = (
    ("letter", "serif", 11, "eng"),
    ("columns", "palatino", 10, "deu"),
    ("article", "sans", 11, "fra"),
    ("typewriter", "mono", 12, "eng"),
    ("small", "dejavu-serif", 8, "deu"),
    ("letter", "bookman", 11, "dan"),
    ("columns", "sans", 9, "eng"),
    ("article", "serif", 12, "deu"),
    ("typewriter", "mono", 11, "fra"),
    ("letter", "sans", 10, "fra"),
    ("small", "palatino", 8, "eng"),
    ("article", "bookman", 10, "dan"),
)


@dataclass
class Sheet:
    """A page being set: its pen, its ink's grey, and the text in reading order."""

    draw: ImageDraw.ImageDraw
    ink: int
    truth: list[str]


def words_of(folder: Path, language: str) -> list[str]:
    """The words of the language's ground truths, hyphenated line ends joined again."""
    texts = []
    for stem in SOURCES[language]:
        path = folder / f"{stem}.gt.txt"
        if path.is_file():
            texts.append(path.read_text(encoding="utf-8", errors="replace"))
    text = joined_hyphens("\n".join(texts))
    # Only words a page would print: no lone marks, no replacement characters.
    return [w for w in text.split() if "\ufffd" not in w and any(c.isalpha() for c in w)]


def wrap(words: list[str], font: ImageFont.FreeTypeFont, width: int) -> list[str]:
    """``words`` set in lines no wider than ``width`` pixels (no hyphenation)."""
    lines: list[str] = []
    line = ""
    for word in words:
        trial = f"{line} {word}" if line else word
        if line and font.getlength(trial) > width:
            lines.append(line)
            line = word
        else:
            line = trial
    if line:
        lines.append(line)
    return lines


Setter = Callable[..., int]


def setter(sheet: Sheet, font: ImageFont.FreeTypeFont, pitch: int) -> Setter:
    """A function that sets a block of lines at (x, y) and returns the y below it."""

    def block(lines: list[str], x: int, y: int, align_right: int | None = None) -> int:
        for line in lines:
            left = align_right - round(font.getlength(line)) if align_right else x
            sheet.draw.text((left, y), line, font=font, fill=sheet.ink)
            y += pitch
        sheet.truth.append("\n".join(lines))
        return y

    return block


def typeset(layout: str, font_path: str, points: int, words: list[str],
            rng: random.Random) -> tuple[Image.Image, str]:
    """One page of ``layout``: its clean image (grey) and its text in reading order."""
    image = Image.new("L", A4, 255)
    sheet = Sheet(ImageDraw.Draw(image), ink=rng.randint(0, 40), truth=[])
    size = round(points * DPI / 72)
    font = ImageFont.truetype(font_path, size)
    big = ImageFont.truetype(font_path, round(size * 1.6))
    pitch = round(size * (2.3 if layout == "typewriter" else 1.25))
    body = setter(sheet, font, pitch)
    head = setter(sheet, big, round(size * 2.0))
    width = A4[0] - 2 * MARGIN
    bottom = A4[1] - MARGIN
    start = rng.randrange(max(1, len(words) - 400))
    pool = itertools.cycle(words[start:] + words[:start])  # small print takes them all

    def take(count: int) -> list[str]:
        return [next(pool) for _ in range(count)]

    def paragraphs(x: int, y: int, column: int) -> int:
        while True:
            lines = wrap(take(rng.randint(25, 70)), font, column)
            if y + pitch * len(lines) > bottom:
                room = (bottom - y) // pitch
                if room >= 2:
                    y = body(lines[:room], x, y)
                return y
            y = body(lines, x, y) + pitch // 2

    y = MARGIN
    if layout == "letter":
        y = body([" ".join(take(3)), " ".join(take(2)), " ".join(take(2))], 0, y,
                 align_right=A4[0] - MARGIN) + pitch
        y = body([" ".join(take(4))], MARGIN, y) + pitch
        paragraphs(MARGIN, y, width * 9 // 10)
    elif layout == "columns":
        y = head([" ".join(take(4))], MARGIN, y) + pitch
        gap = 100
        column = (width - gap) // 2
        paragraphs(MARGIN, y, column)
        paragraphs(MARGIN + column + gap, y, column)
    else:  # article, typewriter, small: a title, then one column
        y = head([" ".join(take(3))], MARGIN, y) + pitch
        paragraphs(MARGIN, y, width)
    return image, "\n\n".join(sheet.truth) + "\n"


def scanned(clean: Image.Image, rng: random.Random) -> Image.Image:
    """The page as a desk scanner gives it: tinted, grainy paper, slightly soft."""
    tint = (rng.randint(232, 250), rng.randint(228, 246), rng.randint(210, 238))
    paper = cases._paper(clean.size, rng, tint, grain=rng.uniform(4, 9),
                         noise=rng.uniform(3, 7))
    ink = clean.filter(ImageFilter.GaussianBlur(rng.uniform(0.5, 0.9)))
    return ImageChops.multiply(paper, Image.merge("RGB", (ink, ink, ink)))


def make(folder: Path, corpus_folder: Path, seed: int) -> list[Path]:
    """The planned pages in ``folder``, each with its ground truth, and a manifest."""
    folder.mkdir(parents=True, exist_ok=True)
    known = {item.path.stem for item in corpus(corpus_folder)}
    rows = ["file\tkind\tlanguage"]
    made = []
    for number, (layout, face, points, language) in enumerate(PLAN):
        if not Path(FONTS[face]).is_file():
            print(f"skipped page {number}: font {FONTS[face]} is not installed", file=sys.stderr)
            continue
        if not any(stem in known for stem in SOURCES[language]):
            continue
        rng = random.Random(seed * 1000 + number)
        clean, truth = typeset(layout, FONTS[face], points,
                               words_of(corpus_folder, language), rng)
        name = f"made_{number:02d}_{layout}_{face}_{language}"
        path = folder / f"{name}.jpg"
        scanned(clean, rng).save(path, "JPEG", quality=rng.randint(85, 92), dpi=(DPI, DPI))
        (folder / f"{name}.gt.txt").write_text(truth, encoding="utf-8")
        rows.append(f"{path.name}\t{layout}\t{language}")
        made.append(path)
    (folder / "manifest.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return made


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder to write the pages to")
    parser.add_argument("--corpus", type=Path, default=Path("../shared/corpus"),
                        help="the corpus whose ground truths give the words")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    made = make(args.out, args.corpus, args.seed)
    print(f"{len(made)} pages in {args.out}")
    return 0 if made else 1


if __name__ == "__main__":
    sys.exit(main())

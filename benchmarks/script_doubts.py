"""Pages in a script the languages cannot read: how often the script check doubts a page.

Each page goes through the daemon's own preparation (:meth:`ocrwatch.scan.prepare.ScanPrep.prepare`,
with the script check an engine reading with ``languages`` gets) configured with
``languages = ["eng"]`` only, the narrowest a user has; a page OSD finds in a script
``eng`` does not read is then read by the Tesseract engine, whose mean word confidence
confirms the doubt or not (:func:`ocrwatch.scan.script.confirmed`). A page whose lines
told its turn is not shown to OSD while prepared: OSD is asked for its script only when
its reading is unsure (``Page.script_unchecked``, as the pipeline does):

- every corpus page (Latin script: English, French, Danish, German, one in Fraktur) as
  scanned, fed four ways: every doubt there is a false one (its original would be kept
  for ever);
- with ``--heldout DIR``, the pages of ``benchmarks/heldout_set.py`` (receipts, dot
  matrix, forms at 100 dpi, faxes, tinted paper, photos, two columns; made with
  ``python benchmarks/heldout_set.py --corpus ../shared/corpus --out /tmp/heldout``):
  false doubts too;
- letters drawn in Cyrillic, Greek and Latin with six fonts (DejaVu and URW) at 10-12 pt
  and 150-300 dpi: each Cyrillic and Greek one should be a doubt, no Latin one.

    python benchmarks/script_doubts.py --corpus ../shared/corpus [--heldout /tmp/heldout]

About 15 minutes here (2 cores), most of it the orientation of pages fed sideways.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from unittest import mock

from PIL import Image, ImageDraw, ImageFont

if __package__ in (None, ""):  # run as a file: the repository is the package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common, cases

LETTERS = {
    "Cyrillic": "Уважаемый Иван Петрович, благодарим вас за письмо от двенадцатого марта. "
                "Счёт номер 4711 оплачен полностью, и мы будем рады видеть вас снова в "
                "нашем магазине. С уважением, Анна Смирнова, главный бухгалтер",
    "Greek": "Αγαπητέ κύριε Παπαδόπουλε, σας ευχαριστούμε για την επιστολή σας. Το "
             "τιμολόγιο αριθμός 4711 έχει πληρωθεί πλήρως και θα χαρούμε να σας δούμε "
             "ξανά στο κατάστημά μας. Με εκτίμηση, Μαρία Γεωργίου, λογίστρια",
    "Latin": "Dear Mr Smith, thank you for your letter of the twelfth of March. Invoice "
             "number 4711 has been paid in full and we look forward to seeing you again in "
             "our shop. Yours sincerely, Anna Smith, chief accountant",
}
FONTS = ("/usr/share/fonts/truetype/dejavu/DejaVuSerif.ttf",
         "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
         "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf",
         "/usr/share/fonts/opentype/urw-base35/C059-Roman.otf",
         "/usr/share/fonts/opentype/urw-base35/NimbusSans-Regular.otf",
         "/usr/share/fonts/opentype/urw-base35/P052-Roman.otf")
SIZES = ((11, 300), (10, 200), (12, 150))  # (points, dpi)


def letter(text: str, font: str, points: int, dpi: int) -> Image.Image:
    """An A4 page at ``dpi`` with ``text`` set in ``font`` at ``points``."""
    px = round(points * dpi / 72)
    face = ImageFont.truetype(font, px)
    width, height = round(8.27 * dpi), round(11.69 * dpi)
    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    y = dpi
    for line in textwrap.wrap(text, width=int(width * 0.8 / (px * 0.5))):
        draw.text((round(dpi * 0.8), y), line, fill="black", font=face)
        y += round(px * 1.5)
    return image


def corpus_pages(folder: Path, work: Path) -> Iterator[tuple[str, Path]]:
    """Each corpus page as a PNG of its own, fed four ways."""
    from ocrwatch.config import Config
    from ocrwatch.pages.decode import iter_pages

    for item in _common.corpus(folder):
        for page in iter_pages(item.path, Config(languages=["eng"]), None):
            name = f"{item.path.name}#{page.index + 1}"
            src = work / f"{item.path.stem}-{page.index + 1}.png"
            page.image.save(src, dpi=(page.dpi or 300,) * 2)
            for clockwise in (0, 90, 180, 270):
                yield f"{name} fed {clockwise}", (cases.turned(src, work / f"t{clockwise}.png",
                                                               clockwise) if clockwise else src)


def main(argv: list[str] | None = None) -> None:
    from ocrwatch import pipeline
    from ocrwatch.config import Config
    from ocrwatch.core.domain import Page
    from ocrwatch.engines.tesseract import TesseractEngine
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.scan import script
    from ocrwatch.scan.orient import Orientation
    from ocrwatch.scan.prepare import ScanPrep

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument("--heldout", type=Path, metavar="DIR")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    config = Config(languages=["eng"])
    prep = ScanPrep(config, scripts=True)
    engine = TesseractEngine(config)
    rows: list[str] = []
    counts: dict[str, list[int]] = {}  # set: [pages, doubts]
    seen_by_osd: list[Orientation] = []
    doubt = script.doubt

    def watched(found: Orientation, languages: Sequence[str]) -> str | None:
        seen_by_osd.append(found)  # what OSD said of the page, for the table
        return doubt(found, languages)

    def judge(kind: str, name: str, image: Image.Image) -> None:
        seen_by_osd.clear()
        page = prep.prepare(Page(Path(name), 0, image.convert("RGB"), dpi=300))
        seen = counts.setdefault(kind, [0, 0, 0])
        asked = page.script_doubt is not None or page.script_unchecked
        read = engine.recognize([page])[0].confidence if asked else None
        # OSD's script as preparing found it, else asked after an unsure reading.
        unread = page.script_doubt or pipeline.script_doubt(page, read, prep)
        found = seen_by_osd[-1] if seen_by_osd else None
        doubted = unread is not None and script.confirmed(read)
        seen[0] += 1
        seen[1] += unread is not None
        seen[2] += doubted
        named = (f"{found.script} {found.script_confidence:.2f}" if found and found.script
                 else "-")
        turn = f"{found.confidence:.2f}" if found else "-"
        verdict = "doubt" if doubted else "-"
        rows.append(f"| {kind} | {name} | {named} | {turn} | "
                    f"{'-' if read is None else f'{read:.0f}%'} | {verdict} |")
        print(rows[-1], flush=True)

    try:
        with tempfile.TemporaryDirectory() as tmp, mock.patch.object(script, "doubt", watched):
            for name, path in corpus_pages(args.corpus, Path(tmp)):
                with Image.open(path) as image:
                    judge("corpus (Latin)", name, image)
            for item in _common.corpus(args.heldout) if args.heldout else []:
                for page in iter_pages(item.path, config, None):
                    judge("held-out set (Latin)", f"{item.path.name}#{page.index + 1}",
                          page.image)
            for written, text in LETTERS.items():
                for font in FONTS:
                    for points, dpi in SIZES:
                        judge(f"letter, {written}", f"{Path(font).stem} {points} pt {dpi} dpi",
                              letter(text, font, points, dpi))
    finally:
        prep.close()
        engine.close()
    lines = _common.header("ocrwatch script check: pages doubted with languages = [\"eng\"]",
                           ["a doubt: OSD names a script eng cannot read, with a script "
                            "confidence of 1.0 or more and a turn confidence of 2.0 or more, "
                            "and Tesseract reads the page at a mean word confidence under 70% "
                            "(ocrwatch/scan/script.py)"])
    lines += ["", "| set | pages | OSD's script not eng's | doubted |", "|---|--:|--:|--:|"]
    lines += [f"| {kind} | {n} | {o} | {d} |" for kind, (n, o, d) in counts.items()]
    lines += ["", "| set | page | OSD's script, confidence | OSD's turn confidence | "
              "read at | verdict |", "|---|---|---|--:|--:|---|", *rows]
    print(_common.save("script_doubts.txt", lines, args.out))


if __name__ == "__main__":
    main()

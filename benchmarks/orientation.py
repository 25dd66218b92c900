"""Which way up, on pages the corpus does not have: every corpus page as scanned, as a
low-resolution scan, as a phone photo, on noisy paper and fed crooked, each fed four ways.

For each variant the daemon's own blank check (:func:`ocrwatch.scan.inkcover.is_blank`),
then its straightening and orientation detection (:meth:`ocrwatch.scan.prepare.ScanPrep.upright`,
which the daemon's preparation calls) run on the page as fed, and the turn decided is compared
with the turn that makes the page upright. A wrong turn is the failure that matters (the
page is read as noise and reported read); a page left as fed because nothing could
decide is counted apart, with the reason. No page made from a corpus page may be
recorded blank. The time of the two is printed, as a median and a maximum per variant.

    python benchmarks/orientation.py --corpus ../shared/corpus [--languages eng]

``--languages`` gives the reading languages the daemon is configured with (default:
each page's own, from manifest.tsv): a user who reads English only still gets an Italian
page turned, since orientation detection (OSD) is by script, not language.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

from PIL import Image, ImageOps

if __package__ in (None, ""):  # run as a file: the repository is the package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common, cases

TURNS = (0, 90, 180, 270)
BANDS = ((0.0, 1.0), (1.0, 2.0), (2.0, 3.0), (3.0, 3.5), (3.5, 5.0), (5.0, float("inf")))


@dataclass(frozen=True)
class Variant:
    name: str
    about: str
    make: Callable[[Path, Path], Path]  # (upright source, output) -> the file written


VARIANTS = (
    Variant("scan", "the corpus page as scanned", lambda src, out: src),
    Variant("dpi150", "rescaled to 150 dpi, no resolution in the file",
            lambda src, out: cases.low_resolution(src, out.with_suffix(".png"), 150)),
    Variant("dpi100", "rescaled to 100 dpi, no resolution in the file",
            lambda src, out: cases.low_resolution(src, out.with_suffix(".png"), 100)),
    Variant("photo", "a phone photo: tilted up to 2 degrees on a table, uneven light, blur, "
            "JPEG at quality 85, 72 dpi", lambda src, out: cases.phone_photo(
                src, out.with_suffix(".jpg"), seed=7)),
    Variant("noisy", "yellowed paper, grain, speckle and a red stamp",
            lambda src, out: cases.noisy(src, out.with_suffix(".jpg"), seed=11)),
    Variant("crooked3", "fed crooked: turned 3 degrees counter-clockwise on white (a "
            "scanner's lid)", lambda src, out: cases.skewed(src, out.with_suffix(".png"), 3)),
    Variant("crooked8", "fed crooked: turned 8 degrees clockwise on white",
            lambda src, out: cases.skewed(src, out.with_suffix(".png"), -8)),
)


@dataclass
class Outcome:
    page: str
    variant: str
    fed: int  # degrees the page was turned clockwise when fed
    decided: int  # degrees ocrwatch turned it clockwise
    confidence: float
    checked: bool
    proposed: int | None  # OSD's own turn; None when it could not decide
    blank: bool
    seconds: float

    @property
    def right(self) -> bool:
        return (self.fed + self.decided) % 360 == 0

    @property
    def left_as_fed(self) -> bool:
        return self.fed != 0 and self.decided == 0


def variant_stem(work: Path, name: str, variant: Variant) -> Path:
    """Where ``variant`` of page ``name`` is written, its maker putting the file's suffix
    in place of ".x": never over the page it is made from (a PDF's pages are drawn into
    ``work`` too; "NAME-p1.dpi150" with its suffix replaced was "NAME-p1.png", so each
    variant of a PDF page was made from the one before, not from the page)."""
    return work / f"{Path(name).stem}.{variant.name}.x"


def pages(items: list[_common.Item], work: Path) -> list[tuple[str, Path, str | None]]:
    """Each corpus page as an image file (a PDF's pages drawn at 200 dpi)."""
    import pypdfium2 as pdfium

    out = []
    for item in items:
        if item.path.suffix.lower() != ".pdf":
            out.append((item.path.name, item.path, item.languages))
            continue
        doc = pdfium.PdfDocument(str(item.path))
        try:
            for index in range(len(doc)):
                image = doc[index].render(scale=200 / 72).to_pil()
                path = work / f"{item.path.stem}-p{index + 1}.png"
                image.save(path, dpi=(200, 200))
                out.append((path.name, path, item.languages))
        finally:
            doc.close()
    return out


def run(corpus: Path, languages: str | None, only: list[str] | None,
        variants: list[str]) -> list[Outcome]:
    from ocrwatch.config import Config
    from ocrwatch.scan import inkcover, orient
    from ocrwatch.scan.prepare import ScanPrep

    outcomes: list[Outcome] = []
    preps: dict[str, ScanPrep] = {}
    with tempfile.TemporaryDirectory(prefix="ocrwatch-orient-") as tmp, mock.patch.dict(
            os.environ, {"XDG_DATA_HOME": str(Path(tmp) / "data")}):
        # The folder of linked language files that a reading check of several languages
        # makes (engines.tesseract.prepare_tessdata) goes there, not into the user's home.
        work = Path(tmp)
        items = [i for i in _common.corpus(corpus) if not only or i.path.name in only]
        for name, path, page_langs in pages(items, work):
            langs = languages or page_langs or "eng"
            if langs not in preps:
                preps[langs] = ScanPrep(Config(languages=langs.split("+")))
                if preps[langs].missing:
                    raise SystemExit(preps[langs].missing)
            prep = preps[langs]
            for variant in (v for v in VARIANTS if v.name in variants):
                made = variant.make(path, variant_stem(work, name, variant))
                with Image.open(made) as opened:
                    upright = ImageOps.exif_transpose(opened).convert("RGB")
                for fed in TURNS:
                    image = orient.turn(upright, fed)
                    started = time.perf_counter()
                    # As the daemon's preparation: the blank check, then straightening
                    # and orientation.
                    blank = inkcover.is_blank(image)
                    found = prep.upright(image).orientation
                    seconds = time.perf_counter() - started
                    outcome = Outcome(name, variant.name, fed, found.turn, found.confidence,
                                      found.checked, found.proposed, blank, seconds)
                    outcomes.append(outcome)
                    verdict = ("right" if outcome.right else
                               "left as fed" if outcome.left_as_fed else "WRONG")
                    print(f"{name:32} {variant.name:7} fed {fed:3} turned {found.turn:3} "
                          f"{verdict}{' BLANK' if blank else ''} (OSD {found.confidence:.2f}"
                          f"{', checked' if found.checked else ''}) {seconds:.2f} s",
                          flush=True)
        for prep in preps.values():
            prep.close()
    return outcomes


def report(outcomes: list[Outcome], args: argparse.Namespace) -> list[str]:
    from ocrwatch.scan import orient

    lines = _common.header("ocrwatch orientation: corpus pages as low-resolution scans, "
                           "photos, on noisy paper and fed crooked, fed four ways", [
                               f"languages: {args.languages or 'each page its own (manifest.tsv)'}",
                               *(f"variant {v.name}: {v.about}" for v in VARIANTS
                                 if v.name in args.variants),
                               "fed: degrees the page was turned clockwise as it was fed; "
                               "right: ocrwatch turned it upright; wrong: it turned it some "
                               "other way; left: it left a turned page as fed"])
    lines += ["", "| variant | fed | pages | right | wrong | left as fed | blank | "
              "median s | max s |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|"]
    for variant in args.variants:
        for fed in TURNS:
            rows = [o for o in outcomes if o.variant == variant and o.fed == fed]
            if not rows:
                continue
            times = [o.seconds for o in rows]
            lines.append(
                f"| {variant} | {fed} | {len(rows)} | {sum(o.right for o in rows)} | "
                f"{sum(not o.right and not o.left_as_fed for o in rows)} | "
                f"{sum(o.left_as_fed for o in rows)} | {sum(o.blank for o in rows)} | "
                f"{_common.median(times):.2f} | {max(times):.2f} |")
    lines += ["", "OSD's own turn (on the page as sized for it) by its confidence: how often "
              "it would have been right taken alone; from SURE "
              f"({orient.SURE}) on it is taken without a check (from SURE_ENLARGED, "
              f"{orient.SURE_ENLARGED}, on a page OSD saw enlarged twice or more)", "",
              "| OSD confidence | pages | OSD right | OSD wrong |", "|---|--:|--:|--:|"]
    undecided = [o for o in outcomes if o.proposed is None]
    lines.append(f"| could not decide | {len(undecided)} | - | - |")
    for low, high in BANDS:
        band = [o for o in outcomes
                if o.proposed is not None and low <= o.confidence < high]
        good = sum((o.fed + o.proposed) % 360 == 0 for o in band if o.proposed is not None)
        lines.append(f"| {low:g} to {high:g} | {len(band)} | {good} | {len(band) - good} |")
    wrong = [o for o in outcomes if not o.right]
    total = len(outcomes)
    lines += ["", f"right: {total - len(wrong)} of {total}; wrong turns: "
              f"{sum(not o.left_as_fed for o in wrong)}; left as fed: "
              f"{sum(o.left_as_fed for o in wrong)}; recorded blank: "
              f"{sum(o.blank for o in outcomes)}"]
    for o in wrong:
        lines.append(f"- {o.page} {o.variant}, fed {o.fed}: turned {o.decided} "
                     f"(OSD confidence {o.confidence:.2f}"
                     f"{', checked by reading' if o.checked else ''})")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument("--languages", default=None, metavar="LANGS",
                        help="the configured languages, e.g. eng (default: each page's own)")
    parser.add_argument("--files", nargs="*", metavar="NAME", help="only these corpus files")
    parser.add_argument("--variants", nargs="+", default=[v.name for v in VARIANTS],
                        choices=[v.name for v in VARIANTS])
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    outcomes = run(args.corpus, args.languages, args.files, args.variants)
    lines = report(outcomes, args)
    print("\n".join(lines))
    path = _common.save("orientation.txt", lines, args.out)
    print(f"written: {path}")


if __name__ == "__main__":
    main()

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

``--compare band`` (or ``--compare``) prepares each page with orient.BAND_CHECK off and
on; ``--compare lines`` with orient.LINES_CHECK off (OSD on every page) and on
(a page's level lines decide before OSD), counting OSD's calls and timing the
orientation itself (Detector.detect) in CPU seconds; ``--compare sheet`` the same with
orient.SHEET_LINES and SIDEWAYS_LINES off and on (the lines measured on the text's box
within a darker ground, and lines running down the page too).

``--languages`` gives the reading languages the daemon is configured with (default:
each page's own, from manifest.tsv): a user who reads English only still gets an Italian
page turned, since orientation detection (OSD) is by script, not language.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
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
    # --compare: the turn the whole-page check (orient.BAND_CHECK off) decided, and the CPU
    # seconds of ScanPrep.prepare with the band check, without it, and without orientation
    before: int | None = None
    cpu: float = 0.0
    cpu_before: float = 0.0
    cpu_off: float = 0.0
    # --compare lines: OSD's calls and Detector.detect's CPU seconds, after and before;
    # whether the page's lines decided it (OSD not asked)
    osd: int = 0
    osd_before: int = 0
    orient_cpu: float = 0.0
    orient_cpu_before: float = 0.0
    lines: bool = False
    lines_before: bool = False

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


# Each comparison's switches in orient: all off (before), all on (after).
SWITCHES = {"band": ("BAND_CHECK",), "lines": ("LINES_CHECK",),
            "sheet": ("SHEET_LINES", "SIDEWAYS_LINES")}


def compared(preps: tuple[Any, Any], name: str, variant: str, fed: int,
             image: Image.Image, switch: str = "band") -> Outcome:
    """The page prepared as the daemon does (ScanPrep.prepare: ink, faint marks, skew,
    orientation) with ``switch`` off (before) and on (after), then without orientation
    (band only), each timed in CPU seconds (one thread); OSD's calls and the orientation's
    own CPU counted apart."""
    from ocrwatch.core.domain import Page
    from ocrwatch.scan import ascenders, orient, osd

    prep, off = preps
    page = Page(Path(name), 0, image, dpi=None)
    seen: list[Any] = []
    upright = prep.upright
    calls = [0]
    spent = [0.0]
    detect, found_osd, detect_osd = orient.Detector.detect, osd.OsdApi.found, osd.OsdApi.detect

    def recording(*args: Any, **kwargs: Any) -> Any:
        made = upright(*args, **kwargs)
        seen.append(made.orientation)
        return made

    def timed(self: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.process_time()
        try:
            return detect(self, *args, **kwargs)
        finally:
            spent[0] += time.process_time() - started

    def counted(method: Callable[..., Any]) -> Callable[..., Any]:
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            calls[0] += 1
            return method(self, *args, **kwargs)
        return call

    cpu: dict[bool, float] = {}
    turns: dict[bool, int] = {}
    osd_calls: dict[bool, int] = {}
    orient_cpu: dict[bool, float] = {}
    by_lines: dict[bool, bool] = {}
    with mock.patch.object(prep, "upright", recording), \
            mock.patch.object(orient.Detector, "detect", timed), \
            mock.patch.object(osd.OsdApi, "found", counted(found_osd)), \
            mock.patch.object(osd.OsdApi, "detect", counted(detect_osd)):
        for on in (False, True):
            calls[0], spent[0] = 0, 0.0
            with contextlib.ExitStack() as switches:
                for setting in SWITCHES[switch]:
                    switches.enter_context(mock.patch.object(orient, setting, on))
                if switch == "sheet" and not on:  # before: the one rule of 12 lines at 85%
                    switches.enter_context(mock.patch.object(
                        ascenders, "RULES", ascenders.RULES[:1]))
                started = time.process_time()
                ready = prep.prepare(page)
                cpu[on] = time.process_time() - started
                turns[on] = ready.turned
            osd_calls[on], orient_cpu[on] = calls[0], spent[0]
            by_lines[on] = bool(seen and seen[-1].lines)
    cpu_off = 0.0
    if switch == "band":
        started = time.process_time()
        off.prepare(page)
        cpu_off = time.process_time() - started
    found = seen[-1] if seen else orient.Orientation(0, -1.0)
    return Outcome(name, variant, fed, turns[True], found.confidence, found.checked,
                   found.proposed, ready.blank, cpu[True], before=turns[False],
                   cpu=cpu[True], cpu_before=cpu[False], cpu_off=cpu_off,
                   osd=osd_calls[True], osd_before=osd_calls[False],
                   orient_cpu=orient_cpu[True], orient_cpu_before=orient_cpu[False],
                   lines=by_lines[True], lines_before=by_lines[False])


def run(corpus: Path, languages: str | None, only: list[str] | None,
        variants: list[str], compare: str | None = None) -> list[Outcome]:
    from ocrwatch.config import Config
    from ocrwatch.scan import inkcover, orient
    from ocrwatch.scan.prepare import ScanPrep

    outcomes: list[Outcome] = []
    preps: dict[str, ScanPrep] = {}
    offs: dict[str, ScanPrep] = {}
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
                offs[langs] = ScanPrep(Config(languages=langs.split("+"),
                                              rotate_pages=False))
            prep = preps[langs]
            for variant in (v for v in VARIANTS if v.name in variants):
                made = variant.make(path, variant_stem(work, name, variant))
                with Image.open(made) as opened:
                    upright = ImageOps.exif_transpose(opened).convert("RGB")
                for fed in TURNS:
                    image = orient.turn(upright, fed)
                    if compare:
                        outcome = compared((prep, offs[langs]), name, variant.name, fed,
                                           image, compare)
                        outcomes.append(outcome)
                        print(f"{name:32} {variant.name:7} fed {fed:3} turned "
                              f"{outcome.decided:3} (before {outcome.before:3}"
                              f"{', by lines' if outcome.lines else ''}) CPU s "
                              f"{outcome.cpu:.2f} (before {outcome.cpu_before:.2f}, "
                              f"no orientation {outcome.cpu_off:.2f}; orientation "
                              f"{outcome.orient_cpu:.3f}, before {outcome.orient_cpu_before:.3f}"
                              f"; OSD calls {outcome.osd}, before {outcome.osd_before})",
                              flush=True)
                        continue
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
        for prep in (*preps.values(), *offs.values()):
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
    undecided = [o for o in outcomes if o.proposed is None and not o.lines]
    lines.append(f"| could not decide | {len(undecided)} | - | - |")
    for low, high in BANDS:
        band = [o for o in outcomes
                if o.proposed is not None and low <= o.confidence < high]
        good = sum((o.fed + o.proposed) % 360 == 0 for o in band if o.proposed is not None)
        lines.append(f"| {low:g} to {high:g} | {len(band)} | {good} | {len(band) - good} |")
    if any(o.lines for o in outcomes):
        lines.append(f"| decided by its lines, OSD not asked | "
                     f"{sum(o.lines for o in outcomes)} | - | - |")
    if args.compare:
        lines += comparison(outcomes, args.compare)
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


def comparison(outcomes: list[Outcome], switch: str = "band") -> list[str]:
    """Before (the switch off) against after (on): the pages' verdicts, each page's
    change, and the CPU seconds of preparing a page (and of orientation, OSD's calls)."""
    def verdict(fed: int, turned: int) -> str:
        return ("right" if (fed + turned) % 360 == 0 else
                "left" if fed and not turned else "wrong")

    about = ("Before: orient.BAND_CHECK off (the whole page read four ways where OSD "
             "is unsure); after: on. CPU seconds of ScanPrep.prepare per page, one thread, "
             "both and without orientation (rotate_pages = false) on the same page in turn"
             if switch == "band" else
             "Before: orient.SHEET_LINES and SIDEWAYS_LINES off and ascenders.RULES its first "
             "(today: the lines' check on the whole picture, level lines only, 12 votes at "
             "85%); after: on (the lines measured on "
             "the text's box where ink reaches the picture's edge, and lines running down "
             "the page measured turned a quarter; 20 votes at 80% or 8 at 95% decide "
             "too). A model engine's preparation (no script doubt). CPU seconds of "
             "ScanPrep.prepare and of its orientation (Detector.detect) per page, one "
             "thread, both on the same page in turn"
             if switch == "sheet" else
             "Before: orient.LINES_CHECK off (OSD on every page, as today); after: on (a "
             "page whose level lines tell decided by them, OSD not asked). A model "
             "engine's preparation (no script doubt). CPU seconds of ScanPrep.prepare and "
             "of its orientation (Detector.detect) per page, one thread, both on the same "
             "page in turn")
    lines = ["", about, "", "| | right | wrong | left as fed |", "|---|--:|--:|--:|"]
    for label, decided in (("before", [o.before or 0 for o in outcomes]),
                           ("after", [o.decided for o in outcomes])):
        verdicts = [verdict(o.fed, turned) for o, turned in zip(outcomes, decided, strict=True)]
        lines.append(f"| {label} | {verdicts.count('right')} | {verdicts.count('wrong')} | "
                     f"{verdicts.count('left')} |")
    changed = [o for o in outcomes if o.before != o.decided]
    lines += ["", f"pages decided otherwise than before: {len(changed)}"]
    lines += [f"- {o.page} {o.variant}, fed {o.fed}: before {o.before} "
              f"({verdict(o.fed, o.before or 0)}), after {o.decided} "
              f"({verdict(o.fed, o.decided)})" for o in changed]
    checked = [o for o in outcomes if o.checked]
    lines += ["", "| CPU s per page | median | mean | max | pages |", "|---|--:|--:|--:|--:|"]
    for label, values in (
            ("before", [o.cpu_before for o in outcomes]), ("after", [o.cpu for o in outcomes]),
            ("no orientation", [o.cpu_off for o in outcomes] if switch == "band" else []),
            ("before, pages OSD was unsure of", [o.cpu_before for o in checked]),
            ("after, pages OSD was unsure of", [o.cpu for o in checked])):
        if values:
            lines.append(f"| {label} | {_common.median(values):.3f} | "
                         f"{sum(values) / len(values):.3f} | {max(values):.2f} | {len(values)} |")
    if switch in ("lines", "sheet"):
        return lines + lines_figures(outcomes)
    before = sum(o.cpu_before - o.cpu_off for o in outcomes)
    after = sum(o.cpu - o.cpu_off for o in outcomes)
    if before > 0:
        lines += ["", f"orientation's own CPU (preparation less preparation without it), "
                  f"summed: before {before:.1f} s, after {after:.1f} s ({after / before:.2f}x)"]
    return lines


def lines_figures(outcomes: list[Outcome]) -> list[str]:
    """OSD's calls and the orientation's own CPU, before and after the lines' check."""
    lines = ["", "| orientation CPU s per page | median | mean | max | sum |",
             "|---|--:|--:|--:|--:|"]
    for label, values in (("before", [o.orient_cpu_before for o in outcomes]),
                          ("after", [o.orient_cpu for o in outcomes]),
                          ("after, pages decided by lines",
                           [o.orient_cpu for o in outcomes if o.lines]),
                          ("before, the same pages",
                           [o.orient_cpu_before for o in outcomes if o.lines])):
        if values:
            lines.append(f"| {label} | {_common.median(values):.3f} | "
                         f"{sum(values) / len(values):.3f} | {max(values):.2f} | "
                         f"{sum(values):.1f} |")
    before = sum(o.orient_cpu_before for o in outcomes)
    after = sum(o.orient_cpu for o in outcomes)
    calls = sum(o.osd_before for o in outcomes), sum(o.osd for o in outcomes)
    decided = sum(o.lines for o in outcomes)
    lines += ["", f"pages decided by their lines: {decided} of {len(outcomes)} (before "
              f"{sum(o.lines_before for o in outcomes)})",
              f"OSD calls: before {calls[0]}, after {calls[1]}"
              f" ({calls[1] / max(1, calls[0]):.2f}x)",
              f"orientation's own CPU, summed: before {before:.1f} s, after {after:.1f} s"
              f" ({after / before if before else 0:.2f}x)"]
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
    parser.add_argument("--compare", nargs="?", const="band", default=None,
                        choices=sorted(SWITCHES),
                        help="band: each page prepared with the band check, with the "
                        "whole-page check and without orientation; lines: with and "
                        "without the lines' check before OSD; sheet: with and without "
                        "the lines measured on the text's box and sideways: decisions, "
                        "CPU s and OSD's calls compared")
    args = parser.parse_args(argv)
    outcomes = run(args.corpus, args.languages, args.files, args.variants, args.compare)
    lines = report(outcomes, args)
    print("\n".join(lines))
    path = _common.save("orientation.txt", lines, args.out)
    print(f"written: {path}")


if __name__ == "__main__":
    main()

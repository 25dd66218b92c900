"""How much of a skewed page's error is the straightening's, and how much is Tesseract's own
sensitivity to the pixels it is given.

Each corpus image page (PDFs left out) is skewed ``--degrees`` counter-clockwise on white
(``cases.skewed``, as ``accuracy.py --scan`` does) and read:

- upright: the page as it is, prepared and read as the daemon does (``ScanPrep``, then
  the Tesseract engine);
- ocrwatch: the skewed page, prepared and read the same way (its skew measured and undone);
- exact: the skewed page straightened by exactly the turn it was given, and by that turn
  0.2 and 0.4 degrees either way (``deskew.straighten``), each read by the engine as it is;
- plain: the ``tesseract`` command on the skewed page (its own handling of skew).

If a perfect straightening misses the goal too (CER within 1.1 times the upright page's,
plus 0.002), and angles a fifth of a degree apart read far apart, the miss is Tesseract's
sensitivity on that page, not the angle measured.

    python benchmarks/skew_sweep.py --corpus ../shared/corpus --degrees 2 5 [--pages tapus_03]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from unittest import mock

if __package__ in (None, ""):  # run as a file: the repository is the package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common, accuracy, cases

OFFSETS = (-0.4, -0.2, 0.0, 0.2, 0.4)  # degrees around the exact turn
GOAL, SLACK = 1.1, 0.002


def within(cer: float, upright: float) -> bool:
    return cer <= GOAL * upright + SLACK


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument("--degrees", type=float, nargs="+", default=[2.0, 5.0])
    parser.add_argument("--pages", default="", help="comma-separated stems (default: all)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    wanted = {stem for stem in args.pages.split(",") if stem}
    items = [item for item in _common.corpus(args.corpus)
             if item.path.suffix.lower() != ".pdf"
             and (not wanted or item.path.name.rsplit(".", 1)[0] in wanted)]
    rows: list[str] = []
    misses = perfect_misses = 0
    spreads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="ocrwatch-skew-") as scratch, mock.patch.dict(
            # One thread, as measured; the engine's language links in a folder of the run's
            # own, not in the user's data folder.
            os.environ, {"OMP_THREAD_LIMIT": "1", "XDG_DATA_HOME": f"{scratch}/data"}):
        for item in items:
            for found in _sweep(item, args.degrees, Path(scratch)):
                misses += not within(found.ours, found.upright)
                perfect_misses += not within(found.exact[0.0], found.upright)
                spreads.append(max(found.exact.values()) - min(found.exact.values()))
                rows.append(found.row())
                print(rows[-1], flush=True)
    heads = " | ".join(f"exact {o:+.1f}" if o else "exact" for o in OFFSETS)
    lines = _common.header(
        "ocrwatch skew sweep: a skewed page read as ocrwatch straightens it, and straightened "
        "by exactly its turn and a little either way", [
            "skewed: cases.skewed (turned counter-clockwise on white, bicubic); measured: "
            "the straightening ocrwatch chose (degrees counter-clockwise)",
            "exact: deskew.straighten by the turn given, plus the offset; read by the "
            "Tesseract engine, OMP_THREAD_LIMIT=1; plain: the `tesseract` command on the "
            "skewed page",
            f"goal: CER <= {GOAL} x upright + {SLACK}"])
    lines += ["", f"| file | degrees | upright CER | measured | ocrwatch CER | {heads} | "
              "exact range | plain CER | s ocrwatch |",
              "|---|--:|--:|--:|--:|" + "--:|" * len(OFFSETS) + "---|--:|--:|", *rows, "",
              f"ocrwatch misses the goal on {misses} of {len(rows)}; straightened by exactly "
              f"the turn given, {perfect_misses} of {len(rows)}; CER range over the "
              f"{len(OFFSETS)} angles 0.4 degrees either side of exact: median "
              f"{_common.median(spreads):.4f}, at most {max(spreads, default=0.0):.4f}"]
    print("\n".join(lines))
    print(f"written: {_common.save('skew_sweep.txt', lines, args.out)}")


@dataclass(frozen=True)
class Found:
    name: str
    degrees: float
    upright: float  # CER of the upright page
    measured: float  # the straightening ocrwatch chose
    ours: float  # CER of the skewed page as ocrwatch reads it
    exact: dict[float, float]  # offset from the exact turn -> CER
    plain: float  # CER of the `tesseract` command on the skewed page
    seconds: float  # ocrwatch's preparation and reading of the skewed page

    def row(self) -> str:
        spread = f"{min(self.exact.values()):.4f}-{max(self.exact.values()):.4f}"
        return (f"| {self.name} | {self.degrees:g} | {self.upright:.4f} | "
                f"{self.measured:+.1f} | {self.ours:.4f}"
                f"{'' if within(self.ours, self.upright) else ' MISS'} | "
                + " | ".join(f"{self.exact[o]:.4f}" for o in OFFSETS)
                + f" | {spread} | {self.plain:.4f} | {self.seconds:.1f} |")


def _sweep(item: _common.Item, degrees_list: list[float], tmp: Path) -> list[Found]:
    """One page's upright reading, then each skew's readings."""
    from ocrwatch.core.domain import Page
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.scan import deskew

    out = []
    with _common.reader(item) as r:
        def cer(page: Page, prepared: bool = True) -> float:
            ready = r.prep.prepare(page) if prepared else page
            return _common.score(r.truth, r.engine.recognize([ready])[0].text).cer

        upright = cer(next(iter(iter_pages(item.path, r.config, None))))
        for degrees in degrees_list:
            path = cases.skewed(item.path, tmp / f"skew{degrees:g}.png", degrees)
            page = next(iter(iter_pages(path, r.config, None)))
            started = time.perf_counter()
            ready = r.prep.prepare(page)
            ours = cer(ready, prepared=False)
            measured = ready.skew
            seconds = time.perf_counter() - started
            exact = {offset: cer(replace(page, image=deskew.straighten(
                page.image, -degrees + offset)), prepared=False) for offset in OFFSETS}
            text, _ = accuracy.run_plain(replace(item, path=path), r.languages,
                                         r.config.pdf_dpi, tmp)
            plain = _common.score(r.truth, text).cer
            out.append(Found(item.path.name, degrees, upright, measured, ours, exact, plain,
                             seconds))
    return out


if __name__ == "__main__":
    main()

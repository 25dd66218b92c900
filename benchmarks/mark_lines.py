"""Lines of marks read as text, left out by the Tesseract engine: what it gains and what
it costs, page by page.

Each corpus image page (PDFs left out) is read as the daemon reads it (``ScanPrep``, then
the Tesseract engine) as it is, skewed 2 and 5 degrees (``cases.skewed``) and on noisy
paper (``cases.noisy``: yellowed, grain, speckle, a red stamp), twice in the same run:

- ocrwatch: as shipped, a line read with a confidence under ``JUNK_LINE_CONF`` that is
  mostly not words left out (``junk_line`` in ``ocrwatch/engines/tesseract.py``);
- every line: the same engine with that rule off (``JUNK_LINE_CONF = 0``);
- plain: the ``tesseract`` command on the same file.

Each line left out is printed with the best match it has in the ground truth (a share of
100: it is there, as read), so that a line of text left out shows.

    python benchmarks/mark_lines.py --corpus ../shared/corpus
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any
from unittest import mock

if __package__ in (None, ""):  # run as a file: the repository is the package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common, accuracy, cases

VARIANTS = ("as scanned", "skew2", "skew5", "noisy")


@dataclass(frozen=True)
class Read:
    name: str
    variant: str
    ours: float  # CER as shipped
    every_line: float  # CER with no line left out
    plain: float  # CER of the `tesseract` command
    marks: tuple[str, ...]  # lines left out of the reading kept
    matches: tuple[float, ...]  # each one's best match in the ground truth, 0-100


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, required=True, metavar="DIR")
    parser.add_argument("--pages", default="", help="comma-separated stems (default: all)")
    parser.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS),
                        metavar="VARIANT", help=f"which ({', '.join(VARIANTS)}; default all)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    wanted = {stem for stem in args.pages.split(",") if stem}
    items = [item for item in _common.corpus(args.corpus)
             if item.path.suffix.lower() != ".pdf"
             and (not wanted or item.path.name.rsplit(".", 1)[0] in wanted)]
    reads: list[Read] = []
    with tempfile.TemporaryDirectory(prefix="ocrwatch-marks-") as scratch, mock.patch.dict(
            os.environ, {"OMP_THREAD_LIMIT": "1", "XDG_DATA_HOME": f"{scratch}/data"}):
        for item in items:
            for found in _page(item, args.variants, Path(scratch)):
                reads.append(found)
                print(_row(found), flush=True)
    print("\n".join(report(reads)))
    print(f"written: {_common.save('mark_lines.txt', report(reads), args.out)}")


def report(reads: list[Read]) -> list[str]:
    lines = _common.header(
        "Lines of marks read as text, left out by the Tesseract engine", [
            "ocrwatch: ScanPrep then the Tesseract engine as shipped; every line: the same "
            "with JUNK_LINE_CONF = 0 (no line left out); plain: the `tesseract` command; "
            "OMP_THREAD_LIMIT=1",
            "variants: " + ", ".join(VARIANTS) + " (benchmarks/cases.py: skewed "
            "counter-clockwise on white; noisy: yellowed paper, grain, speckle, red stamp)",
            "left out: each line left out of the reading kept, with its best match in the "
            "ground truth (rapidfuzz partial_ratio, 100: there as read)"])
    lines += ["", "| file | variant | CER ocrwatch | CER every line | CER plain | left out |",
              "|---|---|--:|--:|--:|---|", *(_row(r) for r in reads), ""]
    for variant in VARIANTS:
        mine = [r for r in reads if r.variant == variant]
        if not mine:
            continue
        better = sum(r.ours < r.every_line - 0.0005 for r in mine)
        worse = [r for r in mine if r.ours > r.every_line + 0.0005]
        lines.append(
            f"{variant}: mean CER {_mean(r.ours for r in mine):.4f} against "
            f"{_mean(r.every_line for r in mine):.4f} with every line (plain "
            f"{_mean(r.plain for r in mine):.4f}); {better} of {len(mine)} better, "
            f"{len(worse)} worse" + (" (" + ", ".join(
                f"{r.name} {r.every_line:.4f} -> {r.ours:.4f}" for r in worse) + ")"
                if worse else ""))
    marks = [(m, s) for r in reads for m, s in zip(r.marks, r.matches, strict=True)]
    found = [m for m, s in marks if s >= 90 and len(m.strip()) >= 4]
    lines.append(f"all: mean CER {_mean(r.ours for r in reads):.4f} against "
                 f"{_mean(r.every_line for r in reads):.4f} with every line; {len(marks)} "
                 f"lines left out, {len(found)} of them of 4 characters or more found in the "
                 "ground truth as read" + (f": {found}" if found else ""))
    return lines


def _mean(values: Any) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def _row(r: Read) -> str:
    marks = "; ".join(f"`{_cell(m)}` ({s:.0f})" for m, s in zip(r.marks, r.matches, strict=True))
    return (f"| {r.name} | {r.variant} | {r.ours:.4f} | {r.every_line:.4f} | "
            f"{r.plain:.4f} | {marks or '-'} |")


def _cell(text: str) -> str:
    """A line as it can stand in a Markdown table's cell, in backquotes."""
    return text.replace("|", "/").replace("`", "'")


def _page(item: _common.Item, variants: list[str], tmp: Path) -> list[Read]:
    """One page's variants, each read both ways and by the command."""
    from rapidfuzz import fuzz

    from ocrwatch.engines import tesseract
    from ocrwatch.pages.decode import iter_pages

    out = []
    with _common.reader(item) as r:
        readings: dict[str, tuple[str, ...]] = {}  # a reading's text -> its lines left out
        real = r.engine._reading

        def recorded(api: Any) -> Any:
            reading = real(api)
            readings[reading.text.strip()] = reading.marks
            return reading

        with mock.patch.object(r.engine, "_reading", recorded):
            for variant in variants:
                path = {"as scanned": lambda: item.path,
                        "skew2": lambda: cases.skewed(item.path, tmp / "skew2.png", 2),
                        "skew5": lambda: cases.skewed(item.path, tmp / "skew5.png", 5),
                        "noisy": lambda: cases.noisy(item.path, tmp / "noisy.jpg", seed=7),
                        }[variant]()
                page = r.prep.prepare(next(iter(iter_pages(path, r.config, None))))
                readings.clear()
                (ours,) = r.engine.recognize([page])
                marks = readings.get(ours.text.strip(), ())
                with mock.patch.object(tesseract, "JUNK_LINE_CONF", 0):
                    (every,) = r.engine.recognize([page])
                text, _ = accuracy.run_plain(replace(item, path=path),
                                             r.languages, r.config.pdf_dpi, tmp)
                out.append(Read(
                    item.path.name, variant, _common.score(r.truth, ours.text).cer,
                    _common.score(r.truth, every.text).cer, _common.score(r.truth, text).cer,
                    marks, tuple(fuzz.partial_ratio(m, r.truth) for m in marks)))
    return out


if __name__ == "__main__":
    main()

"""Page preparation alone, per kind of page, with today's orientation and with the lines'
check on the text's box (cards and photos on a darker ground) and on lines running down
the page: pages/s per kind on the GPU benchmark's drop, one thread and on the daemon's
preparer threads.

    python benchmarks/prep_kinds.py [--drop A4,CARDS,PDFS] [--threads N] [--out FILE]

The drop is benchmarks/_drop.py's (24 A4 300-dpi JPEGs, 24 business-card photos on a
darker table, 4 four-page PDFs by default). Each page is prepared as the daemon's
preparers do for a model engine (``iter_pages`` scaled to the model's longest side, then
``ScanPrep.prepare``: ink, faint marks, skew, orientation), once with ``orient.SHEET_LINES``
and ``orient.SIDEWAYS_LINES`` off and ``ascenders.RULES`` its first rule (before: the
lines' check on the whole picture, level lines only, 12 votes at 85%) and once as they are
(after), file by file back to back, timed in this
process's CPU seconds (``time.process_time``; the machine's other work does not count).
A page's "pages/s" is 1 / its CPU seconds: what one core prepares. Then the whole drop on
the daemon's preparer count (``gpu_preparers``), a file each, both ways in turn: wall
seconds and CPU seconds. OSD's calls are counted, and every page's turn is printed against
how it was fed (the drop is fed upright; ``--turned`` feeds the cards a quarter, a half and
three quarters turned as well).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _common  # noqa: E402
from benchmarks._drop import drop_counts, make_drop  # noqa: E402

KINDS = ("a4", "card", "pdf")
WAYS = ("before", "after")


def kind_of(name: str) -> str:
    return "a4" if name.startswith("a4_") else "card" if "card_" in name else "pdf"


@contextmanager
def way(after: bool) -> Iterator[None]:
    """Today's orientation (before) or the lines measured on the text's box and sideways
    too, decided by ascenders.RULES (after; before: its first rule only)."""
    from ocrwatch.scan import ascenders, orient

    rules = ascenders.RULES if after else ascenders.RULES[:1]
    with mock.patch.object(orient, "SHEET_LINES", after), \
            mock.patch.object(orient, "SIDEWAYS_LINES", after), \
            mock.patch.object(ascenders, "RULES", rules):
        yield


@contextmanager
def osd_counted() -> Iterator[list[int]]:
    from ocrwatch.scan import osd

    calls = [0]
    found = osd.OsdApi.found

    def counted(self: Any, *args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return found(self, *args, **kwargs)

    with mock.patch.object(osd.OsdApi, "found", counted):
        yield calls


def turned_cards(folder: Path, files: dict[str, int]) -> dict[str, int]:
    """Each card also fed turned 90, 180 and 270 degrees clockwise."""
    from PIL import Image

    from ocrwatch.scan import orient

    more: dict[str, int] = {}
    for name in [n for n in files if kind_of(n) == "card"]:
        with Image.open(folder / name) as opened:
            image = opened.convert("RGB")
        for fed in (90, 180, 270):
            out = f"turn{fed}_{name}"
            orient.turn(image, fed).save(folder / out, quality=85)
            more[out] = 1
    return more


def fed_of(name: str) -> int:
    return int(name[4:name.index("_")]) if name.startswith("turn") else 0


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--drop", type=drop_counts, default=(24, 24, 4), metavar="A4,CARDS,PDFS")
    parser.add_argument("--turned", action="store_true",
                        help="the cards fed turned 90, 180 and 270 degrees too")
    parser.add_argument("--threads", type=int, default=None,
                        help="preparer threads (default: the daemon's gpu_preparers)")
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_THREAD_LIMIT", "1")

    from ocrwatch.config import Config
    from ocrwatch.engines import profiles
    from ocrwatch.engines.base import gpu_preparers
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.scan import deskew
    from ocrwatch.scan.prepare import ScanPrep

    max_side = profiles.get(profiles.DEFAULT).max_side
    config = Config()
    threads = args.threads or gpu_preparers(config.rotate_pages)
    with tempfile.TemporaryDirectory(prefix="ocrwatch-prep-kinds-") as tmp:
        folder = Path(tmp)
        files = make_drop(folder, *args.drop)
        if args.turned:
            files.update(turned_cards(folder, files))
        # A model engine's: no script doubt, the skew floor of a degree.
        scan = ScanPrep(config, least_skew=deskew.JUDGED_ANGLE)

        def prepare(name: str) -> list[int]:
            return [scan.prepare(page).turned
                    for page in iter_pages(folder / name, config, max_side)]

        prepare(next(iter(files)))  # Tesseract's data loaded
        cpu = {w: dict.fromkeys(KINDS, 0.0) for w in WAYS}
        pages = dict.fromkeys(KINDS, 0)
        osd_calls = {w: dict.fromkeys(KINDS, 0) for w in WAYS}
        wrong: dict[str, list[str]] = {w: [] for w in WAYS}
        per_page: dict[str, list[float]] = {f"{w} {k}": [] for w in WAYS for k in KINDS}
        with osd_counted() as calls:
            for name in files:  # each file both ways, back to back
                kind = kind_of(name)
                for index, label in enumerate(WAYS):
                    with way(bool(index)):
                        calls[0] = 0
                        started = time.process_time()
                        turns = prepare(name)
                        spent = time.process_time() - started
                    cpu[label][kind] += spent
                    per_page[f"{label} {kind}"] += [spent / len(turns)] * len(turns)
                    osd_calls[label][kind] += calls[0]
                    fed = fed_of(name)
                    wrong[label] += [f"{name}: turned {t}" for t in turns
                                     if (fed + t) % 360]
                pages[kind] += len(turns)
                print(f"{name:24} {kind:5} CPU s before {per_page['before ' + kind][-1]:.3f}"
                      f" after {per_page['after ' + kind][-1]:.3f}", flush=True)

        def whole(after: bool) -> tuple[float, float, int]:
            def count(name: str) -> int:
                return len(prepare(name))

            with way(after):
                cpu0, wall0 = time.process_time(), time.perf_counter()
                with ThreadPoolExecutor(threads) as pool:
                    done = sum(pool.map(count, files))
                return time.perf_counter() - wall0, time.process_time() - cpu0, done

        threaded = {label: whole(bool(index)) for index, label in enumerate(WAYS)}
        scan.close()

    lines = _common.header(
        "Page preparation alone per kind, the lines' check before and after", [
            f"drop: benchmarks/_drop.py's make_drop{tuple(args.drop)}"
            + (" and each card fed turned 90, 180 and 270" if args.turned else "")
            + f": {len(files)} files, {sum(pages.values())} pages; scaled to {max_side} px",
            "per page: iter_pages, then ScanPrep.prepare (a model engine's: ink, faint "
            "marks, skew, orientation); OMP_THREAD_LIMIT=1; cores: " + str(os.cpu_count()),
            "before: orient.SHEET_LINES and SIDEWAYS_LINES off, ascenders.RULES[:1] (today); "
            "after: as they are; each "
            "file both ways back to back; CPU s by time.process_time"])
    lines += ["", "One thread, per kind (pages/s = pages / CPU s: what one core prepares)", "",
              "| kind | pages | CPU s before | CPU s after | pages/s before | pages/s after "
              "| after / before | median CPU s a page before | after | OSD calls before "
              "| after |", "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|"]
    rate: Callable[[int, float], str] = lambda n, s: f"{n / s:.2f}" if s else "-"  # noqa: E731
    for kind in (*KINDS, "all"):
        n = sum(pages.values()) if kind == "all" else pages[kind]
        if not n:
            continue
        b = sum(cpu["before"].values()) if kind == "all" else cpu["before"][kind]
        a = sum(cpu["after"].values()) if kind == "all" else cpu["after"][kind]
        ob = sum(osd_calls["before"].values()) if kind == "all" else osd_calls["before"][kind]
        oa = sum(osd_calls["after"].values()) if kind == "all" else osd_calls["after"][kind]
        mb = (_common.median([v for k in KINDS for v in per_page["before " + k]])
              if kind == "all" else _common.median(per_page["before " + kind]))
        ma = (_common.median([v for k in KINDS for v in per_page["after " + k]])
              if kind == "all" else _common.median(per_page["after " + kind]))
        lines.append(f"| {kind} | {n} | {b:.2f} | {a:.2f} | {rate(n, b)} | {rate(n, a)} | "
                     f"{b / a if a else 0:.2f}x | {mb:.3f} | {ma:.3f} | {ob} | {oa} |")
    lines += ["", f"The whole drop on {threads} preparer threads (the daemon's "
              "gpu_preparers here), a file each; wall seconds on this machine, CPU seconds "
              "of the process", "",
              "| | pages | wall s | pages/s (wall) | CPU s | pages per CPU s |",
              "|---|--:|--:|--:|--:|--:|"]
    for label in WAYS:
        wall, spent, done = threaded[label]
        lines.append(f"| {label} | {done} | {wall:.2f} | {done / wall:.2f} | {spent:.2f} | "
                     f"{done / spent:.2f} |")
    for label in WAYS:
        lines.append("")
        lines.append(f"pages turned otherwise than fed, {label}: {len(wrong[label])}")
        lines += [f"- {item}" for item in wrong[label]]
    print("\n".join(lines))
    print(f"saved {_common.save('prep_kinds', lines, args.out)}")


if __name__ == "__main__":
    main()

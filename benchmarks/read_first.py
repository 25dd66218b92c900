"""Does the Tesseract engine's own reading of a page, as it lies, tell upright from turned?

ocrwatch's Tesseract path leaves the turn of a page whose lines do not tell it
(:meth:`ocrwatch.scan.orient.Detector.lines_first`) to the page's reading: a reading of
upright text (:func:`ocrwatch.scan.orient.reads_upright`) settles it without OSD; any
other has the page turned by OSD and the reading check, and read again if turned. This
benchmark feeds every page four ways, prepares it as the daemon does without the turn
(blank check, skew), and for each page its lines do not decide reads it as it lies with
the daemon's Tesseract engine and applies the rule. What must never happen: a page fed
turned whose reading passes as upright (it would be kept turned and read as noise).
What it saves: the upright pages that pass need no OSD (0.3-0.5 CPU-s each); what it
costs: a turned page is read once before it is turned.

Two sets: the held-out-style set (``benchmarks/heldout_set.py``; its "turned" class, pages
of the other classes fed turned, left out) and the orientation set (the corpus's pages in
the seven variants of ``benchmarks/orientation.py``).

    python benchmarks/read_first.py --heldout /tmp/heldout --corpus ../shared/corpus \\
        [--variants scan dpi150 ...] [--jobs 2] [--save readings.jsonl] [--out FILE]
    python benchmarks/read_first.py --load readings.jsonl  # the rule changed: no reading
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a file: the repository is the package root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _common, orientation

os.environ.setdefault("OMP_THREAD_LIMIT", "1")
TURNS = (0, 90, 180, 270)


@dataclass(frozen=True)
class Reading:
    set: str
    page: str  # file (and variant)
    fed: int
    lines: bool  # its lines decided its turn: not read first
    confidence: float = 0.0
    words: int = 0
    level: int = 0
    cpu: float = 0.0  # the reading's CPU seconds

    @property
    def upright(self) -> bool:
        """The rule's verdict (orient.reads_upright), with its thresholds as they are now."""
        from ocrwatch.scan import orient

        return not self.lines and orient.upright_counts(self.confidence, self.level, self.words)


_ENGINES: dict[str, tuple[Any, Any, Any]] = {}


def _engine(langs: str) -> tuple[Any, Any, Any]:
    from ocrwatch.config import Config
    from ocrwatch.engines.tesseract import TesseractEngine
    from ocrwatch.scan import prepare

    if langs not in _ENGINES:
        config = Config(languages=langs.split("+"), rotate_pages=False)
        _ENGINES[langs] = (config, TesseractEngine(config),
                           prepare.ScanPrep(config, scripts=True))
    return _ENGINES[langs]


def read_file(set_name: str, label: str, path: Path, langs: str) -> list[Reading]:
    """Each page of ``path`` fed four ways: decided by its lines, or read as it lies."""
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.scan import orient

    config, engine, prep = _engine(langs)
    out: list[Reading] = []
    for page in iter_pages(path, config, None):
        name = label if page.index == 0 else f"{label} p{page.index + 1}"
        for fed in TURNS:
            fed_page = replace(page, image=orient.turn(page.image, fed)) if fed else page
            made = prep.prepare(fed_page)  # blank check and skew; rotate_pages is off
            if made.blank or made.text is not None:
                continue
            if orient.Detector.by_lines(made.image) is not None:
                out.append(Reading(set_name, name, fed, lines=True))
                continue
            started = time.process_time()
            (result,) = engine.recognize([made])
            cpu = time.process_time() - started
            level, words = (orient.level_words(result.layout) if result.layout is not None
                            else (0, 0))
            out.append(Reading(set_name, name, fed, False, float(result.confidence or 0.0),
                               words, level, cpu=cpu))
    return out


def tasks(heldout: Path | None, corpus: Path | None, variants: list[str],
          work: Path) -> list[tuple[str, str, Path, str]]:
    out: list[tuple[str, str, Path, str]] = []
    if heldout is not None:
        # Its "turned" class is pages of the other classes fed turned: each page here is
        # fed four ways already, and a turned file's own way up is not known here.
        out += [("held-out-style", item.path.name, item.path, item.languages or "eng")
                for item in _common.corpus(heldout) if item.kind != "turned"]
    if corpus is not None:
        for name, src, langs in orientation.pages(_common.corpus(corpus), work):
            for variant in orientation.VARIANTS:
                if variant.name in variants:
                    path = variant.make(src, orientation.variant_stem(work, name, variant))
                    out.append(("orientation", f"{name} {variant.name}", path, langs or "eng"))
    return out


def report(readings: list[Reading]) -> list[str]:
    from ocrwatch.scan import orient

    lines = _common.header(
        "Pages read first, as they lie, by the Tesseract engine: the reading's verdict "
        "(orient.reads_upright) against the way each page was fed", [
            f"rule: {orient.READ_UPRIGHT_WORDS} level words or more (three letters or more, "
            f"box wider than tall), {orient.READ_UPRIGHT_SHARE:.0%} of the words or more, "
            f"mean word confidence {orient.READ_UPRIGHT_MEAN:g} or more",
            "each page fed four ways; blank check and skew as the daemon's; pages whose "
            "lines decide their turn are not read first (counted apart)"])
    for set_name in sorted({r.set for r in readings}, reverse=True):
        rows = [r for r in readings if r.set == set_name]
        read = [r for r in rows if not r.lines]
        up = [r for r in read if r.fed == 0]
        turned = [r for r in read if r.fed]
        passed = [r for r in up if r.upright]
        wrong = [r for r in turned if r.upright]
        lines += ["", f"## {set_name}: {len(rows)} pages fed ({len(rows) // 4 if rows else 0} "
                  "pages, four ways)", "",
                  f"- decided by their lines: {sum(r.lines for r in rows)}; read first: "
                  f"{len(read)} ({len(up)} upright, {len(turned)} turned)",
                  f"- upright pages read as upright text (no OSD): **{len(passed)} of "
                  f"{len(up)}**; the others go on to OSD as before",
                  f"- turned pages read as upright text (would stay turned): "
                  f"**{len(wrong)} of {len(turned)}**" + (
                      ": " + ", ".join(f"{r.page} fed {r.fed}" for r in wrong) if wrong else "")]
        for label, group in (("upright, passed", passed),
                             ("upright, not passed", [r for r in up if not r.upright]),
                             ("upside down", [r for r in turned if r.fed == 180]),
                             ("sideways", [r for r in turned if r.fed in (90, 270)])):
            if not group:
                continue
            conf = sorted(r.confidence for r in group)
            share = sorted(r.level / r.words if r.words else 0.0 for r in group)
            lines.append(f"- {label} ({len(group)}): mean confidence {conf[0]:.0f}-"
                         f"{conf[-1]:.0f} (median {_common.median(conf):.0f}); level share "
                         f"{share[0]:.2f}-{share[-1]:.2f}")
        near = sorted((r for r in turned if r.confidence >= orient.READ_UPRIGHT_MEAN - 20
                       and r.level >= orient.READ_UPRIGHT_WORDS), key=lambda r: -r.confidence)
        if near:
            lines.append("- turned pages nearest the rule (confidence within 20 of it, "
                         "enough level words): " + ", ".join(
                             f"{r.page} fed {r.fed} ({r.confidence:.0f}, "
                             f"{r.level}/{r.words} level)" for r in near[:6]))
        wasted = sum(r.cpu for r in turned)
        lines.append(f"- CPU of the first readings of turned pages (spent before their "
                     f"turn): {wasted:.1f} s, {wasted / max(1, len(turned)):.2f} s a page")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heldout", type=Path, default=None, metavar="DIR")
    parser.add_argument("--corpus", type=Path, default=None, metavar="DIR")
    parser.add_argument("--variants", nargs="+",
                        default=[v.name for v in orientation.VARIANTS])
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, metavar="FILE")
    parser.add_argument("--save", type=Path, default=None, metavar="JSONL",
                        help="keep each reading's figures, to judge them again with --load")
    parser.add_argument("--load", type=Path, default=None, metavar="JSONL",
                        help="judge saved readings with the rule as it is now: no reading")
    args = parser.parse_args(argv)
    if args.load is not None:
        readings = [Reading(**json.loads(line))
                    for line in args.load.read_text(encoding="utf-8").splitlines() if line]
        lines = report(readings)
        print("\n".join(lines))
        print(f"written: {_common.save('read_first.txt', lines, args.out)}")
        return
    if args.heldout is None and args.corpus is None:
        parser.error("give --heldout, --corpus or both")
    readings = []
    with tempfile.TemporaryDirectory(prefix="ocrwatch-readfirst-") as tmp:
        work = tasks(args.heldout, args.corpus, args.variants, Path(tmp))
        with ProcessPoolExecutor(max_workers=args.jobs) as pool:
            for done in pool.map(read_file, *zip(*work, strict=True)):
                readings += done
                for r in done:
                    if not r.lines:
                        print(f"{r.set:<15} {r.page:<40} fed {r.fed:3d} conf "
                              f"{r.confidence:5.1f} level {r.level:4d}/{r.words:<4d} "
                              f"{'upright' if r.upright else '-'}", flush=True)
    if args.save is not None:
        args.save.write_text("".join(json.dumps(asdict(r)) + "\n" for r in readings),
                             encoding="utf-8")
    lines = report(readings)
    print("\n".join(lines))
    print(f"written: {_common.save('read_first.txt', lines, args.out)}")


if __name__ == "__main__":
    main()

"""Whether a file that needs no OCR waits behind scans: time to its result when dropped
just after N scan pages, next to the time for all the scans.

    python3 benchmarks/fairness.py [--corpus ../shared/corpus] [--scans 6] [--repeat 2]
                                   [--out benchmarks/results/fairness.txt]

A daemon in this process (the real Tesseract engine, a real inbox watched with inotify,
a real SQLite index) is given N scanned pages of the corpus at once, then, 0.2 s later,
a one-page born-digital PDF (its own text is taken, no OCR). Timed from each drop to its
job being ``done``. Two claim orders in the same run: first in, first out (what the queue
did before: ``jobs.BYTES_A_SECOND`` set to 0 makes the size count nothing) and the
cost-aware order (a second of age per ``BYTES_A_SECOND`` of size). The passing lane
(scheduler.py) is in both. Medians over ``--repeat`` runs, each on a fresh index.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ocrwatch.config import Config  # noqa: E402
from ocrwatch.daemon import Daemon  # noqa: E402
from ocrwatch.store import jobs as jobs_mod  # noqa: E402
from tests.reliability.attack_files import raw_pdf  # noqa: E402

LETTER = (b"BT /F1 11 Tf 72 720 Td 14 TL (Dear Ms Martin,) ' "
          b"(thank you for your letter of the third; the invoice is attached.) ' "
          b"(Yours sincerely, J. Smith) ' ET")


def one_run(corpus: list[Path], scans: int, cost_aware: bool) -> tuple[float, float]:
    """(seconds to the born-digital file's result, seconds to the last scan's)."""
    saved = jobs_mod.BYTES_A_SECOND
    jobs_mod.BYTES_A_SECOND = saved if cost_aware else 0  # / 0 is NULL in SQLite: by id
    work = Path(tempfile.mkdtemp(prefix="fairness-"))
    try:
        inbox, staging = work / "inbox", work / "staging"
        inbox.mkdir()
        staging.mkdir()
        names = []
        for n in range(scans):
            source = corpus[n % len(corpus)]
            name = f"scan_{n:02d}{source.suffix}"
            # Each a page of its own: the same bytes would be read once.
            shutil.copy(source, staging / name)
            with (staging / name).open("ab") as fh:
                fh.write(b"\0" * (n + 1))
            names.append(name)
        (staging / "letter.pdf").write_bytes(raw_pdf(LETTER))
        config = Config(inbox=[inbox], database=work / "index.sqlite3", engine="tesseract",
                        settle_seconds=0.3, languages=["eng"], outputs=["md", "txt"],
                        cache_dir=work / "cache")
        with Daemon(config) as daemon:
            began = time.monotonic()
            for name in names:
                (staging / name).rename(inbox / name)
            time.sleep(0.2)
            (staging / "letter.pdf").rename(inbox / "letter.pdf")
            letter_dropped = time.monotonic()
            letter = last = None
            while last is None:
                states = {p.name: (j.state.value if (j := daemon.jobs.known(p)) else None)
                          for p in inbox.iterdir() if p.suffix in (".jpg", ".tif", ".pdf")}
                if letter is None and states.get("letter.pdf") in ("done", "failed"):
                    assert states["letter.pdf"] == "done", "the letter was not read"
                    letter = time.monotonic() - letter_dropped
                if all(states.get(n) in ("done", "failed") for n in names):
                    last = time.monotonic() - began
                time.sleep(0.05)
            while letter is None:
                job = daemon.jobs.known(inbox / "letter.pdf")
                if job is not None and job.state.value == "done":
                    letter = time.monotonic() - letter_dropped
                time.sleep(0.05)
        return letter, last
    finally:
        jobs_mod.BYTES_A_SECOND = saved
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--scans", type=int, default=6)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    corpus = sorted(p for p in args.corpus.iterdir() if p.suffix in (".jpg", ".tif"))
    rows = []
    for label, cost_aware in (("first in, first out", False), ("cost-aware", True)):
        runs = [one_run(corpus, args.scans, cost_aware) for _ in range(args.repeat)]
        letter = statistics.median(r[0] for r in runs)
        scans = statistics.median(r[1] for r in runs)
        rows.append(f"| {label} | {letter:.1f} | {scans:.1f} |")
        print(rows[-1], flush=True)
    text = "\n".join([
        f"# fairness: a born-digital one-page PDF dropped 0.2 s after {args.scans} scanned "
        f"pages (corpus JPEG/TIFF), Tesseract engine, medians of {args.repeat} runs",
        "| claim order | born-digital result, s after its drop | all scans, s |",
        "|---|---|---|", *rows, ""])
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

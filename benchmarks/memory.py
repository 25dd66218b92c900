"""Peak memory to read one file, per page kind, next to OCRmyPDF.

    python3 benchmarks/memory.py [--corpus ../shared/corpus] [--repeat 5]
                                 [--out benchmarks/results/memory.txt]

Each run is a fresh process tree: ``ocrwatch add --engine tesseract`` (its own index, the
outputs it writes by default, pages turned upright as by default) and ``ocrmypdf -l eng``
(a searchable PDF; ``--image-dpi 300`` for images without a resolution), without and with
``--rotate-pages`` (what ocrwatch's default does), and, for images, the plain
``tesseract FILE stdout -l eng`` command: the floor of what reading the page costs. The
peak is the largest sum of RSS over the process and all its children, sampled every
20 ms with psutil (a child that lives less than that may be missed). The commands of a
kind take turns within each round (their order reversed every other round), so that the
machine's load drifts onto all of them alike. Medians over ``--repeat`` rounds; the ratio
is ocrwatch's median over OCRmyPDF's; every run's figure is printed too.

Then, per kind, where ocrwatch's peak comes from (``--where`` runs, 0 to skip): ``ocrwatch
add`` runs in a process of its own with a thread that reads its RSS every 2 ms and what
each thread is doing (its innermost ocrwatch frame, named as a stage: start-up, decoding
or drawing the page, the blank check, deskew, OSD, the thumbnail, the reader's layout,
enlargement and recognition, the outputs). Each rise or fall of RSS is put to the stages
running at that moment (shared equally when several are), up to the peak: the stages'
shares add up to the peak; the stages running at the peak are named.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import psutil

ROOT = Path(__file__).resolve().parents[1]


def tree_peak(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[int, float]:
    """(peak RSS of the whole tree in MB, seconds) of running ``argv``."""
    began = time.monotonic()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    top = psutil.Process(proc.pid)
    peak = 0
    while proc.poll() is None:
        total = 0
        with contextlib.suppress(psutil.Error):  # a child that ended meanwhile
            for member in [top, *top.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    total += member.memory_info().rss
        peak = max(peak, total)
        time.sleep(0.02)
    if proc.returncode != 0:
        raise RuntimeError(f"{argv[:3]} exited with {proc.returncode}")
    return peak // (1 << 20), time.monotonic() - began


def _add_args(path: Path, work: Path) -> tuple[dict[str, str], list[str]]:
    """A home of its own in ``work`` with ``path`` copied into its inbox: the environment
    and the arguments of ``ocrwatch add`` reading it with Tesseract."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OCRWATCH_", "XDG_"))}
    env.update({"HOME": str(work / "home"), "XDG_RUNTIME_DIR": str(work / "run"),
                "PYTHONPATH": str(ROOT)})
    (work / "run").mkdir(mode=0o700)
    inbox = work / "inbox"
    inbox.mkdir()
    shutil.copy(path, inbox / path.name)
    return env, ["add", "--engine", "tesseract", "--database", str(work / "index.sqlite3"),
                 "--inbox", str(inbox), str(inbox / path.name)]


def ocrwatch_run(path: Path, work: Path) -> tuple[int, float]:
    env, args = _add_args(path, work)
    return tree_peak([sys.executable, "-m", "ocrwatch", *args], env, work)


def ocrmypdf_run(path: Path, work: Path, rotate: bool = False) -> tuple[int, float]:
    ocrmypdf = Path(sys.executable).with_name("ocrmypdf")
    argv = [str(ocrmypdf), "-q", "-l", "eng", "--output-type", "pdf",
            *(["--rotate-pages"] if rotate else [])]
    if path.suffix.lower() != ".pdf":
        argv += ["--image-dpi", "300"]
    return tree_peak([*argv, str(path), str(work / "out.pdf")], dict(os.environ), work)


def tesseract_run(path: Path, work: Path) -> tuple[int, float]:
    env = dict(os.environ, OMP_THREAD_LIMIT="1")
    return tree_peak(["tesseract", str(path), "stdout", "-l", "eng"], env, work)


def _version(argv: list[str]) -> str:
    """The first line ``argv`` prints, named by its program; "?" when it cannot run."""
    try:
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return f"{Path(argv[0]).name} ?"
    first = (out.stdout or out.stderr).strip().splitlines()
    line = first[0] if first else "?"
    return line if line.lower().startswith(Path(argv[0]).name.lower()) else (
        f"{Path(argv[0]).name} {line}")


# The stage a thread is in, by its innermost frame in ocrwatch: (file, function) -> name,
# the function "" for any in that file. The first match from the innermost frame wins.
STAGES: dict[tuple[str, str], str] = {
    ("engines/tesseract.py", "_api"): "reader: Tesseract loaded",
    ("engines/tesseract.py", "line_height"): "reader: layout (text size)",
    ("engines/tesseract.py", "_reading"): "reader: recognition",
    ("engines/tesseract.py", "_read"): "reader: enlargement",
    ("engines/tesseract.py", ""): "reader: other",
    ("scan/osd.py", "__init__"): "OSD loaded",
    ("scan/orient.py", "_api"): "OSD loaded",
    ("scan/osd.py", ""): "OSD",
    ("scan/orient.py", ""): "OSD",
    ("scan/deskew.py", ""): "deskew",
    ("scan/inkcover.py", ""): "blank check",
    ("scan/faint.py", ""): "blank check",
    ("scan/", ""): "preparing: other",
    ("pages/thumbs.py", ""): "thumbnail",
    ("pages/pdfdraw.py", ""): "decoding / drawing",
    ("pages/pdfpages.py", ""): "decoding / drawing",
    ("pages/pdftext.py", ""): "decoding / drawing",
    ("pages/decode.py", ""): "decoding / drawing",
    ("pages/image.py", ""): "decoding / drawing",
    ("pages/memory.py", ""): "freeing",
    ("results/", ""): "outputs",
    ("outcome.py", ""): "outputs",
}


def stage_of(frame: object) -> str | None:
    """The stage ``frame``'s thread is in, or None where it does no page work."""
    import traceback
    from types import FrameType

    assert isinstance(frame, FrameType)
    for entry in reversed(traceback.extract_stack(frame)):
        where = entry.filename.replace(os.sep, "/")
        if "/ocrwatch/" not in where:
            continue
        inside = where.rsplit("/ocrwatch/", 1)[1]
        for (file, function), name in STAGES.items():
            if inside.startswith(file) and function in ("", entry.name):
                return name
    return None


def where_child(out: Path, argv: list[str]) -> None:
    """Run ocrwatch's command line in this process, its RSS and stages sampled; write
    what built the peak to ``out`` (JSON)."""
    import json
    import runpy
    import threading

    page = os.sysconf("SC_PAGE_SIZE")

    def rss() -> int:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * page

    shares: dict[str, float] = {}
    state: dict[str, object] = {"peak": 0, "at_peak": [], "shares": {}}
    me = threading.get_ident()
    stop = threading.Event()

    def sample() -> None:
        last = 0
        while not stop.is_set():
            now = rss()
            active = [stage_of(f) for t, f in sys._current_frames().items() if t != me]
            named = [a for a in active if a] or ["start-up (imports, index, threads)"]
            for name in named:
                shares[name] = shares.get(name, 0.0) + (now - last) / len(named)
            last = now
            if now > int(state["peak"]):  # type: ignore[call-overload]
                state.update(peak=now, at_peak=sorted(set(named)), shares=dict(shares))
            time.sleep(0.002)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    sys.argv = ["ocrwatch", *argv]
    try:
        runpy.run_module("ocrwatch", run_name="__main__")
    except SystemExit:
        pass
    finally:
        stop.set()
        thread.join()
        out.write_text(json.dumps(state))


def where_run(path: Path, work: Path) -> dict[str, object]:
    """What built ocrwatch's peak on ``path`` (see :func:`where_child`)."""
    import json

    env, args = _add_args(path, work)
    report = work / "where.json"
    subprocess.run([sys.executable, str(Path(__file__).resolve()), "--where-child",
                    str(report), "--", *args], env=env, cwd=work, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    found: dict[str, object] = json.loads(report.read_text())
    return found


def _where_table(kind: str, runs: list[dict[str, object]]) -> list[str]:
    """The run with the median peak, its stages' shares of the peak largest first."""
    runs = sorted(runs, key=lambda r: int(r["peak"]))  # type: ignore[call-overload]
    chosen = runs[len(runs) // 2]
    shares: dict[str, float] = chosen["shares"]  # type: ignore[assignment]
    peak = int(chosen["peak"]) >> 20  # type: ignore[call-overload]
    at_peak = ", ".join(chosen["at_peak"])  # type: ignore[arg-type]
    rows = [f"### {kind}: peak {peak} MB (the median of {len(runs)} runs: "
            f"{', '.join(str(int(r['peak']) >> 20) for r in runs)} MB); "  # type: ignore[call-overload]
            f"running at the peak: {at_peak}",
            "| stage | MB of the peak |", "|---|--:|"]
    for name, value in sorted(shares.items(), key=lambda kv: -kv[1]):
        if abs(value) >= 0.5 * (1 << 20):
            rows.append(f"| {name} | {value / (1 << 20):.0f} |")
    return rows


def _load() -> str:
    return " ".join(f"{v:.1f}" for v in os.getloadavg())


T = TypeVar("T")


def _in_scratch(run: Callable[[Path, Path], T], path: Path) -> T:
    """``run(path, work)`` in a scratch folder of its own, removed after."""
    work = Path(tempfile.mkdtemp(prefix="memory-"))
    try:
        return run(path, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def measure_kind(kind: str, path: Path, repeat: int,
                 where: int) -> tuple[str, str, list[str]]:
    """One page kind: its table row, every run's figure, and the table of where
    ocrwatch's peak comes from (empty when ``where`` is 0); each printed as it comes."""
    figures: dict[str, list[tuple[int, float]]] = {"ocrwatch": [], "OCRmyPDF": [],
                                                   "rotating": [], "tesseract": []}
    runs = [("ocrwatch", ocrwatch_run), ("OCRmyPDF", ocrmypdf_run),
            ("rotating", lambda p, w: ocrmypdf_run(p, w, rotate=True))]
    if path.suffix != ".pdf" and shutil.which("tesseract"):
        runs.append(("tesseract", tesseract_run))
    for round_ in range(repeat):
        # Reversed every other round: a drift in the machine's load meets all alike.
        for label, run in (runs if round_ % 2 == 0 else runs[::-1]):
            figures[label].append(_in_scratch(run, path))
    mine = statistics.median(f[0] for f in figures["ocrwatch"])
    theirs = statistics.median(f[0] for f in figures["OCRmyPDF"])
    secs = [statistics.median(f[1] for f in figures[k]) for k in ("ocrwatch", "OCRmyPDF")]
    rotating = statistics.median(f[0] for f in figures["rotating"])
    plain = (f"{statistics.median(f[0] for f in figures['tesseract']):.0f}"
             if figures["tesseract"] else "-")
    row = (f"| {kind} | {mine:.0f} | {theirs:.0f} | {mine / theirs:.2f} | "
           f"{rotating:.0f} | {mine / rotating:.2f} | {plain} | {secs[0]:.1f} | "
           f"{secs[1]:.1f} |")
    spread = f"- {kind}: " + "; ".join(
        f"{label} {', '.join(str(f[0]) for f in figures[label])}" for label, _run in runs)
    print(row, flush=True)
    found = [_in_scratch(where_run, path) for _ in range(where)]
    table = _where_table(kind, found) if found else []
    if table:
        print("\n".join(table), flush=True)
    return row, spread, table


def report(corpus: Path, repeat: int, rows: list[str], spreads: list[str], wheres: list[str],
           load_before: str, began: float) -> str:
    """The results file: how it was obtained, the table, every run's figure, and where
    ocrwatch's peaks come from."""
    from benchmarks import _common

    commit = _version(["git", "-C", str(ROOT), "describe", "--always", "--dirty"])[4:]
    text = "\n".join([
        *_common.header(
            f"peak RSS of the whole process tree (psutil, 20 ms samples), medians of "
            f"{repeat} runs; Tesseract, English",
            [f"ocrwatch at {commit}, "
             f"{_version([str(Path(sys.executable).with_name('ocrmypdf')), '--version'])}, "
             f"{_version(['tesseract', '--version'])}; "
             f"corpus {os.path.relpath(corpus, ROOT)}",
             f"the commands of a kind take turns in each round, in reverse order every other "
             f"round; load average {load_before} before, {_load()} after "
             f"({time.monotonic() - began:.0f} s; a machine shared with other work)"]),
        "ocrwatch turns pages upright by default (rotate_pages, Tesseract's OSD); OCRmyPDF "
        "does with --rotate-pages",
        "| page kind | ocrwatch add, MB | OCRmyPDF, MB | ratio | OCRmyPDF --rotate-pages, "
        "MB | ratio | plain tesseract, MB | ocrwatch s | OCRmyPDF s |",
        "|---|---|---|---|---|---|---|---|---|", *rows, "",
        "every run's peak, MB, in the order run (rotating: OCRmyPDF --rotate-pages):",
        *spreads,
        *(["", "## where ocrwatch's peak comes from (RSS sampled every 2 ms in its "
           "process; each rise or fall put to the stages running then, up to the peak)",
           *wheres] if wheres else []),
        ""])
    return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=ROOT.parent / "shared" / "corpus")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--where", type=int, default=3,
                        help="runs per kind to find where the peak comes from (0: none)")
    parser.add_argument("--kinds", nargs="*", help="only these kinds (jpeg, tiff, pdf)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--where-child", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.where_child:
        where_child(args.where_child, args.rest)
        return 0
    kinds = {"one-page JPEG scan": ("jpeg", "ehri_eng_03.jpg"),
             "one-page TIFF scan": ("tiff", "ocrd_deu_00.tif"),
             "4-page scanned PDF": ("pdf", "ehri_eng_multipage_4p.pdf")}
    kinds = {k: v for k, v in kinds.items() if not args.kinds or v[0] in args.kinds}

    load_before = _load()
    began = time.monotonic()
    rows, spreads, wheres = [], [], []
    for kind, (_short, name) in kinds.items():
        row, spread, table = measure_kind(kind, (args.corpus / name).resolve(), args.repeat,
                                          args.where)
        rows.append(row)
        spreads.append(spread)
        if table:
            wheres += ["", *table]
    text = report(args.corpus, args.repeat, rows, spreads, wheres, load_before, began)
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""What the benchmark scripts share: text metrics, corpus reading, the machine header."""

from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import unicodedata
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
_SPACE = re.compile(r"\s+")
_WORD = re.compile(r"\w+")


# -- text metrics -------------------------------------------------------------------
def normalize(text: str) -> str:
    """NFKC, then every run of whitespace (newlines and form feeds too) as one space."""
    return _SPACE.sub(" ", unicodedata.normalize("NFKC", text)).strip()


def levenshtein(a: str, b: str) -> int:
    """Exact edit distance (insert, delete, substitute: cost 1 each).

    Hyyrö's bit-vector form of the textbook dynamic programme: one column of the
    DP table is one Python integer, so a 9,000-character page costs 9,000 big-integer
    steps instead of 81 million cell updates, in memory linear in the shorter text.
    """
    # A shared head and tail never add edits; cutting them saves work.
    start = 0
    while start < len(a) and start < len(b) and a[start] == b[start]:
        start += 1
    a, b = a[start:], b[start:]
    end = 0
    while end < len(a) and end < len(b) and a[-1 - end] == b[-1 - end]:
        end += 1
    if end:
        a, b = a[:-end], b[:-end]
    if len(a) < len(b):
        a, b = b, a
    m = len(b)
    if m == 0:
        return len(a)
    peq: dict[str, int] = {}
    for i, ch in enumerate(b):
        peq[ch] = peq.get(ch, 0) | (1 << i)
    full = (1 << m) - 1
    last = 1 << (m - 1)
    vp, vn, dist = full, 0, m
    for ch in a:
        x = peq.get(ch, 0)
        d0 = (((x & vp) + vp) ^ vp) | x | vn
        hp = vn | (~(d0 | vp) & full)
        hn = d0 & vp
        if hp & last:
            dist += 1
        elif hn & last:
            dist -= 1
        hp = ((hp << 1) | 1) & full  # row 0 of the table grows by one per column
        hn = (hn << 1) & full
        vp = hn | (~(d0 | hp) & full)
        vn = hp & d0
    return dist


def levenshtein_dp(a: str, b: str) -> int:
    """The plain O(len(a)*len(b)) programme with two rows; the reference for tests."""
    if len(a) < len(b):
        a, b = b, a
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def words(text: str) -> list[str]:
    """Words as the search index sees them: letters and digits, case folded."""
    return _WORD.findall(unicodedata.normalize("NFKC", text).casefold())


def word_recall(reference: str, hypothesis: str) -> tuple[int, int]:
    """(reference words found in the output, reference words), counted as multisets.

    Bag-of-words, so a table read row by row or column by column scores the same.
    """
    ref = Counter(words(reference))
    hyp = Counter(words(hypothesis))
    found = sum(min(n, hyp[w]) for w, n in ref.items())
    return found, sum(ref.values())


@dataclass(frozen=True)
class Score:
    edits: int
    ref_chars: int
    words_found: int
    ref_words: int

    @property
    def cer(self) -> float:
        return self.edits / self.ref_chars if self.ref_chars else float(self.edits > 0)

    @property
    def recall(self) -> float:
        return self.words_found / self.ref_words if self.ref_words else 1.0

    def __add__(self, other: Score) -> Score:
        return Score(self.edits + other.edits, self.ref_chars + other.ref_chars,
                     self.words_found + other.words_found, self.ref_words + other.ref_words)


def score(reference: str, hypothesis: str) -> Score:
    ref, hyp = normalize(reference), normalize(hypothesis)
    found, total = word_recall(reference, hypothesis)
    return Score(levenshtein(ref, hyp), len(ref), found, total)


# -- the corpus ---------------------------------------------------------------------
@dataclass(frozen=True)
class Item:
    path: Path
    truth: Path
    languages: str | None  # Tesseract's "eng+deu" form, from manifest.tsv when listed
    kind: str


@dataclass(frozen=True)
class Reader:
    """What reads one corpus item as the daemon does: its languages, the config, the
    Tesseract engine and the page preparation, and the item's ground truth."""

    languages: str
    config: Any  # ocrwatch.config.Config
    engine: Any  # ocrwatch.engines.tesseract.TesseractEngine
    prep: Any  # ocrwatch.scan.prepare.ScanPrep
    truth: str


@contextmanager
def reader(item: Item) -> Iterator[Reader]:
    """A :class:`Reader` for ``item``, closed on leaving."""
    from ocrwatch.config import Config
    from ocrwatch.engines.tesseract import TesseractEngine
    from ocrwatch.scan.prepare import ScanPrep

    languages = item.languages or "eng"
    config = Config(languages=languages.split("+"))
    engine, prep = TesseractEngine(config), ScanPrep(config)
    try:
        yield Reader(languages, config, engine, prep, item.truth.read_text(encoding="utf-8"))
    finally:
        prep.close()
        engine.close()


def corpus(folder: Path) -> list[Item]:
    """Every ``X.ext`` with an ``X.gt.txt`` beside it, with manifest.tsv's facts if any."""
    manifest: dict[str, dict[str, str]] = {}
    tsv = folder / "manifest.tsv"
    if tsv.is_file():
        lines = tsv.read_text(encoding="utf-8").splitlines()
        head = lines[0].split("\t")
        for line in lines[1:]:
            if line.strip():
                row = dict(zip(head, line.split("\t"), strict=False))
                manifest[row.get("file", "")] = row
    items = []
    for path in sorted(folder.iterdir()):
        if path.name.endswith(".gt.txt") or path.suffix.lower() in (".txt", ".md", ".tsv"):
            continue
        truth = path.with_name(path.name[: -len(path.suffix)] + ".gt.txt")
        if not path.is_file() or not truth.is_file():
            continue
        row = manifest.get(path.name, {})
        items.append(Item(path, truth, row.get("language") or None, row.get("kind", "")))
    return items


# -- reporting ----------------------------------------------------------------------
def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def tesseract_cli_version() -> str:
    try:
        out = subprocess.run(["tesseract", "--version"], capture_output=True, text=True,
                             check=False, timeout=30)
    except OSError:
        return "not installed"
    first = (out.stdout or out.stderr).splitlines()
    return first[0].strip() if first else "unknown"


def _relative(path: str) -> str:
    """``path`` relative to the repository when it lies in it (``python -m`` gives the
    script's absolute path): results name no machine's own folders."""
    try:
        return str(Path(path).resolve().relative_to(RESULTS.parent.parent))
    except ValueError:
        return path


def header(title: str, extra: Sequence[str] = ()) -> list[str]:
    """How the figures were obtained: machine, versions, date, command line."""
    from ocrwatch import __version__

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    lines = [
        f"# {title}",
        f"# date:     {_dt.datetime.now().astimezone().isoformat(timespec='seconds')}",
        f"# machine:  {_cpu_model()}, {cores} cores usable, {platform.system()} "
        f"{platform.release()}",
        f"# python:   {platform.python_version()}, ocrwatch {__version__}",
        "# command:  " + shlex.join([Path(sys.executable).name, _relative(sys.argv[0]),
                                     *sys.argv[1:]]),
    ]
    lines += [f"# {line}" for line in extra]
    return lines


def median(values: Sequence[float]) -> float:
    return statistics.median(values) if values else float("nan")


def save(name: str, lines: Sequence[str], out: Path | None = None) -> Path:
    target = out or RESULTS / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


_LINE_END_HYPHEN = re.compile(r"(\w)-[ \t]*\n\s*(?=\w)")


def joined_hyphens(text: str) -> str:
    """``text`` with each word hyphenated at a line's end joined ("Fontai-" / "nel" ->
    "Fontainel"), as ``pdftotext``'s default mode joins it whatever the PDF: scoring the
    .txt so too separates what the text layer's geometry costs from what that reader does."""
    return _LINE_END_HYPHEN.sub(r"\1", text)


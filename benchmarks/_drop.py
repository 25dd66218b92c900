"""The GPU benchmarks' drop, and the real daemon run over it.

benchmarks/gpu_daemon.py (the embedded engine) and benchmarks/gpu_remote.py (the remote
engine) drop the same files into a real ``ocrwatch run`` and time it the same way: a
warm-up file of its own first, then every file moved into the inbox at once, timed from
the drop to the last sidecar.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


# Words of a business letter: real words give the preparation's orientation and reading
# checks what a scanner's page gives them (bars of ink sent every page to the four-way
# reading check, where a real page is decided at once).
WORDS = ("the", "invoice", "of", "March", "was", "paid", "in", "full", "and", "we",
         "thank", "you", "for", "your", "order", "please", "find", "enclosed", "a", "copy",
         "delivery", "note", "account", "number", "balance", "due", "on", "receipt",
         "kind", "regards", "customer", "service", "office", "meeting", "report", "with")


def text_page(width: int, height: int, seed: int) -> Any:
    """A page of dark lines of words on white: what a scanner gives, compressed alike."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(image)
    line = max(12, height // 60)
    font = ImageFont.load_default(size=line)
    space = draw.textlength(" ", font=font)
    y = line * 3
    n = seed
    while y < height - line * 3:
        x = float(width // 12)
        while True:
            n = (n * 1103515245 + 12345) & 0x7FFFFFFF
            word = WORDS[n % len(WORDS)]
            advance = draw.textlength(word, font=font)
            if x + advance > width - width // 12:
                break
            draw.text((x, y), word, font=font, fill=(20, 20, 20))
            x += advance + space
        y += line * 2
    return image


def make_drop(folder: Path, a4: int = 24, cards: int = 24, pdfs: int = 4,
              pdf_pages: int = 4, *, prefix: str = "", seed: int = 0) -> dict[str, int]:
    """Write the drop into ``folder``; returns each file's name and page count. Drops of
    another ``seed`` hold other pages (none a duplicate the daemon would not read)."""
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    files: dict[str, int] = {}
    for i in range(a4):  # A4 at 300 dpi
        name = f"{prefix}a4_{i:02d}.jpg"
        text_page(2480, 3508, seed + i).save(folder / name, quality=85, dpi=(300, 300))
        files[name] = 1
    for i in range(cards):  # a business card photographed: a card on a darker table
        name = f"{prefix}card_{i:02d}.jpg"
        photo = Image.new("RGB", (1200, 900), (90, 80, 70))
        photo.paste(text_page(1000, 600, seed + 1000 + i), (100, 150))
        photo.save(folder / name, quality=85)
        files[name] = 1
    for i in range(pdfs):
        name = f"{prefix}doc_{i}.pdf"
        pages = [text_page(2480, 3508, seed + 2000 + 10 * i + j) for j in range(pdf_pages)]
        pages[0].save(folder / name, "PDF", resolution=300, save_all=True,
                      append_images=pages[1:])
        files[name] = pdf_pages
    return files


def drop_counts(text: str) -> tuple[int, int, int]:
    """``--drop``'s or ``--warm``'s "A4,CARDS,PDFS" as make_drop's counts."""
    a4, cards, pdfs = (int(x) for x in text.split(","))
    return a4, cards, pdfs


def vllm_lines(model: str, tokens: int) -> list[str]:
    """A benchmark daemon's config lines for the vLLM engine: the model shape with random
    weights, every page writing exactly ``tokens`` tokens."""
    return ['engine = "vllm"', "[vllm]", f"model = {json.dumps(model)}",
            'load_format = "dummy"', f"max_tokens = {tokens}", "ignore_eos = true"]


def toml_list(values: Sequence[str]) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def daemon_env(home: Path, work: Path) -> dict[str, str]:
    """The environment of a benchmark's `ocrwatch run`: no OCRWATCH_ or XDG_ settings of
    the user's, its XDG folders (its cache of page thumbnails too) under ``home``, its
    socket under ``work/run``, this checkout first on the path, no display. vLLM's compile
    cache stays the user's, so that a benchmark's engine starts as the user's would."""
    user_cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OCRWATCH_", "XDG_"))}
    env["VLLM_CACHE_ROOT"] = os.environ.get("VLLM_CACHE_ROOT") or str(user_cache / "vllm")
    env["OCRWATCH_TESTING"] = "1"  # the benchmark switches of its config (ignore_eos)
    env.update({"XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_DATA_HOME": str(home / ".local/share"),
                "XDG_STATE_HOME": str(home / ".local/state"),
                "XDG_CACHE_HOME": str(home / ".cache"),
                "XDG_RUNTIME_DIR": str(work / "run"),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                            os.environ.get("PYTHONPATH")]))})
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    return env


class Scraper:
    """The daemon's ``/metrics`` every ``every`` seconds while the drop is read: for each
    series whose name starts with ``prefix``, the most it showed, the last value, and in
    how many scrapes it was there; the scrape that showed the most requests running is
    kept whole (``busiest``); and the engine's fill, scrape by scrape (``fill``: seconds
    since the scraping began, requests running, requests waiting), which shows how soon
    the drop's pages took the engine's places."""

    def __init__(self, url: str, prefix: str = "ocrwatch_vllm_", every: float = 0.25) -> None:
        import threading

        self.url, self.prefix, self.every = url, prefix, every
        self.fill: list[tuple[float, float, float]] = []
        self._began = time.monotonic()
        self.scrapes = 0
        self.failed = 0
        self.most: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.seen: dict[str, int] = {}
        self.busiest = ""
        self._busiest_running = -1.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="metrics-scraper", daemon=True)

    def __enter__(self) -> Scraper:
        self._began = time.monotonic()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        import urllib.request

        from prometheus_client.parser import text_string_to_metric_families

        while not self._stop.wait(self.every):
            try:
                with urllib.request.urlopen(self.url, timeout=5) as resp:
                    text = resp.read().decode()
            except (OSError, ValueError):
                self.failed += 1
                continue
            self.scrapes += 1
            running = waiting = 0.0
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    if not sample.name.startswith(self.prefix):
                        continue
                    labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                    key = f"{sample.name}{{{labels}}}" if labels else sample.name
                    self.most[key] = max(self.most.get(key, sample.value), sample.value)
                    self.last[key] = sample.value
                    self.seen[key] = self.seen.get(key, 0) + 1
                    if sample.name == self.prefix + "requests_running":
                        running = sample.value
                    elif sample.name == self.prefix + "requests_waiting":
                        waiting = sample.value
            self.fill.append((round(time.monotonic() - self._began, 2), running, waiting))
            if running > self._busiest_running:
                self._busiest_running, self.busiest = running, text

    def summary(self) -> dict[str, Any]:
        return {"scrapes": self.scrapes, "failed": self.failed, "most": self.most,
                "last": self.last, "seen": self.seen, "every": self.every, "fill": self.fill}


def run_daemon_on_drop(engine: Sequence[str], folder: Path, files: dict[str, int], work: Path,
                       settle: float, sampler: Any, timeout: float,
                       idle_mark: str | None = None,
                       warm: tuple[int, int, int] = (1, 0, 0),
                       metrics_port: int | None = None,
                       timeline: bool = False) -> dict[str, Any]:
    """`ocrwatch run` with the config lines ``engine`` (the engine's keys and section).

    Its HOME stays the user's (vLLM's compile cache lives there); its XDG folders, socket
    and database are under ``work``, and its log is ``work/daemon.log``. With
    ``idle_mark``, once the drop is read the run waits for that line in the log (the
    engine ending on idle), then drops one more A4 page and times it to its sidecar: the
    first page after an idle stop, engine start included. ``warm`` (A4 pages, cards,
    PDFs) is the warm-up drop read before the clock starts: pages of each size the drop
    holds meet a warm engine, as in a daemon that has been reading for a while. With
    ``metrics_port`` the daemon serves its metrics there and :class:`Scraper` reads them
    twice a second while the drop is read (``metrics`` in the result; the busiest scrape
    in ``work/metrics_in_flight.txt``). With ``timeline`` the daemon logs at DEBUG and
    ``timeline`` in the result is :func:`page_timeline` of the drop's pages.
    """
    home = work / "home"
    inbox, staging = work / "inbox", work / "staging"
    for d in (home, inbox, staging, work / "run"):
        d.mkdir(parents=True, exist_ok=True)
    os.chmod(work / "run", 0o700)
    database = work / "index.sqlite3"
    config = work / "config.toml"
    config.write_text("\n".join([
        f"inbox = {toml_list([str(inbox)])}",
        f"database = {json.dumps(str(database))}",
        f"settle_seconds = {settle}",
        "rescan_minutes = 60.0",
        *([f'metrics_address = "127.0.0.1:{metrics_port}"'] if metrics_port else []),
        *(['log_level = "DEBUG"'] if timeline else []),
        *engine,
    ]) + "\n")
    env = daemon_env(home, work)
    log = (work / "daemon.log").open("wb")
    launched, launched_wall = time.monotonic(), time.time()
    proc = subprocess.Popen([sys.executable, "-m", "ocrwatch", "run", "--no-tray",
                             "--config", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            env=env)
    try:
        # Warm-up: files of their own (a copy of a dropped one would make that one a
        # duplicate, which the daemon does not read again), read before the clock starts.
        warmed = make_drop(staging, *warm, prefix="warmup_", seed=5000)
        for name in warmed:
            os.rename(staging / name, inbox / name)
        wait_jobs(database, len(warmed), proc, time.monotonic() + timeout)
        first_file_s = time.monotonic() - launched
        # The first page after launch: the warm-up file whose sidecar came first.
        sidecars = [(inbox / n).with_suffix(".md") for n in warmed]
        first_page_s = min(p.stat().st_mtime for p in sidecars if p.exists()) - launched_wall
        for name in files:
            shutil.copy(folder / name, staging / name)
        scraper = (Scraper(f"http://127.0.0.1:{metrics_port}/metrics") if metrics_port
                   else None)
        if scraper is not None:
            scraper.__enter__()
        try:
            started_wall, started = time.time(), time.monotonic()
            for name in files:  # the drop: every file appears at once, whole
                os.rename(staging / name, inbox / name)
            states = wait_jobs(database, len(warmed) + len(files), proc,
                               time.monotonic() + timeout)
        finally:
            if scraper is not None:
                scraper.__exit__()
                (work / "metrics_in_flight.txt").write_text(scraper.busiest)
        ended_wall = max((inbox / name).with_suffix(".md").stat().st_mtime
                         for name in files if (inbox / name).with_suffix(".md").exists())
        pages = done_pages(database, files)
        peak = sampler.peak(started) if sampler else None
        after_idle = None
        if idle_mark is not None:
            wait_log(work / "daemon.log", idle_mark, proc, time.monotonic() + timeout)
            text_page(2480, 3508, 998).save(staging / "after_idle.jpg", quality=85,
                                            dpi=(300, 300))
            t = time.monotonic()
            os.rename(staging / "after_idle.jpg", inbox / "after_idle.jpg")
            wait_jobs(database, len(warmed) + 1 + len(files), proc,
                      time.monotonic() + timeout)
            after_idle = round(time.monotonic() - t, 1)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
    seconds = ended_wall - started_wall
    logged = "".join(f.read_text(errors="replace") for f in sorted(home.rglob("*.log*"))
                     if f.is_file()) if timeline else ""
    return {"timeline": page_timeline(logged, started, set(files)) if timeline else None,
            "pages": pages, "failed": states.get("failed", 0), "seconds": round(seconds, 2),
            "rate": round(pages / seconds, 3), "peak_mib": peak,
            "first_file_s": round(first_file_s, 1), "first_page_s": round(first_page_s, 1),
            "errors": failures(database),
            "after_idle_stop_s": after_idle,
            "metrics": scraper.summary() if scraper is not None else None}


TIMELINE = re.compile(r"page timeline: (\S+) page (\d+): queued ([\d.]+) sent ([\d.]+) "
                      r"received ([\d.]+) taken ([\d.]+) done ([\d.]+)")
STEPS = ("queued", "sent", "received", "taken", "done")


def page_timeline(log_text: str, started: float, names: set[str]) -> dict[str, Any]:
    """The drop's pages' way through the engine, from the feeder's debug lines
    (ocrwatch/engines/vllm/feeder.timeline): for each step (queued for the engine, that
    is prepared; sent to the worker; taken off the pipe there; taken by vLLM's front end;
    read), seconds after the drop at which the first, a quarter, half, three quarters and
    every page had passed it; and the median seconds between two steps."""
    rows = [tuple(float(x) - started for x in m.groups()[2:])
            for m in TIMELINE.finditer(log_text) if m.group(1) in names]
    if not rows:
        return {"pages": 0}

    # The page by which a share of them had passed (the first at 0, the last at 1).
    ranks = {f"{int(q * 100)}%": min(len(rows) - 1, max(0, round(q * len(rows)) - 1))
             for q in (0.0, 0.25, 0.5, 0.75, 1.0)}
    out: dict[str, Any] = {"pages": len(rows)}
    for i, step in enumerate(STEPS):
        ordered = sorted(r[i] for r in rows)
        out[step] = {share: round(ordered[rank], 2) for share, rank in ranks.items()}
    for (i, a), (j, b) in itertools.pairwise(enumerate(STEPS)):
        gaps = sorted(r[j] - r[i] for r in rows)
        out[f"{a}->{b}"] = round(gaps[len(gaps) // 2], 3)
    return out


def query(database: Path, sql: str) -> list[tuple[Any, ...]]:
    if not database.exists():
        return []
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:
        return []  # tables not made yet
    finally:
        conn.close()


def wait_jobs(database: Path, n: int, proc: subprocess.Popen[bytes],
               deadline: float) -> dict[str, int]:
    """Until ``n`` jobs are done or failed; the daemon must stay up meanwhile."""
    while True:
        states = dict(query(database, "SELECT state, COUNT(*) FROM jobs GROUP BY state"))
        if states.get("done", 0) + states.get("failed", 0) >= n:
            return states
        if proc.poll() is not None:
            log = database.parent / "daemon.log"
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise SystemExit(f"the daemon ended with status {proc.returncode} (a module "
                             f"missing here? benchmarks/gpu_wheels.sh):\n{tail}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the daemon did not finish in time: {states}")
        time.sleep(0.1)


def wait_log(log: Path, mark: str, proc: subprocess.Popen[bytes], deadline: float) -> None:
    """Until ``mark`` appears in the daemon's log; the daemon must stay up meanwhile."""
    while mark not in log.read_text(errors="replace"):
        if proc.poll() is not None:
            raise SystemExit(f"the daemon ended with status {proc.returncode}")
        if time.monotonic() > deadline:
            raise SystemExit(f"the daemon's log never said {mark!r}")
        time.sleep(0.2)


def done_pages(database: Path, files: dict[str, int]) -> int:
    rows = query(database, "SELECT display, pages FROM jobs WHERE state = 'done'")
    names = set(files)
    return sum(int(pages or 0) for path, pages in rows if Path(str(path)).name in names)


def failures(database: Path) -> list[str]:
    rows = query(database, "SELECT display, reason FROM jobs WHERE state = 'failed' LIMIT 5")
    return [f"{Path(str(p)).name}: {e}" for p, e in rows]

"""Two OCR servers on the CPU: the remote engine's own balancing against vLLM's router.

    python3 benchmarks/scale_out.py [--runs 3] [--delay 0.2] [--slots 2] [--quick]

Two fake OpenAI-compatible servers (tests/fake_openai.py, each its own process, real
HTTP on 127.0.0.1) stand for two GPU servers: each page takes ``--delay`` seconds and at
most ``--slots`` pages are worked on at once, the rest waiting their turn, as ``vllm
serve`` queues what does not fit its ``--max-num-seqs``. So the two together read at
most 2 x slots / delay pages a second, whoever sends. In one run, taken in turn
``--runs`` times each:

- (a) own: the real daemon (``ocrwatch run``, ``engine = "remote"``) with both servers in
  ``remote.urls``, balancing them itself (fewest requests outstanding);
- (b) router: the same daemon with one URL, the real ``vllm-router`` (``--policy
  power_of_two``) in front of the same two servers;
- (c) plain: an asyncio httpx client sending the same pages through the router at the
  same concurrency, each request body (the daemon's own) made before the clock starts:
  the strongest plain way to use the router.

Then once each, (a) and (b) with one server killed (SIGKILL) once a third of the drop's
pages are answered: pages lost (pages of the drop not in the index; must be 0), files
failed, requests answered, the time. Every rate is timed by the servers (each logs when
every request arrived and was answered): from the first request of the drop to the last
answer, so the daemon's settle time and warm-up file are outside it; the daemon's time
from the drop to its last sidecar is printed beside it. Each server's share is its part of
the answers. Report: benchmarks/results/scale_out.txt.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import header, save  # noqa: E402
from benchmarks._drop import done_pages, make_drop, run_daemon_on_drop, toml_list  # noqa: E402
from benchmarks.gpu_remote import engine_stages  # noqa: E402

MODEL = "lightonai/LightOnOCR-2-1B"
ROUTER_FLAGS = ["--policy", "power_of_two", "--health-check-interval-secs", "1",
                "--worker-startup-check-interval", "1", "--request-timeout-secs", "120",
                "--log-level", "warning"]


def _ask(url: str) -> httpx.Response | None:
    try:
        return httpx.get(url, timeout=2)
    except httpx.HTTPError:
        return None


def _wait(what: str, ready: Callable[[], bool], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > deadline:
            raise SystemExit(f"{what} did not come in {seconds:g} s")
        time.sleep(0.1)


class Server:
    """tests/fake_openai.py in its own process on a fixed port (kept when it is started
    again after a kill), logging each request's arrival and answer to ``times``."""

    def __init__(self, name: str, delay: float, slots: int, times: Path) -> None:
        self.name = name
        self.args = ["--delay", str(delay), "--slots", str(slots), "--times", str(times)]
        self.times = times
        self.port = 0
        self.proc: subprocess.Popen[str] | None = None
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> None:
        # Its complaints (a client ending a kept-alive connection) go to a log of its own.
        with self.times.with_name(f"server{self.name}.log").open("a") as log:
            proc = subprocess.Popen(
                [sys.executable, str(ROOT / "tests" / "fake_openai.py"), "--port",
                 str(self.port), *self.args], stdout=subprocess.PIPE, stderr=log, text=True,
                cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
        self.proc = proc
        try:
            assert proc.stdout is not None
            self.port = int(proc.stdout.readline())
            _wait(f"the server {self.name}", lambda: _ask(f"{self.url}/models") is not None)
        except BaseException:
            self.kill()
            raise

    def lines(self) -> list[tuple[float, float]]:
        """(arrived, answered) of every request answered so far."""
        if not self.times.exists():
            return []
        return [(float(a), float(b)) for a, b in (
            line.split() for line in self.times.read_text().splitlines() if line.strip())]

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)
            if self.proc.stdout is not None:
                self.proc.stdout.close()


class Router:
    """The real ``vllm-router`` on 127.0.0.1 in front of the servers."""

    def __init__(self, binary: str, servers: Sequence[Server], log: Path) -> None:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.root = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.root}/v1"
        self.command = [binary, "--host", "127.0.0.1", "--port", str(self.port),
                        "--worker-urls", *(f"http://127.0.0.1:{s.port}" for s in servers),
                        *ROUTER_FLAGS]
        self._log = log.open("w")
        self.proc = subprocess.Popen(self.command, stdout=self._log, stderr=subprocess.STDOUT)
        try:
            self.wait_healthy(len(servers))
        except BaseException:
            self.close()
            raise

    def healthy(self) -> int:
        answer = _ask(f"{self.root}/workers")
        if answer is None or answer.status_code != 200:
            return 0
        return sum(w.get("is_healthy") is True for w in answer.json().get("workers", []))

    def wait_healthy(self, n: int) -> None:
        _wait(f"{n} healthy servers behind the router", lambda: self.healthy() >= n)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self._log.close()


def window(servers: Sequence[Server], starts: Sequence[int], skip: int,
           expected: int) -> dict[str, Any]:
    """The requests answered since ``starts`` (each server's line count before the run),
    less the ``skip`` that arrived first (the daemon's warm-up file): how many, over what
    span (first arrival to last answer), and each server's part. A server logs a request
    just after its answer is sent: up to 5 s is given for ``expected`` lines to be there."""
    def count() -> int:
        return sum(len(s.lines()) - start for s, start in zip(servers, starts, strict=True))

    deadline = time.monotonic() + 5.0
    while count() < skip + expected and time.monotonic() < deadline:
        time.sleep(0.05)
    rows = sorted((a, b, i) for i, (s, start) in enumerate(zip(servers, starts, strict=True))
                  for a, b in s.lines()[start:])[skip:]
    if not rows:
        return {"answered": 0, "window": float("nan"), "rate": 0.0, "each": [0] * len(servers)}
    span = max(r[1] for r in rows) - min(r[0] for r in rows)
    each = [sum(1 for r in rows if r[2] == i) for i in range(len(servers))]
    return {"answered": len(rows), "window": span, "rate": len(rows) / span, "each": each}


class Killer:
    """Kills ``doomed`` with SIGKILL once ``after`` of the run's requests are answered."""

    def __init__(self, servers: Sequence[Server], doomed: Server, after: int,
                 skip: int) -> None:
        self.servers, self.doomed, self.after, self.skip = servers, doomed, after, skip
        self.starts = [len(s.lines()) for s in servers]
        self.answered_at_kill: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="killer")
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(0.02):
            answered = sum(len(s.lines()) - start
                           for s, start in zip(self.servers, self.starts, strict=True))
            if answered - self.skip >= self.after:
                self.doomed.kill()
                self.answered_at_kill = answered - self.skip
                return

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


# Pages are not turned or straightened (the Tesseract work of that would be most of a
# 2-core machine's time): what is measured is how pages are spread, not prepared.
PREPARATION = {"rotate_pages": False, "deskew": False}


def daemon_lines(urls: Sequence[str], concurrency: int, per_server: int) -> list[str]:
    return ['engine = "remote"', *(f"{k} = {json.dumps(v)}" for k, v in PREPARATION.items()),
            "[remote]", f"urls = {toml_list(urls)}",
            f"model = {json.dumps(MODEL)}", f"concurrency = {concurrency}",
            f"per_server = {per_server}", "timeout_seconds = 60.0"]


def run_daemon(urls: Sequence[str], in_flight: int, args: argparse.Namespace, folder: Path,
               files: dict[str, int], work: Path, servers: Sequence[Server],
               doomed: Server | None = None) -> dict[str, Any]:
    """The daemon over the drop; with ``doomed``, that server killed a third of the way."""
    shutil.rmtree(work, ignore_errors=True)
    starts = [len(s.lines()) for s in servers]
    killer = None
    if doomed is not None:
        killer = Killer(servers, doomed, max(1, sum(files.values()) // 3), skip=1)
    try:
        result = run_daemon_on_drop(daemon_lines(urls, in_flight, args.per_server),
                                    folder, files, work, args.settle, None, 300.0,
                                    warm=(0, 1, 0))
    finally:
        if killer is not None:
            killer.stop()
    # The warm-up file's page is answered before the drop: the rest are the drop's.
    result.update(window(servers, starts, skip=1, expected=sum(files.values())))
    result["lost"] = sum(files.values()) - done_pages(work / "index.sqlite3", files)
    result["stage_ms"] = engine_stages(work / "daemon.log")
    if killer is not None:
        result["killed_after"] = killer.answered_at_kill
    return result


def request_bodies(folder: Path, files: dict[str, int]) -> list[bytes]:
    """Each page's request as the daemon makes it (decoded, prepared, its data URL)."""
    from ocrwatch.config import Config
    from ocrwatch.engines.openai_http import chat_body
    from ocrwatch.engines.remote import RemoteEngine
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.scan.prepare import ScanPrep

    config = Config(rotate_pages=PREPARATION["rotate_pages"], deskew=PREPARATION["deskew"])
    config.engine = "remote"
    config.remote.model = MODEL
    engine = RemoteEngine(config)  # only its page preparation: no request is sent
    scan = ScanPrep(config)
    try:
        bodies = []
        for name in files:
            for page in iter_pages(folder / name, config, engine.max_side):
                url = engine.prepare_page(scan.prepare(page)).payload
                assert url is not None
                bodies.append(json.dumps(chat_body(config.remote, url,
                                                   config.remote.temperature)).encode())
        return bodies
    finally:
        scan.close()
        engine.close()


async def _send_all(url: str, bodies: Sequence[bytes], in_flight: int) -> list[str]:
    """Every body to ``url``, ``in_flight`` at once over kept-alive connections; the
    errors."""
    queue: asyncio.Queue[bytes] = asyncio.Queue()
    for body in bodies:
        queue.put_nowait(body)
    errors: list[str] = []
    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    async with httpx.AsyncClient(timeout=120, limits=limits) as client:
        async def worker() -> None:
            while not queue.empty():
                body = queue.get_nowait()
                try:
                    response = await client.post(f"{url}/chat/completions", content=body,
                                                 headers={"Content-Type": "application/json"})
                    response.raise_for_status()
                    if not isinstance(response.json()["choices"][0]["message"]["content"],
                                      str):
                        raise ValueError("message.content is no string")
                except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
                    errors.append(str(exc))

        await asyncio.gather(*(worker() for _ in range(in_flight)))
    return errors


def run_plain(url: str, bodies: Sequence[bytes], in_flight: int,
              servers: Sequence[Server]) -> dict[str, Any]:
    starts = [len(s.lines()) for s in servers]
    errors = asyncio.run(_send_all(url, bodies, in_flight))
    result = window(servers, starts, skip=0, expected=len(bodies))
    result.update({"failed": len(errors), "lost": len(errors), "errors": errors[:5]})
    return result


def _cells(rows: Sequence[dict[str, Any]], key: str, fmt: str = "{}") -> str:
    return ", ".join(fmt.format(r[key]) for r in rows)


def _share(rows: Sequence[dict[str, Any]]) -> str:
    each = [sum(r["each"][i] for r in rows) for i in range(len(rows[0]["each"]))]
    total = sum(each) or 1
    return " / ".join(f"{100 * n / total:.0f}%" for n in each)


WAYS = {"own": "(a) own: daemon, remote.urls = both servers",
        "router": "(b) router: daemon, remote.url = vllm-router",
        "plain": "(c) plain: asyncio httpx through vllm-router, bodies made beforehand"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=1.0,
                        help="each server's seconds a page (default 1.0)")
    parser.add_argument("--slots", type=int, default=2,
                        help="pages each server works on at once (default 2)")
    parser.add_argument("--in-flight", default="",
                        help="pages in flight from each client, comma-separated (default: "
                             "what the two servers take at once, and twice that)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cards", type=int, default=24, help="one-page card photos")
    parser.add_argument("--pdfs", type=int, default=1, help="PDFs of four A4 pages")
    parser.add_argument("--settle", type=float, default=0.5)
    parser.add_argument("--quick", action="store_true",
                        help="one run each on 8 cards and a PDF (a check, not figures)")
    parser.add_argument("--out", type=Path)
    parser.add_argument("--work", type=Path)
    args = parser.parse_args()
    if args.quick:
        args.runs, args.cards, args.pdfs = 1, 8, 1
    capacity = 2 * args.slots
    levels = [int(x) for x in args.in_flight.split(",")] if args.in_flight else \
        [capacity, 2 * capacity]
    # remote.per_server: twice what a server takes at once (as remote.concurrency is
    # set), so that the in-flight limit follows the servers up in both layouts.
    args.per_server = 2 * args.slots
    binary = shutil.which("vllm-router", path=str(Path(sys.executable).parent)) \
        or shutil.which("vllm-router")
    if binary is None:
        raise SystemExit("vllm-router is not installed (pip install vllm-router; it comes "
                         "with the dev extra)")

    work = args.work or Path(tempfile.mkdtemp(prefix="ocrwatch-scale-out-"))
    work.mkdir(parents=True, exist_ok=True)
    folder = work / "drop"
    shutil.rmtree(folder, ignore_errors=True)
    files = make_drop(folder, 0, args.cards, args.pdfs)
    n_pages = sum(files.values())
    bodies = request_bodies(folder, files)

    servers: list[Server] = []
    router: Router | None = None
    runs: dict[tuple[str, int], list[dict[str, Any]]] = {
        (way, level): [] for level in levels for way in WAYS}
    killed: dict[str, dict[str, Any]] = {}
    top = max(levels)
    try:
        for name in ("1", "2"):
            servers.append(Server(name, args.delay, args.slots, work / f"times{name}.txt"))
        router = Router(binary, servers, work / "router.log")
        urls = [s.url for s in servers]
        for run in range(args.runs):
            for level in levels:
                runs["own", level].append(run_daemon(
                    urls, level, args, folder, files, work / f"own_{level}_{run}", servers))
                runs["router", level].append(run_daemon(
                    [router.url], level, args, folder, files, work / f"router_{level}_{run}",
                    servers))
                runs["plain", level].append(run_plain(router.url, bodies, level, servers))
                print(f"run {run + 1}, {level} in flight: " + ", ".join(
                    f"{way} {runs[way, level][-1]['rate']:.2f}" for way in WAYS) + " pages/s",
                    flush=True)
        doomed = servers[1]
        killed["own"] = run_daemon(urls, top, args, folder, files, work / "own_kill",
                                   servers, doomed)
        doomed.start()  # on its port again, for the router's run
        router.wait_healthy(len(servers))
        killed["router"] = run_daemon([router.url], top, args, folder, files,
                                      work / "router_kill", servers, doomed)
        print(f"one server killed: own {killed['own']['rate']:.2f} pages/s, "
              f"{killed['own']['lost']} lost; router {killed['router']['rate']:.2f}, "
              f"{killed['router']['lost']} lost", flush=True)
        router_command = router.command
    finally:
        if router is not None:
            router.close()
        for server in servers:
            server.kill()

    bound = capacity / args.delay
    rate = {key: statistics.median(r["rate"] for r in rows) for key, rows in runs.items()}
    router_flags = " ".join(router_command[router_command.index("--policy"):])
    lines = [*header("Two OCR servers: the remote engine's own balancing against "
                     "vllm-router, on the CPU (benchmarks/scale_out.py)", [
        f"servers:  2 x tests/fake_openai.py, each its own process on 127.0.0.1: "
        f"{args.delay:g} s a page, {args.slots} pages at once, the rest queued (together "
        f"at most {bound:.2f} pages/s)",
        f"router:   vllm-router {router_flags}",
        f"drop:     {args.cards} card photos and {args.pdfs} PDF(s) of 4 A4 pages "
        f"({n_pages} pages); {args.runs} runs each, (a), (b) and (c) in turn",
        f"clients:  {' and '.join(map(str, levels))} pages in flight (the daemon's "
        f"remote.concurrency), remote.per_server = {args.per_server}; pages not turned "
        "or straightened",
        "timed:    by the servers, from the first request of the drop to the last answer",
        "machine shared with other work: figures move between runs; compare within one "
        "run only",
    ]), "",
        "| way | in flight | pages/s (median) | each run | failed files | pages lost "
        "| answers | share server 1 / 2 | daemon: drop to last sidecar |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for level in levels:
        for way, label in WAYS.items():
            rows = runs[way, level]
            failed = _cells(rows, "failed") + (" (requests)" if way == "plain" else "")
            seconds = "-" if way == "plain" else _cells(rows, "seconds", "{} s")
            lines.append(f"| {label} | {level} | {rate[way, level]:.2f} | "
                         f"{_cells(rows, 'rate', '{:.2f}')} | {failed} | "
                         f"{_cells(rows, 'lost')} | {_cells(rows, 'answered')} | "
                         f"{_share(rows)} | {seconds} |")
    lines.append("")
    for level in levels:
        own, routed, plain = (rate[way, level] for way in WAYS)
        lines.append(f"{level} in flight: (a) own / (b) router {own / routed:.3f}; (a) own / "
                     f"(c) plain {own / plain:.3f}; (b) router / (c) plain "
                     f"{routed / plain:.3f}; (c) plain / the servers' bound "
                     f"({bound:.2f} pages/s) {plain / bound:.3f}")
    lines += [
        "",
        f"One server (2) killed with SIGKILL once a third of the drop's pages "
        f"({n_pages // 3}) were answered, {top} in flight, one run each:",
        "",
        "| way | pages/s | failed files | pages lost | answers | share server 1 / 2 "
        "| killed after | daemon: drop to last sidecar |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for way in ("own", "router"):
        r = killed[way]
        lines.append(f"| {WAYS[way].split(':')[0]} | {r['rate']:.2f} | {r['failed']} | "
                     f"{r['lost']} | {r['answered']} | {_share([r])} | "
                     f"{r['killed_after']} answers | {r['seconds']} s |")
    lines.append("")
    for way in ("own", "router"):
        stages = [r["stage_ms"] for r in runs[way, top] if r.get("stage_ms")]
        if stages:
            lines.append(f"engine stages of {WAYS[way].split(':')[0]} at {top} in flight, "
                         "median ms a page (median of the runs): " + ", ".join(
                             f"{k} {statistics.median(float(s[k]) for s in stages):.2f}"
                             for k in stages[-1]))
    lines.append("answers: requests the servers answered in the window; a page whose "
                 "server was killed under it is asked again elsewhere, and counted once.")
    target = save("scale_out.txt", lines, args.out)
    print("\n".join(lines))
    print(f"written to {target}")


if __name__ == "__main__":
    main()

"""The daemon's remote engine against vLLM's own server, beside plain HTTP clients.

    python3 benchmarks/gpu_remote.py MODEL_DIR            # starts `vllm serve` on this GPU
    python3 benchmarks/gpu_remote.py MODEL_DIR --gpus 2   # one server per GPU (or --dp)
    python3 benchmarks/gpu_remote.py --url http://HOST:8000/v1 [--url ...]  # running servers
    python3 benchmarks/gpu_remote.py MODEL_DIR --router 2  # 2 servers on one GPU, vllm-router

MODEL_DIR is a LightOnOCR-2-1B-shaped folder (../shared/gpu/make_model.py), served with
random weights (``--load-format dummy``) and the memory settings the embedded engine
derives from a 16 GB card (ocrwatch's memory plan: utilization, max_num_seqs,
max_num_batched_tokens, max_model_len), as ``lightonai/LightOnOCR-2-1B``.

The drop is the GPU daemon benchmark's: 24 A4 pages scanned at 300 dpi (JPEG), 24 card
photos (JPEG) and 4 PDFs of four A4 pages, 64 pages, every page writing exactly
``--tokens`` tokens (``ignore_eos``). On the same servers, one after another:

- the seeds' client: plain HTTP, each page decoded, scaled to 1540 px (up or down, as the
  daemon does, so both send the same pixels) and sent as a base64 PNG, 2 requests in flight;
- the same plain client with as many requests in flight as the daemon (the strongest
  plain way to use the servers);
- the real daemon: ``ocrwatch run`` with ``engine = "remote"``, a warm-up file first,
  then every file moved into its inbox at once, timed from the drop to the last sidecar.

With ``--router N`` (:func:`run_router`): N servers on GPU 0, each planned for a card of
16/N GiB (so that together they fit the 16 GB card's budget: each pays its own CUDA context,
weights and working memory, and holds the KV cache left), behind ``vllm-router``, beside one
server planned for the whole 16 GiB on the same card, all started at once (their KV caches
are fixed, so no start measures another's memory); then, against the router and against the
one server in turn, the plain client and the daemon at twice the servers' ``max_num_seqs``,
``--repeat`` times each, with each server's share of the requests (its own
``vllm:request_success`` counter) and each server's memory (nvidia-smi's per-process use,
every 0.5 s).

The card's memory is sampled with nvidia-smi every 0.1 s. The report goes to
benchmarks/results/remote.txt (``--out``). ``--embedded RATE`` adds the embedded engine's
pages/s for the same drop on the same card (benchmarks/gpu_daemon.py) and the ratio.
"""

from __future__ import annotations

import argparse
import base64
import faulthandler
import io
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._common import header, save  # noqa: E402
from benchmarks._drop import drop_counts, make_drop, run_daemon_on_drop, toml_list  # noqa: E402
from benchmarks.gpu_engine import Sampler, total_mib, used_mib  # noqa: E402
from ocrwatch.engines import profiles  # noqa: E402
from ocrwatch.engines.remote import Stages  # noqa: E402

MAX_SIDE = profiles.get(profiles.DEFAULT).max_side  # the model engines' longest side

MODEL = "lightonai/LightOnOCR-2-1B"
PDF_DPI = 200  # the daemon's pdf_dpi default; the plain client renders PDFs the same
GIB = 1024.0


# -- the servers ------------------------------------------------------------------------

def serve_settings(max_tokens: int, card_mib: int | None,
                   budget_gib: float = 16.0) -> dict[str, Any]:
    """The embedded engine's memory plan for a 16 GB card (or a card of ``budget_gib``),
    as `vllm serve` flags."""
    try:
        from ocrwatch.engines.vllm.memory import plan_memory
    except ImportError:  # the engine as a single module
        from ocrwatch.engines.vllm import plan_memory
    card_gib = (card_mib or 16 * 1024) / GIB
    # Planned for a 16 GB card, its KV cache in bytes, as the embedded engine does.
    size = min(budget_gib, card_gib)
    plan = plan_memory(size, size, max_tokens, device_gib=card_gib)
    settings: dict[str, Any] = {
        "gpu-memory-utilization": plan.gpu_memory_utilization,
        "max-model-len": plan.max_model_len,
        "max-num-seqs": plan.max_num_seqs,
        "max-num-batched-tokens": plan.max_num_batched_tokens,
    }
    sizes = getattr(plan, "cudagraph_sizes", None)
    if sizes:
        settings["cudagraph-capture-sizes"] = sizes
    if getattr(plan, "kv_cache_bytes", 0):
        settings["kv-cache-memory-bytes"] = plan.kv_cache_bytes
    return settings


def serve_command(model_dir: str, port: int, settings: dict[str, Any], dp: int) -> list[str]:
    """`vllm serve` as the embedded engine runs the model (bf16, one image, no caches)."""
    cmd = [sys.executable, "-m", "vllm.entrypoints.cli.main", "serve", model_dir,
           "--served-model-name", MODEL, "--load-format", "dummy", "--dtype", "bfloat16",
           "--host", "127.0.0.1", "--port", str(port),
           "--limit-mm-per-prompt", json.dumps({"image": 1}),
           "--mm-processor-cache-gb", "0", "--no-enable-prefix-caching", "--seed", "0"]
    for key, value in settings.items():
        if isinstance(value, list):
            cmd += [f"--{key}", *(str(v) for v in value)]
        else:
            cmd += [f"--{key}", str(value)]
    if dp > 1:
        cmd += ["--data-parallel-size", str(dp)]
    return cmd


@dataclass
class Servers:
    """`vllm serve` processes started here, each in its own session, with their logs."""

    urls: list[str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    started_s: float = 0.0

    @classmethod
    def start(cls, model_dir: str, gpus: int, dp: bool, settings: dict[str, Any],
              port: int, log_dir: Path, timeout: float) -> Servers:
        layout = [(port, list(range(gpus)), gpus, settings)] if dp else [
            (port + i, [i], 1, settings) for i in range(gpus)]
        return cls.launch(model_dir, layout, log_dir, timeout)

    @classmethod
    def launch(cls, model_dir: str,
               layout: Sequence[tuple[int, list[int], int, dict[str, Any]]],
               log_dir: Path, timeout: float) -> Servers:
        """One server per (port, GPUs, data-parallel size, settings), all started at once."""
        begun = time.monotonic()
        servers = cls(urls=[])
        for p, devices, size, settings in layout:
            env = dict(os.environ)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices)
            log = log_dir / f"vllm_serve_{p}.log"
            servers.logs.append(log)
            with log.open("wb") as out:
                servers.procs.append(subprocess.Popen(
                    serve_command(model_dir, p, settings, size), stdout=out,
                    stderr=subprocess.STDOUT, env=env, start_new_session=True))
            servers.urls.append(f"http://127.0.0.1:{p}/v1")
        try:
            for url, proc, log in zip(servers.urls, servers.procs, servers.logs, strict=True):
                wait_healthy(url, proc, log, begun + timeout)
        except BaseException:
            servers.stop()
            raise
        servers.started_s = time.monotonic() - begun
        return servers

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)


def wait_healthy(url: str, proc: subprocess.Popen[bytes] | None, log: Path | None,
                 deadline: float) -> None:
    """Until ``GET /models`` answers 200: the server has loaded the model."""
    while True:
        try:
            with urllib.request.urlopen(f"{url}/models", timeout=5) as resp:
                if resp.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        if proc is not None and proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log else ""
            raise SystemExit(f"vllm serve ended with status {proc.returncode}:\n{tail}")
        if time.monotonic() > deadline:
            raise SystemExit(f"{url} did not answer in time")
        time.sleep(1.0)


class Occupancy:
    """vLLM's own gauges (``GET /metrics``: ``vllm:num_requests_running`` and
    ``…_waiting``, summed over servers) every 0.2 s during a run: whether a client keeps
    the servers' ``max_num_seqs`` full. A server without them (the fake one) gives none."""

    def __init__(self, urls: Sequence[str]) -> None:
        self.roots = [u.rsplit("/v1", 1)[0] for u in urls]
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="occupancy", daemon=True)

    def __enter__(self) -> Occupancy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        while not self._stop.wait(0.2):
            running = waiting = 0.0
            for root in self.roots:
                try:
                    with urllib.request.urlopen(f"{root}/metrics", timeout=2) as resp:
                        text = resp.read().decode(errors="replace")
                except (OSError, ValueError):
                    return  # no metrics here
                for line in text.splitlines():
                    name, _, value = line.rpartition(" ")
                    if name.startswith("vllm:num_requests_running"):
                        running += float(value)
                    elif name.startswith("vllm:num_requests_waiting"):
                        waiting += float(value)
            self.samples.append((running, waiting))

    def sampling(self) -> bool:
        return self._thread.is_alive()

    def busy_means(self) -> tuple[float, float] | None:
        """Mean requests running and waiting over the samples with any request."""
        busy = [s for s in self.samples if s[0] + s[1] > 0]
        if not busy:
            return None
        return (statistics.mean(s[0] for s in busy), statistics.mean(s[1] for s in busy))


# -- the plain client -------------------------------------------------------------------

def _page_of(path: Path, index: int) -> Any:
    """Page ``index`` of a file, decoded as the daemon decodes it (PDFs at 200 dpi)."""
    from PIL import Image, ImageOps

    if path.suffix == ".pdf":
        import pypdfium2 as pdfium

        doc = pdfium.PdfDocument(str(path))
        try:
            return doc[index].render(scale=PDF_DPI / 72).to_pil().convert("RGB")
        finally:
            doc.close()
    with Image.open(path) as opened:
        return ImageOps.exif_transpose(opened).convert("RGB")


def _png_url(image: Any) -> str:
    """The page at 1540 px on its longest side, up or down, as the daemon sends it (so that
    both sides send the same pixels), as a base64 PNG data URL."""
    scale = MAX_SIDE / max(image.size)
    if scale != 1.0:
        from PIL import Image

        image = image.resize((round(image.width * scale), round(image.height * scale)),
                             Image.Resampling.LANCZOS if scale < 1 else Image.Resampling.BICUBIC)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG", compress_level=1)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def run_plain(urls: Sequence[str], folder: Path, files: dict[str, int], in_flight: int,
              tokens: int, sampler: Sampler | None, *, keep_alive: bool) -> dict[str, Any]:
    """Every page as its own request, ``in_flight`` at once, servers taken in turn.

    Every answered request is a page read: an empty answer is a page the model left
    empty (random weights often write nothing), which the daemon writes as an empty
    page too; only a request that got no answer, or an answer that is not a chat
    completion, is a failure. ``keep_alive``: one httpx client with kept-alive
    connections (the strongest plain way); else urllib, a connection per request (the
    seeds' way).
    """
    import httpx

    pages = [(folder / name, i) for name, n in files.items() for i in range(n)]
    latencies: list[float] = []
    errors: list[str] = []
    tokens_used = Stages()  # the servers' usage counts, kept as the engine keeps them
    empty = 0
    lock = threading.Lock()
    counter = iter(range(10**9))
    client = httpx.Client(timeout=600, limits=httpx.Limits(
        max_connections=in_flight, max_keepalive_connections=in_flight)) if keep_alive else None

    def one(task: tuple[Path, int]) -> None:
        nonlocal empty
        path, index = task
        image = _page_of(path, index)
        body = json.dumps({
            "model": MODEL, "max_tokens": tokens, "ignore_eos": True,
            "temperature": 0.2, "top_p": 0.9,
            "messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": _png_url(image)}}]}],
        }).encode()
        with lock:
            url = f"{urls[next(counter) % len(urls)]}/chat/completions"
        sent = time.monotonic()
        try:
            if client is not None:
                response = client.post(url, content=body,
                                       headers={"Content-Type": "application/json"})
                response.raise_for_status()
                answer = response.json()
            else:
                request = urllib.request.Request(url, data=body, method="POST", headers={
                    "Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=600) as resp:
                    answer = json.loads(resp.read())
            content = answer["choices"][0]["message"]["content"]
            if not isinstance(content, str):
                raise ValueError(f"message.content is {type(content).__name__}")
        except (OSError, ValueError, KeyError, IndexError, TypeError, httpx.HTTPError) as exc:
            with lock:
                errors.append(f"{path.name} page {index + 1}: {exc}")
            return
        usage = answer.get("usage") if isinstance(answer, dict) else None
        with lock:
            latencies.append(time.monotonic() - sent)
            empty += not content.strip()
            if isinstance(usage, dict):
                tokens_used.add_tokens(usage.get("prompt_tokens"), usage.get("completion_tokens"))

    started = time.monotonic()
    try:
        with ThreadPoolExecutor(in_flight) as pool:
            list(pool.map(one, pages))
    finally:
        if client is not None:
            client.close()
    seconds = time.monotonic() - started
    done = len(latencies)
    return {"pages": done, "empty": empty, "failed": len(errors), "errors": errors[:5],
            "seconds": seconds, "rate": done / seconds,
            "median_latency": statistics.median(latencies) if latencies else float("nan"),
            "tokens": tokens_used.token_medians(),
            "peak_mib": sampler.peak(started) if sampler else None}



# -- the daemon -------------------------------------------------------------------------

def run_daemon(urls: Sequence[str], folder: Path, files: dict[str, int], concurrency: int,
               tokens: int, settle: float, work: Path, sampler: Sampler | None,
               timeout: float, warm: tuple[int, int, int] = (1, 0, 0)) -> dict[str, Any]:
    """`ocrwatch run` with the remote engine on the drop (benchmarks/_drop.py)."""
    result = run_daemon_on_drop([
        'engine = "remote"',
        "[remote]",
        f"urls = {toml_list(urls)}",
        f"model = {json.dumps(MODEL)}",
        f"max_tokens = {tokens}",
        "ignore_eos = true",
        f"concurrency = {concurrency}",
        "timeout_seconds = 600.0",
    ], folder, files, work, settle, sampler, timeout, warm=warm)
    result["stage_ms"] = engine_stages(work / "daemon.log")
    result["tokens"] = engine_tokens(work / "daemon.log")
    # The daemon's own clock starts at the drop and so includes settle_seconds, which a
    # plain client does not wait; from the first of the drop's files queued (settled) to
    # the last sidecar is the same span as a plain client's first request to last answer.
    queued = first_queued(work / "daemon.log", files)
    ends = [(work / "inbox" / n).with_suffix(".md").stat().st_mtime for n in files
            if (work / "inbox" / n).with_suffix(".md").exists()]
    if queued is not None and ends:
        result["queued_seconds"] = round(max(ends) - queued, 2)
        result["queued_rate"] = round(result["pages"] / result["queued_seconds"], 3)
    return result


def first_queued(log: Path, files: dict[str, int]) -> float | None:
    """When the first of the drop's files was queued, from the daemon's log (local time)."""
    import datetime as dt

    names = set(files)
    times = []
    text = log.read_text(errors="replace") if log.exists() else ""
    for match in re.finditer(r"^(\S+ \S+) INFO .*: queued (.+) \(", text, re.MULTILINE):
        if Path(match.group(2)).name in names:
            stamp = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f")
            times.append(stamp.timestamp())
    return min(times) if times else None


def engine_stages(log: Path) -> dict[str, str]:
    """The remote engine's own per-page stage medians, from the line it logs at close."""
    found: dict[str, str] = {}
    text = log.read_text(errors="replace") if log.exists() else ""
    for match in re.finditer(r"remote engine, median ms a page over \d+ answers: (.*)", text):
        found = dict(part.rsplit(" ", 1) for part in match.group(1).strip().split(", "))
    return found


def engine_tokens(log: Path) -> dict[str, float]:
    """The remote engine's median tokens a page (the servers' usage), from its close line."""
    text = log.read_text(errors="replace") if log.exists() else ""
    found: dict[str, float] = {}
    for match in re.finditer(r"remote engine, median tokens a page: (.*)", text):
        found = {k: float(v) for k, v in (p.rsplit(" ", 1) for p in
                                          match.group(1).strip().split(", "))}
    return found


def run_engine_alone(urls: Sequence[str], folder: Path, files: dict[str, int],
                     concurrency: int, tokens: int,
                     sampler: Sampler | None) -> dict[str, Any]:
    """The remote engine without the daemon: the drop's pages prepared first as the daemon
    prepares them (decoded, turned, straightened, encoded), then ``concurrency`` callers.
    Beside the daemon's run it says whether a gap to the plain client is in the engine's
    requests or in the daemon feeding them."""
    from ocrwatch.config import Config
    from ocrwatch.engines.remote import RemoteEngine
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.scan import deskew
    from ocrwatch.scan.prepare import ScanPrep

    config = Config()
    config.engine = "remote"
    config.remote.urls = list(urls)
    config.remote.model = MODEL
    config.remote.max_tokens = tokens
    config.remote.ignore_eos = True
    config.remote.concurrency = concurrency
    config.remote.timeout_seconds = 600.0
    engine = RemoteEngine(config)
    scan = ScanPrep(config, least_skew=deskew.JUDGED_ANGLE)  # as for a model engine
    try:
        pages = [engine.prepare_page(scan.prepare(p)) for name in files
                 for p in iter_pages(folder / name, config, engine.max_side)]
        started = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            out = [r for rs in pool.map(lambda p: engine.recognize([p]), pages) for r in rs]
        seconds = time.monotonic() - started
        errors = [r.error for r in out if r.error]
        return {"pages": len(out) - len(errors), "failed": len(errors), "errors": errors[:5],
                "empty": sum(1 for r in out if not r.error and not r.text.strip()),
                "seconds": seconds, "rate": (len(out) - len(errors)) / seconds,
                "stage_ms": engine.stages.medians_ms(), "tokens": engine.stages.token_medians(),
                "peak_mib": sampler.peak(started) if sampler else None}
    finally:
        scan.close()
        engine.close()


# -- the report -------------------------------------------------------------------------

def tokens_cell(r: dict[str, Any]) -> str:
    """The servers' median prompt and output tokens a page: the same work on both sides."""
    t = r.get("tokens") or {}
    if "prompt" not in t or "completion" not in t:
        return "-"
    return f"{t['prompt']:g} + {t['completion']:g}"


def report(runs: list[tuple[str, int, dict[str, Any]]], meta: dict[str, Any]) -> list[str]:
    def gib(mib: int | None) -> str:
        return "-" if mib is None else f"{mib / GIB:.2f} GiB"

    seeds = next((r["rate"] for name, _, r in runs if name.startswith("seeds")), None)
    lines = [*header("Remote engine against vLLM's server (benchmarks/gpu_remote.py)", [
        f"servers:  {meta['servers']}",
        f"settings: {meta['settings']}",
        f"drop:     {meta['drop']}; {meta['tokens']} tokens a page (ignore_eos)",
        f"warm-up:  every page once through the plain client before the timed runs "
        f"({meta['warm']})",
        f"card:     {meta['card']}",
    ]), "",
        "| run | in flight | pages | failed | empty | seconds | pages/s | from first queued "
        "| vs seeds' client | median request | tokens a page (prompt + output) "
        "| peak card memory |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, in_flight, r in runs:
        ratio = f"{r['rate'] / seeds:.2f}x" if seeds else "-"
        latency = r.get("median_latency")
        queued = "-" if not r.get("queued_rate") else f"{r['queued_rate']:.2f}"
        lines.append(
            f"| {name} | {in_flight} | {r['pages']} | {r['failed']} | {r.get('empty', '-')} | "
            f"{r['seconds']:.1f} | {r['rate']:.2f} | "
            f"{queued} | {ratio} | "
            f"{'-' if latency is None else f'{latency:.1f} s'} | {tokens_cell(r)} | "
            f"{gib(r.get('peak_mib'))} |")
    lines.append("")
    daemon = [r for name, _, r in runs if name.startswith("ocrwatch")]
    plain = [r for name, _, r in runs if name.startswith("plain")]
    best = max(daemon, key=lambda r: r["rate"]) if daemon else None
    if best and plain:
        top = max(p["rate"] for p in plain)
        ratio = best["rate"] / top
        lines.append(f"daemon (best) / plain client at the same concurrency, from the drop "
                     f"(settle_seconds included): {ratio:.3f}")
        if best.get("queued_rate"):
            ratio = best["queued_rate"] / top
            lines.append(f"daemon (best) / plain client at the same concurrency, from the "
                         f"first file queued: {ratio:.3f} (goal at least 0.97: "
                         f"{'PASS' if ratio >= 0.97 else 'FAIL'})")
    alone = [r for name, _, r in runs if name.startswith("the remote engine alone")]
    if alone and plain:
        lines.append(f"the remote engine alone / plain client at the same concurrency: "
                     f"{alone[0]['rate'] / max(p['rate'] for p in plain):.3f}")
    if best and meta.get("embedded"):
        ratio = best["rate"] / meta["embedded"]
        lines.append(f"daemon with the remote engine / daemon with the embedded engine "
                     f"({meta['embedded']:.2f} pages/s, benchmarks/gpu_daemon.py on this card): "
                     f"{ratio:.2f} (goal at least 0.95: {'PASS' if ratio >= 0.95 else 'FAIL'})")
    for name, _, r in runs:
        if r.get("occupancy"):
            running, waiting = r["occupancy"]
            lines.append(f"{name}: on the servers while busy (vLLM's /metrics), "
                         f"{running:.2f} requests running and {waiting:.2f} waiting on mean "
                         f"(max_num_seqs {meta.get('max_num_seqs', '?')} a server)")
        if r.get("stage_ms"):
            lines.append(f"{name}: engine stages, median ms a page: " + ", ".join(
                f"{k} {v}" for k, v in r["stage_ms"].items()))
    for name, _, r in runs:
        for error in r.get("errors") or []:
            lines.append(f"failed in {name}: {error}")
    lines.append("Pages/s are the drop's pages over the time from the drop (or the first "
                 "request) to the last sidecar (or answer); one run each, on the same servers, "
                 "one after another. Every answered request counts as a page read (empty: "
                 "the model wrote nothing, as random weights often do); failed: no answer, "
                 "an HTTP error, or an answer that is not a chat completion.")
    return lines


# -- several servers on one GPU behind vllm-router (--router N) ---------------------------

class Router:
    """``vllm-router`` (the Rust router of the ``vllm-router`` wheel) on 127.0.0.1 in front
    of ``workers`` (their OpenAI base URLs), power-of-two-choices balancing."""

    def __init__(self, workers: Sequence[str], port: int, log: Path, policy: str,
                 timeout: float) -> None:
        script = shutil.which("vllm-router") or shutil.which(
            "vllm-router", path=str(Path(sys.executable).parent))
        launcher = [script] if script else [sys.executable, "-m", "vllm_router.launch_router"]
        self.url = f"http://127.0.0.1:{port}/v1"
        self.policy = policy
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            [*launcher, "--host", "127.0.0.1", "--port", str(port),
             "--worker-urls", *(w.rsplit("/v1", 1)[0] for w in workers),
             "--policy", policy, "--request-timeout-secs", "600", "--log-level", "warning",
             # Its own Prometheus exporter, on a port of its own (the default may be taken).
             "--prometheus-host", "127.0.0.1", "--prometheus-port", str(port + 1)],
            stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_healthy(self.url, self.proc, log, time.monotonic() + timeout)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()


class ProcessMemory:
    """Each server's GPU memory (nvidia-smi's per-process use, summed over the processes
    of the server's session: its API server and its engine core) every 0.5 s."""

    def __init__(self) -> None:
        self.samples: list[dict[int, int]] = []  # session -> MiB, every session seen
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="per-server-memory",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-compute-apps=pid,used_memory",
                     "--format=csv,noheader,nounits"], capture_output=True, text=True,
                    timeout=10).stdout
            except (OSError, subprocess.TimeoutExpired):
                return
            sample: dict[int, int] = {}
            for line in out.splitlines():
                try:
                    pid, mib = (int(x) for x in line.split(","))
                    session = os.getsid(pid)
                except (ValueError, OSError):
                    continue
                sample[session] = sample.get(session, 0) + mib
            self.samples.append(sample)

    def peak(self, sessions: Sequence[int]) -> int | None:
        """The most the given servers held together at one sample."""
        sums = [sum(s.get(x, 0) for x in sessions) for s in self.samples]
        return max(sums) if sums else None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(15)


def served_counts(urls: Sequence[str]) -> list[float]:
    """Each server's requests finished so far (its ``vllm:request_success_total``)."""
    counts = []
    for url in urls:
        total = 0.0
        try:
            with urllib.request.urlopen(f"{url.rsplit('/v1', 1)[0]}/metrics",
                                        timeout=5) as resp:
                text = resp.read().decode(errors="replace")
        except (OSError, ValueError):
            counts.append(float("nan"))
            continue
        for line in text.splitlines():
            name, _, value = line.rpartition(" ")
            if name.startswith("vllm:request_success_total"):
                total += float(value)
        counts.append(total)
    return counts


def run_router(args: argparse.Namespace, folder: Path, files: dict[str, int],
               work: Path) -> None:
    """``--router N``: N servers behind vllm-router against one server of the same total
    memory, on one GPU (see the module's docstring). The report is written after every
    run, so a run cut short by a time limit still leaves the runs before it."""
    n = args.router
    card = total_mib()
    baseline = used_mib()
    each = serve_settings(args.tokens, card, 16.0 / n)
    whole = serve_settings(args.tokens, card)
    layout = [(args.port + i, [0], 1, each) for i in range(n)]
    if args.single:
        layout.append((args.port + n, [0], 1, whole))
    memory = ProcessMemory()  # from before the servers start: their start's peaks too
    servers = router = None
    runs: list[dict[str, Any]] = []
    meta: dict[str, Any] = {
        "n": n, "each": each, "whole": whole, "policy": args.router_policy,
        "drop": f"{sum(files.values())} pages in {len(files)} files ({args.drop}: A4 JPEGs, "
                f"card photos, four-page PDFs)", "tokens": args.tokens,
        "card": (f"{card / GIB:.1f} GiB, {baseline} MiB in use before the servers started"
                 if card else "no GPU seen")}
    try:
        started = time.monotonic()
        servers = Servers.launch(args.model, layout, work, args.start_timeout)
        meta["servers_up_s"] = round(time.monotonic() - started)
        sessions = [proc.pid for proc in servers.procs]  # each started a session
        router = Router(servers.urls[:n], args.router_port, work / "vllm_router.log",
                        args.router_policy, 120.0)
        print(f"{len(servers.urls)} servers up in {meta['servers_up_s']} s; router at "
              f"{router.url}", flush=True)
        targets = [(f"vllm-router, {n} servers", [router.url], servers.urls[:n],
                    n * int(each["max-num-seqs"]))]
        if args.single:
            targets.append(("one server, the whole budget", servers.urls[n:],
                            servers.urls[n:], int(whole["max-num-seqs"])))
        meta["sessions"] = sessions
        for target, client_urls, _, seqs in targets:
            warm = run_plain(client_urls, folder, files, 2 * seqs, args.tokens, None,
                             keep_alive=True)
            print(f"{target}: warm-up pass {warm['rate']:.2f} pages/s, {warm['failed']} "
                  "failed", flush=True)
        # Round after round (each client against each target once a round), so that a run
        # cut short by a time limit costs a repeat, not a whole comparison.
        for i in range(args.repeat):
            for target, client_urls, backend_urls, seqs in targets:
                in_flight = 2 * seqs
                for client in ("plain", "daemon"):
                    before = served_counts(backend_urls)
                    with Occupancy(backend_urls) as occupancy:
                        if client == "plain":
                            result = run_plain(client_urls, folder, files, in_flight,
                                               args.tokens, None, keep_alive=True)
                        else:
                            result = run_daemon(client_urls, folder, files, in_flight,
                                                args.tokens, args.settle,
                                                work / f"daemon_{len(runs)}", None,
                                                args.timeout, drop_counts(args.warm))
                    after = served_counts(backend_urls)
                    result.update(target=target, client=client, repeat=i + 1,
                                  in_flight=in_flight, occupancy=occupancy.busy_means(),
                                  share=[b - a for a, b in zip(before, after, strict=True)])
                    runs.append(result)
                    print(f"{target}, {client} #{i + 1}: {result['rate']:.2f} pages/s, "
                          f"{result['failed']} failed, share {result['share']}", flush=True)
                    meta["peaks"] = {s: memory.peak([s]) for s in sessions}
                    meta["pair_peak"] = memory.peak(sessions[:n])
                    save("gpu_router.txt", router_report(runs, meta), args.out)
    finally:
        if router is not None:
            router.stop()
        if servers is not None:
            servers.stop()
        memory.stop()
    lines = router_report(runs, meta)
    target_file = save("gpu_router.txt", lines, args.out)
    print("\n".join(lines))
    print(f"written to {target_file}")


def router_report(runs: list[dict[str, Any]], meta: dict[str, Any]) -> list[str]:
    def flags(settings: dict[str, Any]) -> str:
        return " ".join(f"--{k} {v}" for k, v in settings.items())

    def gib(mib: int | None) -> str:
        return "-" if mib is None else f"{mib / GIB:.2f} GiB"

    n = meta["n"]
    lines = [*header("Several servers on one GPU behind vllm-router "
                     "(benchmarks/gpu_remote.py --router)", [
        f"servers:  {n} x `vllm serve` on GPU 0 behind vllm-router (policy "
        f"{meta['policy']}), each: {flags(meta['each'])}",
        f"beside:   1 x `vllm serve` on the same GPU, the whole 16 GiB budget: "
        f"{flags(meta['whole'])}",
        f"started:  all at once, up in {meta.get('servers_up_s', '-')} s",
        f"drop:     {meta['drop']}; {meta['tokens']} tokens a page (ignore_eos)",
        f"card:     {meta['card']}",
    ]), "",
        "| target | client | run | in flight | pages | failed | seconds | pages/s "
        "| from first queued | requests per server | running + waiting on mean |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        occ = r.get("occupancy")
        queued = r.get("queued_rate")
        lines.append(
            f"| {r['target']} | {r['client']} | {r['repeat']} | {r['in_flight']} | "
            f"{r['pages']} | {r['failed']} | {r['seconds']:.1f} | {r['rate']:.2f} | "
            f"{'-' if not queued else f'{queued:.2f}'} | "
            f"{' / '.join(f'{x:g}' for x in r['share'])} | "
            f"{'-' if not occ else f'{occ[0]:.1f} + {occ[1]:.1f}'} |")
    lines.append("")
    medians: dict[tuple[str, str], float] = {}
    for key in sorted({(r["target"], r["client"]) for r in runs}):
        rates = [r["rate"] for r in runs if (r["target"], r["client"]) == key]
        failed = sum(r["failed"] for r in runs if (r["target"], r["client"]) == key)
        medians[key] = statistics.median(rates)
        lines.append(f"median {key[0]}, {key[1]}: {medians[key]:.2f} pages/s over "
                     f"{len(rates)} run(s), {failed} failed")
    router_target = f"vllm-router, {n} servers"
    single = "one server, the whole budget"
    pairs = [((router_target, "daemon"), (router_target, "plain"),
              "daemon / plain client, both through the router"),
             ((single, "daemon"), (single, "plain"), "daemon / plain client, one server"),
             ((router_target, "daemon"), (single, "daemon"),
              "daemon through the router / daemon against one server"),
             ((router_target, "plain"), (single, "plain"),
              "plain client through the router / plain client against one server")]
    for a, b, what in pairs:
        if a in medians and b in medians:
            lines.append(f"{what}: {medians[a] / medians[b]:.3f} (medians)")
    sessions = meta.get("sessions") or []
    peaks = meta.get("peaks") or {}
    for i, session in enumerate(sessions):
        role = f"router's server {i + 1}" if i < n else "the one server"
        lines.append(f"{role}: peak {gib(peaks.get(session))} of GPU memory (nvidia-smi, "
                     "its processes)")
    if sessions:
        lines.append(f"the router's {n} servers together: peak {gib(meta.get('pair_peak'))} "
                     "(at one sample; the 16 GB card's budget is 16 GiB)")
    lines.append("Pages/s: the drop's pages over the time from the first request (plain) or "
                 "the drop (daemon, its 1 s settle included) to the last answer or sidecar; "
                 "'from first queued' leaves the settle out. Requests per server: each "
                 "server's vllm:request_success_total before and after the run (the daemon's "
                 "warm-up drop included). Failed: no answer, an HTTP error, or not a chat "
                 "completion.")
    return lines


def main() -> None:
    faulthandler.enable()  # a native crash in a decoder thread names its stack
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", nargs="?", help="LightOnOCR-2-1B-shaped model folder to serve")
    parser.add_argument("--url", action="append", default=[],
                        help="a running server's base URL instead (repeatable)")
    parser.add_argument("--gpus", type=int, default=1, help="GPUs to serve on (default 1)")
    parser.add_argument("--dp", action="store_true",
                        help="one server with --data-parallel-size GPUS, not one per GPU")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--warm", default="6,6,1",
                        help="the daemon's warm-up drop before the timed one: A4 pages, card "
                             "photos, four-page PDFs (default 6,6,1: every size the drop holds)")
    parser.add_argument("--concurrency", type=int, action="append", default=[],
                        help="the daemon's remote.concurrency (repeatable; default 2 x "
                             "max_num_seqs per server)")
    parser.add_argument("--seeds-in-flight", type=int, default=2)
    parser.add_argument("--no-seeds", dest="seeds", action="store_false",
                        help="leave out the seeds' client (2 in flight: the slowest run)")
    parser.add_argument("--settle", type=float, default=1.0,
                        help="the daemon's settle_seconds (gpu_daemon.py's default)")
    parser.add_argument("--drop", default="24,24,4",
                        help="A4 pages, card photos, four-page PDFs (default 24,24,4)")
    parser.add_argument("--embedded", type=float,
                        help="the embedded engine's pages/s on this drop and card")
    parser.add_argument("--embedded-json", type=Path,
                        help="or gpu_daemon.py's --json file from the same machine")
    parser.add_argument("--out", type=Path, help="report file (default "
                                                 "benchmarks/results/remote.txt)")
    parser.add_argument("--work", type=Path, help="where the drop and logs go (default: temp)")
    parser.add_argument("--router", type=int, default=0, metavar="N",
                        help="N servers on GPU 0, each planned for 16/N GiB, behind "
                             "vllm-router, beside one server of the whole budget")
    parser.add_argument("--router-port", type=int, default=30080)
    parser.add_argument("--router-policy", default="power_of_two",
                        help="vllm-router's --policy (default power_of_two)")
    parser.add_argument("--no-single", dest="single", action="store_false",
                        help="--router without the one server of the whole budget")
    parser.add_argument("--repeat", type=int, default=1,
                        help="--router: runs of each client against each target")
    parser.add_argument("--start-timeout", type=float, default=420.0)
    parser.add_argument("--timeout", type=float, default=600.0, help="per run")
    args = parser.parse_args()
    # A time limit's SIGTERM ends the servers too (they run in sessions of their own).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if not args.model and not args.url:
        parser.error("give MODEL_DIR to serve, or --url of a running server")
    if args.embedded is None and args.embedded_json and args.embedded_json.exists():
        daemon = json.loads(args.embedded_json.read_text()).get("daemon") or {}
        args.embedded = daemon.get("rate")

    work = args.work or Path(tempfile.mkdtemp(prefix="ocrwatch-remote-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    a4, cards, pdfs = drop_counts(args.drop)
    folder = work / "drop"
    for old in [folder, *work.glob("daemon_*")]:  # an earlier run's files, not anything else
        shutil.rmtree(old, ignore_errors=True)
    t = time.monotonic()
    files = make_drop(folder, a4, cards, pdfs)
    print(f"drop: {len(files)} files, {sum(files.values())} pages, made in "
          f"{time.monotonic() - t:.1f} s", flush=True)

    if args.router:
        if not args.model:
            parser.error("--router starts its servers: give MODEL_DIR")
        run_router(args, folder, files, work)
        return
    card = total_mib()
    baseline = used_mib()  # before any server: the peaks below include it
    settings = serve_settings(args.tokens, card)
    sampler = Sampler() if card is not None else None
    servers: Servers | None = None
    meta_warm = "-"
    try:
        if args.url:
            urls = list(args.url)
            for url in urls:
                wait_healthy(url, None, None, time.monotonic() + args.start_timeout)
            where = f"{', '.join(urls)} (already running)"
        else:
            servers = Servers.start(args.model, args.gpus, args.dp, settings, args.port, work,
                                    args.start_timeout)
            urls = servers.urls
            where = (f"{len(urls)} x `vllm serve` ({'data parallel ' if args.dp else ''}"
                     f"{args.gpus} GPU{'s' if args.gpus > 1 else ''}), up in "
                     f"{servers.started_s:.0f} s")
            print(f"servers up in {servers.started_s:.0f} s: {urls}", flush=True)
        per_server = int(settings["max-num-seqs"]) * (args.gpus if args.dp else 1)
        concurrencies = args.concurrency or [2 * per_server * len(urls)]
        top = max(concurrencies)
        runs: list[tuple[str, int, dict[str, Any]]] = []
        # A fresh server's first pages pay its one-off work (kernel compiles, the first
        # images through its processor): one untimed pass of every page first, so that
        # each timed run below meets the same warm server.
        warm = run_plain(urls, folder, files, top, args.tokens, None, keep_alive=True)
        print(f"warm-up pass: {warm['pages']} pages in {warm['seconds']:.1f} s, "
              f"{warm['failed']} failed", flush=True)
        meta_warm = f"{warm['pages']} pages in {warm['seconds']:.1f} s, {warm['failed']} failed"
        with Occupancy(urls) as occupancy:
            result = run_plain(urls, folder, files, top, args.tokens, sampler, keep_alive=True)
        result["occupancy"] = occupancy.busy_means()
        runs.append(("plain httpx client, kept-alive, base64 PNG", top, result))
        print(f"plain client, {top} in flight: {result['rate']:.2f} pages/s, "
              f"{result['failed']} failed, {result['empty']} empty", flush=True)
        for c in concurrencies:
            with Occupancy(urls) as occupancy:
                result = run_daemon(urls, folder, files, c, args.tokens, args.settle,
                                    work / f"daemon_{c}", sampler, args.timeout,
                                    drop_counts(args.warm))
            result["occupancy"] = occupancy.busy_means()
            runs.append(("ocrwatch daemon, remote engine", c, result))
            print(f"daemon, {c} in flight: {result['rate']:.2f} pages/s, "
                  f"{result['failed']} failed", flush=True)
        with Occupancy(urls) as occupancy:
            result = run_engine_alone(urls, folder, files, top, args.tokens, sampler)
        result["occupancy"] = occupancy.busy_means()
        runs.append(("the remote engine alone, pages prepared beforehand", top, result))
        print(f"engine alone, {top} in flight: {result['rate']:.2f} pages/s, "
              f"{result['failed']} failed, {result['empty']} empty", flush=True)
        if args.seeds:
            with Occupancy(urls) as occupancy:
                result = run_plain(urls, folder, files, args.seeds_in_flight, args.tokens,
                                   sampler, keep_alive=False)
            result["occupancy"] = occupancy.busy_means()
            runs.append(("seeds' client: plain HTTP, base64 PNG", args.seeds_in_flight, result))
            print(f"seeds' client: {result['rate']:.2f} pages/s, {result['failed']} failed, "
                  f"{result['empty']} empty", flush=True)
    finally:
        if servers is not None:
            servers.stop()
        if sampler is not None:
            sampler.stop()
    meta = {"servers": where, "settings": " ".join(f"--{k} {v}" for k, v in settings.items()),
            "drop": f"{a4} A4 JPEGs at 300 dpi, {cards} card photos, {pdfs} PDFs of 4 pages "
                    f"({sum(files.values())} pages)",
            "tokens": args.tokens, "embedded": args.embedded, "warm": meta_warm,
            "max_num_seqs": settings["max-num-seqs"],
            "card": (f"{card / GIB:.1f} GiB, {baseline} MiB in use before the servers started; "
                     "peaks are GPU 0's, that included" if card
                     else "no GPU seen (nvidia-smi absent)")}
    lines = report(runs, meta)
    target = save("remote.txt", lines, args.out)
    print("\n".join(lines))
    print(f"written to {target}")


if __name__ == "__main__":
    main()

"""The real daemon with the embedded vLLM engine, on one GPU, under a 16 GB card's budget.

    python3 benchmarks/gpu_daemon.py MODEL_DIR [--out FILE] [--tokens 500]
    python3 benchmarks/gpu_daemon.py --prepare-only     # the page preparation rates, any CPU

MODEL_DIR is a LightOnOCR-2-1B-shaped folder (../shared/gpu/make_model.py) loaded with
random weights (``load_format = "dummy"``); every page writes exactly ``--tokens``
tokens (``ignore_eos``). The drop is benchmarks/gpu_remote.py's: 24 A4 pages scanned at
300 dpi (JPEG), 24 card photos (JPEG) and 4 PDFs of four A4 pages, 64 pages. In one run:

1. page preparation alone: the daemon's own page loader (decode, rotate, scale to
   1540 px) over the drop, one thread, pages/s for A4 JPEGs, card photos and PDF pages;
2. the daemon: ``ocrwatch run`` with a config file (``engine = "vllm"``), a warm-up file
   read first, then every file of the drop moved into the inbox at once; timed from the
   drop to the last sidecar, the card's memory sampled every 0.1 s;
3. the engine alone, in this process, on the same 64 pages prepared beforehand, fed the
   daemon's way (``policy.concurrency`` threads, a page each): the figure the daemon is
   held to (goal: the daemon at least 0.9x of it, with the peak under 16 GiB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_engine import Sampler, used_mib  # noqa: E402
from gpu_remote import (  # noqa: E402
    _done_pages,
    _failures,
    _text_page,
    _toml_list,
    _wait_jobs,
    make_drop,
)

GIB = 1024.0
LIMIT_GIB = 16.0


def kind_of(name: str) -> str:
    return "a4" if name.startswith("a4_") else "card" if name.startswith("card_") else "pdf"


def prepare_rates(folder: Path, files: dict[str, int]) -> dict[str, Any]:
    """The daemon's page loader alone, one thread: pages/s for each kind of file."""
    from ocrwatch.config import Config
    from ocrwatch.engines.lightonocr import MAX_SIDE
    from ocrwatch.pages import iter_pages

    config = Config()
    seconds: dict[str, float] = {"a4": 0.0, "card": 0.0, "pdf": 0.0}
    pages: dict[str, int] = {"a4": 0, "card": 0, "pdf": 0}
    for name in files:
        kind = kind_of(name)
        t = time.monotonic()
        for _page in iter_pages(folder / name, config, MAX_SIDE):
            pages[kind] += 1
        seconds[kind] += time.monotonic() - t
    return {k: {"pages": pages[k], "s": round(seconds[k], 2),
                "pages_per_s": round(pages[k] / seconds[k], 2) if seconds[k] else None}
            for k in pages}


def run_daemon(model: str, folder: Path, files: dict[str, int], tokens: int, settle: float,
               work: Path, sampler: Sampler | None, timeout: float) -> dict[str, Any]:
    """`ocrwatch run` with the vLLM engine: warm-up file, then the whole drop at once."""
    home = work / "home"
    inbox, staging = work / "inbox", work / "staging"
    for d in (home, inbox, staging, work / "run"):
        d.mkdir(parents=True, exist_ok=True)
    os.chmod(work / "run", 0o700)
    database = work / "index.sqlite3"
    config = work / "config.toml"
    config.write_text("\n".join([
        f"inbox = {_toml_list([str(inbox)])}",
        f"database = {json.dumps(str(database))}",
        'engine = "vllm"',
        f"settle_seconds = {settle}",
        "rescan_minutes = 60.0",
        "[vllm]",
        f"model = {json.dumps(model)}",
        'load_format = "dummy"',
        f"max_tokens = {tokens}",
        "ignore_eos = true",
        "idle_sleep_seconds = 0.0",
        "idle_stop_seconds = 0.0",
    ]) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OCRWATCH_", "XDG_"))}
    # HOME stays: vLLM's compile cache (~/.cache/vllm) is the user's, shared across starts.
    env.update({"XDG_CONFIG_HOME": str(home / ".config"),
                "XDG_DATA_HOME": str(home / ".local/share"),
                "XDG_STATE_HOME": str(home / ".local/state"),
                "XDG_RUNTIME_DIR": str(work / "run"),
                "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT),
                                                            os.environ.get("PYTHONPATH")]))})
    env.pop("DISPLAY", None)
    env.pop("WAYLAND_DISPLAY", None)
    log = (work / "daemon.log").open("wb")
    launched = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ocrwatch", "run", "--no-tray",
                             "--config", str(config)], stdout=log, stderr=subprocess.STDOUT,
                            env=env)
    try:
        # Warm-up: a file of its own (a copy of a dropped one would make that one a
        # duplicate, which the daemon does not read again), read before the clock starts.
        _text_page(2480, 3508, 999).save(staging / "warmup.jpg", quality=85, dpi=(300, 300))
        os.rename(staging / "warmup.jpg", inbox / "warmup.jpg")
        _wait_jobs(database, 1, proc, time.monotonic() + timeout)
        first_file_s = time.monotonic() - launched
        for name in files:
            shutil.copy(folder / name, staging / name)
        started_wall, started = time.time(), time.monotonic()
        for name in files:  # the drop: every file appears at once, whole
            os.rename(staging / name, inbox / name)
        states = _wait_jobs(database, 1 + len(files), proc, time.monotonic() + timeout)
        ended_wall = max((inbox / name).with_suffix(".md").stat().st_mtime
                         for name in files if (inbox / name).with_suffix(".md").exists())
        pages = _done_pages(database, inbox, files)
        peak = sampler.peak(started) if sampler else None
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()
    seconds = ended_wall - started_wall
    return {"pages": pages, "failed": states.get("failed", 0), "seconds": round(seconds, 2),
            "rate": round(pages / seconds, 3), "peak_mib": peak,
            "first_file_s": round(first_file_s, 1), "errors": _failures(database)}


def run_engine_alone(model: str, folder: Path, files: dict[str, int], tokens: int,
                     sampler: Sampler | None) -> dict[str, Any]:
    """The same pages, prepared first, straight into the engine the daemon's way."""
    from ocrwatch.config import Config
    from ocrwatch.engines.vllm import VllmEngine
    from ocrwatch.pages import iter_pages

    config = Config()
    config.vllm.model = model
    config.vllm.load_format = "dummy"
    config.vllm.max_tokens = tokens
    config.vllm.ignore_eos = True
    config.vllm.idle_sleep_seconds = config.vllm.idle_stop_seconds = 0
    engine = VllmEngine(config)
    try:
        t = time.monotonic()
        engine.start()
        start_s = time.monotonic() - t
        warm = [p for p in iter_pages(folder / next(iter(files)), config, engine.max_side)]
        engine.recognize(warm)
        # The daemon's order: files as they were dropped, pages in order within each.
        pages = [p for name in files for p in iter_pages(folder / name, config, engine.max_side)]
        since = time.monotonic()
        with ThreadPoolExecutor(engine.policy.concurrency) as pool:
            out = [r for rs in pool.map(lambda p: engine.recognize([p]), pages) for r in rs]
        seconds = time.monotonic() - since
        bad = [r.error for r in out if r.error]
        return {"pages": len(pages), "seconds": round(seconds, 2),
                "rate": round(len(pages) / seconds, 3), "errors": bad[:3],
                "peak_mib": sampler.peak(since) if sampler else None,
                "start_s": round(start_s, 1), "most_in_flight": engine.most_in_flight}
    finally:
        engine.close()


def report(meta: dict[str, Any], prep: dict[str, Any], daemon: dict[str, Any] | None,
           alone: dict[str, Any] | None) -> str:
    base = meta.get("baseline_mib") or 0

    def gib(mib: int | None) -> str:
        return "n/a" if mib is None else f"{(mib - base) / GIB:.2f} GiB"

    lines = [
        "ocrwatch GPU daemon benchmark",
        f"date: {meta['date']}  machine: {meta['gpu']}  cpu cores: {meta['cores']}  "
        f"vLLM {meta['vllm']}",
        f"model: LightOnOCR-2-1B shape, random weights (load_format=dummy), bf16; "
        f"{meta['tokens']} output tokens a page (ignore_eos); the engine's default 16 GiB budget",
        f"drop: {meta['files']} files, {meta['pages']} pages: 24 A4 300-dpi JPEGs, 24 card "
        "photos, 4 four-page PDFs (benchmarks/gpu_remote.py's make_drop); settle_seconds "
        f"{meta['settle']}",
        "",
        "page preparation alone (the daemon's loader: decode, rotate, scale to 1540 px; one "
        "thread):",
    ]
    for kind in ("a4", "card", "pdf"):
        p = prep[kind]
        lines.append(f"  {kind}: {p['pages']} pages in {p['s']} s, {p['pages_per_s']} pages/s")
    lines += ["", "| run | pages | seconds | pages/s | peak card memory |", "|---|---|---|---|---|"]
    if alone is not None:
        lines.append(f"| the engine alone, same pages prepared beforehand | {alone['pages']} | "
                     f"{alone['seconds']} | {alone['rate']:.2f} | {gib(alone['peak_mib'])} |")
    if daemon is not None:
        lines.append(f"| the daemon (`ocrwatch run`), drop to last sidecar | {daemon['pages']} | "
                     f"{daemon['seconds']} | {daemon['rate']:.2f} | {gib(daemon['peak_mib'])} |")
    lines.append("")
    if daemon is not None:
        lines.append(f"daemon: first file (engine start included) {daemon['first_file_s']} s "
                     f"after launch; failed files {daemon['failed']} {daemon['errors']}")
    if alone is not None:
        lines.append(f"engine alone: start {alone['start_s']} s; pages in flight at most "
                     f"{alone['most_in_flight']}; errors {alone['errors']}")
    if daemon is not None and alone is not None:
        ratio = daemon["rate"] / alone["rate"]
        peak = (daemon["peak_mib"] - base) / GIB if daemon["peak_mib"] is not None else None
        lines.append(f"daemon / engine alone: {ratio:.2f}x (goal 0.9x); daemon's peak "
                     f"{'n/a' if peak is None else f'{peak:.2f}'} GiB (goal under "
                     f"{LIMIT_GIB:.0f} GiB)")
    lines.append(f"memory figures are what each run added to the card; {base} MiB were in use "
                 "before the benchmark started")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="LightOnOCR-shaped model folder")
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/ocrwatch-daemon-bench"))
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    parser.add_argument("--timeout", type=float, default=400.0)
    parser.add_argument("--prepare-only", action="store_true",
                        help="only the page preparation rates (no GPU needed)")
    args = parser.parse_args()
    if not args.prepare_only and not args.model:
        parser.error("give the model folder, or --prepare-only")
    shutil.rmtree(args.work, ignore_errors=True)
    folder = args.work / "drop"
    files = make_drop(folder)
    gpu = shutil.which("nvidia-smi") is not None and not args.prepare_only
    meta: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "tokens": args.tokens,
                            "files": len(files), "pages": sum(files.values()),
                            "settle": args.settle, "cores": os.cpu_count(),
                            "baseline_mib": used_mib() if gpu else None,
                            "gpu": "none", "vllm": "-"}
    if gpu:
        meta["gpu"] = subprocess.check_output(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            text=True).strip()
        import importlib.metadata

        meta["vllm"] = importlib.metadata.version("vllm")
    prep = prepare_rates(folder, files)
    print("prepare:", json.dumps(prep), flush=True)
    saved: dict[str, Any] = {"meta": meta, "prepare": prep, "daemon": None, "alone": None}
    if gpu:
        sampler = Sampler()
        saved["daemon"] = run_daemon(args.model, folder, files, args.tokens, args.settle,
                                     args.work, sampler, args.timeout)
        print("daemon:", json.dumps(saved["daemon"]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(saved, indent=1))
        sampler.settle(3.0)
        saved["alone"] = run_engine_alone(args.model, folder, files, args.tokens, sampler)
        print("engine alone:", json.dumps(saved["alone"]), flush=True)
        sampler.stop()
    text = report(meta, prep, saved["daemon"], saved["alone"])
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(saved, indent=1))


if __name__ == "__main__":
    main()

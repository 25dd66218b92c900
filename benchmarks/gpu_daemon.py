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
   drop to the last sidecar, the card's memory sampled every 0.1 s; then, once the engine
   has ended on idle (``idle_stop_seconds`` 10), one more A4 page, timed to its sidecar:
   the first page after an idle stop;
3. the engine alone, in this process, on the same 64 pages prepared beforehand, fed the
   daemon's way (``policy.concurrency`` threads, a page each): the figure the daemon is
   held to (goal: the daemon at least 0.9x of it, with the peak under 16 GiB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from _drop import make_drop, run_daemon_on_drop  # noqa: E402
from gpu_engine import Sampler, emit, gpu_facts, used_mib  # noqa: E402

from ocrwatch.engines.base import gpu_preparers  # noqa: E402

GIB = 1024.0
LIMIT_GIB = 16.0
IDLE_STOP_S = 10.0  # short, so that the run also times the first page after an idle stop


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
    rates: dict[str, Any] = {
        k: {"pages": pages[k], "s": round(seconds[k], 2),
            "pages_per_s": round(pages[k] / seconds[k], 2) if seconds[k] else None}
        for k in pages}
    # The daemon's way for a GPU engine: its preparers, a file each, all the drop at once.
    threads = gpu_preparers()

    def count(name: str) -> int:
        return sum(1 for _ in iter_pages(folder / name, config, MAX_SIDE))

    t = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(count, files))
    dt = time.monotonic() - t
    rates["all_threads"] = {"threads": threads, "pages": total, "s": round(dt, 2),
                            "pages_per_s": round(total / dt, 2)}
    one = sum(seconds.values())
    rates["all_one_thread"] = {"pages": total, "s": round(one, 2),
                               "pages_per_s": round(total / one, 2)}
    return rates


def run_daemon(model: str, folder: Path, files: dict[str, int], tokens: int, settle: float,
               work: Path, sampler: Sampler | None, timeout: float,
               torch_compile: bool) -> dict[str, Any]:
    """`ocrwatch run` with the vLLM engine on the drop (benchmarks/_drop.py)."""
    return run_daemon_on_drop([
        'engine = "vllm"',
        "[vllm]",
        f"model = {json.dumps(model)}",
        'load_format = "dummy"',
        f"max_tokens = {tokens}",
        "ignore_eos = true",
        f"torch_compile = {'true' if torch_compile else 'false'}",
        "idle_sleep_seconds = 0.0",
        f"idle_stop_seconds = {IDLE_STOP_S}",
    ], folder, files, work, settle, sampler, timeout, idle_mark="vLLM worker ended (idle)")


def run_engine_alone(model: str, folder: Path, files: dict[str, int], tokens: int,
                     sampler: Sampler | None, torch_compile: bool) -> dict[str, Any]:
    """The same pages, prepared first, straight into the engine the daemon's way."""
    from ocrwatch.config import Config
    from ocrwatch.engines.vllm import VllmEngine
    from ocrwatch.pages import iter_pages

    config = Config()
    config.vllm.model = model
    config.vllm.load_format = "dummy"
    config.vllm.max_tokens = tokens
    config.vllm.ignore_eos = True
    config.vllm.torch_compile = torch_compile
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
        f"{meta['tokens']} output tokens a page (ignore_eos); the engine's default 16 GiB budget; "
        f"torch.compile {'on' if meta.get('torch_compile') else 'off'}",
        f"drop: {meta['files']} files, {meta['pages']} pages: 24 A4 300-dpi JPEGs, 24 card "
        "photos, 4 four-page PDFs (benchmarks/gpu_remote.py's make_drop); settle_seconds "
        f"{meta['settle']}",
        "",
        "page preparation alone (the daemon's loader: decode, rotate, scale to 1540 px; one "
        f"thread; the daemon runs {meta.get('preparers', 1)} such preparers, a file each):",
    ]
    for kind in ("a4", "card", "pdf"):
        p = prep[kind]
        lines.append(f"  {kind}: {p['pages']} pages in {p['s']} s, {p['pages_per_s']} pages/s")
    if "all_threads" in prep:
        one, many = prep["all_one_thread"], prep["all_threads"]
        lines.append(f"  the whole drop: one thread {one['pages_per_s']} pages/s; "
                     f"{many['threads']} threads, a file each, {many['pages_per_s']} pages/s "
                     f"({many['pages_per_s'] / one['pages_per_s']:.2f}x)")
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
        lines.append(f"daemon: idle_stop_seconds {IDLE_STOP_S:g}; after the worker had ended on "
                     f"idle, one more A4 page was read in {daemon['after_idle_stop_s']} s "
                     "(engine start included; goal 30 s)")
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
    parser.add_argument("--torch-compile", action="store_true",
                        help="vLLM's torch.compile on (vllm.torch_compile = true)")
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
                            "preparers": gpu_preparers(),
                            "torch_compile": args.torch_compile,
                            "baseline_mib": used_mib() if gpu else None,
                            "gpu": "none", "vllm": "-"}
    if gpu:
        meta.update(gpu_facts())
    prep = prepare_rates(folder, files)
    print("prepare:", json.dumps(prep), flush=True)
    saved: dict[str, Any] = {"meta": meta, "prepare": prep, "daemon": None, "alone": None}
    if gpu:
        sampler = Sampler()
        saved["daemon"] = run_daemon(args.model, folder, files, args.tokens, args.settle,
                                     args.work, sampler, args.timeout, args.torch_compile)
        print("daemon:", json.dumps(saved["daemon"]), flush=True)
        if args.json:
            args.json.write_text(json.dumps(saved, indent=1))
        sampler.settle(3.0)
        saved["alone"] = run_engine_alone(args.model, folder, files, args.tokens, sampler,
                                          args.torch_compile)
        print("engine alone:", json.dumps(saved["alone"]), flush=True)
        sampler.stop()
    emit(report(meta, prep, saved["daemon"], saved["alone"]), args.out, args.json, saved)


if __name__ == "__main__":
    main()

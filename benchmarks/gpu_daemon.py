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
   daemon's way (``policy.concurrency`` threads, a page each);
4. plain vLLM on the same 64 pages, each setting in a process of its own:
   ``LLM.generate`` with every page at once, ``max_num_seqs`` 8, 16 and 24, at
   utilization 0.0926 of the card (the 16 GB card's budget less 3 GiB, as measured
   before) and the engine's step size (``max_num_batched_tokens``), ``max_model_len``
   and CUDA-graph settings; a first pass warms it up, the second is timed. The best of
   those that peaked under 16 GiB is the figure to beat: goals the daemon at 1.0x of it
   and the engine alone at 1.05x, each peaking under 16 GiB. Plain vLLM runs with its own
   LightOnOCR class; ``--plain-pagewise-seqs`` adds runs with the engine's page-at-a-time
   vision encoder, which tell that gain from the rest of the engine's.

The daemon and the engine plan for a 16 GB card (``vllm.card_gb = 16``): what other
programs hold on the card counts against it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import os
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._drop import (  # noqa: E402
    STEPS,
    drop_counts,
    make_drop,
    page_timeline,
    run_daemon_on_drop,
    vllm_lines,
)
from benchmarks.gpu_engine import Sampler, emit, gpu_facts, used_mib  # noqa: E402
from ocrwatch.core.cpus import usable_cores  # noqa: E402
from ocrwatch.engines.base import gpu_preparers  # noqa: E402


def osd_data() -> str:
    """Where Tesseract's osd data was found, or "none" (then pages are not turned)."""
    for folder in (os.environ.get("TESSDATA_PREFIX"), "/usr/share/tesseract-ocr/5/tessdata",
                   "/usr/share/tesseract-ocr/4.00/tessdata", "/usr/share/tessdata"):
        if folder and (Path(folder) / "osd.traineddata").exists():
            return folder
    return "none"

GIB = 1024.0
LIMIT_GIB = 16.0
IDLE_STOP_S = 10.0  # short, so that the run also times the first page after an idle stop
PLAIN_SEQS = (16, 24, 32)
# Plain vLLM's memory: the 16 GB card's budget less 3 GiB (docs/gpu.md), as a share of the
# card it runs on: 0.0926 of the H200's 143771 MiB, 0.1632 of an H100's 81559 MiB.
PLAIN_BUDGET_MIB = 0.0926 * 143771


def plain_share(total_mib: float) -> float:
    """vLLM's gpu_memory_utilization that gives plain vLLM the same 13.0 GiB on any card."""
    return round(PLAIN_BUDGET_MIB / total_mib, 4)


def card_total_mib() -> float:
    import subprocess

    out = subprocess.check_output(["nvidia-smi", "--query-gpu=memory.total",
                                   "--format=csv,noheader,nounits"], text=True)
    return float(out.split()[0])
CARD_GB = 16.0  # the card the daemon and the engine plan for
# vLLM's own account of its memory at start, kept from the logs for the report.
VLLM_MEMORY_LINES = ("Model loading took", "Available KV cache memory", "reserved",
                     "Graph capturing finished", "for peak activation", "KV cache size",
                     "Maximum concurrency")


def kind_of(name: str) -> str:
    return "a4" if name.startswith("a4_") else "card" if name.startswith("card_") else "pdf"


def prepare_rates(folder: Path, files: dict[str, int]) -> dict[str, Any]:
    """The daemon's page loader alone, one thread: pages/s for each kind of file."""
    from ocrwatch.config import Config
    from ocrwatch.engines import profiles

    MAX_SIDE = profiles.get(profiles.DEFAULT).max_side
    from ocrwatch.pages.decode import iter_pages
    from ocrwatch.scan import deskew
    from ocrwatch.scan.prepare import ScanPrep

    config = Config()
    # Blank pages, orientation and skew, as the daemon checks them for a model engine.
    scan = ScanPrep(config, least_skew=deskew.JUDGED_ANGLE)
    seconds: dict[str, float] = {"a4": 0.0, "card": 0.0, "pdf": 0.0}
    pages: dict[str, int] = {"a4": 0, "card": 0, "pdf": 0}

    def count(name: str) -> int:
        """Prepare one file's pages as the daemon does; how many there were."""
        n = 0
        for page in iter_pages(folder / name, config, MAX_SIDE):
            scan.prepare(page)
            n += 1
        return n

    for name in files:
        kind = kind_of(name)
        t = time.monotonic()
        pages[kind] += count(name)
        seconds[kind] += time.monotonic() - t
    rates: dict[str, Any] = {
        k: {"pages": pages[k], "s": round(seconds[k], 2),
            "pages_per_s": round(pages[k] / seconds[k], 2) if seconds[k] else None}
        for k in pages}
    # The daemon's way for a GPU engine: its preparers, a file each, all the drop at once.
    threads = gpu_preparers(config.rotate_pages)

    t = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        total = sum(pool.map(count, files))
    dt = time.monotonic() - t
    rates["all_threads"] = {"threads": threads, "pages": total, "s": round(dt, 2),
                            "pages_per_s": round(total / dt, 2)}
    scan.close()
    one = sum(seconds.values())
    rates["all_one_thread"] = {"pages": total, "s": round(one, 2),
                               "pages_per_s": round(total / one, 2)}
    return rates


def fill_lines(fill: list[list[float]], alone: dict[str, Any] | None) -> list[str]:
    """How soon the drop's pages took the engine's places: vLLM's requests running (and
    waiting) at each scrape of the drop's first 8 s, and when the running first reached
    the most the engine alone had in flight (its places, less 10%)."""
    if not fill:
        return []
    shown = ", ".join(f"{t:g} s {running:g}" + (f"+{waiting:g}" if waiting else "")
                      for t, running, waiting in fill if t <= 8.0)
    lines = ["  the engine's places taken (requests running, +waiting), seconds after the "
             f"drop: {shown}"]
    if alone is not None and alone.get("most_in_flight"):
        full = round(0.9 * min(float(alone["most_in_flight"]), float(alone.get("max_num_seqs")
                                                                    or alone["most_in_flight"])))
        first = next((t for t, running, _ in fill if running >= full), None)
        lines.append(f"  {full:g} places or more first taken {first:g} s after the drop"
                     if first is not None else f"  never {full:g} places or more at once")
    return lines


def run_daemon(model: str, folder: Path, files: dict[str, int], tokens: int, settle: float,
               work: Path, sampler: Sampler | None, timeout: float,
               torch_compile: bool, warm: tuple[int, int, int] = (1, 0, 0),
               metrics_port: int | None = None, processes: bool = True,
               timeline: bool = False, idle: bool = True) -> dict[str, Any]:
    """`ocrwatch run` with the vLLM engine on the drop (benchmarks/_drop.py); with
    ``metrics_port``, its /metrics scraped while the drop is read; ``processes``: its
    pages prepared in processes (vllm.prepare_processes), else in its threads;
    ``timeline``: each page's way through the engine, from its debug log; ``idle``: a page
    after the engine's idle stop timed too."""
    return run_daemon_on_drop([
        *vllm_lines(model, tokens),
        f"prepare_processes = {'true' if processes else 'false'}",
        f"torch_compile = {'true' if torch_compile else 'false'}",
        "idle_sleep_seconds = 0.0",
        f"idle_stop_seconds = {IDLE_STOP_S}",
        f"card_gb = {CARD_GB}",
        "standby = true",
        # After the idle stop: the standby's imports done, so the page then dropped pays
        # only the engine's creation (a page later than 20 s after the stop, as after lunch).
    ], folder, files, work, settle, sampler, timeout,
        idle_mark="vLLM standby ready" if idle else None, warm=warm,
        metrics_port=metrics_port, timeline=timeline)


class _Lines(logging.Handler):
    """The feeder's debug lines (its page timeline), kept."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def run_engine_alone(model: str, folder: Path, files: dict[str, int], tokens: int,
                     sampler: Sampler | None, torch_compile: bool,
                     timeline: bool = False) -> dict[str, Any]:
    """The same pages, prepared first, straight into the engine the daemon's way; with
    ``timeline``, the timed pass's pages' way through the engine."""
    from ocrwatch.config import Config
    from ocrwatch.engines.vllm import VllmEngine
    from ocrwatch.pages.decode import iter_pages

    config = Config()
    config.vllm.model = model
    config.vllm.load_format = "dummy"
    config.vllm.max_tokens = tokens
    config.vllm.ignore_eos = True
    config.vllm.torch_compile = torch_compile
    config.vllm.idle_sleep_seconds = config.vllm.idle_stop_seconds = 0
    config.vllm.card_gb = CARD_GB
    engine = VllmEngine(config)
    try:
        t = time.monotonic()
        engine.start()
        start_s = time.monotonic() - t
        # The daemon's order: files as they were dropped, pages in order within each.
        pages = [p for name in files for p in iter_pages(folder / name, config, engine.max_side)]
        # Two passes, as plain vLLM's below: the first pays the one-off work of each new
        # batch shape and page size, the second is timed.
        passes = []
        feeder_log = logging.getLogger("ocrwatch.engines.vllm.feeder")
        kept = _Lines()
        if timeline:
            feeder_log.setLevel(logging.DEBUG)
            feeder_log.addHandler(kept)
        for _ in range(2):
            kept.lines.clear()
            since = time.monotonic()
            with ThreadPoolExecutor(engine.policy.concurrency) as pool:
                out = [r for rs in pool.map(lambda p: engine.recognize([p]), pages) for r in rs]
            passes.append(time.monotonic() - since)
        warm_s, seconds = passes
        feeder_log.removeHandler(kept)
        bad = [r.error for r in out if r.error]
        return {"timeline": (page_timeline("\n".join(kept.lines), since, set(files))
                             if timeline else None),
                "pages": len(pages), "seconds": round(seconds, 2),
                "rate": round(len(pages) / seconds, 3), "errors": bad[:3],
                "warm_rate": round(len(pages) / warm_s, 3),
                "peak_mib": sampler.peak(since) if sampler else None,
                "start_s": round(start_s, 1), "most_in_flight": engine.most_in_flight,
                "plan": engine.plan.describe(), "max_num_seqs": engine.plan.max_num_seqs,
                "max_num_batched_tokens": engine.plan.max_num_batched_tokens,
                "max_model_len": engine.plan.max_model_len,
                "planned_gib": round(engine.plan.total_gib, 2)}
    finally:
        engine.close()


def drop_pages(folder: Path, files: dict[str, int]) -> list[Any]:
    """The drop's pages as the daemon's loader gives them, in the daemon's order."""
    from ocrwatch.config import Config
    from ocrwatch.engines import profiles

    MAX_SIDE = profiles.get(profiles.DEFAULT).max_side
    from ocrwatch.pages.decode import iter_pages

    config = Config()

    def load(name: str) -> list[Any]:
        return [p.image for p in iter_pages(folder / name, config, MAX_SIDE)]

    with ThreadPoolExecutor(gpu_preparers()) as pool:
        return [im for ims in pool.map(load, files) for im in ims]


def plain_main(model: str, folder: Path, tokens: int, seqs: int, step: int,
               max_model_len: int, pagewise: bool = False, util: float = 0.0926) -> None:
    """One plain vLLM setting on the drop's pages (its own process): RESULT line.

    vLLM's own LightOnOCR class, or with ``pagewise`` the engine's page-at-a-time
    encoder (engines/vllm/pagewise.py), to tell its gain from the rest of the engine's."""
    import dataclasses

    from vllm import LLM, SamplingParams

    from ocrwatch.engines import profiles


    PROMPT = profiles.get(profiles.DEFAULT).raw_prompt()
    from ocrwatch.engines.vllm.backends import _register_model_class, compilation_config
    from ocrwatch.engines.vllm.memory import plan_memory

    # The drop main() wrote; sorted, its names are in the order they were dropped.
    images = drop_pages(folder, {p.name: 1 for p in sorted(folder.iterdir())})
    sizes = dataclasses.replace(plan_memory(16.0, 16.0, tokens), max_num_seqs=seqs)
    t0 = time.monotonic()
    _register_model_class(model, pagewise=pagewise)
    llm = LLM(model=model, load_format="dummy", dtype="bfloat16", max_model_len=max_model_len,
              gpu_memory_utilization=util, max_num_seqs=seqs,
              max_num_batched_tokens=step, limit_mm_per_prompt={"image": 1},
              mm_processor_cache_gb=0, enable_prefix_caching=False, seed=0,
              compilation_config=compilation_config({"cudagraph_sizes": sizes.cudagraph_sizes}))
    start = time.monotonic() - t0
    sp = SamplingParams(temperature=0.2, top_p=0.9, max_tokens=tokens, ignore_eos=True)
    reqs = [{"prompt": PROMPT, "multi_modal_data": {"image": im}} for im in images]
    passes = []
    complete = 0
    for _ in range(2):  # the first pays vLLM's one-off kernel compiles
        t = time.monotonic()
        outs = llm.generate(reqs, sp, use_tqdm=False)
        passes.append((t, time.monotonic()))
        # The same work as the engine's: every page read, each writing all its tokens.
        complete = sum(1 for o in outs if o.outputs and len(o.outputs[0].token_ids) == tokens)
    (w0, w1), (t1, t2) = passes
    # The image encoder and the prompt alone (one token written): the compute-bound share
    # of a page, for the estimates per card class in docs/gpu.md.
    t = time.monotonic()
    llm.generate(reqs, SamplingParams(temperature=0.2, top_p=0.9, max_tokens=1), use_tqdm=False)
    prefill = time.monotonic() - t
    print("RESULT " + json.dumps({
        "seqs": seqs, "pagewise": pagewise, "pages": len(images), "start_s": round(start, 1),
        "complete": complete, "util": util, "prefill_s": round(prefill, 2),
        "warm_rate": round(len(images) / (w1 - w0), 3), "seconds": round(t2 - t1, 2),
        "rate": round(len(images) / (t2 - t1), 3), "window": [w0, t2], "timed": [t1, t2]}),
        flush=True)


def run_plain(model: str, folder: Path, tokens: int, seqs: int, step: int, max_model_len: int,
              sampler: Sampler | None, log: Path | None,
              pagewise: bool = False, util: float = 0.0926) -> dict[str, Any]:
    import subprocess

    cmd = [sys.executable, __file__, model, "--plain", str(seqs), "--tokens", str(tokens),
           "--plain-step", str(step), "--plain-len", str(max_model_len),
           "--work", str(folder.parent), "--plain-util", str(util),
           *(["--plain-pagewise"] if pagewise else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    if log is not None:
        with log.open("a") as f:
            f.write(f"=== plain vLLM, max_num_seqs {seqs}\n{proc.stdout}\n--- stderr ---\n"
                    f"{proc.stderr}\n")
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            result: dict[str, Any] = json.loads(line[len("RESULT "):])
            if sampler is not None:
                result["peak_mib"] = sampler.peak(*result["window"])
                result["timed_peak_mib"] = sampler.peak(*result["timed"])
            result["vllm_memory"] = [ln.split("] ", 1)[-1][:220] for ln in proc.stderr.splitlines()
                                     if any(k in ln for k in VLLM_MEMORY_LINES)][:8]
            return result
    return {"seqs": seqs, "pagewise": pagewise,
            "error": f"exit {proc.returncode}: {proc.stderr[-1500:]}"}


def best_plain(plain: list[dict[str, Any]], base: int) -> dict[str, Any] | None:
    """The fastest plain setting (vLLM's own encoder) whose card peak stayed under 16 GiB."""
    fits = [p for p in plain if "rate" in p and p.get("peak_mib") is not None
            and not p.get("pagewise") and (p["peak_mib"] - base) / GIB < LIMIT_GIB
            and p.get("complete", p.get("pages")) == p.get("pages")]
    return max(fits, key=lambda p: p["rate"]) if fits else None


DROP_WORDS = "24 A4 300-dpi JPEGs, 24 card photos, 4 PDFs of 4 A4 pages"


def timeline_lines(name: str, timeline: dict[str, Any] | None) -> list[str]:
    """A run's page timeline (benchmarks/_drop.page_timeline) as report lines."""
    if not timeline:
        return []
    if not timeline.get("pages"):
        return [f"{name}'s page timeline: no page timeline lines were logged"]
    lines = [f"{name}'s page timeline ({timeline['pages']} pages; seconds after the "
             "drop (the daemon) or the pass's start (the engine alone) by which the first, "
             "a quarter, half, three quarters and all of the pages had passed each step):"]
    for step in STEPS:
        lines.append(f"  {step}: " + ", ".join(f"{v}" for v in timeline[step].values()))
    lines.append("  medians between steps: " + ", ".join(
        f"{a}->{b} {timeline[f'{a}->{b}']} s" for a, b in itertools.pairwise(STEPS)))
    return lines


def report(meta: dict[str, Any], prep: dict[str, Any], daemon: dict[str, Any] | None,
           alone: dict[str, Any] | None, plain: list[dict[str, Any]] | None = None) -> str:
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
        f"cores usable {meta.get('usable_cores')} (affinity {meta.get('affinity')}); "
        f"Tesseract osd data: {meta.get('osd')}",
        f"drop: {meta['files']} files, {meta['pages']} pages: {meta.get('drop', DROP_WORDS)} "
        "(benchmarks/_drop.py's make_drop); settle_seconds "
        f"{meta['settle']}",
        "",
        "page preparation alone (the daemon's loader: decode, scale to 1540 px, blank, "
        "orientation and skew checks; one "
        f"thread; the daemon runs {meta.get('preparers', 1)} such preparers, a file each, "
        f"preparing pages {meta.get('preparation', 'in processes')}):",
    ]
    for kind in ("a4", "card", "pdf") if prep else ():
        p = prep[kind]
        lines.append(f"  {kind}: {p['pages']} pages in {p['s']} s, {p['pages_per_s']} pages/s")
    if "all_threads" in prep:
        one, many = prep["all_one_thread"], prep["all_threads"]
        lines.append(f"  the whole drop: one thread {one['pages_per_s']} pages/s; "
                     f"{many['threads']} threads, a file each, {many['pages_per_s']} pages/s "
                     f"({many['pages_per_s'] / one['pages_per_s']:.2f}x)")
    lines += ["", "| run | pages | seconds | pages/s | peak card memory |", "|---|---|---|---|---|"]
    if alone is not None:
        first = (f" (second pass; first {alone['warm_rate']:.2f})" if "warm_rate" in alone
                 else "")
        lines.append(f"| the engine alone, same pages prepared beforehand{first} | "
                     f"{alone['pages']} | {alone['seconds']} | {alone['rate']:.2f} | "
                     f"{gib(alone['peak_mib'])} |")
    if daemon is not None:
        lines.append(f"| the daemon (`ocrwatch run`), drop to last sidecar | {daemon['pages']} | "
                     f"{daemon['seconds']} | {daemon['rate']:.2f} | {gib(daemon['peak_mib'])} |")
    for p in plain or []:
        which = ("plain vLLM with the engine's page-at-a-time encoder" if p.get("pagewise")
                 else "plain vLLM")
        if "rate" in p:
            lines.append(f"| {which}, max_num_seqs {p['seqs']}, all pages at once (second "
                         f"pass; first {p['warm_rate']:.2f}) | {p['pages']} | {p['seconds']} | "
                         f"{p['rate']:.2f} | {gib(p.get('peak_mib'))} |")
            lines.append(f"|   pages written in full {p.get('complete')}/{p['pages']}; encoder "
                         f"and prompt alone (1 token a page) {p.get('prefill_s')} s | | | | |")
        else:
            lines.append(f"| {which}, max_num_seqs {p['seqs']} | failed: "
                         f"{p['error'][-200:]!r} | | | |")
    lines.append("")
    best = best_plain(plain or [], base)
    if best is not None:
        lines.append(f"best plain setting under {LIMIT_GIB:.0f} GiB: max_num_seqs {best['seqs']}, "
                     f"{best['rate']:.2f} pages/s (utilization {best.get('util')} of this "
                     "card: the 16 GB card's 13.0 GiB, "
                     f"{meta.get('plain_step')}-token steps, max_model_len "
                     f"{meta.get('plain_len')}, the engine's CUDA-graph settings)")
        if daemon is not None:
            lines.append(f"daemon / best plain: {daemon['rate'] / best['rate']:.2f}x (goal 1.1x)")
        if alone is not None:
            lines.append(f"engine alone / best plain: {alone['rate'] / best['rate']:.2f}x "
                         "(goal 1.05x)")
    elif plain:
        lines.append(f"no plain setting stayed under {LIMIT_GIB:.0f} GiB")
    for p in plain or []:
        if p.get("pagewise") and "rate" in p and alone is not None:
            lines.append(f"engine alone / plain vLLM at {p['seqs']} with the same encoder: "
                         f"{alone['rate'] / p['rate']:.2f}x (the memory plan and feeding "
                         "alone)")
    if daemon is not None:
        lines.append(f"daemon: first page's sidecar {daemon.get('first_page_s')} s after launch "
                     f"(goal 30 s with warm caches; {meta.get('caches', '?')}); the whole "
                     f"warm-up drop {daemon['first_file_s']} s; failed files {daemon['failed']} "
                     f"{daemon['errors']}")
        if daemon.get("after_idle_stop_s") is not None:
            lines.append(f"daemon: idle_stop_seconds {IDLE_STOP_S:g}; after the worker had "
                         "ended on idle and the standby process had imported vLLM, one more "
                         f"A4 page was read in {daemon['after_idle_stop_s']} s from its drop "
                         "to its sidecar (engine creation included; goal 10 s)")
    metrics = (daemon or {}).get("metrics")
    if metrics:
        lines.append(f"daemon's /metrics while the drop was read: {metrics['scrapes']} scrapes "
                     f"({metrics['failed']} failed), every {metrics.get('every', 0.5):g} s; "
                     "vLLM's own figures (ocrwatch_vllm_*), the most each showed and the last:")
        lines.extend(fill_lines(metrics.get("fill") or [], alone))
        for key in sorted(metrics["most"]):
            if key.endswith("_bucket") or "_bucket{" in key or "timestamp" in key:
                continue
            lines.append(f"  {key}: most {metrics['most'][key]:g}, last "
                         f"{metrics['last'][key]:g}, in {metrics['seen'][key]} scrapes")
        if not metrics["most"]:
            lines.append("  none: no ocrwatch_vllm_* series was served")
    for name, run in (("daemon", daemon), ("engine alone", alone)):
        lines.extend(timeline_lines(name, (run or {}).get("timeline")))
    if alone is not None:
        lines.append(f"engine alone: start {alone['start_s']} s; pages in flight at most "
                     f"{alone['most_in_flight']}; errors {alone['errors']}")
        lines.append(f"engine's memory plan: {alone.get('plan')}")
    for p in plain or []:
        for line in p.get("vllm_memory", [])[:4]:
            lines.append(f"plain {p['seqs']}, vLLM said: {line}")
    if daemon is not None and alone is not None:
        ratio = daemon["rate"] / alone["rate"]
        peak = (daemon["peak_mib"] - base) / GIB if daemon["peak_mib"] is not None else None
        lines.append(f"daemon / engine alone: {ratio:.2f}x; daemon's peak "
                     f"{'n/a' if peak is None else f'{peak:.2f}'} GiB (goal under "
                     f"{LIMIT_GIB:.0f} GiB)")
    lines.append(f"memory figures are what each run added to the card; {base} MiB were in use "
                 "before the benchmark started")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="LightOnOCR-shaped model folder")
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--drop", default="24,24,4,4",
                        help="the drop: A4 JPEGs, card photos, PDFs and pages a PDF "
                             "(default 24,24,4,4; 0,0,1,48 is one 48-page PDF)")
    parser.add_argument("--warm", default="6,6,1",
                        help="the daemon's warm-up drop before the timed one: A4 pages, card "
                             "photos, four-page PDFs (default 6,6,1: every size the drop holds)")
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--work", type=Path, default=Path("/tmp/ocrwatch-daemon-bench"))
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    parser.add_argument("--timeout", type=float, default=400.0)
    parser.add_argument("--torch-compile", action="store_true",
                        help="vLLM's torch.compile on (vllm.torch_compile = true)")
    parser.add_argument("--prepare-only", action="store_true",
                        help="only the page preparation rates (no GPU needed)")
    parser.add_argument("--skip-plain", action="store_true", help="no plain vLLM runs")
    parser.add_argument("--prepare-threads", action="store_true",
                        help="the daemon prepares pages in its threads "
                             "(vllm.prepare_processes = false), as before")
    parser.add_argument("--plain-only", action="store_true",
                        help="only plain vLLM (4096-token steps, max_model_len 3840: the "
                             "engine's plan at 500 tokens), for a call of its own")
    parser.add_argument("--plain-seqs", type=int, nargs="+", default=list(PLAIN_SEQS),
                        help="plain vLLM's max_num_seqs settings (default 8 16 24)")
    parser.add_argument("--plain-pagewise-seqs", type=int, nargs="*", default=[],
                        help="also plain vLLM with the engine's page-at-a-time encoder at "
                             "these max_num_seqs (default none)")
    parser.add_argument("--plain-log", type=Path, help="plain vLLM's output goes here")
    parser.add_argument("--metrics-port", type=int, default=9464,
                        help="the daemon serves its metrics here and they are scraped while "
                             "the drop is read (0: off)")
    parser.add_argument("--plain-pagewise", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--plain-util", type=float, default=0.0926, help=argparse.SUPPRESS)
    parser.add_argument("--skip-idle", action="store_true",
                        help="no page after the engine's idle stop (saves about 40 s)")
    parser.add_argument("--timeline", action="store_true",
                        help="each page's way through the engine (the daemon logs at DEBUG)")
    parser.add_argument("--skip-prepare", action="store_true",
                        help="no page preparation rates (they take a minute with orientation)")
    parser.add_argument("--caches", default="as found",
                        help="what the report says of vLLM's and Triton's caches at launch")
    parser.add_argument("--plain", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--plain-step", type=int, default=4096, help=argparse.SUPPRESS)
    parser.add_argument("--plain-len", type=int, default=3840, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plain:
        plain_main(args.model, args.work / "drop", args.tokens, args.plain, args.plain_step,
                   args.plain_len, args.plain_pagewise, args.plain_util)
        return
    if not args.prepare_only and not args.model:
        parser.error("give the model folder, or --prepare-only")
    from ocrwatch.config import Config

    shutil.rmtree(args.work, ignore_errors=True)
    folder = args.work / "drop"
    a4, cards, pdfs, *rest = (int(x) for x in args.drop.split(","))
    pdf_pages = rest[0] if rest else 4
    files = make_drop(folder, a4, cards, pdfs, pdf_pages)
    gpu = shutil.which("nvidia-smi") is not None and not args.prepare_only
    meta: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "tokens": args.tokens,
                            "files": len(files), "pages": sum(files.values()),
                            "settle": args.settle, "cores": os.cpu_count(),
                            "drop": (f"{a4} A4 300-dpi JPEGs, {cards} card photos, {pdfs} "
                                     f"PDFs of {pdf_pages} A4 pages"),
                            "preparers": gpu_preparers(Config().rotate_pages),
                            "usable_cores": usable_cores(), "caches": args.caches,
                            "affinity": len(os.sched_getaffinity(0)),
                            "osd": osd_data(),
                            "torch_compile": args.torch_compile,
                            "preparation": ("in threads" if args.prepare_threads
                                            else "in processes"),
                            "baseline_mib": used_mib() if gpu else None,
                            "gpu": "none", "vllm": "-"}
    if gpu:
        meta.update(gpu_facts())
    prep = {} if args.skip_prepare else prepare_rates(folder, files)
    print("prepare:", json.dumps(prep), flush=True)
    saved: dict[str, Any] = {"meta": meta, "prepare": prep, "daemon": None, "alone": None}
    if gpu:
        sampler = Sampler()
        if not args.plain_only:
            saved["daemon"] = run_daemon(args.model, folder, files, args.tokens, args.settle,
                                         args.work, sampler, args.timeout, args.torch_compile,
                                         drop_counts(args.warm), args.metrics_port or None,
                                         processes=not args.prepare_threads,
                                         timeline=args.timeline, idle=not args.skip_idle)
            print("daemon:", json.dumps(saved["daemon"]), flush=True)
            if args.json:
                args.json.write_text(json.dumps(saved, indent=1))
            sampler.settle(3.0)
            saved["alone"] = run_engine_alone(args.model, folder, files, args.tokens, sampler,
                                              args.torch_compile, timeline=args.timeline)
            print("engine alone:", json.dumps(saved["alone"]), flush=True)
            if args.json:
                args.json.write_text(json.dumps(saved, indent=1))
        saved["plain"] = []
        step = saved["alone"]["max_num_batched_tokens"] if saved["alone"] else 4096
        length = saved["alone"]["max_model_len"] if saved["alone"] else 3840
        util = plain_share(card_total_mib())
        meta.update(plain_step=step, plain_len=length, plain_util=util)
        runs = [(seqs, False) for seqs in args.plain_seqs]
        runs += [(seqs, True) for seqs in args.plain_pagewise_seqs]
        for seqs, pagewise in () if args.skip_plain else runs:
            sampler.settle(3.0)
            saved["plain"].append(run_plain(args.model, folder, args.tokens, seqs, step, length,
                                            sampler, args.plain_log, pagewise, util))
            print("plain:", json.dumps(saved["plain"][-1]), flush=True)
            # The report so far, so that a time limit met in a later run leaves this one's.
            if args.out:
                args.out.write_text(report(meta, prep, saved["daemon"], saved["alone"],
                                           saved["plain"]))
            if args.json:
                args.json.write_text(json.dumps(saved, indent=1))
        sampler.stop()
    emit(report(meta, prep, saved["daemon"], saved["alone"], saved.get("plain")), args.out,
         args.json, saved)


if __name__ == "__main__":
    main()

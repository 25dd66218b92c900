"""The embedded vLLM engine against plain vLLM, on one GPU, under a 16 GB card's budget.

    python3 benchmarks/gpu_engine.py MODEL_DIR [--out FILE] [--tokens 500] [--pages 16]
    python3 benchmarks/gpu_engine.py --fake          # the engine's side only, on any CPU

MODEL_DIR is a LightOnOCR-2-1B-shaped folder loaded with random weights
(load_format="dummy"), so compute and memory are the real model's. Every page writes
exactly ``--tokens`` tokens (ignore_eos). Every run reads the same pages: A4
(1088x1540), card-sized (800x500) and a mix of the two arriving interleaved. In one
process each, one after another on the same card:

- the daemon's engine: ``VllmEngine`` with its default budget (the card's size, capped
  at 16 GiB), fed the daemon's way (``policy.concurrency`` threads, one page each), then
  put to sleep, woken, stopped, and started once more. Its caches (vLLM's, Triton's,
  inductor's) are folders of its own, empty at first: the first start is a cold one and
  the second finds what the first left;
- plain vLLM, the reference: ``LLM.generate`` in pairs (``max_num_seqs=2``) at the 16 GB
  card's 0.9, mixed pages interleaved or sorted by size;
- plain vLLM, the strongest plain setting: ``LLM.generate`` with all the pages at once
  at the engine's own utilization, ``max_num_seqs``, ``max_num_batched_tokens`` and
  ``max_model_len``; then sleep level 1 and level 2, each with the card's memory after
  it and the wake time.

The card's memory is read with nvidia-smi every 0.1 s from outside all of them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

A4 = (1088, 1540)
# Where vLLM, Triton and inductor keep what they compile.
CACHE_VARS = ("VLLM_CACHE_ROOT", "TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")
CARD = (800, 500)
GIB = 1024


def used_mib() -> int | None:
    """Memory in use on the card, by every process (nvidia-smi, through ocrwatch.engines.gpu)."""
    from ocrwatch.engines import gpu

    return gpu.used_mib()


def total_mib() -> int | None:
    from ocrwatch.engines import gpu

    return gpu.card_memory_mib()


def gpu_facts() -> dict[str, str]:
    """The card's name and size, and vLLM's version, for a report's header."""
    import importlib.metadata

    card = subprocess.check_output(
        ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
        text=True).strip()
    return {"gpu": card, "vllm": importlib.metadata.version("vllm")}


def emit(text: str, out: Path | None, json_path: Path | None, saved: dict[str, Any]) -> None:
    """Print the report, and write it and the raw figures where asked."""
    print(text)
    if out:
        out.write_text(text)
    if json_path:
        json_path.write_text(json.dumps(saved, indent=1))


class Sampler:
    """Card memory every 0.1 s; ``peak(since)`` over any window."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpu-memory-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            value = used_mib()
            if value is None:
                return
            self.samples.append((time.monotonic(), value))
            self._stop.wait(0.1)

    def peak(self, since: float, until: float | None = None) -> int | None:
        values = [v for t, v in list(self.samples)
                  if t >= since and (until is None or t <= until)]
        return max(values) if values else None

    def settle(self, seconds: float = 1.5) -> int | None:
        """The card's use once it has stopped moving (after sleep or stop)."""
        time.sleep(seconds)
        return used_mib()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


def images(kind: str, n: int, seed: int = 0) -> list[Any]:
    """Noise pages, as in the reference runs: four distinct images of each size."""
    import random

    from PIL import Image

    rng = random.Random(seed)

    def page(w: int, h: int) -> Any:
        return Image.frombytes("RGB", (w, h), rng.randbytes(w * h * 3))

    a4 = [page(*A4) for _ in range(4)]
    card = [page(*CARD) for _ in range(4)]
    if kind == "a4":
        return [a4[i % 4] for i in range(n)]
    if kind == "card":
        return [card[i % 4] for i in range(n)]
    return [a4[i % 4] if i % 2 == 0 else card[i % 4] for i in range(n)]  # mixed, interleaved


def repeated(run: Any, imgs: list[Any], times: int) -> dict[str, Any]:
    """``run`` over the same pages ``times`` times: the median rate, and every rate."""
    return median_of([run(imgs) for _ in range(times)])


def median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Runs of one page set: the median rate and time, and every rate."""
    import statistics

    rates = [r["pages_per_s"] for r in runs]
    out = dict(runs[0], pages_per_s=round(statistics.median(rates), 3), rates=rates,
               s=round(statistics.median(r["s"] for r in runs), 2))
    if "most_in_flight" in runs[0]:
        out["most_in_flight"] = max(r["most_in_flight"] for r in runs)
    return out


LIKE_WAIT = 0.5  # the like-sizes-first admission the mix is also measured with


# -- plain vLLM, in its own process ------------------------------------------------------------


def raw_main(model: str, tokens: int, n: int, strongest: bool, repeats: int) -> None:
    from vllm import LLM, SamplingParams

    from ocrwatch.engines import profiles


    PROMPT = profiles.get(profiles.DEFAULT).raw_prompt()
    from ocrwatch.engines.vllm.memory import plan_memory

    total = total_mib() or 16 * GIB
    t0 = time.monotonic()
    if strongest:  # the engine's own settings, every page handed over at once
        plan = plan_memory(16.0, 16.0, tokens, device_gib=total / GIB)
        util = plan.gpu_memory_utilization
        llm = LLM(model=model, load_format="dummy", dtype="bfloat16",
                  max_model_len=plan.max_model_len, gpu_memory_utilization=util,
                  kv_cache_memory_bytes=plan.kv_cache_bytes, max_num_seqs=plan.max_num_seqs,
                  max_num_batched_tokens=plan.max_num_batched_tokens,
                  limit_mm_per_prompt={"image": 1}, mm_processor_cache_gb=0,
                  enable_prefix_caching=False, enable_sleep_mode=True, seed=0)
    else:  # the reference: pairs at the 16 GB card's usual 0.9
        util = 16 * 1024 * 0.9 / total
        llm = LLM(model=model, load_format="dummy", dtype="bfloat16", max_model_len=8192,
                  gpu_memory_utilization=util, max_num_seqs=2,
                  limit_mm_per_prompt={"image": 1}, mm_processor_cache_gb=0,
                  enable_prefix_caching=False, seed=0)
    start = time.monotonic() - t0
    sp = SamplingParams(temperature=0.2, top_p=0.9, max_tokens=tokens, ignore_eos=True,
                        detokenize=False)

    def run(imgs: list[Any]) -> dict[str, Any]:
        reqs = [{"prompt": PROMPT, "multi_modal_data": {"image": im}} for im in imgs]
        t = time.monotonic()
        llm.generate(reqs, sp, use_tqdm=False)
        dt = time.monotonic() - t
        done = {"pages": len(imgs), "s": round(dt, 2), "pages_per_s": round(len(imgs) / dt, 3)}
        print("plain run:", json.dumps(done), flush=True)
        return done

    run(images("a4", 2))  # warm-up
    mixed = images("mixed", n)
    times = repeats if strongest else 1  # the pairs are slow, and only the reference
    result: dict[str, Any] = {
        "start_s": round(start, 1), "util": round(util, 4), "strongest": strongest,
        "a4": repeated(run, images("a4", n), times),
        "card": repeated(run, images("card", n), times),
        "mixed": repeated(run, mixed, times),
        "mixed_sorted": repeated(run, sorted(mixed, key=lambda im: im.size[0] * im.size[1]),
                                 times)}
    if strongest:  # sleep levels: what each leaves on the card, and the wake time
        for level in (1, 2):
            t = time.monotonic()
            llm.sleep(level=level)
            result[f"sleep{level}_s"] = round(time.monotonic() - t, 2)
            time.sleep(1.5)
            result[f"asleep{level}_mib"] = used_mib()
            t = time.monotonic()
            llm.wake_up()
            result[f"wake{level}_s"] = round(time.monotonic() - t, 2)
        # Level 2 dropped the weights: without reloading them (the dummy format cannot)
        # the text is noise, but the speed after waking is still the card's.
        result["after_wake2"] = run(images("a4", 4))
    print("RESULT " + json.dumps(result), flush=True)


def run_raw(model: str, tokens: int, n: int, log: Path | None,
            strongest: bool, repeats: int) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--raw", model, "--tokens", str(tokens), "--pages", str(n),
           "--repeats", str(repeats)]
    if strongest:
        cmd.append("--strongest")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if log is not None:
        with log.open("a") as f:
            f.write(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            parsed: dict[str, Any] = json.loads(line[len("RESULT "):])
            return parsed
    raise RuntimeError(f"plain vLLM run failed (exit {proc.returncode}): {proc.stderr[-3000:]}")


# -- the daemon's engine -----------------------------------------------------------------------


def run_engine(model: str, tokens: int, n: int, fake: bool, eager: bool,
               sampler: Sampler | None, torch_compile: bool = False,
               repeats: int = 1) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    from ocrwatch.config import Config
    from ocrwatch.core.domain import Page
    from ocrwatch.engines.vllm import VllmEngine

    config = Config()
    config.vllm.model = model
    config.vllm.load_format = "dummy"
    config.vllm.max_tokens = tokens
    config.vllm.ignore_eos = True  # every page writes exactly ``tokens``
    config.vllm.enforce_eager = eager
    config.vllm.torch_compile = torch_compile
    config.vllm.idle_sleep_seconds = 0  # the benchmark sleeps and stops it itself
    config.vllm.idle_stop_seconds = 0
    if fake:
        engine = VllmEngine(config, backend="fake", backend_options={"delay": 0.2},
                            card_mib=16 * GIB)
    else:
        engine = VllmEngine(config)
    now = time.monotonic
    plan = dict(engine.plan.__dict__, cudagraph_sizes=engine.plan.cudagraph_sizes)
    result: dict[str, Any] = {"plan": plan}

    def pipeline(imgs: list[Any]) -> dict[str, Any]:
        """The daemon's way: policy.concurrency threads, each handing over one page."""
        pages = [Page(Path(f"bench{i}.png"), 0, im) for i, im in enumerate(imgs)]
        engine.most_in_flight = 0
        t = now()
        with ThreadPoolExecutor(engine.policy.concurrency) as pool:
            out = [r for rs in pool.map(lambda p: engine.recognize([p]), pages) for r in rs]
        dt = now() - t
        bad = [r.error for r in out if r.error]
        if bad:
            raise RuntimeError(f"pages failed: {bad}")
        done = {"pages": len(imgs), "s": round(dt, 2), "pages_per_s": round(len(imgs) / dt, 3),
                "most_in_flight": engine.most_in_flight}
        print("engine run:", json.dumps(done), flush=True)  # kept even if the run is cut short
        return done

    # Caches of its own, empty at first: the first start is then a cold one, as on a
    # machine where ocrwatch never ran, and the second finds what the first left.
    caches = Path(tempfile.mkdtemp(prefix="ocrwatch-engine-caches-"))
    saved_env = {k: os.environ.get(k) for k in CACHE_VARS}
    os.environ.update({k: str(caches / k.lower()) for k in CACHE_VARS})
    try:
        t0 = now()
        engine.start()
        result["start_s"] = round(now() - t0, 1)
        result["worker_start_s"] = engine.worker_info.get("start_seconds")
        pipeline(images("a4", 2))  # warm-up, as on the plain side
        since = now()
        result["a4"] = repeated(pipeline, images("a4", n), repeats)
        result["card"] = repeated(pipeline, images("card", n), repeats)
        # The mix both ways, the runs alternating: the configured admission, then like
        # sizes first (the admission rule of vllm.admit_wait_seconds = 0.5).
        mixed, like = [], []
        for _ in range(repeats):
            mixed.append(pipeline(images("mixed", n)))
            # Set on the running engine's queue: a restart would cost 30 s.
            configured, engine.admit_wait = engine.admit_wait, LIKE_WAIT
            like.append(pipeline(images("mixed", n)))
            engine.admit_wait = configured
        result["mixed"] = dict(median_of(mixed), admit_wait=config.vllm.admit_wait_seconds)
        result["mixed_like"] = dict(median_of(like), admit_wait=LIKE_WAIT)
        result["peak_mib"] = sampler.peak(since) if sampler else None
        t0 = now()
        engine.sleep()
        result["sleep_s"] = round(now() - t0, 2)
        result["asleep_mib"] = sampler.settle() if sampler else None
        t0 = now()
        engine.wake()
        result["wake_s"] = round(now() - t0, 2)
        result["after_wake"] = pipeline(images("a4", 4))
        t0 = now()
        engine.release()
        result["stop_s"] = round(now() - t0, 2)
        result["stopped_mib"] = sampler.settle(3.0) if sampler else None
        t0 = now()
        engine.start()  # a fresh worker process, with the caches the first start left
        result["second_start_s"] = round(now() - t0, 1)
        result["second_worker_start_s"] = engine.worker_info.get("start_seconds")
        result["describe"] = {k: v for k, v in engine.describe().items() if k != "last_error"}
    finally:
        engine.close()
        for k, v in saved_env.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(caches, ignore_errors=True)
    return result


# -- report ------------------------------------------------------------------------------------


def report(raw: dict[str, Any] | None, strong: dict[str, Any] | None, eng: dict[str, Any],
           meta: dict[str, Any]) -> str:
    base = meta.get("baseline_mib") or 0

    def gib(mib: int | None) -> str:
        """Memory this run added to the card: what was there before it started is left out."""
        return "n/a" if mib is None else f"{(mib - base) / GIB:.2f} GiB"

    def rates(run: dict[str, Any]) -> str:
        return (f"{run['a4']['pages_per_s']:.2f} | {run['card']['pages_per_s']:.2f} | "
                f"{run['mixed']['pages_per_s']:.2f} interleaved, "
                f"{run['mixed_sorted']['pages_per_s']:.2f} sorted")

    plan = eng["plan"]
    lines = [
        "ocrwatch GPU engine benchmark",
        f"date: {meta['date']}  machine: {meta['gpu']}  vLLM {meta['vllm']}"
        + (f"  python {meta['python']}" if meta.get("python") else ""),
        f"model: LightOnOCR-2-1B shape, random weights (load_format=dummy), bf16; "
        f"{meta['tokens']} output tokens a page (ignore_eos); {meta['pages']} pages a run; "
        f"the engine's and the strongest plain setting's rates are medians of "
        f"{meta.get('repeats', 1)} runs of each set (every rate below the table)",
        f"pages: A4 = {A4[0]}x{A4[1]}, card = {CARD[0]}x{CARD[1]}, mix = the two interleaved",
        f"budget: the 16 GB card's (card memory sampled with nvidia-smi every 0.1 s); "
        f"engine {'eager' if meta['eager'] else 'with CUDA graphs'}, torch.compile "
        f"{'on' if meta.get('torch_compile') else 'off (whole decode steps as CUDA graphs)'}",
        f"engine settings (its memory plan): utilization {plan['gpu_memory_utilization']}, "
        f"max_num_seqs {plan['max_num_seqs']}, max_num_batched_tokens "
        f"{plan['max_num_batched_tokens']}, max_model_len {plan['max_model_len']}, CUDA graphs "
        f"for {plan['cudagraph_sizes']} sequences",
        "",
        "| run | A4 pages/s | card pages/s | mix pages/s | peak card memory | start |",
        "|---|---|---|---|---|---|",
    ]
    if raw is not None:
        lines.append(f"| plain vLLM, pairs: max_num_seqs=2, utilization {raw['util']} "
                     f"(16 GB x 0.9) | {rates(raw)} | {gib(raw.get('peak_mib'))} | "
                     f"{raw['start_s']:.0f} s |")
    if strong is not None:
        lines.append(f"| plain vLLM, all pages at once, the engine's settings | {rates(strong)} "
                     f"| {gib(strong.get('peak_mib'))} | {strong['start_s']:.0f} s |")
    lines.append(
        f"| ocrwatch engine, pages streamed (one page per call, {meta['concurrency']} callers) | "
        f"{eng['a4']['pages_per_s']:.2f} | {eng['card']['pages_per_s']:.2f} | "
        f"{eng['mixed']['pages_per_s']:.2f} (arriving interleaved) | {gib(eng['peak_mib'])} | "
        f"{eng['start_s']:.0f} s first, {eng['second_start_s']:.0f} s second |")
    if "mixed_like" in eng:
        lines.append(
            f"| the same engine, like sizes first (admit_wait_seconds = "
            f"{eng['mixed_like']['admit_wait']}) | | | {eng['mixed_like']['pages_per_s']:.2f} | "
            "| |")
    lines += [
        "",
        f"pages in flight at most: A4 {eng['a4']['most_in_flight']}, card "
        f"{eng['card']['most_in_flight']}, mix {eng['mixed']['most_in_flight']}",
        f"engine start: first {eng['start_s']} s (worker's own count {eng['worker_start_s']} s; "
        f"goal 60 s), second, in a fresh worker process {eng['second_start_s']} s "
        f"({eng['second_worker_start_s']} s; goal 30 s)",
        f"engine idle: sleep {eng['sleep_s']} s -> {gib(eng['asleep_mib'])} on the card; "
        f"wake {eng['wake_s']} s, then {eng['after_wake']['pages_per_s']:.2f} A4 pages/s; "
        f"stop {eng['stop_s']} s -> {gib(eng['stopped_mib'])} left on the card",
    ]
    if strong is not None and "sleep1_s" in strong:
        lines.append(
            f"plain vLLM sleep levels: level 1 {strong['sleep1_s']} s -> "
            f"{gib(strong['asleep1_mib'])}, wake {strong['wake1_s']} s; level 2 "
            f"{strong['sleep2_s']} s -> {gib(strong['asleep2_mib'])}, wake {strong['wake2_s']} s "
            "(weights not reloaded)")
    lines.append(f"memory figures are what each run added to the card; {base} MiB were in use "
                 "before the benchmark started")
    for name, run in (("engine", eng), ("strongest plain", strong)):
        if run is not None:
            lines.append(f"every run, {name}: " + "; ".join(
                f"{kind} {run[kind].get('rates', [run[kind]['pages_per_s']])}"
                for kind in ("a4", "card", "mixed", "mixed_like", "mixed_sorted") if kind in run))
    if "mixed_like" in eng:
        fifo, like = eng["mixed"]["pages_per_s"], eng["mixed_like"]["pages_per_s"]
        lines.append(f"engine mix admission: admit_wait_seconds {eng['mixed']['admit_wait']} "
                     f"(the default) {fifo:.2f} pages/s, like sizes first {like:.2f}: "
                     f"{fifo / like:.2f}x (runs alternated)")
    if strong is not None:
        for kind in ("a4", "card", "mixed"):
            goal = strong[kind]["pages_per_s"]
            if kind == "mixed":
                goal = max(goal, strong["mixed_sorted"]["pages_per_s"])
            got = eng[kind]["pages_per_s"]
            lines.append(f"{kind}: engine {got:.2f} pages/s against the strongest plain setting's "
                         f"{goal:.2f}{' (its better order)' if kind == 'mixed' else ''}: "
                         f"{got / goal:.2f}x (goal 0.95x)")
    if raw is not None:
        goal = raw["mixed_sorted"]["pages_per_s"]
        lines.append(f"mix: engine {eng['mixed']['pages_per_s']:.2f} pages/s against plain "
                     f"vLLM's sorted pairs {goal:.2f} ({eng['mixed']['pages_per_s'] / goal:.2f}x)")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="LightOnOCR-shaped model folder")
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--pages", type=int, default=16)
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    parser.add_argument("--raw-log", type=Path, help="plain vLLM's output goes here")
    parser.add_argument("--repeats", type=int, default=3,
                        help="runs of each page set, engine and strongest plain (median)")
    parser.add_argument("--eager", action="store_true", help="engine without CUDA graphs")
    parser.add_argument("--torch-compile", action="store_true",
                        help="engine with vLLM's torch.compile (vllm.torch_compile = true)")
    parser.add_argument("--skip-raw", action="store_true", help="the engine's side only")
    parser.add_argument("--fake", action="store_true", help="fake worker, no GPU (a dry run)")
    parser.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--strongest", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--report-from", type=Path, help="print the report of a --json file")
    args = parser.parse_args()
    if args.report_from:
        earlier = json.loads(args.report_from.read_text())
        print(report(earlier["raw"], earlier.get("strongest"), earlier["engine"],
                     earlier["meta"]), end="")
        return
    if args.raw:
        raw_main(args.model, args.tokens, args.pages, args.strongest, args.repeats)
        return
    if not args.fake and not args.model:
        parser.error("give the model folder, or --fake for a dry run")
    sampler = None if args.fake else Sampler()
    meta: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "tokens": args.tokens,
                            "pages": args.pages, "eager": args.eager, "repeats": args.repeats,
                            "torch_compile": args.torch_compile,
                            "baseline_mib": used_mib(), "gpu": "none (fake worker)",
                            "vllm": "-", "python": platform.python_version()}
    if not args.fake:
        meta.update(gpu_facts())
    saved: dict[str, Any] = {"meta": meta, "raw": None, "strongest": None, "engine": None}

    def keep() -> None:  # after each stage, so a run cut short still leaves its figures
        if args.json:
            args.json.write_text(json.dumps(saved, indent=1))

    # The engine first: its first start is then a cold one (no compile cache yet).
    eng = run_engine(args.model or "fake", args.tokens, args.pages, args.fake, args.eager,
                     sampler, args.torch_compile, args.repeats)
    meta["concurrency"] = 2 * eng["plan"]["max_num_seqs"]
    saved["engine"] = eng
    print("engine:", json.dumps(eng), flush=True)
    keep()
    if not (args.fake or args.skip_raw):
        assert sampler is not None
        for key, strongest in (("raw", False), ("strongest", True)):
            sampler.settle(3.0)  # the last run's memory goes back first
            t = time.monotonic()
            figures = run_raw(args.model, args.tokens, args.pages, args.raw_log, strongest,
                              args.repeats)
            figures["peak_mib"] = sampler.peak(t)
            saved[key] = figures
            print(f"plain vLLM ({key}):", json.dumps(figures), flush=True)
            keep()
    emit(report(saved["raw"], saved["strongest"], eng, meta), args.out, args.json, saved)
    if sampler:
        sampler.stop()


if __name__ == "__main__":
    main()

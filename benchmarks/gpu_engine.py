"""The embedded vLLM engine against plain vLLM, on one GPU, under a 16 GB card's budget.

    python3 benchmarks/gpu_engine.py MODEL_DIR [--out FILE] [--tokens 500] [--pages 16]
    python3 benchmarks/gpu_engine.py --fake          # the engine's side only, on any CPU

MODEL_DIR is a LightOnOCR-2-1B-shaped folder loaded with random weights
(load_format="dummy"), so compute and memory are the real model's. Every page writes
exactly ``--tokens`` tokens (ignore_eos). Both sides read the same pages: A4
(1088x1540), card-sized (800x500) and a mix of the two arriving interleaved.

- plain vLLM: ``LLM.generate`` at ``max_num_seqs=2`` with the 16 GB card's 0.9
  (the reference: pairs of pages, mixed ones interleaved or sorted by size), run in a
  process of its own first;
- the daemon's engine: ``VllmEngine`` with its default budget (the card's size, capped
  at 16 GiB) fed through the daemon's ``Batcher``, then put to sleep, woken, stopped.

The card's memory is read with nvidia-smi every 0.1 s from outside both.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import platform
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

A4 = (1088, 1540)
CARD = (800, 500)
GIB = 1024


def used_mib() -> int | None:
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.check_output(
        ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"], text=True)
    return int(out.split()[0])


def total_mib() -> int | None:
    if shutil.which("nvidia-smi") is None:
        return None
    out = subprocess.check_output(
        ["nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits"], text=True)
    return int(out.split()[0])


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
    import numpy as np
    from PIL import Image

    rng = np.random.RandomState(seed)

    def page(w: int, h: int) -> Any:
        return Image.fromarray((rng.rand(h, w, 3) * 255).astype("uint8"))

    a4 = [page(*A4) for _ in range(4)]
    card = [page(*CARD) for _ in range(4)]
    if kind == "a4":
        return [a4[i % 4] for i in range(n)]
    if kind == "card":
        return [card[i % 4] for i in range(n)]
    return [a4[i % 4] if i % 2 == 0 else card[i % 4] for i in range(n)]  # mixed, interleaved


# -- plain vLLM, in its own process ------------------------------------------------------------


def raw_main(model: str, tokens: int, n: int) -> None:
    from vllm import LLM, SamplingParams

    total = total_mib() or 16 * GIB
    util = 16 * 1024 * 0.9 / total  # the 16 GB card's usual 0.9
    t0 = time.monotonic()
    llm = LLM(model=model, load_format="dummy", dtype="bfloat16", max_model_len=8192,
              gpu_memory_utilization=util, max_num_seqs=2, limit_mm_per_prompt={"image": 1},
              mm_processor_cache_gb=0, enable_prefix_caching=False, seed=0)
    start = time.monotonic() - t0
    prompt = ("<|im_start|>system<|im_end|>\n<|im_start|>user\n<|image_pad|><|im_end|>\n"
              "<|im_start|>assistant\n")
    sp = SamplingParams(temperature=0.2, top_p=0.9, max_tokens=tokens, ignore_eos=True,
                        detokenize=False)

    def run(imgs: list[Any]) -> dict[str, Any]:
        reqs = [{"prompt": prompt, "multi_modal_data": {"image": im}} for im in imgs]
        t = time.monotonic()
        llm.generate(reqs, sp, use_tqdm=False)
        dt = time.monotonic() - t
        return {"pages": len(imgs), "s": round(dt, 2), "pages_per_s": round(len(imgs) / dt, 3)}

    run(images("a4", 2))  # warm-up
    mixed = images("mixed", n)
    result = {"start_s": round(start, 1), "util": round(util, 4),
              "a4": run(images("a4", n)), "card": run(images("card", n)),
              "mixed": run(mixed),
              "mixed_sorted": run(sorted(mixed, key=lambda im: im.size[0] * im.size[1]))}
    print("RESULT " + json.dumps(result), flush=True)


def run_raw(model: str, tokens: int, n: int, log: Path | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, "--raw", model, "--tokens", str(tokens), "--pages", str(n)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if log is not None:
        log.write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    for line in proc.stdout.splitlines():
        if line.startswith("RESULT "):
            parsed: dict[str, Any] = json.loads(line[len("RESULT "):])
            return parsed
    raise RuntimeError(f"plain vLLM run failed (exit {proc.returncode}): {proc.stderr[-3000:]}")


# -- the daemon's engine -----------------------------------------------------------------------


def run_engine(model: str, tokens: int, n: int, fake: bool, eager: bool,
               sampler: Sampler | None) -> dict[str, Any]:
    from ocrwatch.batching import MAX_IMAGE_TOKENS, Batcher, image_tokens
    from ocrwatch.config import Config
    from ocrwatch.domain import Page
    from ocrwatch.engines.base import BatchPolicy
    from ocrwatch.engines.vllm import VllmEngine

    config = Config()
    config.vllm.model = model
    config.vllm.load_format = "dummy"
    config.vllm.max_tokens = tokens
    config.vllm.ignore_eos = True  # every page writes exactly ``tokens``
    config.vllm.enforce_eager = eager
    config.vllm.idle_sleep_seconds = 0  # the benchmark sleeps and stops it itself
    config.vllm.idle_stop_seconds = 0
    if fake:
        engine = VllmEngine(config, backend="fake", backend_options={"delay": 0.01},
                            card_mib=16 * GIB)
    else:
        engine = VllmEngine(config)
    now = time.monotonic
    result: dict[str, Any] = {"plan": engine.plan.__dict__}

    def pipeline(imgs: list[Any], policy: BatchPolicy | None = None) -> dict[str, Any]:
        """The daemon's way: one Batcher, batches taken as they fill or time out."""
        batcher: Batcher[Page] = Batcher(
            policy or engine.policy,
            tokens=lambda p: image_tokens(*p.size, engine.max_side or 1540))
        t = now()
        for i, im in enumerate(imgs):
            batcher.add(Page(Path(f"bench{i}.png"), 0, im), now())
        sizes = []
        while len(batcher):
            batch = batcher.take(now())
            if batch is None:
                deadline = batcher.next_deadline() or now()
                time.sleep(max(0.0, deadline - now()))
                continue
            sizes.append(len(batch))
            out = engine.recognize(batch)
            bad = [r.error for r in out if r.error]
            if bad:
                raise RuntimeError(f"pages failed: {bad}")
        dt = now() - t
        done = {"pages": len(imgs), "s": round(dt, 2), "pages_per_s": round(len(imgs) / dt, 3),
                "batches": sizes}
        print("engine run:", json.dumps(done), flush=True)  # kept even if the run is cut short
        return done

    try:
        t0 = now()
        engine.start()
        result["start_s"] = round(now() - t0, 1)
        pipeline(images("a4", 2))  # warm-up, as on the plain side
        since = now()
        result["a4"] = pipeline(images("a4", n))
        result["card"] = pipeline(images("card", n))
        result["mixed"] = pipeline(images("mixed", n))
        result["peak_mib"] = sampler.peak(since) if sampler else None
        # Same engine, wider batches: four full-size pages' worth of image tokens.
        wide = dataclasses.replace(engine.policy, max_tokens=4 * MAX_IMAGE_TOKENS)
        since = now()
        result["wide"] = {"batch_tokens": wide.max_tokens,
                          "a4": pipeline(images("a4", n), wide),
                          "mixed": pipeline(images("mixed", n), wide)}
        result["wide"]["peak_mib"] = sampler.peak(since) if sampler else None
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
        result["describe"] = {k: v for k, v in engine.describe().items() if k != "last_error"}
    finally:
        engine.close()
    return result


# -- report ------------------------------------------------------------------------------------


def report(raw: dict[str, Any] | None, eng: dict[str, Any], meta: dict[str, Any]) -> str:
    base = meta.get("baseline_mib") or 0

    def gib(mib: int | None) -> str:
        """Memory this run added to the card: what was there before it started is left out."""
        return "n/a" if mib is None else f"{(mib - base) / GIB:.2f} GiB"

    lines = [
        "ocrwatch GPU engine benchmark",
        f"date: {meta['date']}  machine: {meta['gpu']}  vLLM {meta['vllm']}"
        + (f"  python {meta['python']}" if meta.get("python") else ""),
        f"model: LightOnOCR-2-1B shape, random weights (load_format=dummy), bf16; "
        f"{meta['tokens']} output tokens a page (ignore_eos); {meta['pages']} pages a run",
        f"pages: A4 = {A4[0]}x{A4[1]}, card = {CARD[0]}x{CARD[1]}, mix = the two interleaved",
        f"budget: the 16 GB card's (card memory sampled with nvidia-smi every 0.1 s); "
        f"engine {'eager' if meta['eager'] else 'with CUDA graphs'}",
        "",
        "| run | A4 pages/s | card pages/s | mix pages/s | peak card memory | start |",
        "|---|---|---|---|---|---|",
    ]
    if raw is not None:
        lines.append(
            f"| plain vLLM, max_num_seqs=2, utilization {raw['util']} (16 GB x 0.9) | "
            f"{raw['a4']['pages_per_s']:.2f} | {raw['card']['pages_per_s']:.2f} | "
            f"{raw['mixed']['pages_per_s']:.2f} interleaved, "
            f"{raw['mixed_sorted']['pages_per_s']:.2f} sorted | {gib(raw.get('peak_mib'))} | "
            f"{raw['start_s']:.0f} s |")
    plan = eng["plan"]
    lines.append(
        f"| ocrwatch engine (utilization {plan['gpu_memory_utilization']}, "
        f"max_num_seqs {plan['max_num_seqs']}, max_num_batched_tokens "
        f"{plan['max_num_batched_tokens']}, batch <= {plan['batch_tokens']} image tokens) | "
        f"{eng['a4']['pages_per_s']:.2f} | {eng['card']['pages_per_s']:.2f} | "
        f"{eng['mixed']['pages_per_s']:.2f} | {gib(eng['peak_mib'])} | {eng['start_s']:.0f} s |")
    wide = eng["wide"]
    lines.append(
        f"| ocrwatch engine, same settings, batch <= {wide['batch_tokens']} image tokens "
        f"(vllm.batch_image_tokens) | {wide['a4']['pages_per_s']:.2f} | - | "
        f"{wide['mixed']['pages_per_s']:.2f} | {gib(wide['peak_mib'])} | - |")
    lines += [
        "",
        f"engine batches (pages each): A4 {eng['a4']['batches']}, card {eng['card']['batches']}, "
        f"mix {eng['mixed']['batches']}; wider: A4 {wide['a4']['batches']}, "
        f"mix {wide['mixed']['batches']}",
        f"engine idle: sleep {eng['sleep_s']} s -> {gib(eng['asleep_mib'])} on the card; "
        f"wake {eng['wake_s']} s, then {eng['after_wake']['pages_per_s']:.2f} A4 pages/s; "
        f"stop {eng['stop_s']} s -> {gib(eng['stopped_mib'])} left on the card",
        f"memory figures are what each run added to the card; {base} MiB were in use before "
        "the benchmark started",
    ]
    if raw is not None:
        goal = raw["mixed_sorted"]["pages_per_s"]
        lines.append(
            f"mix: engine {eng['mixed']['pages_per_s']:.2f} pages/s against plain vLLM's sorted "
            f"pairs {goal:.2f} ({eng['mixed']['pages_per_s'] / goal:.2f}x)")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", help="LightOnOCR-shaped model folder")
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--pages", type=int, default=16)
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    parser.add_argument("--raw-log", type=Path, help="plain vLLM's output goes here")
    parser.add_argument("--eager", action="store_true", help="engine without CUDA graphs")
    parser.add_argument("--skip-raw", action="store_true", help="the engine's side only")
    parser.add_argument("--fake", action="store_true", help="fake worker, no GPU (a dry run)")
    parser.add_argument("--raw", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--report-from", type=Path, help="print the report of a --json file")
    args = parser.parse_args()
    if args.report_from:
        saved = json.loads(args.report_from.read_text())
        print(report(saved["raw"], saved["engine"], saved["meta"]), end="")
        return
    if args.raw:
        raw_main(args.model, args.tokens, args.pages)
        return
    if not args.fake and not args.model:
        parser.error("give the model folder, or --fake for a dry run")
    sampler = None if args.fake else Sampler()
    meta: dict[str, Any] = {"date": time.strftime("%Y-%m-%d"), "tokens": args.tokens,
                            "pages": args.pages, "eager": args.eager,
                            "baseline_mib": used_mib(), "gpu": "none (fake worker)",
                            "vllm": "-", "python": platform.python_version()}
    if not args.fake:
        meta["gpu"] = subprocess.check_output(
            ["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
            text=True).strip()
        import importlib.metadata

        meta["vllm"] = importlib.metadata.version("vllm")
    raw = None
    if not (args.fake or args.skip_raw):
        t = time.monotonic()
        raw = run_raw(args.model, args.tokens, args.pages, args.raw_log)
        assert sampler is not None
        raw["peak_mib"] = sampler.peak(t)
        print("plain vLLM:", json.dumps(raw), flush=True)
    settle: Callable[[], None] = lambda: time.sleep(0 if args.fake else 3)  # noqa: E731
    settle()  # the plain run's memory goes back before the engine starts
    eng = run_engine(args.model or "fake", args.tokens, args.pages, args.fake, args.eager,
                     sampler)
    print("engine:", json.dumps(eng), flush=True)
    text = report(raw, eng, meta)
    print(text)
    if args.out:
        args.out.write_text(text)
    if args.json:
        args.json.write_text(json.dumps({"meta": meta, "raw": raw, "engine": eng}, indent=1))
    if sampler:
        sampler.stop()


if __name__ == "__main__":
    main()

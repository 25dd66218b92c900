"""Where a start of the vLLM engine spends its time, with vLLM's torch.compile and without.

    python3 benchmarks/gpu_start.py MODEL_DIR [--out FILE] [--json FILE] [--modes plain,compile]

MODEL_DIR is a LightOnOCR-2-1B-shaped folder loaded with random weights
(load_format="dummy"). Each mode starts the worker's own backend
(``ocrwatch.engines.vllm.backends.VllmBackend``, with the memory plan of a 16 GB card) in a
fresh process, twice: a first start with empty caches of its own (vLLM's compile cache,
Triton's and inductor's), as on a machine where ocrwatch never ran, then a second start
that finds them. The modes:

- ``plain``: the engine's default, no torch.compile, CUDA graphs of whole decode steps;
- ``compile``: vLLM's torch.compile with its piecewise and full CUDA graphs
  (``vllm.torch_compile = true``).

Each process times the interpreter's start, ``from vllm import LLM``, the engine's
construction, one A4 page, then 16 A4 pages and 16 mixed ones, each set all in flight
(pages/s, 500 tokens a page with ignore_eos). vLLM's own log lines give the phases inside
the engine's construction, and ``python -X importtime`` breaks the import down once.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MODES = ("plain", "compile")
PHASES = re.compile(r"Model loading took|Dynamo bytecode transform|torch\.compile took|"
                    r"Compiling a graph|Directly load the compiled|Graph capturing finished|"
                    r"init engine .* took|Kernel JIT monitor activated|non-default args")


def child(model: str, mode: str, launched: float, tokens: int) -> None:
    """One start, in this process: prints one JSON line of timings."""
    up = time.time() - launched
    from benchmarks.gpu_engine import images
    from ocrwatch.config import Config
    from ocrwatch.engines import gpu
    from ocrwatch.engines.vllm.memory import plan_memory
    from ocrwatch.engines.vllm.supervisor import worker_settings

    t = time.monotonic()
    from vllm import LLM  # noqa: F401  (timed: the worker's import)

    imported = time.monotonic() - t
    from ocrwatch.engines.vllm.backends import VllmBackend
    from ocrwatch.engines.vllm.messages import Sampling

    cfg = Config().vllm  # the engine's own settings, as the worker gets them
    cfg.load_format, cfg.max_tokens, cfg.torch_compile = "dummy", tokens, mode == "compile"
    card_gib = (gpu.card_memory_mib() or 16 * 1024) / 1024
    plan = plan_memory(16.0, 16.0, tokens, device_gib=card_gib)
    t = time.monotonic()
    backend = VllmBackend(worker_settings(cfg, plan, "vllm", {}, model))
    built = time.monotonic() - t
    ready = time.time() - launched
    params = Sampling(cfg.temperature, cfg.top_p, tokens, ignore_eos=True)

    runs = iter(range(1000))

    def run(imgs: list[Any]) -> float:
        """Every page added at once, the engine stepped until each has ended."""
        t, n = time.monotonic(), next(runs)
        for i, im in enumerate(imgs):
            backend.add(f"r{n}-{i}", im, params)
        left = len(imgs)
        while left:
            left -= len(backend.step())
        return time.monotonic() - t

    first_page = run(images("a4", 1))
    a4 = run(images("a4", 16))
    mixed = run(images("mixed", 16))
    print("RESULT " + json.dumps({
        "interpreter_s": round(up, 2), "import_s": round(imported, 2), "build_s": round(built, 2),
        "total_s": round(ready, 2),
        "first_page_s": round(first_page, 2), "a4_pages_per_s": round(16 / a4, 3),
        "mixed_pages_per_s": round(16 / mixed, 3)}), flush=True)
    backend.close()


def start(model: str, mode: str, caches: Path, log: Path, tokens: int) -> dict[str, Any]:
    env = dict(os.environ, VLLM_CACHE_ROOT=str(caches / "vllm"),
               TRITON_CACHE_DIR=str(caches / "triton"),
               TORCHINDUCTOR_CACHE_DIR=str(caches / "inductor"))
    launched = time.time()
    proc = subprocess.run([sys.executable, __file__, model, "--child", mode,
                           "--launched", repr(launched), "--tokens", str(tokens)],
                          env=env, capture_output=True, text=True, timeout=400)
    with log.open("a") as f:
        f.write(f"== {mode}\n{proc.stdout}\n{proc.stderr}\n")
    found = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not found:
        raise RuntimeError(f"{mode} start failed (exit {proc.returncode}): {proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(found[-1][len("RESULT "):])
    result["phases"] = [re.sub(r"^.*?(INFO|WARNING) (\d\d-\d\d )?", "", line)[:150]
                        for line in (proc.stderr + proc.stdout).splitlines()
                        if PHASES.search(line)]
    return result


def import_breakdown() -> dict[str, Any]:
    """``python -X importtime``: the slowest top-level imports under ``from vllm import LLM``."""
    t = time.monotonic()
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c", "from vllm import LLM"],
                          capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t
    rows = []
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", line)
        if m and len(m.group(3)) <= 2:  # top-level imports and their direct children
            rows.append((int(m.group(2)) / 1e6, m.group(4)))
    rows.sort(reverse=True)
    return {"wall_s": round(wall, 2), "slowest": [(round(s, 2), n) for s, n in rows[:15]]}


def report(runs: dict[str, dict[str, Any]], imports: dict[str, Any] | None,
           meta: dict[str, Any]) -> str:
    lines = [
        "Where a start of the vLLM engine spends its time (benchmarks/gpu_start.py)",
        f"date: {meta['date']}  machine: {meta['gpu']}  vLLM {meta['vllm']}",
        "model: LightOnOCR-2-1B shape, random weights; the memory plan of a 16 GB card; "
        f"{meta['tokens']} tokens a page (ignore_eos)",
        "each start is a fresh process; 'first' with empty caches of its own, 'second' with "
        "the caches the first left",
        "",
        "| start | until ready | interpreter | from vllm import LLM | engine built | "
        "first page | A4 pages/s | mixed pages/s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for key, r in runs.items():
        lines.append(f"| {key} | {r['total_s']} s | {r['interpreter_s']} s | {r['import_s']} s | "
                     f"{r['build_s']} s | {r['first_page_s']} s | {r['a4_pages_per_s']:.2f} | "
                     f"{r['mixed_pages_per_s']:.2f} |")
    lines.append("")
    for key, r in runs.items():
        lines.append(f"vLLM's log, {key}:")
        lines += [f"  {p}" for p in r["phases"]]
    if imports:
        lines += ["", f"`from vllm import LLM` under -X importtime: {imports['wall_s']} s "
                  "(the slowest imports, cumulative seconds):"]
        lines += [f"  {s:6.2f}  {name}" for s, name in imports["slowest"]]
    for mode in MODES:
        first, second = runs.get(f"{mode}, first"), runs.get(f"{mode}, second")
        if first and second:
            lines.append(f"{mode}: first start {first['total_s']} s, second {second['total_s']} s")
    if "plain, second" in runs and "compile, second" in runs:
        p, c = runs["plain, second"], runs["compile, second"]
        lines.append(f"plain / compile: A4 {p['a4_pages_per_s'] / c['a4_pages_per_s']:.2f}x, "
                     f"mixed {p['mixed_pages_per_s'] / c['mixed_pages_per_s']:.2f}x")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="LightOnOCR-shaped model folder")
    parser.add_argument("--modes", default="plain,compile")
    parser.add_argument("--tokens", type=int, default=500)
    parser.add_argument("--work", type=Path, default=Path("/tmp/ocrwatch-start-bench"))
    parser.add_argument("--out", type=Path, help="also write the report here")
    parser.add_argument("--json", type=Path, help="write the raw figures here")
    parser.add_argument("--log", type=Path, help="every process's output goes here")
    parser.add_argument("--no-imports", action="store_true", help="skip -X importtime")
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--launched", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.model, args.child, args.launched, args.tokens)
        return
    from benchmarks.gpu_engine import emit, gpu_facts

    meta = {"date": time.strftime("%Y-%m-%d"), "tokens": args.tokens, **gpu_facts()}
    shutil.rmtree(args.work, ignore_errors=True)
    args.work.mkdir(parents=True)
    log = args.log or args.work / "starts.log"
    runs: dict[str, dict[str, Any]] = {}
    imports = None
    saved: dict[str, Any] = {"meta": meta, "runs": runs, "imports": None}
    for mode in [m for m in args.modes.split(",") if m]:
        for which in ("first", "second"):
            key = f"{mode}, {which}"
            try:
                runs[key] = start(args.model, mode, args.work / mode, log, args.tokens)
            except (RuntimeError, subprocess.TimeoutExpired) as exc:
                print(f"{key}: {exc}", flush=True)
                break
            print(key, json.dumps(runs[key]), flush=True)
            if args.json:
                args.json.write_text(json.dumps(saved, indent=1))
        if imports is None and not args.no_imports:
            imports = saved["imports"] = import_breakdown()
            print("imports:", json.dumps(imports), flush=True)
    emit(report(runs, imports, meta), args.out, args.json, saved)


if __name__ == "__main__":
    main()

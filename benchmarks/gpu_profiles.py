"""LightOnOCR-3-1B on the GPU machine: the daemon asking for grounding, its longest sequence,
and fp8 weights and KV cache against bf16 (docs/gpu.md, docs/models.md).

Runs where vLLM and a CUDA GPU are (benchmarks/gpu_call.sh stages them on the lent machine):

    python3 benchmarks/gpu_profiles.py --stages daemon,longest   # one call
    python3 benchmarks/gpu_profiles.py --stages fp8              # another

Every stage emulates a 16 GB card on the real one (``vllm.card_gb = 16``: the plan's
utilization is a share of the card's real memory) and reads with a LightOnOCR-3-1B-shaped
model folder (ocrwatch/testing/model_folder.py) with random weights
(``load_format = "dummy"``), so the text is noise and every page runs to its token count
(``ignore_eos``). The card's memory is sampled every 0.1 s through NVML (it includes the
driver's own share, about 0.6 GiB).

- ``daemon``: the daemon (inbox to sidecars) with ``model_profile = "lightonocr-3-1b"``: each
  request holds the image and "grounding"; A4 scans, card photos and the worst page (a
  1540 x 1540 page: the largest prompt), ``TOKENS`` tokens a page.
- ``longest``: the engine planned for the profile's own answer length (16384-token
  sequences), the worst page and three A4 pages each writing the whole of it.
- ``fp8``: the engine alone on 32 pages (A4 and cards, ``TOKENS`` tokens a page), bf16, then
  fp8 weights (vLLM's dynamic fp8), then the fp8 KV cache, each a fresh worker; pages/s
  and the card's peak. Accuracy cannot be measured with random weights.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._drop import make_drop, text_page  # noqa: E402
from benchmarks.gpu_engine import A4, CARD, Sampler, gpu_facts, total_mib  # noqa: E402

TOKENS = 1024  # a page's answer in the daemon and fp8 stages (grounding adds boxes, labels)
PROFILE = "lightonocr-3-1b"


def model(work: Path) -> Path:
    from ocrwatch.engines import profiles
    from ocrwatch.testing import model_folder

    return model_folder.write(work / "lightonocr-3-1b", profiles.get(PROFILE))


def base_config(work: Path, folder: Path, tokens: int | None) -> Any:
    from ocrwatch.config import Config

    config = Config(inbox=[work / "inbox"], database=work / "index.sqlite3",
                    cache_dir=work / "cache", engine="vllm", model_profile=PROFILE,
                    outputs=["md", "txt"], rotate_pages=False, deskew=False,
                    settle_seconds=0.5)
    v = config.vllm
    v.model = str(folder)
    v.load_format = "dummy"
    v.card_gb = 16.0
    v.ignore_eos = True
    v.idle_sleep_seconds = 0
    v.idle_stop_seconds = 0
    v.standby = False
    if tokens is not None:
        v.max_tokens = tokens
    return config


def plan_of(engine: Any) -> dict[str, Any]:
    plan = getattr(engine, "plan", None)
    if plan is None:
        return {}
    return {"max_model_len": plan.max_model_len, "max_num_seqs": plan.max_num_seqs,
            "max_num_batched_tokens": plan.max_num_batched_tokens,
            "kv_cache_gib": round(plan.kv_cache_bytes / 2**30, 2), "kv_tokens": plan.kv_tokens,
            "kv_cache_dtype": plan.kv_cache_dtype, "quantization": plan.quantization,
            "gpu_memory_utilization": plan.gpu_memory_utilization,
            "planned_gib": round(plan.total_gib, 2)}


def stage_daemon(work: Path, folder: Path, sampler: Sampler, tokens: int) -> dict[str, Any]:
    from ocrwatch.daemon import Daemon

    config = base_config(work, folder, tokens)
    drop = work / "drop"
    files = make_drop(drop, a4=12, cards=12, pdfs=0)
    text_page(1540, 1540, 7).save(drop / "worst_square.png")  # the largest prompt
    files["worst_square.png"] = 1
    daemon = Daemon(config)
    out: dict[str, Any] = {"pages": sum(files.values()), "tokens_per_page": tokens}
    try:
        t0 = time.monotonic()
        daemon.start()
        config.inbox[0].mkdir(parents=True, exist_ok=True)
        for name in files:  # renamed in: each file appears whole
            os.replace(drop / name, config.inbox[0] / name)
        dropped = time.monotonic()
        deadline = dropped + 420
        done: list[Any] = []
        while time.monotonic() < deadline:
            done = [daemon.jobs.known(config.inbox[0] / n) for n in files]
            if all(j is not None and j.state.value in ("done", "failed") for j in done):
                break
            time.sleep(0.2)
        took = time.monotonic() - dropped
        states = [j.state.value if j is not None else "unknown" for j in done]
        out.update(seconds=round(took, 1), pages_per_s=round(out["pages"] / took, 3),
                   states={s: states.count(s) for s in set(states)},
                   peak_mib=sampler.peak(t0), plan=plan_of(daemon.engine),
                   start_to_drop_s=round(dropped - t0, 1))
        worst = config.inbox[0] / "worst_square.md"
        out["worst_page_sidecar"] = worst.exists()
        rows = daemon.db.query("SELECT warnings FROM pages")
        out["pages_with_grounding_fallback_warning"] = sum(
            "no layout blocks" in (r["warnings"] or "") for r in rows)
    finally:
        daemon.close()
    return out


def _pages(kind: str, n: int) -> list[Any]:
    from ocrwatch.core.domain import Page

    sizes = {"a4": [A4], "card": [CARD], "mixed": [A4, CARD], "worst": [(1540, 1540), A4, A4,
                                                                           A4]}[kind]
    return [Page(Path(f"{kind}{i}.png"), 0, text_page(*sizes[i % len(sizes)], i))
            for i in range(n)]


def _read(engine: Any, pages: list[Any]) -> dict[str, Any]:
    from concurrent.futures import ThreadPoolExecutor

    t = time.monotonic()
    with ThreadPoolExecutor(max(len(pages), engine.policy.concurrency)) as pool:
        out = [r for rs in pool.map(lambda p: engine.recognize([p]), pages) for r in rs]
    dt = time.monotonic() - t
    bad = [r.error for r in out if r.error]
    return {"pages": len(pages), "s": round(dt, 2), "pages_per_s": round(len(pages) / dt, 3),
            "failed": bad}


def stage_engine(work: Path, folder: Path, sampler: Sampler, *, tokens: int | None,
                 kind: str, n: int, quantization: str = "none",
                 kv_cache_dtype: str = "auto") -> dict[str, Any]:
    from ocrwatch.engines.vllm import VllmEngine

    config = base_config(work, folder, tokens)
    config.vllm.quantization = quantization
    config.vllm.kv_cache_dtype = kv_cache_dtype
    engine = VllmEngine(config)
    result: dict[str, Any] = {"quantization": quantization, "kv_cache_dtype": kv_cache_dtype,
                              "tokens": tokens, "plan": plan_of(engine)}
    try:
        t0 = time.monotonic()
        engine.start()
        result["start_s"] = round(time.monotonic() - t0, 1)
        _read(engine, _pages("a4", 2))  # warm-up: the first pages pay kernel compiles
        since = time.monotonic()
        result["run"] = _read(engine, _pages(kind, n))
        result["peak_mib"] = sampler.peak(since)
        result["peak_with_start_mib"] = sampler.peak(t0)
    finally:
        engine.close()
    print(json.dumps(result), flush=True)
    return result


def report(results: dict[str, Any]) -> str:
    def gib(mib: int | None) -> str:
        return "n/a" if mib is None else f"{mib / 1024:.2f} GiB"

    lines = ["# LightOnOCR-3-1B profile on the GPU (benchmarks/gpu_profiles.py)", "",
             f"card: {results['meta']['gpu']}; vLLM {results['meta']['vllm']}; "
             f"16 GB card emulated (vllm.card_gb = 16); random weights (load_format = "
             f"dummy), every page runs to its token count (ignore_eos); card memory from NVML "
             f"every 0.1 s, the driver's share included", ""]
    if "daemon" in results:
        d = results["daemon"]
        lines += [f"daemon, grounding requests: {d['pages']} pages (12 A4 scans, 12 card "
                  f"photos, one 1540x1540 page), {d['tokens_per_page']} tokens a page: "
                  f"{d['pages_per_s']} pages/s ({d['seconds']} s from drop to last sidecar), "
                  f"states {d['states']}, peak {gib(d['peak_mib'])}; plan {d['plan']}", ""]
    if "longest" in results:
        lg = results["longest"]
        lines += [f"longest sequence: the worst page (1540x1540) and three A4 pages each "
                  f"writing {lg['plan']['max_model_len']}-token sequences' answers: "
                  f"{lg['run']['s']} s, peak {gib(lg['peak_mib'])}; plan {lg['plan']}", ""]
    if "fp8" in results:
        first = results["fp8"][0]
        lines += [f"fp8 against bf16: {first['run']['pages']} pages (A4 and cards), "
                  f"{first.get('tokens')} tokens a page, each setting a fresh worker", "",
                  "| weights | KV cache | pages/s | peak (reading) | pages in flight | "
                  "KV tokens |", "|---|---|---|---|---|---|"]
        for r in results["fp8"]:
            lines.append(f"| {'fp8' if r['quantization'] == 'fp8' else 'bf16'} | "
                         f"{'fp8' if r['kv_cache_dtype'] == 'fp8' else 'bf16'} | "
                         f"{r['run']['pages_per_s']} | {gib(r['peak_mib'])} | "
                         f"{r['plan']['max_num_seqs']} | {r['plan']['kv_tokens']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", default="daemon,longest")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    parser.add_argument("--pages", type=int, default=32, help="pages a run in the fp8 stage")
    parser.add_argument("--tokens", type=int, default=TOKENS,
                        help="tokens a page in the daemon and fp8 stages")
    args = parser.parse_args()
    stages = args.stages.split(",")
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="ocrwatch-profiles-"))
    folder = model(work)
    results: dict[str, Any] = {"meta": {**gpu_facts(), "card_mib": total_mib(),
                                        "stages": stages}}
    name = "gpu_profiles_" + "_".join(stages)

    def keep() -> None:  # after each stage, so a run cut short still leaves its figures
        (args.out / f"{name}.json").write_text(json.dumps(results, indent=1))
        (args.out / f"{name}.txt").write_text(report(results))

    sampler = Sampler()
    try:
        if "daemon" in stages:
            results["daemon"] = stage_daemon(work, folder, sampler, args.tokens)
            keep()
        if "longest" in stages:
            results["longest"] = stage_engine(work, folder, sampler, tokens=None, kind="worst",
                                              n=4)
            keep()
        if "fp8" in stages:
            results["fp8"] = []
            for quantization, kv in (("none", "auto"), ("fp8", "auto"), ("none", "fp8")):
                results["fp8"].append(stage_engine(work, folder, sampler, tokens=args.tokens,
                                                   kind="mixed", n=args.pages,
                                                   quantization=quantization,
                                                   kv_cache_dtype=kv))
                keep()
    finally:
        sampler.stop()
        keep()
    print(report(results))


if __name__ == "__main__":
    main()

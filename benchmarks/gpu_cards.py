"""What the GPU engine would read on real 16 GB cards, estimated from the daemon benchmark.

    python3 benchmarks/gpu_cards.py DAEMON_JSON [PLAIN_JSON ...] [--out FILE]

Nothing here runs on a GPU: it reads the figures ``benchmarks/gpu_daemon.py`` measured on
the lent card (its ``--json``) and scales them with each card's published peaks.

A page's work has two parts. The image encoder and the prompt (prefill) are matrix
products: bound by the card's bf16 tensor throughput. Writing the text (decode) reads the
weights and every page's KV cache at each step: bound by the card's memory bandwidth. The
benchmark measures the split: plain vLLM with the engine's page-at-a-time encoder reads
the drop once writing every token and once writing one token a page (``prefill_s``), and
the rest is decode. The engine's own time a page (the engine alone's rate) is split in
the same proportion, and each part is scaled by the lent card's peak over the other
card's:

    a page = prefill x (lent bf16 / card bf16) + decode x (lent GB/s / card GB/s)

This assumes each part reaches the same fraction of the peak on both cards (it is an
estimate, not a measure: no such card was at hand). GeForce cards run bf16 products with
fp32 accumulation, which vLLM's kernels use, at half their fp16-accumulate rate: the
estimate gives both, the slower being the likely one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks import _common  # noqa: E402

# Published peaks: memory bandwidth (GB/s) and dense bf16/fp16 tensor TFLOP/s with fp32
# accumulation (and, for GeForce, with fp16 accumulation: twice that). NVIDIA's data
# sheets and the Ada and Ampere architecture white papers.
LENT = {"H100": (3350.0, 989.0), "H200": (4800.0, 989.0)}
CARDS: list[tuple[str, float, float, float]] = [
    # name, GB/s, TFLOP/s fp32-accumulate, TFLOP/s fp16-accumulate
    ("RTX 4060 Ti 16 GB", 288.0, 22.1, 44.2),
    ("RTX A4000 16 GB", 448.0, 76.7, 76.7),
    ("RTX 4070 Ti Super 16 GB", 672.0, 44.1, 88.2),
    ("RTX 4080 16 GB", 716.8, 48.7, 97.5),
]


def lent_card(gpu: str) -> str:
    return "H200" if "H200" in gpu else "H100"


def estimate(data: dict[str, Any], plain: list[dict[str, Any]]) -> list[str]:
    meta, alone, daemon = data["meta"], data.get("alone"), data.get("daemon")
    timed = [p for p in plain if p.get("prefill_s") and "rate" in p]
    # The engine's own encoder splits a page's time best; plain vLLM's own (every page's
    # image at once) is the fallback, and the estimate says which it used.
    split = [p for p in timed if p.get("pagewise")] or sorted(timed, key=lambda p: -p["rate"])
    if not split or alone is None:
        return ["no plain run with a prefill pass: nothing to scale"]
    p = split[0]
    share = p["prefill_s"] / p["seconds"]
    encoder = ("the engine's encoder" if p.get("pagewise") else
               "vLLM's own encoder (no run with the engine's was made: its prefill share "
               "may differ)")
    lent = lent_card(p.get("gpu") or meta["gpu"])
    bw, tf = LENT[lent]
    per_page = 1.0 / alone["rate"]
    prefill, decode = per_page * share, per_page * (1 - share)
    lines = [
        f"measured on the lent {lent} ({meta['gpu']}): the engine alone {alone['rate']:.2f} "
        f"pages/s = {per_page * 1000:.0f} ms a page; plain vLLM with {encoder} at "
        f"{p['seqs']} sequences read the drop in {p['seconds']} s writing 500 tokens a page "
        f"and in {p['prefill_s']} s writing one: prefill {share:.0%} of a page's time",
        f"so a page on the {lent}: prefill {prefill * 1000:.1f} ms + decode "
        f"{decode * 1000:.1f} ms; the {lent}'s peaks: {bw:.0f} GB/s, {tf:.0f} TFLOP/s bf16",
        "",
        "| card | GB/s | bf16 TFLOP/s (fp32 acc. / fp16 acc.) | prefill ms a page | decode ms "
        "a page | pages/s (fp32 acc. / fp16 acc.) | x the lent card |",
        "|---|--:|--:|--:|--:|--:|--:|",
    ]
    for name, gbs, slow, fast in CARDS:
        dec = decode * bw / gbs
        pre_slow, pre_fast = prefill * tf / slow, prefill * tf / fast
        rate_slow, rate_fast = 1 / (pre_slow + dec), 1 / (pre_fast + dec)
        lines.append(f"| {name} | {gbs:.0f} | {slow} / {fast} | {pre_slow * 1000:.0f} / "
                     f"{pre_fast * 1000:.0f} | {dec * 1000:.0f} | {rate_slow:.2f} / "
                     f"{rate_fast:.2f} | {rate_slow * per_page:.3f} / "
                     f"{rate_fast * per_page:.3f} |")
    if daemon is not None:
        lines += ["", f"the daemon on the lent machine: {daemon['rate']:.2f} pages/s "
                  f"({meta.get('usable_cores')} cores usable); on each card above the GPU, "
                  "not the preparers, is then the bound: a desktop's cores prepare faster "
                  "than these cards read"]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("daemon_json", type=Path)
    parser.add_argument("plain_json", type=Path, nargs="*",
                        help="runs whose plain vLLM figures to use (--plain-only)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    data = json.loads(args.daemon_json.read_text())
    plain = list(data.get("plain") or [])
    for path in args.plain_json:
        other = json.loads(path.read_text())
        plain += [dict(p, gpu=other["meta"]["gpu"]) for p in other.get("plain") or []]
    lines = _common.header("The GPU engine on real 16 GB cards, estimated", [
        "from benchmarks/gpu_daemon.py's figures on the lent card and published peaks; "
        "see the docstring for the arithmetic"])
    lines += ["", *estimate(data, plain)]
    print("\n".join(lines))
    if args.out:
        print(f"saved {_common.save('gpu_cards', lines, args.out)}")


if __name__ == "__main__":
    main()

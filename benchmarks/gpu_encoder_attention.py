"""The vision encoder's attention, as vLLM 0.26 runs it for LightOnOCR, against one page
at a time without a mask. Needs torch and a CUDA GPU; no vLLM.

    python3 benchmarks/gpu_encoder_attention.py [--out FILE]

Without xformers (which vLLM does not install), vLLM's Pixtral encoder concatenates every
image of a step into one sequence and hands ``scaled_dot_product_attention`` a dense
block-diagonal mask (transformers' ``generate_block_attention_mask``). A mask rules out
the flash kernel, and the pages of one step attend to each other only to be masked out.
This times the attention of the encoder's 24 layers (16 heads of 64, bf16) for pages
fitted to 1540 px, both ways, with the same tensor layout as vLLM's ``PixtralHFAttention``:
one A4 page (110 x 78 patches), two A4 pages in one step, and a card (110 x 70). The
median of 5 timed runs after 2 warm-ups, and the peak memory each way above the inputs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

LAYERS, HEADS, HEAD_DIM = 24, 16, 64
PAGES = {"one A4 page": [110 * 78], "two A4 pages in one step": [110 * 78, 110 * 78],
         "one card": [110 * 70]}


def block_mask(sizes: list[int], like):  # type: ignore[no-untyped-def]
    """transformers' generate_block_attention_mask, as vLLM calls it."""
    import torch

    n = sum(sizes)
    mask = torch.full((n, n), torch.finfo(like.dtype).min, dtype=like.dtype, device=like.device)
    start = 0
    for size in sizes:
        mask[start:start + size, start:start + size] = 0
        start += size
    return mask[None, None, :, :].expand(1, 1, -1, -1)


def qkv(n: int):  # type: ignore[no-untyped-def]
    """q, k and v laid out as PixtralHFAttention hands them to SDPA."""
    import torch

    raw = torch.randn(1, n, 3 * HEADS * HEAD_DIM, device="cuda", dtype=torch.bfloat16)
    q, k, v = raw.chunk(3, dim=-1)
    q = q.reshape(1, n, HEADS, HEAD_DIM).transpose(1, 2)
    k = k.reshape(1, n, HEADS, HEAD_DIM).transpose(1, 2)
    v = v.reshape(1, n, HEADS, HEAD_DIM).transpose(1, 2)
    return q, k, v


def timed(fn) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Median seconds of fn over 5 runs after 2 warm-ups, and its peak memory in MiB."""
    import torch

    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    runs = []
    for _ in range(5):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        runs.append(time.perf_counter() - t)
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return statistics.median(runs), peak


def measure(sizes: list[int]) -> tuple[float, float, float, float]:
    """Seconds and peak MiB of the pages' attention, vLLM's way and a page at a time."""
    from torch.nn.functional import scaled_dot_product_attention as sdpa

    q, k, v = qkv(sum(sizes))
    mask = block_mask(sizes, q)
    parts = [qkv(size) for size in sizes]

    def masked() -> None:
        for _ in range(LAYERS):
            sdpa(q, k, v, attn_mask=mask)

    def pagewise() -> None:
        for _ in range(LAYERS):
            for pq, pk, pv in parts:
                sdpa(pq, pk, pv)

    slow, slow_mib = timed(masked)
    fast, fast_mib = timed(pagewise)
    return slow, fast, slow_mib, fast_mib


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    import torch

    lines = ["ocrwatch: the vision encoder's attention, vLLM's way and a page at a time",
             f"GPU: {torch.cuda.get_device_name()}  torch {torch.__version__}",
             f"{LAYERS} layers x {HEADS} heads of {HEAD_DIM}, bf16, median of 5 runs", "",
             "| pages | vLLM's way (one sequence, block mask) | a page at a time, no mask "
             "| ratio | peak MiB (mask / none) |", "|---|---|---|---|---|"]
    for name, sizes in PAGES.items():
        slow, fast, slow_mib, fast_mib = measure(sizes)
        lines.append(f"| {name} | {slow * 1000:.1f} ms | {fast * 1000:.1f} ms | "
                     f"{slow / fast:.2f}x | {slow_mib:.0f} / {fast_mib:.0f} |")
        torch.cuda.empty_cache()
    report = "\n".join(lines)
    print(report)
    if args.out:
        args.out.write_text(report + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())

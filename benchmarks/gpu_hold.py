"""Another program on the card: hold GIB of GPU memory until stdin closes.

    python3 benchmarks/gpu_hold.py GIB

A torch allocation of GIB GiB, written once so the memory is really taken (its CUDA
context comes on top, as with any program). Prints "held PID" once the memory is on the
card, then waits; it exits when its stdin is closed (or it is killed). Used by
benchmarks/gpu_shared.py and tests/gpu to play the game or browser beside ocrwatch.
"""

from __future__ import annotations

import sys


def main() -> None:
    import os

    import torch

    gib = float(sys.argv[1])
    block = torch.empty(int(gib * 1024**3), dtype=torch.uint8, device="cuda")
    block.fill_(1)
    torch.cuda.synchronize()
    print(f"held {os.getpid()}", flush=True)
    sys.stdin.read()  # until the parent closes it
    del block


if __name__ == "__main__":
    main()

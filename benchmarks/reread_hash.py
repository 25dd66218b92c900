"""What the end-of-read content check costs: the SHA-256 of the file through the handle
it was read from, once its last page is decoded (``pipeline.open_pages``), beside the
plain size-and-time check (``fstat``) it completes.

The file is in the page cache, as it is right after its pages were decoded. Files of 1,
10 and 100 MB; each check runs 7 times; medians are printed. For scale, the time a page
takes to read is in ``benchmarks/pipeline.py``'s results.

    python benchmarks/reread_hash.py
    python benchmarks/reread_hash.py --sizes 1 50 --out /tmp/h.txt
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, median, save
from ocrwatch.store.jobs import file_sha256

RUNS = 7


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 10, 100], help="MB")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = header("The end-of-read content check (SHA-256 through the read's handle)",
                   [f"runs: {RUNS} per size, file in the page cache"])
    for mb in args.sizes:
        with tempfile.NamedTemporaryFile(prefix="reread-", dir=Path.cwd()) as tmp:
            tmp.write(os.urandom(mb << 20))
            tmp.flush()
            with open(tmp.name, "rb") as fh:
                file_sha256(fh)  # warm the page cache
                hashed, statted = [], []
                for _ in range(RUNS):
                    start = time.perf_counter()
                    file_sha256(fh)
                    hashed.append(time.perf_counter() - start)
                    start = time.perf_counter()
                    os.fstat(fh.fileno())
                    statted.append(time.perf_counter() - start)
        h, s = median(hashed), median(statted)
        lines.append(f"{mb:4d} MB: sha256 {h * 1000:8.2f} ms ({mb / h:6.0f} MB/s)   "
                     f"fstat {s * 1e6:6.2f} us")
    print("\n".join(lines))
    save("reread_hash.txt", lines, args.out)


if __name__ == "__main__":
    main()

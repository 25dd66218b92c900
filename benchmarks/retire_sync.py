"""What making the results durable costs when an original is deleted or archived.

Before an original goes, ocrwatch syncs each sidecar (``.md``, ``.txt``, ``.ocr.pdf``),
their folder, and the index's WAL (``synchronous = FULL`` for the journal transaction
that precedes the act), then renames the original to a private name, checks it, and acts.
This script times ``Lifecycle.finish`` per file, through the project's own code (a real
SQLite index, sidecars written by ``write_sidecars``, a 200 KB original), in three ways,
interleaved file by file:

- ``durable``: as shipped;
- ``checkpoint``: the files synced, the index made durable by ``PRAGMA
  wal_checkpoint(PASSIVE)`` instead of FULL (the other way SQLite offers);
- ``no sync``: the same steps with no sync of the files, folders or index (the strongest
  plain alternative: what a power loss may undo).

Medians of the per-file times are printed, with the ratio to ``no sync``.

    python benchmarks/retire_sync.py                      # 60 files each way, on ./
    python benchmarks/retire_sync.py --files 30 --dir /var/tmp --out /tmp/r.txt
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, median, save
from ocrwatch.config import Config
from ocrwatch.core.domain import PageText
from ocrwatch.results.lifecycle import Lifecycle
from ocrwatch.results.sidecar import pdf_path, write_sidecars
from ocrwatch.store.db import Database
from ocrwatch.store.jobs import JobQueue, file_sha256

WAYS = ("durable", "checkpoint", "no sync")


def prepare(queue: JobQueue, inbox: Path, n: int) -> tuple[int, Path, dict[str, Path], str]:
    original = inbox / f"scan{n}.png"
    original.write_bytes(os.urandom(200_000))
    pdf = pdf_path(inbox / f"scan{n}")
    pdf.write_bytes(os.urandom(60_000))
    text = "words of the page " * 200
    md, txt = write_sidecars(inbox / f"scan{n}", [PageText(text, text)])
    st = original.stat()
    sha = file_sha256(original)
    queue.offer(original, st.st_size, st.st_mtime_ns, sha)
    job = queue.claim()
    assert job is not None and md is not None and txt is not None
    queue.complete(job.id, [PageText(text, text)], engine="bench", md_path=md, txt_path=txt,
                   sha256=sha, retire="pending")
    return job.id, original, {"txt": txt, "md": md, "pdf": pdf}, sha


def run(folder: Path, files: int, mode: str) -> dict[str, list[float]]:
    inbox = folder / "inbox"
    inbox.mkdir()
    db = Database(folder / "index.sqlite3")
    queue = JobQueue(db)
    config = Config(inbox=[inbox], database=folder / "index.sqlite3", on_success=mode,
                    archive_dir=folder / "archive")
    life = Lifecycle(config, db)
    real_durable, real_make = db.durable, life._make_durable

    @contextlib.contextmanager
    def checkpoint() -> Iterator[None]:
        yield
        db.conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

    times: dict[str, list[float]] = {w: [] for w in WAYS}
    for n in range(files):
        for way in WAYS:
            job_id, original, sidecars, sha = prepare(queue, inbox, n * 10 + WAYS.index(way))
            # The way under test, patched on these two objects only.
            setattr(db, "durable", {"durable": real_durable, "checkpoint": checkpoint,  # noqa: B010
                                    "no sync": contextlib.nullcontext}[way])
            setattr(life, "_make_durable",  # noqa: B010
                    (lambda _s: None) if way == "no sync" else real_make)
            start = time.perf_counter()
            life.finish(job_id, original, sidecars, sha, mode)
            times[way].append(time.perf_counter() - start)
            assert not original.exists()
    db.close()
    return times


def fs_type(folder: Path) -> str:
    done = subprocess.run(["stat", "-f", "-c", "%T", str(folder)], capture_output=True,
                          text=True, check=False)
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=60)
    parser.add_argument("--dir", type=Path, default=Path.cwd(),
                        help="where the index and files go (a real disk: fsync costs there)")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    lines = header("Syncing results before an original is deleted or archived",
                   [f"files: {args.files} per way and mode, 200 KB originals, "
                    f"3 sidecars each; on a {fs_type(args.dir)} file system"])
    for mode in ("delete", "archive"):
        with tempfile.TemporaryDirectory(prefix="retire-sync-", dir=args.dir) as tmp:
            times = run(Path(tmp), args.files, mode)
        base = median(times["no sync"])
        lines.append(f"{mode}:")
        for way in WAYS:
            m = median(times[way])
            lines.append(f"  {way:<10} median {m * 1000:7.2f} ms per file  "
                         f"({m / base:5.1f} x no sync)")
    print("\n".join(lines))
    save("retire_sync.txt", lines, args.out)


if __name__ == "__main__":
    main()

"""Soak: a real daemon under random mixed drops for a long while, watched from outside.

Good files, hostile files, renames, deletes, control-socket abuse and searches arrive in a
random order (seeded: ``OCRWATCH_SOAK_SEED`` repeats a run). The daemon's RSS, open file
descriptors and threads are sampled throughout. At the end nothing may be lost: every
original is in the inbox (read, with sidecars) or in ``failed/`` (with its note), every
deleted file has left the index, the log holds no traceback, and the resources have not
grown. CI runs ``test_soak_short`` (about 75 s); the 30-minute run is
``OCRWATCH_SOAK_SECONDS=1800 pytest -m slow tests/reliability/test_hostile_soak.py -s``,
with ``OCRWATCH_SOAK_REPORT=FILE`` to keep its figures as JSON.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import socket
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .helpers import (
    DaemonProcess,
    Home,
    drop,
    image_bytes,
    jobs,
    ocrwatch_cli,
    pdf_bytes,
    wait_for,
    write,
)

SEED = int(os.environ.get("OCRWATCH_SOAK_SEED", "8"))
FAIL = "fake-engine-fail"  # the fake engine fails pages of files so named


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Sample:
    at: float
    rss_mb: float
    fds: int
    threads: int


@dataclass
class Soak:
    home: Home
    daemon: DaemonProcess
    failed_dir: Path
    rng: random.Random
    good: dict[Path, str] = field(default_factory=dict)  # where it is now -> content sha
    bad: dict[str, str] = field(default_factory=dict)  # content sha -> what it was
    deleted: dict[Path, str] = field(default_factory=dict)  # path -> how and when it went
    counts: dict[str, int] = field(default_factory=dict)
    samples: list[Sample] = field(default_factory=list)
    serial: int = 0
    used: set[Path] = field(default_factory=set)

    def count(self, what: str) -> None:
        self.counts[what] = self.counts.get(what, 0) + 1

    def name(self, suffix: str) -> Path:
        self.serial += 1
        folder = self.home.inbox / self.rng.choice(["", "a", "a/b", "scans 2024", "ü"])
        # Same names in several folders on purpose: failed/ must keep every one.
        stem = self.rng.choice([f"scan{self.serial}", "bad", "letter", f"page-{self.serial}"])
        path = folder / f"{stem}{suffix}"
        while path in self.used or path.exists():
            self.serial += 1
            path = folder / f"{stem}-{self.serial}{suffix}"
        self.used.add(path)  # a name is used once: each check below knows its one file
        return path

    # -- actions
    def good_file(self) -> None:
        text = f"soak page {self.serial} {self.rng.random():.12f}"
        kind = self.rng.choice(["PNG", "JPEG", "PDF"])
        data = (pdf_bytes([text, text + " (2)"]) if kind == "PDF"
                else image_bytes(text, kind))
        path = self.name({"PNG": ".png", "JPEG": ".jpg", "PDF": ".pdf"}[kind])
        drop(path, data)
        self.good[path] = _sha(data)
        self.count("good files")

    def hostile_file(self) -> None:
        choice = self.rng.choice(["empty", "truncated", "text", "engine-fails", "link",
                                  "sparse", "deep"])
        serial = f"{self.serial}-{self.rng.random():.9f}"
        if choice == "link":
            outside = write(self.home.root / "outside" / f"secret-{serial}.png",
                            image_bytes(f"outside {serial}"))
            link = self.name(".png")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(outside)
            self.bad[_sha(outside.read_bytes())] = "link target (must stay outside)"
        elif choice == "sparse":
            path = self.name(".pdf")
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as fh:
                fh.truncate(3 * 1024 ** 3)  # over max_file_mb: refused before hashing
        elif choice == "deep":
            folder = self.home.inbox.joinpath(*["deep"] * 60)
            data = image_bytes(f"deep {serial}")
            drop(folder / f"deep-{serial}.png", data)
            self.good[folder / f"deep-{serial}.png"] = _sha(data)
        else:
            data = {
                "empty": b"",
                "truncated": image_bytes(f"cut {serial}")[:300],
                "text": f"not an image {serial}\n".encode(),
                "engine-fails": image_bytes(f"engine fails {serial}"),
            }[choice]
            path = self.name(".png")
            if choice == "engine-fails":
                path = path.with_name(f"{FAIL}-{serial}.png")
            drop(path, data)
            if data:
                self.bad[_sha(data)] = choice
        self.count(f"hostile: {choice}")

    def rename(self) -> None:
        rows = jobs(self.home.database)
        done = [p for p in self.good
                if (r := rows.get(os.fsdecode(p))) is not None and r["state"] == "done"]
        if not done:
            return
        src = self.rng.choice(done)
        dest = self.name(src.suffix)
        dest.parent.mkdir(parents=True, exist_ok=True)
        os.rename(src, dest)
        self.good[dest] = self.good.pop(src)
        self.deleted[src] = f"renamed to {dest} at {time.time():.3f}"
        self.count("renames")

    def delete(self) -> None:
        if not self.good:
            return
        path = self.rng.choice(list(self.good))
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        del self.good[path]
        self.deleted[path] = f"deleted at {time.time():.3f}"
        self.count("deletes")

    def socket_abuse(self) -> None:
        path = self.home.run / "ocrwatch" / "control.sock"
        kind = self.rng.choice(["nested", "garbage", "long", "idle", "trickle", "status"])
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(10)
                s.connect(str(path))
                if kind == "nested":
                    s.sendall(b"[" * 20000 + b"]" * 20000 + b"\n")
                elif kind == "garbage":
                    s.sendall(bytes(self.rng.randrange(256) for _ in range(200)) + b"\n")
                elif kind == "long":
                    with contextlib.suppress(OSError):
                        s.sendall(b"x" * 200_000)
                elif kind == "trickle":
                    s.sendall(b'{"cmd"')
                elif kind == "status":
                    s.sendall(b'{"cmd": "status"}\n')
                if kind in ("nested", "garbage", "long", "status"):
                    reply = s.recv(1 << 20)
                    assert reply, f"no answer to a {kind} request"
        except OSError as exc:
            raise AssertionError(f"the control socket failed a {kind} client: {exc}") from exc
        self.count(f"socket: {kind}")

    def search(self) -> None:
        query = self.rng.choice(["soak", "page", '"soak page"', "soak*", "letter OR scan",
                                 "a* b* c*", '"unclosed', "AND"])
        done = ocrwatch_cli(self.home, "search", "--database", str(self.home.database),
                            query, "--limit", "5")
        out = done.stdout + done.stderr
        assert "Traceback" not in out, out
        assert done.returncode in (0, 1, 2), out
        self.count("searches")

    def sample(self, start: float) -> None:
        assert self.daemon.proc is not None
        pid = self.daemon.proc.pid
        status = Path(f"/proc/{pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        rss = int(fields["VmRSS"].split()[0]) / 1024
        fds = len(os.listdir(f"/proc/{pid}/fd"))
        self.samples.append(Sample(time.monotonic() - start, rss, fds,
                                   int(fields["Threads"])))


def _soak(home: Home, daemon_process: Callable[..., DaemonProcess],
          seconds: float) -> dict[str, Any]:
    failed_dir = home.root / "failed"
    config = home.root / "soak.toml"
    config.write_text(f'failed_dir = "{failed_dir}"\nmax_file_mb = 50\n')
    daemon = daemon_process("--config", str(config), OCRWATCH_FAKE_DELAY="0.01")
    soak = Soak(home, daemon, failed_dir, random.Random(SEED))
    daemon.start()
    daemon.wait_ready()
    actions: list[tuple[float, Callable[[], None]]] = [
        (40, soak.good_file), (14, soak.hostile_file), (8, soak.rename), (8, soak.delete),
        (12, soak.socket_abuse), (2, soak.search)]
    weights = [w for w, _ in actions]
    start = time.monotonic()
    next_sample = start
    while time.monotonic() - start < seconds:
        if time.monotonic() >= next_sample:
            soak.sample(start)
            next_sample += max(2.0, seconds / 200)
        soak.rng.choices([a for _, a in actions], weights)[0]()
        assert daemon.running, daemon.output()[-3000:]
        # Pace: a busy user's folder, not a flood (the fake engine is fast).
        time.sleep(soak.rng.uniform(0.02, 0.25))  # pacing between actions, not a wait
    # Every file settles, then nothing may be lost.
    def in_failed_dir() -> set[str]:
        return {_sha(p.read_bytes()) for p in failed_dir.rglob("*")
                if p.is_file() and not p.name.endswith(".error.txt")}

    def settled() -> bool:
        rows = jobs(home.database)
        return bool(rows) and all(r["state"] in ("done", "failed") for r in rows.values()) \
            and all((r := rows.get(os.fsdecode(p))) is not None and r["state"] == "done"
                    for p in soak.good) \
            and {sha for sha, what in soak.bad.items() if not what.startswith("link")} \
            <= in_failed_dir() \
            and not any(os.fsdecode(p) in rows for p in soak.deleted if p not in soak.good)

    try:
        wait_for(settled, 180, "every file to be read")
    except AssertionError:
        rows = jobs(home.database)
        open_rows = {k: (r["state"], r["reason"]) for k, r in rows.items()
                     if r["state"] not in ("done", "failed")}
        stale = [str(p) for p in soak.deleted if p not in soak.good and os.fsdecode(p) in rows]
        missing = {str(p): (rows[os.fsdecode(p)]["state"], rows[os.fsdecode(p)]["reason"])
                   if os.fsdecode(p) in rows else "no job" for p in soak.good
                   if os.fsdecode(p) not in rows or rows[os.fsdecode(p)]["state"] != "done"}
        raise AssertionError(f"not settled: open {open_rows}; good not done {missing}; "
                             f"deleted but indexed {stale}; "
                             f"log: {daemon.output()[-3000:]}") from None
    soak.sample(start)
    rows = jobs(home.database)
    for path in soak.good:
        assert rows[os.fsdecode(path)]["state"] == "done", (path, rows[os.fsdecode(path)])
        row = rows[os.fsdecode(path)]
        for sidecar in (row["md_path"], row["txt_path"]):  # scan.jpg beside scan.png: scan.jpg.md
            assert sidecar is not None and Path(os.fsdecode(sidecar)).is_file(), (path, sidecar)
    for path, how in soak.deleted.items():
        if path not in soak.good:
            row = rows.get(os.fsdecode(path))
            assert row is None, f"{path} ({how}) is still indexed: {dict(row or {})}"
    kept = in_failed_dir()
    outside = {_sha(p.read_bytes()) for p in (home.root / "outside").glob("*")}
    for sha, what in soak.bad.items():
        if what.startswith("link"):
            assert sha in outside, "a link's target was moved or lost"
        else:
            assert sha in kept, f"a failed file ({what}) is not in failed/"
    notes = list(failed_dir.rglob("*.error.txt"))
    assert len(notes) >= len([w for w in soak.bad.values() if not w.startswith("link")])
    assert not list((home.root / "outside").glob("*.md")), "sidecars written outside the inbox"
    assert ocrwatch_cli(home, "status").returncode == 0
    assert daemon.stop() == 0
    out = daemon.output()
    assert "Traceback" not in out, out[-5000:]
    # Resources: compare the last quarter with the first (after start-up) by medians.
    quarter = max(1, len(soak.samples) // 4)
    first, last = soak.samples[1:quarter + 1] or soak.samples[:1], soak.samples[-quarter:]

    def med(items: list[Sample], key: str) -> float:
        return float(statistics.median(getattr(s, key) for s in items))

    facts: dict[str, Any] = {
        "seconds": round(time.monotonic() - start), "seed": SEED,
        "actions": dict(sorted(soak.counts.items())),
        "files_in_index": len(rows),
        "done": sum(1 for r in rows.values() if r["state"] == "done"),
        "failed": sum(1 for r in rows.values() if r["state"] == "failed"),
        "in_failed_dir": len(kept),
        "samples": len(soak.samples),
        "rss_mb": {"first_quarter_median": round(med(first, "rss_mb"), 1),
                   "last_quarter_median": round(med(last, "rss_mb"), 1),
                   "max": round(max(s.rss_mb for s in soak.samples), 1)},
        "fds": {"first_quarter_median": med(first, "fds"),
                "last_quarter_median": med(last, "fds"),
                "max": max(s.fds for s in soak.samples)},
        "threads": {"first_quarter_median": med(first, "threads"),
                    "last_quarter_median": med(last, "threads"),
                    "max": max(s.threads for s in soak.samples)},
    }
    assert facts["fds"]["last_quarter_median"] <= facts["fds"]["first_quarter_median"] + 16, facts
    assert facts["threads"]["max"] <= facts["threads"]["first_quarter_median"] + 16, facts
    assert facts["rss_mb"]["last_quarter_median"] <= \
        facts["rss_mb"]["first_quarter_median"] * 1.5 + 50, facts
    report = os.environ.get("OCRWATCH_SOAK_REPORT")
    if report:
        Path(report).write_text(json.dumps(facts, indent=2) + "\n")
    return facts


def test_soak_short(home: Home, daemon_process: Callable[..., DaemonProcess],
                    capsys: pytest.CaptureFixture[str]) -> None:
    facts = _soak(home, daemon_process, 45.0)  # CI's share; the long soak is marked slow
    with capsys.disabled():
        print(f"\nsoak (short): {json.dumps(facts)}")


@pytest.mark.slow
@pytest.mark.timeout(4 * 3600)
def test_soak_long(home: Home, daemon_process: Callable[..., DaemonProcess],
                   capsys: pytest.CaptureFixture[str]) -> None:
    seconds = os.environ.get("OCRWATCH_SOAK_SECONDS")
    if not seconds:
        reason = "set OCRWATCH_SOAK_SECONDS (1800 for the 30-minute soak) to run it"
        print(reason)
        pytest.skip(reason)
    facts = _soak(home, daemon_process, float(seconds))
    with capsys.disabled():
        print(f"\nsoak ({seconds} s): {json.dumps(facts)}")

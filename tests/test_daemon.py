"""The daemon in this process, around the fake engine (and Tesseract once)."""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import save_pdf, text_page, wait_for

from ocrwatch.config import Config
from ocrwatch.control.client import request
from ocrwatch.control.server import ControlServer
from ocrwatch.daemon import Daemon
from ocrwatch.engines.base import ReadPolicy
from ocrwatch.store.index import search
from ocrwatch.testing.fake import FakeEngine


@pytest.fixture
def config(tmp_path: Path) -> Config:
    return Config(inbox=[tmp_path / "inbox"], database=tmp_path / "index.sqlite3",
                  settle_seconds=0.3, engine="fake")


@pytest.fixture
def engine() -> FakeEngine:
    return FakeEngine()


@pytest.fixture
def daemon(config: Config, engine: FakeEngine) -> Iterator[Daemon]:
    with Daemon(config, engine=engine) as d:
        yield d


def state(d: Daemon, path: Path) -> str | None:
    job = d.jobs.known(path)
    return job.state.value if job else None


def finished(d: Daemon, *paths: Path) -> bool:
    return all(state(d, p) in ("done", "failed") for p in paths)


def test_image_and_pdf_get_sidecars_and_index(daemon: Daemon, config: Config) -> None:
    inbox = config.inbox[0]
    png = inbox / "letter.png"
    text_page(["hello"]).save(png)
    pdf = save_pdf(inbox / "report.pdf", [["a"], ["b"], ["c"]])
    wait_for(lambda: finished(daemon, png, pdf), 30, "both files")
    assert state(daemon, png) == state(daemon, pdf) == "done"
    assert "fake text of letter.png page 1" in (inbox / "letter.txt").read_text()
    md = (inbox / "report.md").read_text()
    assert md.index("page 1 (") < md.index("page 2 (") < md.index("page 3 (")
    assert "<!-- page 3 -->" in md
    hits = search(daemon.db, "report")
    assert sorted(h.page for h in hits) == [1, 2, 3]


def test_pages_are_scaled_for_the_engine(daemon: Daemon, config: Config,
                                         engine: FakeEngine) -> None:
    big = config.inbox[0] / "big.png"
    text_page(["x"], width=3000).save(big)
    wait_for(lambda: finished(daemon, big), 30, "big page")
    assert "(1540x" in (config.inbox[0] / "big.txt").read_text()


def test_identical_content_is_read_once(daemon: Daemon, config: Config,
                                        engine: FakeEngine) -> None:
    inbox = config.inbox[0]
    first = inbox / "a.png"
    text_page(["same"]).save(first)
    wait_for(lambda: finished(daemon, first), 30, "first copy")
    read_before = sum(len(b) for b in engine.batches)
    copy = inbox / "sub" / "b.png"
    copy.parent.mkdir()
    shutil.copy(first, copy)
    wait_for(lambda: finished(daemon, copy), 30, "second copy")
    assert sum(len(b) for b in engine.batches) == read_before
    assert (copy.parent / "b.md").read_text() == (inbox / "a.md").read_text()
    assert {Path(h.path).name for h in search(daemon.db, "fake")} == {"a.png", "b.png"}


def test_changed_file_is_read_again_and_deleted_file_leaves_index(
        daemon: Daemon, config: Config, engine: FakeEngine) -> None:
    path = config.inbox[0] / "doc.png"
    text_page(["one"], width=800).save(path)
    wait_for(lambda: finished(daemon, path), 30, "first version")
    # The fake engine takes 1540 px pages, as the model does: 800x400 is read at 1540x770.
    assert "(1540x770)" in (config.inbox[0] / "doc.txt").read_text()
    text_page(["two"], width=900).save(path)
    wait_for(lambda: "(1540x684)" in (config.inbox[0] / "doc.txt").read_text(), 30,
             "new version")
    wait_for(lambda: state(daemon, path) == "done", 30, "done again")
    path.unlink()
    wait_for(lambda: state(daemon, path) is None, 30, "removal from the index")
    assert search(daemon.db, "doc") == []


def test_bad_files_fail_with_reasons_and_the_next_is_read(daemon: Daemon,
                                                          config: Config) -> None:
    inbox = config.inbox[0]
    (inbox / "empty.png").write_bytes(b"")
    (inbox / "text.png").write_text("not an image")
    good = inbox / "good.png"
    text_page(["fine"]).save(good)
    wait_for(lambda: finished(daemon, inbox / "empty.png", inbox / "text.png", good), 30,
             "all three")
    assert state(daemon, good) == "done"
    reasons = {Path(f.path).name: f.reason for f in daemon.status().recent_failures}
    assert "empty" in reasons["empty.png"]
    assert "not an image or PDF" in reasons["text.png"]
    assert not (inbox / "empty.md").exists()


def test_engine_page_failure_fails_the_file(daemon: Daemon, config: Config) -> None:
    path = config.inbox[0] / "fake-engine-fail.png"
    text_page(["x"]).save(path)
    wait_for(lambda: finished(daemon, path), 30, "failure")
    job = daemon.jobs.known(path)
    assert job is not None and job.reason is not None
    assert "could not be read: the fake engine was told to fail" in job.reason


def test_same_stem_sidecars_do_not_collide(daemon: Daemon, config: Config) -> None:
    inbox = config.inbox[0]
    text_page(["jpg"], width=700).save(inbox / "scan.jpg")
    wait_for(lambda: finished(daemon, inbox / "scan.jpg"), 30, "jpg")
    save_pdf(inbox / "scan.pdf", [["pdf"]])
    wait_for(lambda: finished(daemon, inbox / "scan.pdf"), 30, "pdf")
    assert "scan.jpg" in (inbox / "scan.md").read_text()
    assert "scan.pdf" in (inbox / "scan.pdf.md").read_text()


def test_output_dir_mirrors_inbox(tmp_path: Path, engine: FakeEngine) -> None:
    config = Config(inbox=[tmp_path / "in"], output_dir=tmp_path / "out",
                    database=tmp_path / "i.sqlite3", settle_seconds=0.2)
    with Daemon(config, engine=engine) as d:
        path = tmp_path / "in" / "2024" / "x.png"
        path.parent.mkdir(parents=True)
        text_page(["x"]).save(path)
        wait_for(lambda: finished(d, path), 30, "x.png")
    assert (tmp_path / "out" / "in" / "2024" / "x.md").exists()
    assert not (path.parent / "x.md").exists()


class SlowRelease(FakeEngine):
    """Its release holds until the test lets go, as vLLM's can for 30 s."""

    def __init__(self) -> None:
        super().__init__()
        self.in_release = threading.Event()
        self.let_go = threading.Event()

    def release(self) -> None:
        self.in_release.set()
        self.let_go.wait(60)
        super().release()


def test_status_answers_while_the_engine_releases(config: Config) -> None:
    engine = SlowRelease()
    d = Daemon(config, engine=engine)
    rundir = Path(tempfile.mkdtemp(prefix="ow-"))  # AF_UNIX paths must stay short
    os.chmod(rundir, 0o700)
    server = ControlServer(rundir / "control.sock", d)
    d.start()
    server.start()
    try:
        path = config.inbox[0] / "first.png"
        text_page(["x"]).save(path)
        wait_for(lambda: finished(d, path), 30, "first.png")
        d.pause()
        wait_for(engine.in_release.is_set, 10, "the engine's release to begin")
        took: list[float] = []
        for _ in range(5):
            start = time.perf_counter()
            local = d.status()
            took.append(time.perf_counter() - start)
            start = time.perf_counter()
            remote = request("status", socket_path=rundir / "control.sock", timeout=5)
            took.append(time.perf_counter() - start)
            assert local.state == remote["state"] == "paused"
        assert max(took) < 0.2, f"status took {max(took):.3f} s during a release"
        assert engine.released == 0  # the release was still running all along
    finally:
        engine.let_go.set()
        server.close()
        d.close()
        shutil.rmtree(rundir, ignore_errors=True)
    assert engine.released == 1


def test_pause_queues_without_reading_and_survives_restart(config: Config) -> None:
    engine = FakeEngine()
    d = Daemon(config, engine=engine)
    d.start()
    try:
        d.pause()
        path = config.inbox[0] / "later.png"
        text_page(["x"]).save(path)
        wait_for(lambda: state(d, path) == "queued", 30, "queued while paused")
        assert d.status().state == "paused"
        assert engine.released >= 1 or wait_for(lambda: engine.released >= 1, 10, "release")
        assert engine.batches == []
    finally:
        d.close()
    engine2 = FakeEngine()
    d2 = Daemon(config, engine=engine2)
    d2.start()
    try:
        assert d2.paused
        assert state(d2, path) == "queued"
        d2.resume()
        wait_for(lambda: state(d2, path) == "done", 30, "read after resume")
    finally:
        d2.close()


def gated_open_pages(monkeypatch: pytest.MonkeyPatch, gate: Callable[[], None],
                     opened: list[str]) -> None:
    """Preparers pass ``gate`` on entering a file, before its first page is opened."""
    from ocrwatch import pipeline

    real = pipeline.open_pages

    def gated(ctx: Any, job: Any, max_side: int | None) -> Iterator[Any]:
        opened.append(job.path.name)
        gate()
        yield from real(ctx, job, max_side)

    monkeypatch.setattr(pipeline, "open_pages", gated)


def test_several_preparers_open_files_at_the_same_time(
        config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each file's preparer waits for the other at a barrier: with one preparer the
    # barrier breaks after 20 s and both files fail.
    both = threading.Barrier(2, timeout=20)
    opened: list[str] = []
    gated_open_pages(monkeypatch, both.wait, opened)
    engine = FakeEngine(policy=ReadPolicy(concurrency=2, preparers=2))
    with Daemon(config, engine=engine) as d:
        paths = [config.inbox[0] / "one.png", config.inbox[0] / "two.png"]
        for path in paths:
            text_page([path.stem]).save(path)
        wait_for(lambda: finished(d, *paths), 40, "both files")
        assert [state(d, p) for p in paths] == ["done", "done"]
    assert sorted(opened) == ["one.png", "two.png"] and not both.broken


def test_a_pause_while_several_preparers_are_inside_files_loses_none(
        config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    let_go = threading.Event()
    opened: list[str] = []
    gated_open_pages(monkeypatch, lambda: let_go.wait(20), opened)
    engine = FakeEngine(policy=ReadPolicy(concurrency=2, preparers=3))
    d = Daemon(config, engine=engine)
    d.start()
    try:
        paths = [config.inbox[0] / f"page{n}.png" for n in range(5)]
        for path in paths:
            text_page([path.stem]).save(path)
        # Three preparers inside a file each (the passing lane may take a fourth).
        wait_for(lambda: len(opened) >= 3, 30, "three preparers inside a file each")
        d.pause()
        let_go.set()  # they leave their files; the drain waits for all three
        wait_for(lambda: engine.released >= 1, 30, "the engine released for the pause")
        wait_for(lambda: all(state(d, p) == "queued" for p in paths), 30, "every file queued")
        assert engine.batches == []
        d.resume()
        wait_for(lambda: finished(d, *paths), 40, "every file read after resume")
        assert all(state(d, p) == "done" for p in paths)
        read = sorted(name for batch in engine.batches for name, _ in batch)
        assert read == sorted(p.name for p in paths)  # each file read once
    finally:
        d.close()


def test_a_resume_right_after_a_preparer_dropped_its_file_for_a_pause_reads_it(
        config: Config, monkeypatch: pytest.MonkeyPatch) -> None:
    """A preparer that met a pause dropped its file and left it to the pause drain; a
    resume before the drain ran left the job running, unread, until the next start (the
    tray's pause and resume a second apart)."""
    from ocrwatch import scheduler

    let_go = threading.Event()
    opened: list[str] = []
    gated_open_pages(monkeypatch, lambda: let_go.wait(20), opened)
    real = scheduler.Scheduler._prepare
    resumed: list[bool] = []

    def prepare_then_resume(self: scheduler.Scheduler, job: Any) -> None:
        real(self, job)
        if self.paused and not resumed:
            resumed.append(True)
            self.resume()  # from the preparer itself: before any drain can run

    monkeypatch.setattr(scheduler.Scheduler, "_prepare", prepare_then_resume)
    engine = FakeEngine(policy=ReadPolicy(concurrency=1, preparers=1))
    d = Daemon(config, engine=engine)
    d.start()
    try:
        path = config.inbox[0] / "page.png"
        text_page(["page"]).save(path)
        wait_for(lambda: opened, 30, "the preparer inside the file")
        d.pause()
        let_go.set()
        wait_for(lambda: resumed, 30, "the resume right after the file was dropped")
        wait_for(lambda: state(d, path) == "done", 30, "the file read after the resume")
        assert [name for batch in engine.batches for name, _ in batch] == ["page.png"]
    finally:
        d.close()


def test_startup_recovers_running_jobs(config: Config) -> None:
    from ocrwatch.store.db import Database
    from ocrwatch.store.jobs import JobQueue, file_sha256

    path = config.inbox[0] / "crashed.png"
    path.parent.mkdir(parents=True)
    text_page(["x"]).save(path)
    db = Database(config.database)
    q = JobQueue(db)
    st = path.stat()
    q.offer(path, st.st_size, st.st_mtime_ns, file_sha256(path))
    assert q.claim() is not None  # "running" when the power went out
    db.close()
    with Daemon(config, engine=FakeEngine()) as d:
        wait_for(lambda: state(d, path) == "done", 30, "recovered job")


def test_pages_reach_the_engine_one_at_a_time_in_order(config: Config) -> None:
    # Every engine takes one page per call and does its own admission: pages and strips
    # of every size go in singly, each page once, a file's pages in their order.
    engine = FakeEngine()
    d = Daemon(config, engine=engine)
    d.pause()
    inbox = config.inbox[0]
    inbox.mkdir(parents=True)
    names = []
    for i, height in enumerate([2171, 200, 2171, 200]):
        path = inbox / f"p{i}.png"
        text_page([str(i)], width=1540).resize((1540, height)).save(path)
        names.append(path)
    names.append(save_pdf(inbox / "five.pdf", [[str(n)] for n in range(5)]))
    d.start()
    try:
        for p in names:
            d.consider(p)
        d.resume()
        wait_for(lambda: finished(d, *names), 30, "four pages and a PDF")
    finally:
        d.close()
    assert [len(b) for b in engine.batches] == [1] * 9
    read = [page for batch in engine.batches for page in batch]
    assert sorted(read) == sorted([(f"p{i}.png", 0) for i in range(4)]
                                  + [("five.pdf", n) for n in range(5)])
    assert [n for name, n in read if name == "five.pdf"] == [0, 1, 2, 3, 4]


def test_status_reports_engine_and_counts(daemon: Daemon) -> None:
    status = daemon.status()
    assert status.state in ("idle", "working")
    assert status.engine.name == "fake"
    assert {"queued", "running", "done", "failed", "pages_today", "pid"} <= set(status.to_dict())


def test_tesseract_engine_reads_real_text(tmp_path: Path) -> None:
    config = Config(inbox=[tmp_path / "in"], database=tmp_path / "i.sqlite3",
                    settle_seconds=0.2, engine="tesseract", workers=2)
    with Daemon(config) as d:
        path = tmp_path / "in" / "memo.png"
        text_page(["Quarterly invoice from Lisbon", "Amount due: 1250 euros"]).save(
            path, dpi=(200, 200))
        wait_for(lambda: finished(d, path), 60, "Tesseract")
        assert state(d, path) == "done"
        text = (tmp_path / "in" / "memo.txt").read_text()
        assert "Quarterly invoice from Lisbon" in text
        assert "1250" in text
        assert [Path(h.path).name for h in search(d.db, "lisbon")] == ["memo.png"]


class _Unavailable(FakeEngine):
    """An engine that cannot start (no driver, no server) until told otherwise."""

    def __init__(self) -> None:
        super().__init__()
        self.broken = True

    def recognize(self, pages):  # type: ignore[no-untyped-def]
        from ocrwatch.core.errors import EngineUnavailable

        if self.broken:
            raise EngineUnavailable("the worker could not start: no GPU driver")
        return super().recognize(pages)


def test_unavailable_engine_requeues_instead_of_failing(config: Config) -> None:
    engine = _Unavailable()
    with Daemon(config, engine=engine) as d:
        path = config.inbox[0] / "waits.pdf"
        save_pdf(path, [["a"], ["b"], ["c"]])
        job = wait_for(lambda: (j := d.jobs.known(path)) and j.attempts >= 1 and j, 30,
                       "a deferred job")
        assert job.state.value == "queued"
        assert "engine is unavailable" in (job.reason or "")
        assert d.jobs.counts()["failed"] == 0
        # Once the engine works, the same job is read (without waiting out the backoff).
        engine.broken = False
        with d.db.transaction() as conn:
            conn.execute("UPDATE jobs SET not_before = 0")
        wait_for(lambda: state(d, path) == "done", 30, "read once the engine works")

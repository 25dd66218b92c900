from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from ocrwatch.core.domain import PageText, State
from ocrwatch.core.errors import SearchError
from ocrwatch.store.db import Database
from ocrwatch.store.index import search
from ocrwatch.store.jobfiles import Seen
from ocrwatch.store.jobs import JobQueue
from ocrwatch.store.migrations import MIGRATIONS


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(tmp_path / "index.sqlite3")
    yield database
    database.close()


def add_done(db: Database, path: Path, texts: list[str], sha: str = "") -> int:
    q = JobQueue(db)
    q.offer(path, 1, 1, sha or f"sha-{path}")
    job = q.claim()
    assert job is not None and job.path == path
    assert q.complete(job.id, [PageText(t, t) for t in texts], engine="fake",
                      md_path=path.with_suffix(".md"), txt_path=path.with_suffix(".txt"))
    return job.id


def test_migrations_apply_once_and_wal(tmp_path: Path) -> None:
    path = tmp_path / "x.sqlite3"
    first = Database(path)
    names = [r["name"] for r in first.query("SELECT name FROM _migrations ORDER BY name")]
    assert names == [m[0] for m in MIGRATIONS]
    assert first.query("PRAGMA journal_mode")[0][0] == "wal"
    first.close()
    second = Database(path)
    assert second.migrate() == []
    second.close()
    first.close()  # closing twice is safe


def test_job_lifecycle(db: Database, tmp_path: Path) -> None:
    q = JobQueue(db)
    path = tmp_path / "a.png"
    assert q.offer(path, 10, 100, "aaa") is Seen.NEW
    assert q.offer(path, 10, 100, "aaa") is Seen.UNCHANGED
    assert q.files.is_current(path, 10, 100) and not q.files.is_current(path, 11, 100)
    assert q.counts()["queued"] == 1
    job = q.claim()
    assert job is not None and job.state is State.RUNNING
    assert q.claim() is None
    q.fail(job.id, "bad scan")
    assert q.counts()["failed"] == 1
    assert q.failures()[0].reason == "bad scan"
    assert q.retry() == 1
    assert q.counts()["queued"] == 1


def test_changed_content_is_queued_again(db: Database, tmp_path: Path) -> None:
    path = tmp_path / "a.png"
    add_done(db, path, ["old"], sha="one")
    q = JobQueue(db)
    assert q.offer(path, 2, 2, "one") is Seen.UNCHANGED
    assert q.offer(path, 3, 3, "two") is Seen.CHANGED
    assert q.counts() == {"queued": 1, "running": 0, "done": 0, "failed": 0}


def test_recover_puts_running_back(db: Database, tmp_path: Path) -> None:
    q = JobQueue(db)
    q.offer(tmp_path / "a.png", 1, 1, "x")
    assert q.claim() is not None
    assert q.recover().queued == 1
    assert q.counts()["queued"] == 1


def _crashes(db: Database) -> dict[str, int]:
    return {Path(r["display"]).name: r["crashes"]
            for r in db.query("SELECT display, crashes FROM jobs")}


def test_a_kill_is_not_counted_against_the_files_being_read(db: Database,
                                                           tmp_path: Path) -> None:
    q = JobQueue(db)
    for name in ("a.png", "b.png"):
        q.offer(tmp_path / name, 1, 1, name)
    assert q.claim() is not None
    assert q.recover(crashed=False).queued == 1
    assert _crashes(db) == {"a.png": 0, "b.png": 0}
    assert q.claim() is not None and q.claim() is not None  # read side by side as before


def test_files_being_read_in_a_crash_are_read_alone_then_fail(db: Database,
                                                             tmp_path: Path) -> None:
    q = JobQueue(db)
    for name in ("a.png", "b.png", "c.png"):
        q.offer(tmp_path / name, 1, 1, name)
    a, b = q.claim(), q.claim()
    assert a is not None and b is not None
    recovered = q.recover(crashed=True)
    assert (recovered.queued, recovered.crashers) == (2, [])
    assert _crashes(db) == {"a.png": 1, "b.png": 1, "c.png": 0}
    # Each file that was being read now goes first, alone: nothing beside it.
    first = q.claim()
    assert first is not None and first.path.name == "a.png"
    assert q.claim() is None and q.next_due() is None
    assert q.fail(first.id, "read")  # a.png was not the one: it ends (here: failed)
    second = q.claim()
    assert second is not None and second.path.name == "b.png"
    assert q.claim() is None
    # It crashes the daemon again, alone: it is handed back to be failed, not queued.
    recovered = q.recover(crashed=True)
    assert recovered.queued == 0
    assert [job.path.name for job in recovered.crashers] == ["b.png"]
    assert q.counts()["running"] == 1 and q.fail(second.id, "crashed twice")
    third = q.claim()
    assert third is not None and third.path.name == "c.png"  # the rest as before


def test_a_file_read_alone_waits_for_the_files_being_read(db: Database,
                                                         tmp_path: Path) -> None:
    q = JobQueue(db)
    for name in ("a.png", "b.png", "c.png"):
        q.offer(tmp_path / name, 1, 1, name)
    a = q.claim()
    assert a is not None
    assert q.recover(crashed=True).queued == 1
    a = q.claim()
    assert a is not None and a.path.name == "a.png"
    assert q.recover(crashed=True).crashers[0].id == a.id
    assert q.fail(a.id, "crashed twice")
    b = q.claim()
    assert b is not None and b.path.name == "b.png"
    # Retrying every failure leaves it (from the tray, it would bring the daemon down);
    # named, it is retried and read alone again: not beside b, and nothing (c) claimed
    # meanwhile, or it would wait for ever behind the queue.
    assert q.retry() == 0
    assert q.retry([tmp_path / "a.png"]) == 1
    assert _crashes(db)["a.png"] == 1
    assert q.claim() is None and q.next_due() is None
    assert q.fail(b.id, "read")
    again = q.claim()
    assert again is not None and again.path.name == "a.png"
    # Once more, alone: it fails at once.
    assert [job.id for job in q.recover(crashed=True).crashers] == [a.id]


def test_changed_content_forgets_the_crashes(db: Database, tmp_path: Path) -> None:
    q = JobQueue(db)
    q.offer(tmp_path / "a.png", 1, 1, "one")
    assert q.claim() is not None
    q.recover(crashed=True)
    assert _crashes(db) == {"a.png": 1}
    assert q.offer(tmp_path / "a.png", 2, 2, "two") is Seen.CHANGED
    assert _crashes(db) == {"a.png": 0}


def test_defer_backs_off_then_gives_up(db: Database, tmp_path: Path) -> None:
    q = JobQueue(db)
    q.offer(tmp_path / "a.png", 1, 1, "x")
    job = q.claim()
    assert job is not None
    assert q.defer(job.id, "disk full", max_attempts=3)
    assert q.claim() is None  # not before the backoff
    due = q.next_due()
    assert due is not None
    job = q.claim(now=due + 0.01)
    assert job is not None and job.attempts == 1
    assert q.defer(job.id, "disk full", max_attempts=3)
    job = q.claim(now=due + 1000)
    assert job is not None
    assert not q.defer(job.id, "disk full", max_attempts=3)
    assert "gave up after 3 tries" in q.failures()[0].reason


def test_a_small_file_passes_a_big_one_dropped_just_before_it(
        db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Claim order counts size as age (jobs.BYTES_A_SECOND): a one-page born-digital PDF
    dropped a second after a 2 MB scan is read first; one dropped a minute later is not."""
    from ocrwatch.store import jobs as jobs_mod

    clock = [1000.0]
    monkeypatch.setattr(jobs_mod.time, "time", lambda: clock[0])
    q = JobQueue(db)
    q.offer(tmp_path / "scan.png", 2_000_000, 1, "scan")
    clock[0] += 1
    q.offer(tmp_path / "letter.pdf", 20_000, 1, "letter")
    first = q.claim()
    assert first is not None and first.path.name == "letter.pdf"
    q.release(first.id)
    clock[0] += 60
    q.offer(tmp_path / "later.pdf", 20_000, 1, "later")
    order = []
    while (job := q.claim()) is not None:
        order.append(job.path.name)
        q.fail(job.id, "done with it")
    assert order == ["letter.pdf", "scan.png", "later.pdf"]


def test_a_clock_set_back_does_not_hold_a_retry_for_hours(db: Database,
                                                          tmp_path: Path) -> None:
    """A retry's time is wall-clock (status names it); the clock set back two hours after
    the deferral must not keep the file waiting two hours more."""
    q = JobQueue(db)
    q.offer(tmp_path / "a.png", 1, 1, "x")
    job = q.claim()
    assert job is not None and q.defer(job.id, "disk full", max_attempts=3)
    due = q.next_due()
    assert due is not None
    assert q.claim(now=due - 1) is None  # the backoff holds while the clock runs on
    again = q.claim(now=due - 2 * 3600)  # set back two hours: due now
    assert again is not None and again.id == job.id


def test_non_utf8_names_round_trip(db: Database, tmp_path: Path) -> None:
    path = Path(tmp_path.as_posix().encode().decode() + "/caf\udce9.png")  # latin-1 byte
    q = JobQueue(db)
    q.offer(path, 1, 1, "x")
    job = q.claim()
    assert job is not None and job.path == path
    assert "caf\ufffd.png" in job.display


def test_forget_removes_pages_from_index(db: Database, tmp_path: Path) -> None:
    path = tmp_path / "a.png"
    add_done(db, path, ["zebra crossing"])
    assert search(db, "zebra")
    assert JobQueue(db).files.forget(path)
    assert search(db, "zebra") == []
    assert not JobQueue(db).files.forget(path)


def test_complete_refuses_stale_content(db: Database, tmp_path: Path) -> None:
    q = JobQueue(db)
    path = tmp_path / "a.png"
    q.offer(path, 1, 1, "one")
    job = q.claim()
    assert job is not None
    q.offer(path, 2, 2, "two")  # changed while it was being read
    assert not q.complete(job.id, [PageText("x", "x")], engine="fake", md_path=None,
                          txt_path=None, sha256="one")
    assert q.counts()["queued"] == 1


def test_reuse_for_identical_content(db: Database, tmp_path: Path) -> None:
    first = add_done(db, tmp_path / "a.png", ["page one", "page two"], sha="same")
    q = JobQueue(db)
    q.offer(tmp_path / "copy.png", 1, 1, "same")
    copy = q.claim()
    assert copy is not None
    cached = q.reuse("same", copy.id)
    assert cached is not None
    pages, engine = cached
    assert [p.text for p in pages] == ["page one", "page two"] and engine == "fake"
    # The only other done copy is the job itself: nothing to borrow from.
    only_self = q.reuse("same", first)
    assert only_self is None  # "copy" is not done, so "first" has no twin to borrow from
    assert q.reuse("other", copy.id) is None


def test_search_ranks_and_highlights(db: Database, tmp_path: Path) -> None:
    add_done(db, tmp_path / "once.png", ["an invoice among other words here"])
    add_done(db, tmp_path / "many.png", ["invoice invoice invoice total"])
    hits = search(db, "invoice")
    assert [Path(h.path).name for h in hits] == ["many.png", "once.png"]
    assert "\x02invoice\x03" in hits[0].snippet
    assert hits[0].as_dict()["snippet"].count("[invoice]") >= 1


def test_search_folds_accents_both_ways(db: Database, tmp_path: Path) -> None:
    add_done(db, tmp_path / "fr.png", ["Le café de la gare, déjà fermé"])
    add_done(db, tmp_path / "de.png", ["Die Straße nach München"])
    assert search(db, "cafe") and search(db, "café") and search(db, "DEJA")
    assert Path(search(db, "munchen")[0].path).name == "de.png"
    assert search(db, "Straße")


def test_search_finds_cjk_substrings(db: Database, tmp_path: Path) -> None:
    add_done(db, tmp_path / "zh.png", ["这是一个光学字符识别的测试文件"])
    add_done(db, tmp_path / "ja.png", ["東京都の請求書を確認してください"])
    assert Path(search(db, "字符识别")[0].path).name == "zh.png"
    assert Path(search(db, "請求書")[0].path).name == "ja.png"
    two = search(db, "東京")  # shorter than a trigram
    assert Path(two[0].path).name == "ja.png"
    assert "\x02東京\x03" in two[0].snippet
    assert search(db, "不存在的词") == []


def test_search_phrases_prefix_and_operators(db: Database, tmp_path: Path) -> None:
    add_done(db, tmp_path / "a.png", ["payment due in March 2024"])
    add_done(db, tmp_path / "b.png", ["march of the penguins"])
    assert len(search(db, '"due in March"')) == 1
    assert len(search(db, "pay*")) == 1
    assert len(search(db, "march OR penguins")) == 2
    assert len(search(db, "march NOT penguins")) == 1
    assert len(search(db, "o'brien e-mail 1,250.00")) == 0  # punctuation is not syntax


@pytest.mark.parametrize("query", ['"unclosed', "AND", "(march", "march AND"])
def test_malformed_query_gets_plain_message(db: Database, tmp_path: Path, query: str) -> None:
    add_done(db, tmp_path / "a.png", ["march"])
    with pytest.raises(SearchError) as err:
        search(db, query)
    assert "query" in str(err.value)
    assert not isinstance(err.value.__cause__, sqlite3.Error)


def test_search_limit_and_empty(db: Database, tmp_path: Path) -> None:
    for i in range(5):
        add_done(db, tmp_path / f"{i}.png", ["common word"])
    assert len(search(db, "common", limit=2)) == 2
    with pytest.raises(SearchError, match="empty"):
        search(db, "   ")


def test_page_numbers_and_warnings_are_stored(db: Database, tmp_path: Path) -> None:
    q = JobQueue(db)
    q.offer(tmp_path / "m.pdf", 1, 1, "m")
    job = q.claim()
    assert job is not None
    q.complete(job.id, [PageText("alpha", "alpha"),
                        PageText("beta", "beta", warnings=["repeats itself"])],
               engine="fake", md_path=None, txt_path=None)
    hit = search(db, "beta")[0]
    assert (hit.page, hit.pages) == (2, 2)
    row = db.query("SELECT warnings FROM pages WHERE page = 2")[0]
    assert json.loads(row["warnings"]) == ["repeats itself"]


def test_trigrams_only_for_cjk_pages_and_short_cjk_words(db: Database, tmp_path: Path) -> None:
    from ocrwatch.core.domain import PageText
    from ocrwatch.store.index import search

    jobs = JobQueue(db)
    texts = {"latin.png": "harbour office Rotterdam", "cjk.png": "東京都の会議 报告",
             "mixed.png": "Tokyo 東京 office"}
    for name, text in texts.items():
        path = tmp_path / name
        jobs.offer(path, 1, 1, name * 4)
        job = jobs.claim()
        assert job is not None
        jobs.complete(job.id, [PageText(text, text)], engine="t", md_path=None,
                      txt_path=None)
    tri = {r[0] for r in db.query("SELECT rowid FROM pages_tri WHERE pages_tri MATCH 'off'")}
    assert tri == {3}  # the mixed page; the Latin-only page has no trigrams
    assert sorted(Path(h.path).name for h in search(db, "東京")) == ["cjk.png", "mixed.png"]
    assert [Path(h.path).name for h in search(db, "会議")] == ["cjk.png"]
    assert [Path(h.path).name for h in search(db, "东京都 报告")] == []
    assert [Path(h.path).name for h in search(db, "東京都")] == ["cjk.png"]
    jobs.files.forget(tmp_path / "cjk.png")
    db.conn.execute("INSERT INTO pages_tri(pages_tri) VALUES ('integrity-check')")
    db.conn.execute("INSERT INTO pages_fts(pages_fts) VALUES ('integrity-check')")
    assert [Path(h.path).name for h in search(db, "東京")] == ["mixed.png"]


def test_other_tools_find_the_full_text_index(db: Database, tmp_path: Path) -> None:
    """sqlite-utils (and Datasette, which detects full-text tables the same way) find
    pages_fts for pages and jobs_fts for the file names, with no configuration."""
    import subprocess
    import sys

    import sqlite_utils

    from ocrwatch.core.domain import PageText

    jobs = JobQueue(db)
    jobs.offer(tmp_path / "Taxes" / "receipt.png", 1, 1, "a" * 64)
    job = jobs.claim()
    assert job is not None
    jobs.complete(job.id, [PageText("harbour", "harbour office")], engine="t", md_path=None,
                  txt_path=None)
    plain = sqlite_utils.Database(db.conn)
    assert plain["pages"].detect_fts() == "pages_fts"  # type: ignore[union-attr]
    assert plain["jobs"].detect_fts() == "jobs_fts"  # type: ignore[union-attr]
    cli = Path(sys.executable).with_name("sqlite-utils")
    found = subprocess.run([str(cli), "search", str(db.path), "pages", "harbour", "--csv"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert "harbour office" in found.stdout
    names = subprocess.run([str(cli), "search", str(db.path), "jobs", "taxes", "-c", "display"],
                           capture_output=True, text=True, timeout=60, check=True)
    assert "receipt.png" in names.stdout

"""The event stream: subscribers get events in order, by type; one that raises is logged
and the others still get the event; an unsubscribed one gets no more; and a daemon's
stream tells what happens to a real file."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from helpers import make_config, text_page, wait_for

from ocrwatch.core import events as ev
from ocrwatch.core.domain import Job, PageText, State
from ocrwatch.daemon import Daemon
from ocrwatch.testing import FakeEngine


def test_subscribers_get_each_event_of_their_type_in_the_order_they_subscribed() -> None:
    stream = ev.Events()
    seen: list[str] = []
    stream.subscribe(ev.FileFailed, lambda e: seen.append(f"first {e.reason}"))
    stream.subscribe(ev.FileQueued, lambda e: seen.append(f"queued {e.path.name}"))
    stream.subscribe(object, lambda e: seen.append(f"all {type(e).__name__}"))
    stream.subscribe(ev.FileFailed, lambda e: seen.append(f"second {e.reason}"))
    stream.publish(ev.FileFailed(Path("a.png"), "broken"))
    stream.publish(ev.FileQueued(Path("b.png")))
    assert seen == ["first broken", "all FileFailed", "second broken",
                    "queued b.png", "all FileQueued"]


def test_a_subscriber_that_raises_is_logged_and_the_others_carry_on(
        caplog: pytest.LogCaptureFixture) -> None:
    stream = ev.Events()
    seen: list[str] = []

    def broken(event: ev.FileFailed) -> None:
        raise RuntimeError("listener bug")

    stream.subscribe(ev.FileFailed, lambda e: seen.append("before"))
    stream.subscribe(ev.FileFailed, broken)
    stream.subscribe(ev.FileFailed, lambda e: seen.append("after"))
    with caplog.at_level(logging.ERROR, logger="ocrwatch.core.events"):
        stream.publish(ev.FileFailed(Path("a.png"), "broken"))  # does not raise
    assert seen == ["before", "after"]
    (record,) = caplog.records
    assert "a subscriber to FileFailed failed" in record.getMessage()
    assert record.exc_info is not None and "listener bug" in str(record.exc_info[1])


def test_an_unsubscribed_handler_gets_no_more_events_and_the_others_do() -> None:
    stream = ev.Events()
    seen: list[str] = []
    stop = stream.subscribe(ev.FileQueued, lambda e: seen.append(f"one {e.path.name}"))
    stream.subscribe(ev.FileQueued, lambda e: seen.append(f"two {e.path.name}"))
    stream.publish(ev.FileQueued(Path("a.png")))
    stop()
    stop()  # safe twice
    stream.publish(ev.FileQueued(Path("b.png")))
    assert seen == ["one a.png", "two a.png", "two b.png"]


def test_a_handler_may_unsubscribe_while_an_event_is_delivered() -> None:
    stream = ev.Events()
    seen: list[str] = []
    stops: list[object] = []

    def once(event: ev.FileQueued) -> None:
        seen.append("once")
        stop = stops[0]
        assert callable(stop)
        stop()

    stops.append(stream.subscribe(ev.FileQueued, once))
    stream.subscribe(ev.FileQueued, lambda e: seen.append("always"))
    stream.publish(ev.FileQueued(Path("a.png")))
    stream.publish(ev.FileQueued(Path("a.png")))
    assert seen == ["once", "always", "always"]


def test_the_metrics_count_what_the_stream_tells() -> None:
    from ocrwatch.metrics import Recorder

    stream, recorder = ev.Events(), Recorder()
    recorder.listen(stream)
    page = PageText(markdown="x", text="x")
    stream.publish(ev.PageRead("fake", 0.2, [page]))
    job = Job(1, Path("a.png"), "0" * 64, 1, 1, State.DONE, 1)
    stream.publish(ev.FileDone(job, [page], "fake", Path("a.png")))
    stream.publish(ev.FileDeferred(Path("b.png"), "the disk is full", again=True))
    stream.publish(ev.FileFailed(Path("c.png"), "not an image"))
    value = recorder.registry.get_sample_value
    assert value("ocrwatch_pages_read_total", {"engine": "fake"}) == 1
    assert value("ocrwatch_files_done_total", {"engine": "fake"}) == 1
    assert sum(value("ocrwatch_files_retried_total", {"kind": k}) or 0
               for k in ("input", "engine", "timeout", "disk", "crash", "other")) == 1
    assert sum(value("ocrwatch_files_failed_total", {"kind": k}) or 0
               for k in ("input", "engine", "timeout", "disk", "crash", "other")) == 1


def test_a_daemons_stream_tells_a_files_way_through(tmp_path: Path, home: Path) -> None:
    """A real inbox, the fake engine: queued, page read, about to commit, done, in that
    order, with the outputs written; then a file that fails."""
    config = make_config(tmp_path, on_success="archive", archive_dir=tmp_path / "archive")
    inbox = config.inbox[0]
    inbox.mkdir()
    daemon = Daemon(config, engine=FakeEngine())
    seen: list[object] = []
    daemon.ctx.events.subscribe(object, seen.append)
    daemon.start()
    try:
        text_page(["hello"]).save(inbox / "page.png")
        wait_for(lambda: any(isinstance(e, ev.FileDone) for e in seen), 30)
        (inbox / "bad.png").write_bytes(b"not an image at all")
        wait_for(lambda: any(isinstance(e, ev.FileFailed) for e in seen), 30)
    finally:
        daemon.close()
    kinds = [type(e).__name__ for e in seen]
    first = kinds[:kinds.index("FileDone") + 1]
    assert [k for k in first if k != "PageRead"][:1] == ["FileQueued"]
    assert "PageRead" in first
    assert first.index("OutcomeStarted") < first.index("FileCommitting") \
        < first.index("OriginalRetired") < first.index("FileDone")
    done = next(e for e in seen if isinstance(e, ev.FileDone))
    assert done.source == inbox / "page.png" and done.engine == "fake"
    assert done.original == tmp_path / "archive" / "inbox" / "page.png"  # archived
    retired = next(e for e in seen if isinstance(e, ev.OriginalRetired))
    assert (retired.source, retired.to) == (done.source, done.original)
    assert sorted(done.outputs) == sorted(config.outputs)
    assert all(p.is_file() for p in done.outputs.values())
    failed = next(e for e in seen if isinstance(e, ev.FileFailed))
    assert failed.path == inbox / "bad.png" and failed.reason
    assert kinds.count("OutcomeStarted") == kinds.count("OutcomeEnded")


def test_the_tray_redraws_at_once_on_a_files_event_and_stops_listening() -> None:
    from daemon_standin import StandInDaemon

    from ocrwatch.tray.menu import TrayController

    stream = ev.Events()
    controller = TrayController(StandInDaemon())
    stop = controller.listen(stream)
    stream.publish(ev.PageRead("fake", 0.1, []))  # not news for the tray
    assert not controller.wake.is_set()
    stream.publish(ev.FileFailed(Path("a.png"), "broken"))
    assert controller.wake.is_set()
    controller.wake.clear()
    stop()
    stream.publish(ev.FileDone(Job(1, Path("a.png"), None, 1, 1, State.DONE, 1), [], "fake",
                               Path("a.png")))
    assert not controller.wake.is_set()


def test_a_reloaded_outputs_setting_keeps_one_subscription_each(tmp_path: Path,
                                                                home: Path) -> None:
    """The context is replaced when ``outputs`` changes; the hooks and the metrics still
    hear each event once."""
    config = make_config(tmp_path)
    daemon = Daemon(config, engine=FakeEngine())
    try:
        before = len(daemon.ctx.events._subscribers)
        config.outputs = ["md", "txt", "pdf"]
        daemon._apply_live(("outputs",))
        assert daemon.ctx.pdf is not None
        assert len(daemon.ctx.events._subscribers) == before
        assert daemon.events is daemon.ctx.events
    finally:
        daemon.close()


def test_the_batch_notice_counts_from_the_stream_and_waits_for_the_outcome() -> None:
    from ocrwatch.config import Config
    from ocrwatch.hooks.notify import BatchNotice

    stream, sent, idle = ev.Events(), [], [True]
    notice = BatchNotice(Config(notify_batch=True), lambda: idle[0],
                         lambda title, body: sent.append((title, body)))
    notice.listen(stream)
    job = Job(1, Path("a.png"), None, 1, 1, State.DONE, 1)
    stream.publish(ev.OutcomeStarted())
    stream.publish(ev.FileDone(job, [], "fake", Path("a.png")))
    stream.publish(ev.FileDone(job, [], "fake", Path("a.png")))
    stream.publish(ev.FileFailed(Path("b.png"), "not an image"))
    notice.check()
    assert sent == []  # an outcome is being recorded: the batch is not over
    stream.publish(ev.OutcomeEnded())
    idle[0] = False
    notice.check()
    assert sent == []  # files still in hand
    idle[0] = True
    notice.check()
    notice.check()  # once per batch
    assert sent == [("ocrwatch: 3 files read", "2 done, 1 failed:\nb.png: not an image")]

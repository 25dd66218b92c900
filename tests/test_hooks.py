"""After a file is done: the on_done program (argv, environment, timeout, failure) and the
batch notification, recorded by a small org.freedesktop.Notifications service on a real
D-Bus session bus of the test's own."""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import NotificationService, make_config, text_page, wait_for

from ocrwatch.daemon import Daemon
from ocrwatch.hooks import runner as hooks
from ocrwatch.hooks.runner import AfterDone, Finished, run_hook
from ocrwatch.testing.fake import FakeEngine

RECORD = """
import json, os, sys
from pathlib import Path
env = {k: v for k, v in os.environ.items() if k.startswith("OCRWATCH_")}
out = Path(os.environ["HOOK_RECORD"])
tmp = out.with_name(".part")
tmp.write_text(json.dumps({"argv": sys.argv[1:], "env": env}))
tmp.rename(out)
"""


def state(d: Daemon, path: Path) -> str | None:
    job = d.jobs.known(path)
    return job.state.value if job else None


@pytest.fixture
def hook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A hook script that records its arguments and environment, and that record's path."""
    script = tmp_path / "hook.py"
    script.write_text(RECORD)
    record = tmp_path / "record.json"
    monkeypatch.setenv("HOOK_RECORD", str(record))
    return script, record


def test_hook_gets_the_final_paths_as_arguments_and_environment(
        tmp_path: Path, hook: tuple[Path, Path]) -> None:
    script, record = hook
    archive = tmp_path / "archive"
    config = make_config(tmp_path, on_success="archive", archive_dir=archive,
                         on_done=[sys.executable, str(script), "{file}", "--text={txt}"])
    inbox = config.inbox[0]
    inbox.mkdir()
    # A name a shell would run: as an argv element it is only a name.
    name = "bill $(touch pwned) ; rm -rf x.png"
    with Daemon(config, engine=FakeEngine()):
        text_page(["hello"]).save(inbox / name)
        wait_for(record.exists, 30, "the hook to run")
        data = json.loads(record.read_text())
    archived = archive / "inbox" / name
    txt = archive / "inbox" / "bill $(touch pwned) ; rm -rf x.txt"
    assert data["argv"] == [str(archived), f"--text={txt}"]
    env = data["env"]
    assert env["OCRWATCH_FILE"] == str(archived)
    assert env["OCRWATCH_SOURCE"] == str(inbox / name)
    assert env["OCRWATCH_TXT"] == str(txt)
    assert env["OCRWATCH_MD"] == str(txt.with_suffix(".md"))
    assert env["OCRWATCH_PDF"] == ""
    assert env["OCRWATCH_PAGES"] == "1"
    assert env["OCRWATCH_DELETED"] == "0"
    assert not list(tmp_path.rglob("pwned"))


def test_without_placeholders_the_path_is_the_last_argument(
        tmp_path: Path, hook: tuple[Path, Path]) -> None:
    script, record = hook
    item = Finished(source=tmp_path / "in.png", original=None,
                    outputs={"md": tmp_path / "in.md"}, pages=3)
    assert run_hook([sys.executable, str(script), "--flag"], item, 30) == 0
    data = json.loads(record.read_text())
    assert data["argv"] == ["--flag", str(tmp_path / "in.png")]  # deleted: where it was
    assert data["env"]["OCRWATCH_DELETED"] == "1"
    assert data["env"]["OCRWATCH_FILE"] == ""
    assert data["env"]["OCRWATCH_PAGES"] == "3"


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ", 1)[1].startswith("Z")  # a zombie is ended
    except FileNotFoundError:
        return True


def test_a_hook_over_its_timeout_is_ended_with_everything_it_started(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    pids = tmp_path / "pids"
    code = ("import subprocess, sys, time, pathlib\n"
            "child = subprocess.Popen(['sleep', '600'])\n"
            f"pathlib.Path({str(pids)!r}).write_text(str(child.pid))\n"
            "time.sleep(600)\n")
    item = Finished(source=tmp_path / "a.png", original=tmp_path / "a.png")
    caplog.set_level(logging.WARNING)
    assert run_hook([sys.executable, "-c", code], item, 2.0) is None
    assert "ran over 2 s" in caplog.text
    grandchild = int(pids.read_text())
    wait_for(lambda: _gone(grandchild), 10, "the hook's own child to end too")


def test_a_failing_hook_is_logged_and_the_file_is_still_done(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    config = make_config(tmp_path, on_done=[sys.executable, "-c",
                                            "import sys; print('no printer'); sys.exit(3)"])
    inbox = config.inbox[0]
    inbox.mkdir()
    caplog.set_level(logging.INFO)
    with Daemon(config, engine=FakeEngine()) as d:
        path = inbox / "a.png"
        text_page(["a"]).save(path)
        wait_for(lambda: "exited with status 3" in caplog.text, 30, "the hook's failure")
        assert state(d, path) == "done"
    assert "no printer" in caplog.text


def test_a_missing_hook_program_is_logged(tmp_path: Path,
                                          caplog: pytest.LogCaptureFixture) -> None:
    item = Finished(source=tmp_path / "a.png", original=tmp_path / "a.png")
    caplog.set_level(logging.WARNING)
    assert run_hook([str(tmp_path / "nothing-here")], item, 5) is None
    assert "could not start" in caplog.text


def test_hooks_queued_at_stop_run_within_the_grace_or_are_logged_by_name(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """Stopping with hooks still queued: those that can start within the grace run, each
    in full; every other one is named in the log. None is lost without a word."""
    ran = tmp_path / "ran"
    ran.mkdir()
    code = ("import pathlib, sys, time\n"
            "time.sleep(1.0)\n"
            "(pathlib.Path(sys.argv[2]) / pathlib.Path(sys.argv[1]).name).touch()\n")
    config = make_config(tmp_path, on_done=[sys.executable, "-c", code, "{source}", str(ran)])
    monkeypatch.setattr(hooks, "STOP_GRACE_SECONDS", 2.5)
    caplog.set_level(logging.WARNING)
    after = AfterDone(config, is_idle=lambda: True)
    after.start()
    names = [f"scan{n}.png" for n in range(5)]
    for name in names:
        after.done(Finished(source=tmp_path / name, original=tmp_path / name))
    began = time.monotonic()
    assert after.close()
    took = time.monotonic() - began
    run = {p.name for p in ran.iterdir()}
    logged = {n for n in names if f"on_done was not run for {n}" in caplog.text}
    assert run | logged == set(names) and not run & logged, (run, logged)
    assert run and logged  # the first ones ran whole; the rest came too late to start
    assert took < 2.5 + config.on_done_timeout, took
    late = Finished(source=tmp_path / "late.png", original=tmp_path / "late.png")
    after.done(late)  # a page that outlived the stop
    assert "on_done was not run for late.png" in caplog.text


# -- the batch notification ------------------------------------------------------------
def test_batch_done_notification_counts_files_and_names_failures(
        tmp_path: Path, session_bus: str) -> None:
    service = NotificationService(session_bus)
    try:
        config = make_config(tmp_path, notify_batch=True)
        inbox = config.inbox[0]
        inbox.mkdir()
        names = ("a.png", "b.png", "fake-engine-fail.png")
        with Daemon(config, engine=FakeEngine()) as d:
            # One batch: all three queued (paused) before any is read.
            d.pause()
            for name in names:
                text_page([name]).save(inbox / name)
            wait_for(lambda: all(state(d, inbox / n) == "queued" for n in names), 30,
                     "the files to be queued")
            d.resume()
            wait_for(lambda: service.calls, 60, "the notification")
            assert all(state(d, inbox / n) in ("done", "failed") for n in names)
        assert len(service.calls) == 1
        app, _replaces, _icon, title, body, _actions, _hints, _timeout = service.calls[0]
        assert app == "ocrwatch"
        assert title == "ocrwatch: 3 files read"
        assert body.startswith("2 done, 1 failed:")  # type: ignore[attr-defined]
        assert "fake-engine-fail.png: " in body  # type: ignore[operator]
    finally:
        service.close()


def test_notifications_are_off_by_default(tmp_path: Path, session_bus: str) -> None:
    service = NotificationService(session_bus)
    try:
        config = make_config(tmp_path)
        assert config.notify_batch is False
        inbox = config.inbox[0]
        inbox.mkdir()
        with Daemon(config, engine=FakeEngine()) as d:
            text_page(["x"]).save(inbox / "x.png")
            wait_for(lambda: state(d, inbox / "x.png") == "done", 30, "done")
        assert service.calls == []
        assert not any(t.name == "ocrwatch-after" for t in threading.enumerate())
    finally:
        service.close()


def test_without_a_bus_the_notification_is_logged(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from ocrwatch.hooks import notify

    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", f"unix:path={tmp_path / 'no-bus'}")
    caplog.set_level(logging.INFO)
    assert notify.send("title", "body") is False
    assert "notification not shown" in caplog.text


def test_a_notification_finds_the_bus_of_a_systemd_user_session(
        tmp_path: Path, session_bus: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without DBUS_SESSION_BUS_ADDRESS, the bus a systemd user session opens at
    $XDG_RUNTIME_DIR/bus is the one notifications go to, as the tray finds it."""
    from ocrwatch.hooks import notify

    service = NotificationService(session_bus)
    try:
        monkeypatch.delenv("DBUS_SESSION_BUS_ADDRESS")
        monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))  # the fixture's socket: bus
        assert notify.session_bus() == f"unix:path={tmp_path / 'bus'}"
        assert notify.send("title", "body") is True
        assert [call[3:5] for call in service.calls] == [("title", "body")]
    finally:
        service.close()


def test_a_kill_while_a_finished_hook_is_cleared_away_never_runs_it_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The record of a hook that ran goes before its trace: killed between the two
    removals, the next start finds nothing to run (before, a ".run" record without its
    trace read as never started, and the hook ran twice)."""
    from ocrwatch.hooks.queue import HookJournal, trace_for

    folder = tmp_path / "index.sqlite3.hooks"
    journal = HookJournal(folder)
    record = journal.add({"source": tmp_path / "a.png", "md": tmp_path / "a.md"}, 1)
    assert record is not None
    running = journal.started(record)
    trace_for(running).write_bytes(b".")  # what the hook's own process writes
    unlink = Path.unlink
    removed: list[str] = []

    def killed_after_one(self: Path, missing_ok: bool = False) -> None:
        if removed:
            raise SystemExit("SIGKILL")
        removed.append(self.name)
        unlink(self, missing_ok=missing_ok)

    with monkeypatch.context() as patch:
        patch.setattr(Path, "unlink", killed_after_one)
        with pytest.raises(SystemExit):
            journal.finished(running)
    assert removed == [running.name]
    assert HookJournal(folder).recover() == ([], [])
    assert sorted(p.name for p in folder.iterdir()) == []  # the lone trace is cleared too

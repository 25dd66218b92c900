"""A running daemon takes a new configuration: on SIGHUP, on `ocrwatch reload`, and when
the config file is saved; what waits for a restart is named in the log and the status.
And `ocrwatch reread` works while the daemon runs, by asking it.

Real `ocrwatch run` processes (fake engine: what is tested is what surrounds it)."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import wait_for
from reliability.helpers import DaemonProcess, Home, drop, ended, image_bytes, ocrwatch_cli


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Home]:
    h = Home.make(tmp_path)
    yield h
    h.cleanup()


def config_file(home: Home) -> Path:
    return home.root / "home" / ".config" / "ocrwatch" / "config.toml"


def write_config(home: Home, text: str) -> Path:
    path = config_file(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def rewrite_unseen(path: Path, text: str) -> None:
    """Change the file so that the file watch cannot tell (same inode, size and time):
    only the signal or the command can make the daemon take it."""
    st = path.stat()
    assert len(text.encode()) <= st.st_size
    text += "#" * (st.st_size - len(text.encode()) - 1) + "\n"  # the same size
    with path.open("r+") as fh:
        fh.write(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


@pytest.fixture
def daemon(home: Home) -> Iterator[DaemonProcess]:
    write_config(home, 'outputs = ["md"]\n' + "#" * 40 + "\n")
    proc = DaemonProcess(home).start()
    try:
        proc.wait_ready()
        yield proc
    finally:
        proc.close()


def read(home: Home, name: str) -> Path:
    path = drop(home.inbox / name, image_bytes(name))
    wait_for(lambda: ended(home.database, path, "done"), 60, f"{name} to be read")
    return path


def logged(proc: DaemonProcess, text: str) -> None:
    wait_for(lambda: text in proc.output(), 30, repr(text))


def test_sighup_reloads_the_config(home: Home, daemon: DaemonProcess) -> None:
    first = read(home, "a.png")
    assert first.with_suffix(".md").exists() and not first.with_suffix(".txt").exists()
    rewrite_unseen(config_file(home), 'outputs = ["txt"]\n')
    assert daemon.proc is not None
    os.kill(daemon.proc.pid, signal.SIGHUP)
    logged(daemon, "configuration reloaded (SIGHUP): outputs now in effect")
    second = read(home, "b.png")
    assert second.with_suffix(".txt").exists() and not second.with_suffix(".md").exists()
    assert daemon.running


def test_ocrwatch_reload_asks_the_daemon(home: Home, daemon: DaemonProcess) -> None:
    rewrite_unseen(config_file(home), 'outputs = ["txt"]\n')
    result = ocrwatch_cli(home, "reload")
    assert result.returncode == 0, result.stderr
    assert "configuration reloaded: outputs now in effect" in result.stdout
    second = read(home, "b.png")
    assert second.with_suffix(".txt").exists() and not second.with_suffix(".md").exists()


def test_saving_the_config_file_reloads_it(home: Home, daemon: DaemonProcess) -> None:
    path = config_file(home)
    new = path.with_name("config.toml.new")
    new.write_text('outputs = ["md", "txt"]\n')
    os.replace(new, path)  # as editors save: a new file renamed over the old
    logged(daemon, f"configuration reloaded ({path} changed): outputs now in effect")
    second = read(home, "b.png")
    assert second.with_suffix(".txt").exists() and second.with_suffix(".md").exists()


def test_what_needs_a_restart_is_named_in_log_and_status(home: Home,
                                                         daemon: DaemonProcess) -> None:
    rewrite_unseen(config_file(home), 'workers = 3\n')
    result = ocrwatch_cli(home, "reload")
    assert result.returncode == 0, result.stderr
    assert "waiting for a restart" in result.stdout and "workers" in result.stdout
    assert "outputs now in effect" in result.stdout  # back to the default, at once
    logged(daemon, "workers changed but take effect only when the daemon starts again")
    status = ocrwatch_cli(home, "status", "--json")
    assert json.loads(status.stdout)["restart_needed"] == ["workers"]
    text = ocrwatch_cli(home, "status").stdout
    assert "restart: workers changed in the config" in text


def test_a_config_that_does_not_load_changes_nothing(home: Home, daemon: DaemonProcess) -> None:
    rewrite_unseen(config_file(home), 'outputs = "pd"\n')
    result = ocrwatch_cli(home, "reload")
    assert result.returncode == 2 and "outputs" in result.stderr
    assert daemon.running
    os.kill(daemon.proc.pid, signal.SIGHUP)  # type: ignore[union-attr]
    logged(daemon, "configuration not reloaded (SIGHUP)")
    first = read(home, "a.png")
    assert first.with_suffix(".md").exists() and not first.with_suffix(".txt").exists()


def test_reread_while_the_daemon_runs_asks_it(home: Home, daemon: DaemonProcess) -> None:
    first = read(home, "a.png")
    before = ended(home.database, first, "done")
    assert before is not None
    nothing = ocrwatch_cli(home, "reread")
    assert nothing.returncode == 0, nothing.stderr
    assert "nothing to read again" in nothing.stdout
    again = ocrwatch_cli(home, "reread", "--all")
    assert again.returncode == 0, again.stderr
    assert "1 file queued again" in again.stdout

    def read_again() -> bool:
        row = ended(home.database, first, "done")
        return row is not None and row["finished"] > before["finished"]
    wait_for(read_again, 60, "a.png to be read again")
    assert daemon.running


def test_reread_with_new_languages_says_the_daemon_must_restart(
        home: Home, daemon: DaemonProcess) -> None:
    status = json.loads(ocrwatch_cli(home, "status", "--json").stdout)
    other = "deu" if "deu" not in status["languages"] else "fra"
    write_config(home, f'outputs = ["md"]\nlanguages = ["eng", "{other}"]\n')
    result = ocrwatch_cli(home, "reread")
    assert result.returncode == 4, result.stderr
    assert "take effect when it starts again" in result.stderr


def test_new_outputs_for_files_already_read_from_the_stored_text(
        home: Home, daemon: DaemonProcess) -> None:
    """`outputs` gains "txt" and "pdf": `reread --outputs` (asking the running daemon)
    writes them for the file read before, from its stored text; the file is not read
    again, and the page, read by an engine without word boxes, is said to have had
    Tesseract's boxes found for the PDF."""
    first = read(home, "a.png")
    before = ended(home.database, first, "done")
    assert before is not None and not first.with_suffix(".txt").exists()
    rewrite_unseen(config_file(home), 'outputs = ["md", "txt", "pdf"]\n')
    reloaded = ocrwatch_cli(home, "reload")
    assert reloaded.returncode == 0, reloaded.stderr
    logged(daemon, "`ocrwatch reread --outputs` writes the new ones from the stored pages")
    result = ocrwatch_cli(home, "reread", "--outputs")
    assert result.returncode == 0, result.stderr
    assert ("2 outputs written for 1 file from the stored text; Tesseract found the word "
            "boxes of 1 page again") in result.stdout
    txt, pdf = first.with_suffix(".txt"), first.with_name("a.ocr.pdf")
    assert "fake text of a.png page 1" in txt.read_text()
    assert pdf.read_bytes().startswith(b"%PDF")
    after = ended(home.database, first, "done")
    assert after is not None and after["finished"] == before["finished"]  # not read again
    again = ocrwatch_cli(home, "reread", "--outputs")
    assert "nothing to write" in again.stdout


def test_new_outputs_without_a_daemon(home: Home) -> None:
    write_config(home, 'outputs = ["md"]\n')
    scan = drop(home.inbox / "b.png", image_bytes("b"))
    added = ocrwatch_cli(home, "add", "--engine", "fake", "--database", str(home.database),
                         str(scan))
    assert added.returncode == 0, added.stderr
    before = ended(home.database, scan, "done")
    write_config(home, 'outputs = ["md", "txt"]\n')
    # The engine would fail b.png's pages now: nothing may be read to write the .txt.
    result = ocrwatch_cli(home, "reread", "--outputs", "--engine", "fake", "--database",
                          str(home.database), OCRWATCH_FAKE_FAIL="b.png")
    assert result.returncode == 0, result.stderr
    assert "1 output written for 1 file" in result.stdout
    assert "fake text of b.png page 1" in scan.with_suffix(".txt").read_text()
    after = ended(home.database, scan, "done")
    assert after is not None and before is not None
    assert after["finished"] == before["finished"]


def test_reread_on_another_index_than_the_daemons_is_done_here(
        home: Home, daemon: DaemonProcess) -> None:
    """`reread --outputs --config X --database Y` while a daemon runs on another index:
    done by this command on Y, with X's outputs; the daemon's index is left alone."""
    other = home.root / "other" / "index.sqlite3"
    other.parent.mkdir()
    scan = drop(home.root / "other" / "c.png", image_bytes("c"))
    added = ocrwatch_cli(home, "add", "--engine", "fake", "--database", str(other), str(scan))
    assert added.returncode == 0, added.stderr
    mine = home.root / "mine.toml"
    mine.write_text('outputs = ["md", "txt"]\n')
    result = ocrwatch_cli(home, "reread", "--outputs", "--engine", "fake", "--config",
                          str(mine), "--database", str(other))
    assert result.returncode == 0, result.stderr
    assert "1 output written for 1 file" in result.stdout
    assert "fake text of c.png page 1" in scan.with_suffix(".txt").read_text()
    assert daemon.running


def test_reread_on_the_daemons_index_with_another_config_is_refused(
        home: Home, daemon: DaemonProcess) -> None:
    """The daemon reads and writes by its own config: a reread asking for other settings
    on its index is refused (status 2, saying what to do), not done otherwise than asked."""
    first = read(home, "a.png")
    mine = home.root / "mine.toml"
    mine.write_text(f'outputs = ["md", "txt"]\ndatabase = "{home.database}"\n')
    result = ocrwatch_cli(home, "reread", "--outputs", "--config", str(mine))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"was started with {config_file(home)}, not {mine}" in result.stderr
    assert "`ocrwatch stop`" in result.stderr
    assert not first.with_suffix(".txt").exists()
    # Its own file, named: the daemon does it.
    own = ocrwatch_cli(home, "reread", "--outputs", "--config", str(config_file(home)))
    assert own.returncode == 0, own.stderr

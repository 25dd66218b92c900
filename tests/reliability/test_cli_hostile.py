"""The command line against bad input: every error is a message and an exit status, never
a traceback. Each test runs the real ``ocrwatch`` program on real files and SQLite indexes.

Covers issue 8's items on configuration values (8), tracebacks (9), the query time bound
(10), file names printed to a terminal (12) and repeated log warnings (15).
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ocrwatch.store.db import Database

from .helpers import DaemonProcess, Home, drop, image_bytes, ocrwatch_cli, wait_for, write


def _clean(done: subprocess.CompletedProcess[str]) -> str:
    out = done.stdout + done.stderr
    assert "Traceback" not in out, out
    assert "Exception ignored" not in out, out
    return out


def _index(home: Home, pages: dict[str, list[str]]) -> Path:
    """A real index holding ``pages`` (file name -> page texts), as the daemon writes it."""
    Database(home.database).close()
    conn = sqlite3.connect(home.database)
    with conn:
        for name, texts in pages.items():
            path = home.inbox / name
            cur = conn.execute(
                "INSERT INTO jobs(path, display, state, attempts, pages, finished) "
                "VALUES (?, ?, 'done', 0, ?, ?)",
                (os.fsencode(path), str(path), len(texts), time.time()))
            conn.executemany(
                "INSERT INTO pages(job_id, page, text, markdown) VALUES (?, ?, ?, ?)",
                [(cur.lastrowid, n, text, text) for n, text in enumerate(texts, 1)])
    conn.close()
    return home.database


# -- 8. configuration values: finite, in range, named by where they came from -------------
@pytest.mark.parametrize(("source", "value"), [
    ("file", "nan"), ("file", "inf"), ("env", "nan"), ("env", "-inf"),
])
def test_nan_and_inf_are_refused_naming_their_source(home: Home, source: str,
                                                     value: str) -> None:
    args: list[str] = ["doctor"]
    env: dict[str, str] = {}
    if source == "file":
        config = write(home.root / "config.toml", f"settle_seconds = {value}\n".encode())
        args += ["--config", str(config)]
        where = str(config)
    else:
        env["OCRWATCH_MAX_FILE_MB"] = value
        where = "OCRWATCH_MAX_FILE_MB"
    done = ocrwatch_cli(home, *args, **env)
    out = _clean(done)
    assert done.returncode == 2, out
    assert where in out and "finite" in out, out


@pytest.mark.parametrize(("key", "value"), [
    ("workers", "100000"), ("max_file_mb", "1e300"), ("rescan_minutes", "0"),
    ("max_attempts", "-3"), ("remote.concurrency", "100000"),
])
def test_absurd_sizes_are_refused_with_the_range(home: Home, key: str, value: str) -> None:
    section, _, name = key.rpartition(".")
    text = (f"[{section}]\n{name} = {value}\n" if section else f"{key} = {value}\n")
    config = write(home.root / "config.toml", text.encode())
    done = ocrwatch_cli(home, "doctor", "--config", str(config))
    out = _clean(done)
    assert done.returncode == 2, out
    assert str(config) in out and key in out and "between" in out, out


def test_a_bad_environment_value_is_blamed_on_the_variable(home: Home) -> None:
    done = ocrwatch_cli(home, "doctor", OCRWATCH_WORKERS="-1")
    out = _clean(done)
    assert done.returncode == 2, out
    assert "OCRWATCH_WORKERS" in out and "defaults" not in out, out


def test_a_layout_error_names_every_place_involved(home: Home) -> None:
    """output_dir from the environment inside an inbox from a flag: both are named."""
    done = ocrwatch_cli(home, "doctor", "--inbox", str(home.inbox),
                        OCRWATCH_OUTPUT_DIR=str(home.inbox / "out"))
    out = _clean(done)
    assert done.returncode == 2, out
    assert "OCRWATCH_OUTPUT_DIR" in out and "--inbox" in out and "defaults" not in out, out


def test_a_config_file_that_is_not_utf8(home: Home) -> None:
    config = write(home.root / "config.toml", b'engine = "fake"\ninbox = ["\xff\xfe"]\n')
    done = ocrwatch_cli(home, "run", "--no-tray", "--config", str(config))
    out = _clean(done)
    assert done.returncode == 2, out
    assert str(config) in out and "line 2" in out and "UTF-8" in out, out


@pytest.mark.parametrize("command", ["search", "status", "add", "retry"])
def test_a_database_that_is_not_sqlite(home: Home, command: str) -> None:
    bogus = write(home.root / "notes.txt", b"my shopping list, not an index\n" * 200)
    args = {"search": ["search", "milk"], "status": ["status"],
            "add": ["add", "--engine", "fake", str(drop(home.inbox / "a.png",
                                                       image_bytes("a")))],
            "retry": ["retry", "--all-failed"]}[command]
    done = ocrwatch_cli(home, *args, "--database", str(bogus))
    out = _clean(done)
    assert done.returncode == 2, out
    assert str(bogus) in out and "--database" in out and "not an ocrwatch index" in out, out
    assert bogus.read_bytes() == b"my shopping list, not an index\n" * 200  # left alone


@pytest.mark.parametrize("kind", ["empty", "other-sqlite", "fifo", "device"])
def test_an_index_that_is_no_index_is_refused_without_hanging(home: Home, kind: str) -> None:
    target = home.root / "odd.db"
    if kind == "empty":
        target.write_bytes(b"")
    elif kind == "other-sqlite":
        conn = sqlite3.connect(target)
        conn.execute("CREATE TABLE recipes (name TEXT)")
        conn.close()
    elif kind == "fifo":
        os.mkfifo(target)  # opening it would wait for a writer for ever
    else:
        target = Path("/dev/null")
    before = target.read_bytes() if kind in ("empty", "other-sqlite") else None
    for args in (["search", "milk"], ["status"]):
        done = ocrwatch_cli(home, *args, "--database", str(target), timeout=60)
        out = _clean(done)
        assert done.returncode == 2, (args, out)
        assert str(target) in out and "--database" in out, out
    if before is not None:
        assert target.read_bytes() == before  # left as it was


def test_retry_without_an_index_creates_none(home: Home) -> None:
    missing = home.root / "nowhere" / "index.sqlite3"
    done = ocrwatch_cli(home, "retry", "--all-failed", "--database", str(missing))
    out = _clean(done)
    assert done.returncode == 1 and "no index at" in out, out
    assert not missing.parent.exists()


def test_add_of_a_pipe_says_what_it_is(home: Home) -> None:
    fifo = home.root / "scan.pdf"
    os.mkfifo(fifo)
    done = ocrwatch_cli(home, "add", "--engine", "fake", str(fifo), timeout=60)
    out = _clean(done)
    assert done.returncode == 1 and "not a regular file" in out, out


# -- 9. messages, not tracebacks ----------------------------------------------------------
def test_a_query_of_a_thousand_cjk_terms(home: Home) -> None:
    _index(home, {"memo.png": ["請求書 東京 会議"]})
    for terms in ([chr(0x4E00 + i) for i in range(1000)],           # scanned (short)
                  [chr(0x4E00 + i) * 3 for i in range(1000)]):      # trigram index
        done = ocrwatch_cli(home, "search", "--database", str(home.database), *terms)
        out = _clean(done)
        assert done.returncode == 2, out
        assert "1000 words" in out, out


def test_a_limit_too_large_for_sqlite(home: Home) -> None:
    _index(home, {"memo.png": ["invoice"]})
    done = ocrwatch_cli(home, "search", "--database", str(home.database), "invoice",
                        "--limit", "99999999999999999999")
    out = _clean(done)
    assert done.returncode == 2 and "--limit" in out and "out of range" in out, out


def test_status_into_a_closed_pipe(home: Home) -> None:
    """``ocrwatch status | head -1``: the reader goes away before the output is written."""
    _index(home, {f"scan{n}.png": ["text"] for n in range(3)})
    proc = subprocess.Popen([sys.executable, "-m", "ocrwatch", "status", "--database",
                             str(home.database)], env=home.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.close()  # before the program has started: every write meets a closed pipe
    _, err = proc.communicate(timeout=60)
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
    assert "Exception ignored" not in err, err
    assert proc.returncode == 141, (proc.returncode, err)


def _read_only_mount(folder: Path) -> list[str]:
    """A command prefix that runs the program with ``folder`` mounted read-only."""
    if os.geteuid() != 0:
        os.chmod(folder, 0o555)
        for f in folder.iterdir():
            os.chmod(f, 0o444)
        return []
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare(1) to make a read-only mount as root")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot make a mount namespace here: {probe.stderr.decode()[:200]}")
    return ["unshare", "-m", "sh", "-c", f'mount --bind -o ro "{folder}" "{folder}" && '
            'exec "$@"', "sh"]


@pytest.mark.parametrize("command", ["search", "status"])
def test_a_read_only_index_is_still_searched(home: Home, command: str) -> None:
    _index(home, {"letter.png": ["harbour office"]})
    conn = sqlite3.connect(home.database)
    conn.execute("PRAGMA journal_mode = WAL")  # as the daemon leaves it
    conn.close()
    for extra in home.database.parent.glob("*-shm"):
        extra.unlink()
    prefix = _read_only_mount(home.database.parent)
    args = ["search", "harbour"] if command == "search" else ["status"]
    done = subprocess.run([*prefix, sys.executable, "-m", "ocrwatch", *args, "--database",
                           str(home.database)], env=home.env(), capture_output=True,
                          text=True, timeout=60)
    out = _clean(done)
    assert done.returncode == (0 if command == "search" else 5), out  # 5: no daemon runs
    assert ("letter.png" in out) if command == "search" else ("1 done" in out), out


def test_no_runtime_dir_and_the_fallback_belongs_to_someone_else(home: Home,
                                                                tmp_path: Path) -> None:
    """XDG_RUNTIME_DIR unset; /tmp/runtime-UID is another user's (or a symlink to one).
    Nobody else can keep ocrwatch from running: the daemon and the commands meet in a
    private folder of the user's own, and the other user's folder is left alone."""
    uid = os.getuid()
    if Path(f"/run/user/{uid}").is_dir():
        pytest.skip(f"/run/user/{uid} exists: the /tmp fallback is never used here")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    squatted = tmp / f"runtime-{uid}"
    if os.geteuid() == 0:
        squatted.mkdir(mode=0o755)
        os.chown(squatted, 65534, 65534)  # nobody's
    else:
        (tmp_path / "elsewhere").mkdir(mode=0o755)
        squatted.symlink_to(tmp_path / "elsewhere")
    env = {k: v for k, v in home.env(TMPDIR=str(tmp)).items() if k != "XDG_RUNTIME_DIR"}

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "ocrwatch", *args], env=env,
                              capture_output=True, text=True, timeout=60)

    done = cli("pause")
    assert done.returncode == 5 and "no ocrwatch daemon" in _clean(done), done.stderr
    log = tmp_path / "daemon.log"
    with log.open("wb") as out:
        daemon = subprocess.Popen([sys.executable, "-m", "ocrwatch", "run", "--no-tray",
                                   "--engine", "fake", "--inbox", str(home.inbox),
                                   "--database", str(home.database)], env=env, stdout=out,
                                  stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: "PID" in cli("status").stdout, 60, "the daemon to answer")
        done = cli("stop")
        assert done.returncode == 0, _clean(done)
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait(timeout=30)
    assert "Traceback" not in log.read_text(errors="replace")
    private = home.state / "ocrwatch" / "run"
    assert private.is_dir() and (private.stat().st_mode & 0o777) == 0o700
    assert not any(squatted.iterdir())  # nothing of ours in the other user's folder


def test_no_private_runtime_folder_at_all_is_a_message(home: Home, tmp_path: Path) -> None:
    uid = os.getuid()
    if Path(f"/run/user/{uid}").is_dir():
        pytest.skip(f"/run/user/{uid} exists: the /tmp fallback is never used here")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (tmp / f"runtime-{uid}").symlink_to(tmp_path / "elsewhere")
    state = write(tmp_path / "state-is-a-file", b"")  # the second choice cannot be made
    env = {k: v for k, v in home.env(TMPDIR=str(tmp), XDG_STATE_HOME=str(state)).items()
           if k != "XDG_RUNTIME_DIR"}
    for args in (["status"], ["pause"]):
        done = subprocess.run([sys.executable, "-m", "ocrwatch", *args], env=env,
                              capture_output=True, text=True, timeout=60)
        out = _clean(done)
        assert done.returncode == 1, (args, out)
        assert "no private runtime folder" in out and "XDG_RUNTIME_DIR" in out, out
    done = subprocess.run([sys.executable, "-m", "ocrwatch", "run", "--no-tray", "--engine",
                           "fake"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "ocrwatch: " in _clean(done), done.stderr  # the log


# -- 10. a query's time is bounded --------------------------------------------------------
def test_a_runaway_query_is_stopped_and_says_so(home: Home) -> None:
    rng = random.Random(8)
    words = ["".join(rng.choice("abcdefghij") for _ in range(rng.randint(3, 9)))
             for _ in range(3000)]
    _index(home, {f"scan{n}.png": [" ".join(rng.choices(words, k=300))]
                  for n in range(3000)})
    query = " OR ".join(f"{c}*" for c in "abcdefghij" * 3)
    started = time.monotonic()
    done = ocrwatch_cli(home, "search", "--database", str(home.database), "--time-limit",
                        "0.05", query)
    took = time.monotonic() - started
    out = _clean(done)
    assert done.returncode == 2, out
    assert "stopped after 0.05 s" in out and "--time-limit" in out, out
    assert took < 20, took  # the program's start included; the query itself is cut short
    # The same index answers a plain query within the same bound.
    done = ocrwatch_cli(home, "search", "--database", str(home.database), "--time-limit",
                        "5", words[0])
    assert done.returncode == 0, _clean(done)


def test_the_bound_interrupts_sqlite_itself(tmp_path: Path) -> None:
    """The progress handler stops a statement mid-way; the connection stays usable."""
    from ocrwatch.core.errors import SearchTimeout

    db = Database(tmp_path / "index.sqlite3")
    try:
        started = time.monotonic()
        with pytest.raises(SearchTimeout, match=r"stopped after 0\.2 s"), db.time_limit(0.2):
            db.query("WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
                     "SELECT count(*) FROM n")
        assert time.monotonic() - started < 5
        assert db.query("SELECT 1 AS one")[0]["one"] == 1
    finally:
        db.close()


# -- 12. file names printed to a terminal -------------------------------------------------
EVIL = "invoice\x1b]0;owned\x07\x1b[2J\x1b[31m\x9b1m\u202egnp.png"


def test_escape_sequences_in_names_do_not_reach_the_terminal(home: Home) -> None:
    bad = write(home.inbox / EVIL, b"not an image at all")
    good = drop(home.inbox / ("ok\x1b[5m.png"), image_bytes("fine"))
    done = ocrwatch_cli(home, "add", "--engine", "fake", "--database", str(home.database),
                        str(bad), str(good))
    outputs = [done]
    outputs.append(ocrwatch_cli(home, "status", "--database", str(home.database)))
    outputs.append(ocrwatch_cli(home, "search", "--database", str(home.database), "fake"))
    outputs.append(ocrwatch_cli(home, "search", "--database", str(home.database), "fake",
                                "--json"))
    outputs.append(ocrwatch_cli(home, "retry", "--database", str(home.database),
                                str(home.inbox / "gone\x1b[2J.png")))
    for result in outputs:
        out = _clean(result)
        for raw in ("\x1b", "\x07", "\x9b", "\u202e"):
            assert raw not in out, (result.args, out)
    assert "\\x1b]0;owned\\x07" in outputs[0].stdout, outputs[0].stdout  # shown, escaped
    assert "\\x1b[2J" in outputs[1].stdout, outputs[1].stdout
    assert "ok\\x1b[5m.png" in outputs[2].stdout, outputs[2].stdout


# -- 15. repeated warnings are rate-limited -----------------------------------------------
def test_a_deep_folder_tree_does_not_flood_the_log(
        home: Home, daemon_process: Callable[..., DaemonProcess]) -> None:
    daemon = daemon_process()
    daemon.start()
    daemon.wait_ready()
    deepest = home.inbox
    for n in range(120):  # made while watched, a file on each level: each a new watch
        deepest = deepest / f"d{n:03d}"
        deepest.mkdir()
        (deepest / "note.png").write_bytes(b"not a picture")
    write(deepest / "bottom.png", image_bytes("at the bottom"))
    wait_for(lambda: "bottom.png" in daemon.output(), 120, "the deepest file to be seen")
    daemon.stop()
    logs = list((home.state).rglob("*.log*"))
    size = sum(p.stat().st_size for p in logs) + len(daemon.output())
    assert size < 1_000_000, f"{size} bytes of log for one folder tree"
    warnings = [line for line in daemon.output().splitlines() if "py.warnings" in line]
    assert len(warnings) <= 5, len(warnings)
    assert "Traceback" not in daemon.output()


@pytest.mark.parametrize("command", ["run", "add"])
def test_an_index_on_a_read_only_file_system_is_named_with_what_to_do(
        home: Home, command: str, tmp_path: Path) -> None:
    """Before: "unexpected error in `run`: OSError(30, 'Read-only file system') … report
    that" (the lock file beside the index could not be made)."""
    _index(home, {"letter.png": ["harbour office"]})
    prefix = _read_only_mount(home.database.parent)
    letter = tmp_path / "new.png"
    letter.write_bytes(image_bytes("new"))
    args = ["run"] if command == "run" else ["add", str(letter)]
    done = subprocess.run([*prefix, sys.executable, "-m", "ocrwatch", *args, "--database",
                           str(home.database)], env=home.env(), capture_output=True,
                          text=True, timeout=60)
    out = _clean(done)
    assert done.returncode not in (0, 70) and "unexpected error" not in out, out
    assert f"{home.database}.lock" in out and "must be writable" in out, out
    assert letter.exists()

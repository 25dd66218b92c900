"""The crash record beside the index (ocrwatch/control/crashes.py), with real processes:
a fatal signal leaves a trace, a kill an empty record, a clean stop nothing."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ocrwatch.control.crashes import CrashRecord

CHILD = """
import os, signal, sys, time
from pathlib import Path
from ocrwatch.control.crashes import CrashRecord
record = CrashRecord(Path(sys.argv[1]))
print(repr(record.arm()), flush=True)
how = sys.argv[2]
if how == "abort":
    os.abort()
elif how == "segv":
    import ctypes
    ctypes.string_at(0)
elif how == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
else:
    record.disarm()
"""


def _run(database: Path, how: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", CHILD, str(database), how],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("how", "sig"), [("abort", signal.SIGABRT),
                                          ("segv", signal.SIGSEGV)])
def test_a_fatal_signal_leaves_a_private_trace_for_the_next_start(
        tmp_path: Path, how: str, sig: int) -> None:
    database = tmp_path / "index.sqlite3"
    done = _run(database, how)
    assert done.returncode == -sig
    assert done.stdout.strip() == "None"  # nothing from before
    record = database.with_name("index.sqlite3.crash")
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    # The next start gets the trace (with the line that crashed) and starts afresh.
    again = _run(database, "stop")
    assert again.returncode == 0
    assert "Fatal Python error" in again.stdout and "<string>" in again.stdout
    assert again.stdout.startswith("LastEnd(trace=")
    assert not record.exists()


def test_a_kill_is_an_unclean_end_without_a_trace(tmp_path: Path) -> None:
    """SIGKILL (the out-of-memory killer's signal) writes nothing, but the record made at
    start is still there: the next start knows the last one did not stop cleanly."""
    database = tmp_path / "index.sqlite3"
    assert _run(database, "kill").returncode == -signal.SIGKILL
    assert _run(database, "stop").stdout.strip() == "LastEnd(trace=None)"


def test_a_clean_stop_leaves_nothing(tmp_path: Path) -> None:
    database = tmp_path / "index.sqlite3"
    assert _run(database, "stop").returncode == 0
    assert _run(database, "stop").stdout.strip() == "None"


def test_a_record_that_cannot_be_kept_does_not_stop_the_daemon(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    database = tmp_path / "index.sqlite3"
    os.symlink(tmp_path / "elsewhere", database.with_name("index.sqlite3.crash"))
    record = CrashRecord(database)
    assert record.arm() is None
    record.disarm()
    assert "cannot keep a crash record" in caplog.text
    assert not (tmp_path / "elsewhere").exists()  # the link was not followed

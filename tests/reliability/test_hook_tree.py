"""A hook that runs past its timeout is ended with everything it started, including a
child that left its session with setsid (killpg alone missed it)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from helpers import wait_for

from ocrwatch.hooks.runner import Finished, run_hook


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(") ", 1)[1][0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("how", [
    # a setsid child while the hook waits
    'setsid sleep 300 & echo $! > "{pids}"; sleep 300',
    # a setsid grandchild whose parent has exited (a double fork, as daemons do)
    'sh -c \'setsid sh -c "echo \\$\\$ > {pids}; exec sleep 300" & \' ; sleep 300',
    # a setsid child that ignores TERM
    'setsid sh -c \'trap "" TERM; echo $$ > "{pids}"; while :; do sleep 1; done\' & sleep 300',
])
def test_a_hook_past_its_timeout_ends_with_its_setsid_children(tmp_path: Path,
                                                               how: str) -> None:
    pids = tmp_path / "child.pid"
    argv = ["/bin/sh", "-c", how.replace("{pids}", str(pids))]
    item = Finished(source=tmp_path / "x.png", original=tmp_path / "x.png")
    started = time.monotonic()
    try:
        assert run_hook(argv, item, timeout=1.5) is None
        assert time.monotonic() - started < 15
        pid = int(wait_for(lambda: pids.exists() and pids.read_text().strip(), 5,
                           "the child's pid"))
        wait_for(lambda: not _alive(pid), 5, "the setsid child ended with the hook")
    finally:
        if pids.exists() and pids.read_text().strip():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pids.read_text()), signal.SIGKILL)

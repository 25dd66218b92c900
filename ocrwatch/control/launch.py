"""Start the daemon in the background, as the login autostart does, and wait a bounded
time to see it answer, or end, so that the caller can say which truthfully.

``make start``, ``ocrwatch start`` and ``ocrwatch autostart enable --now`` (where no
systemd user session can start it) all come here: before, each put ``ocrwatch run`` in
the background and said it ran, whether it did or had already exited on a bad config.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ocrwatch.control import startfail
from ocrwatch.core.errors import DaemonRunning, OcrwatchError
from ocrwatch.fs import paths

WAIT = 60.0  # seconds: a daemon answers in one or two; an engine may take longer to load
POLL = 0.2


@dataclass(frozen=True)
class Launched:
    """What became of the daemon started in the background."""

    pid: int
    up: bool  # it answers on its control socket
    exit_code: int | None  # it ended (a failed start) with this status
    reason: str = ""  # why it ended, from its record of the failed start
    log_file: Path = Path()

    @property
    def failed(self) -> bool:
        return self.exit_code is not None

    def __str__(self) -> str:
        if self.up:
            return (f"the daemon runs in the background (PID {self.pid}); `ocrwatch status` "
                    f"shows it, `ocrwatch stop` ends it; its log: {self.log_file}")
        if self.failed:
            return (f"the daemon did not start (status {self.exit_code}): {self.reason}\n"
                    f"Fix that, then start it again; its log: {self.log_file}")
        which = f" (PID {self.pid})" if self.pid else ""
        return (f"the daemon is starting in the background{which} and does not answer "
                "yet; `ocrwatch status` says when it is up, or why it did not start; its "
                f"log: {self.log_file}")


def already_running() -> int | None:
    """The PID of the daemon that answers now, or None."""
    from ocrwatch.control.client import request

    try:
        answer = request("status", timeout=5)
    except OcrwatchError:
        return None
    pid = answer.get("pid") if isinstance(answer, dict) else None
    return int(pid) if isinstance(pid, int) else 0


def start(command: Sequence[str], *, wait: float = WAIT,
          env: Mapping[str, str] | None = None, cwd: Path | None = None) -> Launched:
    """Run ``command`` (``ocrwatch run ...``) detached, in a session of its own, its
    output to nowhere (it logs to its log file); return once it answers, has ended, or
    ``wait`` seconds have passed."""
    began = time.time()
    proc = subprocess.Popen(list(command), stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, close_fds=True,
                            env=dict(env) if env is not None else None, cwd=cwd)
    return watch(began, wait=wait, pid=proc.pid, ended=proc.poll,
                 what=f"`{' '.join(command)}`")


def watch(began: float, *, wait: float = WAIT, pid: int | None = None,
          ended: Callable[[], int | None] = lambda: None,
          what: str = "the daemon") -> Launched:
    """Wait for a daemon started at ``began`` (``time.time()``): until it answers (the one
    of ``pid``; None: any), ``ended()`` gives its exit status, a start since ``began`` is
    recorded as failed (a service manager's child, not ours to wait for), or ``wait``
    seconds have passed."""
    from ocrwatch.control.client import request

    log_file = paths.log_file()
    deadline = time.monotonic() + wait
    while True:
        code = ended()
        failure = startfail.last()
        fresh = failure if failure is not None and failure.when >= began else None
        if code is not None or (pid is None and fresh is not None):
            if fresh is not None:
                return Launched(pid or 0, False, code if code is not None else fresh.exit_code,
                                fresh.reason, log_file)
            if code == DaemonRunning.exit_code:  # not a failure to record: one runs
                reason = ("another ocrwatch daemon runs for this user or on this index; "
                          "`ocrwatch status` shows it")
            else:
                reason = f"{what} ended before it answered; see its log"
            return Launched(pid or 0, False, code, reason, log_file)
        try:
            answer = request("status", timeout=2)
        except OcrwatchError:
            pass  # none yet, or a socket that is there but not answering yet
        else:
            answered = answer.get("pid") if isinstance(answer, dict) else None
            if isinstance(answered, int) and pid in (None, answered):
                return Launched(answered, True, None, "", log_file)
            # another daemon answers: ours ends with status 4 in a moment
        if time.monotonic() >= deadline:
            return Launched(pid or 0, False, None, "", log_file)
        time.sleep(POLL)

"""Out of file descriptors for a moment (EMFILE): the file is tried again, never failed.

A real child process runs the daemon with the fake engine, lowers its own RLIMIT_NOFILE,
and takes every descriptor left (as a flood of connections or another part of the
program would); a file dropped into the inbox then (found by inotify), and a file
already queued then (its pages opened then), must both end ``done`` once the descriptors
are free again. Before, each failed for good with "Too many open files".
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from .helpers import Home, image_bytes

_CHILD = textwrap.dedent('''
    import json, logging, os, resource, sqlite3, sys, time
    from pathlib import Path
    from ocrwatch.config import Config
    from ocrwatch.daemon import Daemon
    from ocrwatch.testing.fake import FakeEngine

    inbox, db, first, second = map(Path, sys.argv[1:5])
    warned = []
    class Catch(logging.Handler):
        def emit(self, record):
            warned.append(record.getMessage())
    logging.getLogger("ocrwatch").addHandler(Catch())
    logging.getLogger("ocrwatch").setLevel(logging.INFO)

    def until(cond, what, timeout=30.0):
        end = time.monotonic() + timeout
        while not cond():
            if time.monotonic() > end:
                raise SystemExit(f"timed out waiting for {what}; log: {warned[-10:]}")
            time.sleep(0.05)

    def state(name):
        rows = daemon.db.query("SELECT state FROM jobs WHERE path = ?",
                               (os.fsencode(str(inbox / name)),))
        return rows[0]["state"] if rows else None

    resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))
    config = Config(inbox=[inbox], database=db, engine="fake", settle_seconds=0.3,
                    rescan_minutes=60.0)
    daemon = Daemon(config, engine=FakeEngine(), watch=True)
    daemon.start()
    hog = []
    def take_all():
        try:
            while True:
                hog.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
    def give_back():
        while hog:
            os.close(hog.pop())
    try:
        # 1. A file arrives while no descriptor is left.
        take_all()
        os.rename(first, inbox / first.name)
        until(lambda: any("open files" in m for m in warned)
              or state(first.name) == "failed", "the open to fail")
        give_back()
        until(lambda: state(first.name) in ("done", "failed"), "the first file to end")
        # 2. A file queued (paused), then its pages opened while no descriptor is left.
        daemon.pause()
        os.rename(second, inbox / second.name)
        until(lambda: state(second.name) == "queued", "the second file to be queued")
        seen = len(warned)
        take_all()
        daemon.scheduler.resume()
        until(lambda: any("open files" in m for m in warned[seen:])
              or state(second.name) == "failed", "the second open to fail")
        give_back()
        daemon.resume()
        until(lambda: state(second.name) in ("done", "failed"), "the second file to end")
        print(json.dumps({"first": state(first.name), "second": state(second.name),
                          "warnings": [m for m in warned if "open files" in m]}))
    finally:
        give_back()
        daemon.close()
''')


def test_a_file_met_with_emfile_is_read_once_descriptors_are_back(home: Home,
                                                                  tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    first, second = outside / "first.png", outside / "second.png"
    first.write_bytes(image_bytes("first"))
    second.write_bytes(image_bytes("second"))
    done = subprocess.run([sys.executable, "-c", _CHILD, str(home.inbox), str(home.database),
                           str(first), str(second)], env=home.env(), capture_output=True,
                          text=True, timeout=180, cwd=home.root)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["first"] == "done", result
    assert result["second"] == "done", result
    assert all("will try again" in w for w in result["warnings"]), result["warnings"]

"""A page whose forms draw themselves (issue: 796 bytes grew one native page load to all
memory): the load's cost is known before PDFium loads it (ocrwatch/pages/pdfload.py),
the file fails with a reason, the others are read, and SIGTERM is obeyed in seconds.

The daemon runs under an address-space limit, so that without the check PDFium aborts
at 3 GB instead of taking the test machine's memory."""

from __future__ import annotations

import time
from collections.abc import Callable

from .attack_files import form_fan, self_drawing_form
from .helpers import DaemonProcess, Home, drop, ended, image_bytes, wait_for

ADDRESS_SPACE = 3 << 30  # bytes: the daemon with every library loaded needs about 1.5 GB


def test_forms_that_draw_themselves_fail_and_the_others_are_read(
        home: Home, daemon_process: Callable[..., DaemonProcess]) -> None:
    daemon = daemon_process()
    daemon.prefix = ["prlimit", f"--as={ADDRESS_SPACE}", "--"]
    daemon.start()
    daemon.wait_ready()
    itself = drop(home.inbox / "itself.pdf", self_drawing_form())
    fan = drop(home.inbox / "fan.pdf", form_fan(30))
    assert itself.stat().st_size < 1000
    wait_for(lambda: ended(home.database, itself) and ended(home.database, fan), 120,
             "both bombs to be refused")
    after = drop(home.inbox / "after.png", image_bytes("after the bombs"))
    wait_for(lambda: ended(home.database, after), 60, "the file dropped after them")
    assert daemon.running, daemon.output()[-3000:]
    rows = {p.name: ended(home.database, p) for p in (itself, fan, after)}
    assert rows["after.png"]["state"] == "done"  # type: ignore[index]
    assert rows["itself.pdf"]["state"] == "failed"  # type: ignore[index]
    assert "draws a form inside itself" in rows["itself.pdf"]["reason"]  # type: ignore[index]
    assert rows["fan.pdf"]["state"] == "failed"  # type: ignore[index]
    assert "prepare_memory_mb" in rows["fan.pdf"]["reason"]  # type: ignore[index]
    assert "Traceback" not in daemon.output()
    began = time.monotonic()
    assert daemon.stop(timeout=15) == 0
    assert time.monotonic() - began < 10

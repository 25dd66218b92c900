"""Pages prepared in processes of their own (ocrwatch/scan/pool.py): the same pages as
in the daemon's threads, a crashing page harms no other, the processes end when idle and
when closed, and the daemon of a GPU engine prepares its pages there."""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import helpers
import psutil
import pytest
from PIL import Image, ImageChops

from ocrwatch.config import Config
from ocrwatch.core.domain import Page
from ocrwatch.core.errors import InputError
from ocrwatch.scan import deskew, pool
from ocrwatch.scan.prepare import ScanPrep

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the benchmarks package
from benchmarks import cases
from benchmarks.pdf_output import DPI, page_lines, synthetic_page

pytestmark = pytest.mark.skipif(not shutil.which("tesseract"),
                                reason="tesseract is needed (apt install tesseract-ocr)")

# Fed turned this far clockwise (a page turned 90 clockwise is stood up by 270 more).
TURN = {90: Image.Transpose.ROTATE_270, 180: Image.Transpose.ROTATE_180}


def letter(seed: int = 3) -> Image.Image:
    image, _ = synthetic_page(page_lines(seed, 9))
    return image


def workers() -> list[psutil.Process]:
    """This process's page preparation processes (multiprocessing's spawned children)."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            # (not multiprocessing's resource tracker, which lives as long as this process)
            if any("spawn_main" in part for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            continue
    return found


class _Dies:
    """Unpickled in the worker, it ends that process at once: a crash in native code."""

    def __reduce__(self) -> tuple[object, tuple[int]]:
        return os._exit, (3,)


@pytest.fixture
def prep() -> Iterator[pool.PooledScanPrep]:
    made = pool.PooledScanPrep(Config(languages=["eng"]), 2, least_skew=deskew.JUDGED_ANGLE)
    yield made
    made.close()
    helpers.wait_for(lambda: not workers(), 10, "the preparing processes to end")


def test_pages_prepared_in_processes_are_those_prepared_in_threads(
        prep: pool.PooledScanPrep) -> None:
    here = ScanPrep(Config(languages=["eng"]), least_skew=deskew.JUDGED_ANGLE)
    upright = letter()
    fed = [upright.transpose(TURN[90]), upright.transpose(TURN[180]),
           upright.rotate(-3, expand=True, fillcolor="white")]
    for n, image in enumerate(fed):
        page = Page(Path("x.png"), n, image, dpi=DPI)
        mine, theirs = here.prepare(page), prep.prepare(page)
        assert (theirs.turned, round(theirs.skew, 2), theirs.image.size) == (
            mine.turned, round(mine.skew, 2), mine.image.size)
        assert theirs.image.tobytes() == mine.image.tobytes()
        assert (theirs.turned, abs(theirs.skew) > 2) == [(270, False), (180, False),
                                                          (0, True)][n]
    assert len(workers()) >= 1  # it ran in another process
    here.close()


def test_a_files_pages_are_prepared_several_at_once_and_come_out_in_order(
        prep: pool.PooledScanPrep) -> None:
    upright = letter()
    fed = [Page(Path("long.pdf"), 0, upright.transpose(TURN[90]), dpi=DPI),
           Page(Path("long.pdf"), 1, upright, dpi=DPI, text="its own text layer"),
           *(Page(Path("long.pdf"), n, upright.transpose(TURN[180]), dpi=DPI)
             for n in range(2, 6))]
    pulled: list[int] = []

    def opened() -> Iterator[Page]:
        for page in fed:
            pulled.append(page.index)
            yield page

    out = prep.prepare_all(opened())
    first = next(out)
    # The first page came out once both processes had a page (0 and 2; page 1 needs none).
    assert pulled == [0, 1, 2]
    rest = list(out)
    assert [p.index for p in [first, *rest]] == list(range(6))
    assert [p.turned for p in [first, *rest]] == [270, 0, 180, 180, 180, 180]
    assert rest[0] is fed[1]  # a page with its own text is not prepared
    assert prep._in_flight == 0

    ended: list[bool] = []

    def decoding() -> Iterator[Page]:
        try:
            yield from fed
        finally:
            ended.append(True)

    early = prep.prepare_all(decoding())
    assert next(early).turned == 270
    early.close()  # the file was left: the pages on their way are let go of
    assert prep._in_flight == 0
    assert ended == [True]  # and its decoder closed with it
    assert prep.prepare(fed[2]).turned == 180  # and the pool works on


def test_a_file_is_prepared_ahead_at_most_ahead_pages() -> None:
    made = pool.PooledScanPrep(Config(languages=["eng"]), 8, least_skew=deskew.JUDGED_ANGLE)
    try:
        pulled: list[int] = []
        page = Page(Path("long.pdf"), 0, letter(), dpi=DPI)

        def opened() -> Iterator[Page]:
            for n in range(8):
                pulled.append(n)
                yield replace(page, index=n)

        out = made.prepare_all(opened())
        assert next(out).index == 0
        assert pulled == list(range(pool.AHEAD + 1))  # 8 processes, yet AHEAD ahead
        assert [p.index for p in out] == list(range(1, 8))
    finally:
        made.close()
    helpers.wait_for(lambda: not workers(), 10, "the preparing processes to end")


def test_a_page_that_ends_its_process_fails_alone(prep: pool.PooledScanPrep) -> None:
    good = Page(Path("good.png"), 0, letter().transpose(TURN[180]), dpi=DPI)
    results: list[Page] = []
    readers = [threading.Thread(target=lambda: results.append(prep.prepare(good)))
               for _ in range(3)]
    for reader in readers:
        reader.start()
    with pytest.raises(InputError, match="ended the process that prepared it, twice"):
        prep.prepare(Page(Path("bad.png"), 4, _Dies(), dpi=DPI))  # type: ignore[arg-type]
    for reader in readers:
        reader.join(60)
    assert [p.turned for p in results] == [180, 180, 180]  # each tried again alone
    assert prep.prepare(good).turned == 180  # and the pool works on


def test_a_page_sent_to_a_pool_already_broken_is_tried_again_alone(
        prep: pool.PooledScanPrep) -> None:
    page = Page(Path("x.png"), 0, letter().transpose(TURN[180]), dpi=DPI)
    assert prep.prepare(page).turned == 180
    broken = prep._pool
    assert broken is not None
    broken.shutdown(wait=True)  # as _broken leaves it for the pages beside the crash
    assert prep.prepare(page).turned == 180  # refused there, prepared alone
    assert prep._pool is not broken  # and the pool made again for the next page
    assert prep.prepare(page).turned == 180
    assert prep._in_flight == 0


def test_idle_processes_end_and_start_again_for_the_next_page(
        prep: pool.PooledScanPrep, monkeypatch: pytest.MonkeyPatch) -> None:
    page = Page(Path("x.png"), 0, letter().transpose(TURN[90]), dpi=DPI)
    assert prep.prepare(page).turned == 270
    prep.idle()  # within IDLE_S: kept
    assert workers()
    monkeypatch.setattr(pool, "IDLE_S", 0.0)
    prep.idle()
    helpers.wait_for(lambda: not workers(), 10, "the idle processes to end")
    assert prep.prepare(page).turned == 270


def test_what_a_worker_logs_is_logged_here(
        prep: pool.PooledScanPrep, caplog: pytest.LogCaptureFixture) -> None:
    # Faint print on tinted paper (a worn ribbon): too little ink by the blank check, read
    # all the same, and said so in the log; from the worker, the same line here.
    grey = letter().convert("L").point(lambda v: round(255 - (255 - v) * 0.25))
    paper = cases._paper(grey.size, random.Random(2), (190, 205, 215), grain=8, noise=6)
    faint = ImageChops.multiply(paper, Image.merge("RGB", (grey, grey, grey)))
    page = Page(Path("faint.png"), 0, faint, dpi=DPI)
    with caplog.at_level("INFO", logger="ocrwatch.scan"):
        got = prep.prepare(page)
    assert (got.blank, got.text) == (False, None)
    relayed = [r.getMessage() for r in caplog.records if r.name == "ocrwatch.scan.prepare"]
    assert relayed == ["faint.png, page 1: too little ink to read, but faint print, not the "
                       "other side showing through: read"]


def test_the_daemon_of_a_gpu_engine_prepares_in_processes_and_leaves_none(
        tmp_path: Path) -> None:
    from ocrwatch.daemon import Daemon
    from ocrwatch.engines.vllm import VllmEngine

    config = helpers.make_config(tmp_path, engine="vllm", settle_seconds=0.2)
    config.vllm.idle_sleep_seconds = config.vllm.idle_stop_seconds = 0
    engine = VllmEngine(config, backend="fake", card_mib=16 * 1024, prepare_processes=True)
    assert engine.policy.prepare_processes
    inbox = config.inbox[0]
    inbox.mkdir(parents=True)
    with Daemon(config, engine=engine) as daemon:
        assert isinstance(daemon.ctx.scan, pool.PooledScanPrep)
        staged = tmp_path / "turned.png"
        letter().transpose(TURN[90]).save(staged, dpi=(DPI, DPI))
        os.rename(staged, inbox / "turned.png")
        helpers.wait_for(lambda: (job := daemon.jobs.known(inbox / "turned.png")) is not None
                         and job.state.value == "done", 60, "the file read")
        assert workers()
        turned = [row[0] for row in daemon.db.query("SELECT turned FROM pages")]
    assert turned == [270]
    helpers.wait_for(lambda: not workers(), 10, "the preparing processes to end")


_KILLED_PARENT = """
import sys, time
from ocrwatch.config import Config
from ocrwatch.scan import pool
if __name__ == "__main__":
    prep = pool.PooledScanPrep(Config(languages=["eng"]), 2)
    prep.warm()
    print("warm", flush=True)
    time.sleep(120)
"""


def test_processes_end_when_the_daemon_is_killed_outright(tmp_path: Path) -> None:
    # SIGKILL (the out-of-memory killer): no close(), yet no process is left waiting.
    script = tmp_path / "parent.py"
    script.write_text(_KILLED_PARENT, encoding="utf-8")
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                              cwd=Path(__file__).resolve().parents[1])
    try:
        assert parent.stdout is not None and parent.stdout.readline() == b"warm\n"
        proc = psutil.Process(parent.pid)
        helpers.wait_for(lambda: len([c for c in proc.children()
                                      if "spawn_main" in " ".join(c.cmdline())]) == 2,
                         30, "the two processes started")
        found = [c for c in proc.children() if "spawn_main" in " ".join(c.cmdline())]
        parent.kill()
        parent.wait(10)

        def ended() -> bool:
            for child in found:
                try:
                    if child.status() != psutil.STATUS_ZOMBIE:
                        return False
                except psutil.NoSuchProcess:
                    continue
            return True

        helpers.wait_for(ended, 10 * pool.PARENT_CHECK_S, "the orphaned processes to end")
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(10)
        if parent.stdout is not None:
            parent.stdout.close()

"""Properties and fuzzing: the queue's state machine, the settle logic, the page loader.

``OCRWATCH_FUZZ_CASES`` (default 400) sets the page loader's mutated files, and
``OCRWATCH_FUZZ_EXAMPLES`` hypothesis's examples (default 500 for the queue, 60 for the
settle logic); raise both by hand.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    initialize,
    invariant,
    rule,
)

from ocrwatch.core.domain import Job, PageText, State
from ocrwatch.intake.settle import INCOMPLETE_GRACE, Settler
from ocrwatch.store.db import Database
from ocrwatch.store.jobfiles import Seen
from ocrwatch.store.jobs import JobQueue

EXAMPLES = int(os.environ.get("OCRWATCH_FUZZ_EXAMPLES", "60"))
QUEUE_EXAMPLES = int(os.environ.get("OCRWATCH_FUZZ_EXAMPLES", "500"))  # cheap: in memory
CASES = int(os.environ.get("OCRWATCH_FUZZ_CASES", "400"))
# Few paths and contents, so that sequences often meet the same file or content again.
PATHS = [Path(f"/inbox/{name}") for name in ("a.png", "b.pdf", "d/e.tif")]
SHAS = ["1" * 64, "2" * 64]
MAX_ATTEMPTS = 3


# -- the queue ---------------------------------------------------------------------------
class QueueMachine(RuleBasedStateMachine):
    """Random sequences of queue operations against a model of what each should do."""

    running = Bundle("running")

    @initialize()
    def start(self) -> None:
        self.db = Database(":memory:")
        self.queue = JobQueue(self.db)
        self.model: dict[Path, str] = {}  # path -> state
        self.sha: dict[Path, str | None] = {}
        self.claimed: dict[int, int] = {}  # job id -> token of the reader holding it
        self.not_due: set[Path] = set()  # deferred: not to be handed out for seconds
        self.crashes: dict[Path, int] = {}  # crashes of the daemon while it was read
        self.token = 0
        self.now = time.time()

    def teardown(self) -> None:
        self.db.close()

    def _id(self, path: Path) -> int:
        job = self.queue.known(path)
        assert job is not None
        return job.id

    @rule(path=st.sampled_from(PATHS), sha=st.sampled_from(SHAS))
    def offer(self, path: Path, sha: str) -> None:
        seen = self.queue.offer(path, 10, 1, sha)
        old = self.model.get(path)
        if old is None:
            assert seen is Seen.NEW
            self.model[path] = "queued"
            self.not_due.discard(path)
            self.crashes[path] = 0
        elif self.sha[path] == sha and old != "running":
            assert seen is Seen.UNCHANGED
        else:
            assert seen is Seen.CHANGED
            if old == "running":
                # Queued again for the new content: the running reader's result will be
                # refused by JobQueue.complete, and the job is no longer claimed.
                self.claimed.pop(self._id(path), None)
            self.model[path] = "queued"
            self.not_due.discard(path)
            self.crashes[path] = 0  # new content: the old one's crashes say nothing of it
        self.sha[path] = sha

    @rule(target=running, later=st.booleans())
    def claim(self, later: bool) -> object:
        now = time.time() + (10_000 if later else 0)
        due = {p for p, s in self.model.items() if s == "queued"}
        if not later:
            due -= self.not_due
        running = {p for p, s in self.model.items() if s == "running"}
        suspects = {p for p in due if self.crashes[p]}
        job = self.queue.claim(now=now)
        if any(self.crashes[p] for p in running) or (suspects and running):
            # A file read alone after a crash: nothing beside it, and it waits for the
            # files being read, claiming nothing meanwhile.
            assert job is None, f"{job and job.path} claimed beside {running}"
            return None
        if job is None:
            # Nothing handed out: every queued job must be one put off for later.
            assert not due, (due, self.not_due)
            return None
        assert job.path in (suspects or due), \
            f"claimed {job.path} in state {self.model.get(job.path)}, suspects {suspects}"
        assert later or job.path not in self.not_due, "a deferred job was handed out early"
        assert job.id not in self.claimed, "a job was handed out twice"
        self.model[job.path] = "running"
        self.token += 1
        self.claimed[job.id] = self.token
        return (job, self.token)

    @rule(handed=consumes(running),
          outcome=st.sampled_from(["fail", "defer", "release", "done"]))
    def finish(self, handed: object, outcome: str) -> None:
        if handed is None:
            return
        job, token = cast(tuple[Job, int], handed)
        if self.claimed.get(job.id) != token:
            self._stale(job, outcome)
            return
        del self.claimed[job.id]
        if outcome == "fail":
            assert self.queue.fail(job.id, "broken", job.sha256)
            self.model[job.path] = "failed"
        elif outcome == "defer":
            again = self.queue.defer(job.id, "disk full", MAX_ATTEMPTS, job.sha256)
            self.model[job.path] = "queued" if again else "failed"
            self.not_due.add(job.path)
        elif outcome == "release":
            self.queue.release(job.id)
            self.model[job.path] = "queued"
        else:
            stored = self.queue.complete(job.id, [PageText("m", "t")], engine="fake",
                                         md_path=None, txt_path=None, sha256=job.sha256)
            assert stored
            self.model[job.path] = "done"

    def _stale(self, job: Job, outcome: str) -> None:
        """A reader whose job was forgotten, recovered or queued again for new content:
        what it reports must change nothing (unless the content is the same anyway)."""
        now_row = self.queue.known(job.path)
        if now_row is not None and now_row.id == job.id and now_row.sha256 == job.sha256:
            return  # same job, same content: its result would be as good as a new one
        if outcome == "fail":
            assert not self.queue.fail(job.id, "stale", job.sha256)
        elif outcome == "defer":
            assert not self.queue.defer(job.id, "stale", MAX_ATTEMPTS, job.sha256)
        elif outcome == "done":
            assert not self.queue.complete(job.id, [PageText("m", "t")], engine="fake",
                                           md_path=None, txt_path=None, sha256=job.sha256)
        # release only touches running jobs; a stale release may give back a job another
        # reader holds, which recover() at start would do anyway: not checked here.

    def _queued_again(self, state: str) -> list[Path]:
        """The model's side: every job in ``state`` goes back to the queue."""
        paths = [path for path, s in self.model.items() if s == state]
        for path in paths:
            self.model[path] = "queued"
        return paths

    @rule()
    def recover(self) -> None:
        count = self.queue.recover()
        assert count.queued == len(self._queued_again("running")) and not count.crashers
        self.claimed.clear()

    @rule()
    def recover_after_a_crash(self) -> None:
        """The daemon died of a fatal signal: each file being read counts it; one at the
        second crash is handed back running, and failed as the daemon does."""
        running = [p for p, s in self.model.items() if s == "running"]
        for path in running:
            self.crashes[path] += 1
        got = self.queue.recover(crashed=True)
        crashers = {p for p in running if self.crashes[p] >= 2}
        assert {job.path for job in got.crashers} == crashers
        assert got.queued == len(running) - len(crashers)
        self.claimed.clear()
        for path in running:
            self.model[path] = "queued"
        for job in got.crashers:
            assert self.queue.fail(job.id, "crashed twice", job.sha256)
            self.model[job.path] = "failed"
    @rule()
    def retry_all(self) -> None:
        count = self.queue.retry()
        # Every failure but a file that crashed the daemon twice: named, it is read again.
        again = [p for p, s in self.model.items() if s == "failed" and self.crashes[p] < 2]
        for path in again:
            self.model[path] = "queued"
            self.crashes[path] = min(self.crashes[path], 1)  # read alone once more
        assert count == len(again)
        self.not_due.difference_update(again)

    @rule(path=st.sampled_from(PATHS))
    def forget(self, path: Path) -> None:
        known = path in self.model
        if known:
            self.claimed.pop(self._id(path), None)
        assert self.queue.files.forget(path) is known
        self.model.pop(path, None)
        self.sha.pop(path, None)
        self.crashes.pop(path, None)
        self.not_due.discard(path)

    @invariant()
    def matches_the_model(self) -> None:
        if not hasattr(self, "queue"):
            return
        rows = {p: self.queue.known(p) for p in PATHS}
        actual = {p: j.state.value for p, j in rows.items() if j is not None}
        assert actual == self.model
        counts = self.queue.counts()
        assert sum(counts.values()) == len(self.model)
        assert set(counts) == {s.value for s in State}
        for job in rows.values():
            if job is not None and job.state == State.RUNNING:
                assert job.id in self.claimed, "running with no reader: it would be stuck"


QueueMachine.TestCase.settings = settings(max_examples=QUEUE_EXAMPLES, stateful_step_count=40,
                                          deadline=None)
test_queue_state_machine = QueueMachine.TestCase


def test_a_forgotten_job_id_is_never_reused() -> None:
    """The sequence the state machine found: a file deleted while being read, a new one
    with the same content queued, then the old reader's failure arrives."""
    db = Database(":memory:")
    try:
        queue = JobQueue(db)
        queue.offer(PATHS[0], 1, 1, SHAS[0])
        old = queue.claim()
        assert old is not None
        assert queue.files.forget(PATHS[0])
        queue.offer(PATHS[1], 1, 1, SHAS[0])
        new = queue.claim()
        assert new is not None and new.id != old.id
        assert not queue.fail(old.id, "the file was deleted while it was being read", SHAS[0])
        assert not queue.defer(old.id, "disk full", MAX_ATTEMPTS, SHAS[0])
        again = queue.known(PATHS[1])
        assert again is not None and again.state == State.RUNNING
    finally:
        db.close()


# -- the settle logic ----------------------------------------------------------------------
SETTLE = 2.0
write_step = st.tuples(st.sampled_from(["append", "wait"]),
                       st.floats(min_value=0.05, max_value=3.0))


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(write_step, min_size=1, max_size=25), jpeg=st.booleans())
def test_settler_reports_only_still_and_complete_files(tmp_path: Path,
                                                       steps: list[tuple[str, float]],
                                                       jpeg: bool) -> None:
    """Whatever the writer does, a file is handed over only after ``settle`` seconds
    without change, and, when it looks incomplete (a JPEG without its end marker), only
    after the long grace; once the writer is done it is handed over exactly once, whole."""
    folder = tmp_path / f"run{time.monotonic_ns()}"
    folder.mkdir()
    path = folder / ("scan.jpg" if jpeg else "scan.tif")
    clock = [1000.0]
    ready: list[tuple[float, bytes]] = []
    settler = Settler([folder], SETTLE, lambda p: ready.append((clock[0], p.read_bytes())),
                      lambda p: None, clock=lambda: clock[0])
    last_change = clock[0]
    mtime = 1_000_000_000_000_000_000
    # A TIFF with no directory yet, as libtiff starts one: only size and time tell.
    content = b"\xff\xd8\xff\xe0" if jpeg else b"II*\x00\x00\x00\x00\x00"

    def write(data: bytes) -> None:
        nonlocal mtime, last_change
        path.write_bytes(data)
        mtime += 1_000_000_000  # a distinct mtime per write, as the clock advanced
        os.utime(path, ns=(mtime, mtime))
        last_change = clock[0]
        settler.feed("changed", path)

    write(content)
    for kind, seconds in steps:
        if kind == "append":
            content += b"x" * 100
            write(content)
        # time passes in ticks, as the settler's thread would see it
        end = clock[0] + seconds
        while clock[0] < end:
            clock[0] = min(end, clock[0] + Settler.TICK)
            before = len(ready)
            settler.check()
            if len(ready) > before:
                at, data = ready[-1]
                assert at - last_change >= SETTLE, "handed over before it was still"
                complete = not jpeg or data.endswith(b"\xff\xd9")
                assert complete or at - last_change >= SETTLE * INCOMPLETE_GRACE
    handed_before_end = len(ready)
    # The writer finishes: the end marker arrives; then time passes.
    content += b"\xff\xd9" if jpeg else b"end"
    write(content)
    for _ in range(int(SETTLE * 2 / Settler.TICK) + 2):
        clock[0] += Settler.TICK
        settler.check()
    finals = ready[handed_before_end:]
    assert len(finals) == 1, f"handed over {len(finals)} times after the last write"
    assert finals[0][1] == content
    assert finals[0][0] - last_change >= SETTLE


# -- the page loader ---------------------------------------------------------------------------
@pytest.mark.slow
def test_page_loader_fuzz(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Mutated PNG/JPEG/TIFF/BMP/WebP/PDF files: no crash, no hang, bounded memory.

    Runs in a child process under a 3 GiB address-space limit, so a decoder that tried to
    allocate without bound would fail there, and a hard crash cannot take pytest down.
    """
    seed = int(os.environ.get("OCRWATCH_FUZZ_SEED", str(random.randrange(1 << 30))))
    report = tmp_path / "report.json"
    limit_s = 60 + CASES * 0.5
    try:
        done = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("fuzz_pages.py")), str(report),
             str(CASES), str(seed), "3"], capture_output=True, text=True, timeout=limit_s)
    except subprocess.TimeoutExpired:
        progress = (tmp_path / "progress").read_text() if (tmp_path / "progress").exists() \
            else "?"
        raise AssertionError(f"the page loader hung on case {progress} (seed {seed})") from None
    progress = (tmp_path / "progress").read_text() if (tmp_path / "progress").exists() else ""
    assert done.returncode == 0, \
        f"the fuzz child died ({done.returncode}) at {progress}: {done.stderr[-2000:]}"
    result = json.loads(report.read_text())
    with capsys.disabled():
        print(f"\npage fuzz: {({k: v for k, v in result.items() if k != 'findings'})}")
    assert not result["findings"], f"seed {seed}: " + json.dumps(result["findings"][:5],
                                                                   indent=2)
    assert result["slowest_s"] < 10, result["slowest"]
    assert result["peak_rss_mb"] < 1500

"""The vLLM worker's pipe: typed messages, the one loop decision, the one dead-worker error.

The worker runs in a real spawned process with the fake backend (only vLLM is replaced);
a "rogue" worker defined here stands for a worker of another version that answers with
what this daemon does not know.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import re
import signal
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import ocrwatch
from ocrwatch.config import Config
from ocrwatch.core import errors
from ocrwatch.core.domain import Page
from ocrwatch.core.errors import EngineError, EngineUnavailable, OcrwatchError, WorkerGone
from ocrwatch.engines import lightonocr, profiles
from ocrwatch.engines.faults import Fault
from ocrwatch.engines.vllm import VllmEngine, supervisor, worker
from ocrwatch.engines.vllm import messages as m
from ocrwatch.engines.vllm.feeder import Feeder
from ocrwatch.engines.vllm.worker import main as worker_main

PACKAGE = Path(ocrwatch.__file__).parent
SAMPLING = m.Sampling(temperature=0.2, top_p=0.9, max_tokens=8)
EVERY_MESSAGE: list[object] = [
    m.Start({"backend": "fake", "max_num_seqs": 4}),
    m.Add("p1", (2, 3, b"\xff" * 18), SAMPLING),
    m.Sleep(), m.Wake(), m.Stop(),
    m.StandbyReady(import_seconds=1.25, pid=1234),
    m.Ready({"vllm": "fake", "start_seconds": 0.0}),
    m.Failed("MemoryError: CUDA out of memory", oom=True),
    m.Done("p1", "# Page\n\ntext", tokens=12, finish="stop", peers=3),
    m.Refused("p2", "prompt is longer than the maximum model length"),
    m.Slept(0.5), m.Woke(0.25), m.Stopped(),
    m.VllmFigures(1_700_000_000.0, (
        m.Figure("gauge", "vllm:num_requests_running", (), 3.0),
        m.Figure("histogram", "vllm:time_to_first_token_seconds", (), 2.0,
                 (("0.5", 1.0), ("+Inf", 2.0)), 1.1))),
]


def echo(conn: Connection) -> None:
    """A child process that sends back whatever it is sent, until the pipe closes."""
    while True:
        try:
            conn.send(conn.recv())
        except EOFError:
            return


def rogue_main(conn: Connection, settings: dict[str, Any]) -> None:
    """A worker that answers in the old tuple protocol: at once, or only to a page."""
    if settings["fake"].get("rogue_at_start"):
        conn.send(("ok", {"vllm": "rogue"}))
        return
    conn.send(m.Ready({"vllm": "rogue"}))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if isinstance(message, m.Add):
            conn.send(("done", message.rid, {"text": "x", "finish": "stop"}))
        elif isinstance(message, m.Stop):
            conn.send(m.Stopped())
            return


def spawn_worker() -> tuple[multiprocessing.Process, Connection]:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=worker_main,
                       args=(child, {"backend": "fake", "parent_pid": os.getpid()}))
    proc.start()
    child.close()
    return proc, parent  # type: ignore[return-value]


def page(mark: tuple[int, int, int] = (255, 255, 255)) -> Page:
    return Page(Path("scan.png"), 0, Image.new("RGB", (120, 160), mark))


def fake_engine(**options: Any) -> VllmEngine:
    config = Config()
    config.vllm.max_tokens = 64
    return VllmEngine(config, backend="fake", backend_options=options, card_mib=16 * 1024)


# -- the messages ------------------------------------------------------------------------------


def test_every_message_comes_back_equal_through_a_spawned_process() -> None:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=echo, args=(child,))
    proc.start()
    child.close()
    try:
        for message in EVERY_MESSAGE:
            parent.send(message)
            assert parent.poll(30), message
            back = parent.recv()
            assert type(back) is type(message) and back == message
    finally:
        parent.close()
        proc.join(30)
        if proc.is_alive():
            proc.kill()
            proc.join(10)
    assert proc.exitcode == 0


def test_messages_are_frozen_and_each_kind_is_one_class() -> None:
    kinds = {type(message) for message in EVERY_MESSAGE}
    assert kinds == {*m.ToWorker.__args__, *m.FromWorker.__args__}  # every kind covered
    for message in EVERY_MESSAGE:
        assert dataclasses.is_dataclass(message)
        field = next(iter(dataclasses.fields(message)), None)  # type: ignore[arg-type]
        if field is not None:
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(message, field.name, None)


# -- an unknown message ------------------------------------------------------------------------


def test_the_worker_refuses_an_unknown_message_and_says_so() -> None:
    proc, parent = spawn_worker()
    try:
        assert parent.poll(30) and isinstance(parent.recv(), m.Ready)
        parent.send(("add", "a", (2, 3, b"\xff" * 18), {}))  # the old tuple protocol
        assert parent.poll(30)
        answer = parent.recv()
        assert isinstance(answer, m.Failed) and not answer.oom
        assert answer.reason.startswith("UnknownMessage: the vLLM worker got tuple ('add'")
        assert "no message it knows" in answer.reason
        proc.join(30)
        assert proc.exitcode == 1  # its engine may be broken: it ends, a fresh one starts
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(10)
        parent.close()


def test_the_daemon_refuses_an_unknown_answer_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "main", rogue_main)
    eng = fake_engine(rogue_at_start=True)
    try:
        with pytest.raises(EngineUnavailable) as refused:
            eng.recognize([page()])
        assert "could not start: the daemon got tuple ('ok', {'vllm': 'rogue'}" in str(
            refused.value)
        assert isinstance(refused.value.__cause__, m.UnknownMessage)
        assert eng.state == "stopped" and eng.worker_pid is None
    finally:
        eng.close()


def test_an_unknown_answer_to_a_page_ends_the_worker_and_the_page_says_why(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(worker, "main", rogue_main)
    eng = fake_engine()
    try:
        (result,) = eng.recognize([page()])
        # Sent alone, it is read once more at a smaller size by a fresh (rogue) worker, then
        # it fails with the reason.
        assert result.error is not None and "the daemon got tuple ('done', 'p" in result.error
        assert "no message it knows" in result.error
        assert eng.describe()["restarts"] == 2
    finally:
        eng.close()


# -- the one loop decision ---------------------------------------------------------------------


def test_looped_is_decided_by_finish_or_repetition_unless_pages_run_to_the_end() -> None:
    loop = "# Page\n\n" + "the same line again\n" * 40
    assert lightonocr.looped("a page", "length")
    assert lightonocr.looped(loop, "stop")
    assert not lightonocr.looped("A normal page of text.", "stop")
    # ignore_eos (benchmarks): every page runs to max_tokens on purpose, none loops.
    assert not lightonocr.looped(loop, "length", ignore_eos=True)


def test_no_module_but_lightonocr_decides_that_a_page_looped() -> None:
    deciders = []
    for path in PACKAGE.rglob("*.py"):
        source = path.read_text(encoding="utf-8")
        rel = path.relative_to(PACKAGE).as_posix()
        if re.search(r"def \w*looped\w*\(", source) or re.search(r"finish\w* == \"length\"",
                                                                source):
            deciders.append(rel)
        if "repeats_itself(" in source and rel not in ("core/textutil.py", "engines/lightonocr.py"):
            deciders.append(rel)
    assert deciders == ["engines/lightonocr.py"]


def test_a_page_that_loops_cold_is_not_retried_when_pages_run_to_the_end() -> None:
    config = Config()
    config.vllm.max_tokens, config.vllm.ignore_eos = 64, True
    eng = VllmEngine(config, backend="fake", card_mib=16 * 1024)
    try:
        (result,) = eng.recognize([page(Fault.LOOPS_WHEN_COLD)])
        assert "the same line again" in result.markdown and not result.warnings
    finally:
        eng.close()
    warm = fake_engine()
    try:
        (result,) = warm.recognize([page(Fault.LOOPS_WHEN_COLD)])
        retry = profiles.get(profiles.DEFAULT).retry_temperature
        assert f"t={retry}" in result.markdown and not result.warnings
    finally:
        warm.close()


# -- the one dead-worker error -----------------------------------------------------------------


def test_a_killed_worker_is_worker_gone_to_whoever_talks_to_it() -> None:
    gone = supervisor.Worker({"backend": "fake", "parent_pid": os.getpid()}, 30.0)
    try:
        os.kill(gone.pid, signal.SIGKILL)
        with pytest.raises(WorkerGone, match="the vLLM worker was killed by SIGKILL"):
            gone.receive(30.0)
        with pytest.raises(WorkerGone, match="killed by SIGKILL"):
            gone.request(m.Sleep(), m.Slept, 30.0)
    finally:
        gone.end()
    assert issubclass(WorkerGone, EngineError) and issubclass(WorkerGone, OcrwatchError)


def test_there_is_one_dead_worker_class_and_it_is_in_the_tree() -> None:
    assert supervisor.WorkerGone is errors.WorkerGone  # type: ignore[attr-defined]
    defined = [path.relative_to(PACKAGE).as_posix() for path in PACKAGE.rglob("*.py")
               if re.search(r"^class \w*(Gone|Dead)\w*\([\w.]*(Error|Exception)\w*\)",
                            path.read_text(encoding="utf-8"), re.MULTILINE)]
    assert defined == ["core/errors.py"]


# -- the engine holds its feeder ---------------------------------------------------------------


def test_the_engine_holds_a_feeder_that_alone_takes_its_lock() -> None:
    assert not issubclass(VllmEngine, Feeder)
    eng = fake_engine()
    try:
        assert isinstance(eng._feeder, Feeder)
        assert not hasattr(eng, "_cond") and not hasattr(eng, "_queue")
        (result,) = eng.recognize([page()])
        assert result.error is None and eng.state == "ready" and eng.worker_pid is not None
    finally:
        eng.close()
    engine_source = (PACKAGE / "engines/vllm/engine.py").read_text(encoding="utf-8")
    assert "_cond" not in engine_source and "_queue" not in engine_source

"""The vLLM engine's worker protocol, fault handling and idle timers, with the fake worker.

The fake worker (``backend="fake"``) runs the real protocol in a real spawned process;
only vLLM is replaced. The colour of a page tells it how to misbehave (see
``ocrwatch.engines.vllm_worker.FakeBackend``).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from ocrwatch.batching import image_tokens
from ocrwatch.config import Config
from ocrwatch.domain import Page
from ocrwatch.engines.vllm import VllmEngine, plan_memory
from ocrwatch.engines.vllm_worker import main as worker_main
from ocrwatch.errors import EngineError, EngineUnavailable
from ocrwatch.textutil import markdown_to_text, repeats_itself

OK = (255, 255, 255)
CRASH_IN_BATCH = (255, 0, 1)
CRASH_AT_FULL_SIZE = (255, 0, 2)
CRASH_ALWAYS = (255, 0, 3)
OOM_IN_BATCH = (255, 0, 4)
REFUSED = (255, 0, 5)
LOOPS_WHEN_COLD = (0, 255, 1)
LOOPS_ALWAYS = (0, 255, 2)


def page(i: int, mark: tuple[int, int, int] = OK, size: tuple[int, int] = (120, 160)) -> Page:
    # The whole page carries the mark, so it survives the smaller-size retry's resize.
    return Page(Path(f"scan{i}.png"), i, Image.new("RGB", size, mark))


def make_engine(idle_sleep: float = 0.0, idle_stop: float = 0.0, **options: Any) -> VllmEngine:
    config = Config()
    config.vllm.idle_sleep_seconds = idle_sleep
    config.vllm.idle_stop_seconds = idle_stop
    config.vllm.max_tokens = 64
    return VllmEngine(config, backend="fake", backend_options=options, card_mib=16 * 1024)


@pytest.fixture
def engine() -> Iterator[VllmEngine]:
    eng = make_engine()
    yield eng
    eng.close()


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


# -- the memory plan ------------------------------------------------------------------------


def test_plan_for_a_16_gb_card_keeps_headroom_and_pairs_a4_pages() -> None:
    plan = plan_memory(16.0, 16.0, 4096)
    assert plan.gpu_memory_utilization * 16 <= 13.0 + 1e-6  # 3 GiB left for what vLLM can't see
    assert plan.max_num_batched_tokens == 4096
    assert plan.max_model_len >= 3080 + 4096
    a4 = image_tokens(1088, 1540)
    card = image_tokens(800, 500)
    assert 2 * a4 <= plan.batch_tokens < 3 * a4  # pairs of A4 pages
    assert plan.batch_pages * card <= plan.batch_tokens  # a full batch of business cards
    assert plan.batch_pages == plan.max_num_seqs == 8


def test_plan_on_a_large_card_is_capped_by_the_budget() -> None:
    h200 = 143771 / 1024
    plan = plan_memory(16.0, h200, 4096)
    assert plan.gpu_memory_utilization * h200 == pytest.approx(13.0, abs=0.01)
    assert plan.budget_gib == 16.0


def test_plan_refuses_a_budget_too_small_and_clips_one_too_large() -> None:
    with pytest.raises(EngineUnavailable, match="gpu_memory_gb"):
        plan_memory(4.0, 24.0, 4096)
    assert plan_memory(24.0, 12.0, 4096).budget_gib == 12.0


def test_engine_policy_comes_from_the_plan() -> None:
    eng = make_engine()
    try:
        assert eng.policy.size_matched and eng.policy.concurrency == 1
        assert eng.policy.max_tokens == eng.plan.batch_tokens
        assert eng.max_side == 1540
        assert eng.describe()["state"] == "stopped"
    finally:
        eng.close()


def test_real_backend_without_vllm_says_how_to_install_it() -> None:
    pytest.importorskip("ocrwatch")  # keeps the import order obvious
    try:
        import vllm  # noqa: F401
    except ImportError:
        pass
    else:
        pytest.skip("vLLM is installed here")
    with pytest.raises(EngineUnavailable, match="vLLM is not installed"):
        VllmEngine(Config())


# -- the worker protocol, straight ------------------------------------------------------------


def test_worker_protocol_answers_each_request_once() -> None:
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=worker_main,
                       args=(child, {"backend": "fake", "parent_pid": os.getpid()}))
    proc.start()
    child.close()
    try:
        assert parent.poll(30)
        kind, info = parent.recv()
        assert kind == "ok" and info["vllm"] == "fake"
        image = (2, 3, b"\xff" * 18)
        params = {"temperature": 0.2, "top_p": 0.9, "max_tokens": 8}
        parent.send(("generate", [image, image], [params, params]))
        assert parent.poll(30)
        kind, outputs = parent.recv()
        assert kind == "ok" and len(outputs) == 2 and outputs[0]["finish"] == "stop"
        parent.send(("sleep",))
        assert parent.poll(30) and parent.recv()[0] == "ok"
        parent.send(("wake",))
        assert parent.poll(30) and parent.recv()[0] == "ok"
        refused = (2, 3, bytes(REFUSED) * 6)
        parent.send(("generate", [refused], [params]))
        assert parent.poll(30)
        assert parent.recv()[:2] == ("error", "input")
        parent.send(("stop",))
        assert parent.poll(30) and parent.recv() == ("ok", None)
        proc.join(30)
        assert proc.exitcode == 0
    finally:
        if proc.is_alive():
            proc.kill()
            proc.join(10)
        parent.close()


def test_worker_reports_a_failed_start() -> None:
    eng = make_engine(fail_start="no CUDA device here")
    try:
        with pytest.raises(EngineUnavailable, match="could not start: RuntimeError: no CUDA"):
            eng.recognize([page(0)])
        assert eng.state == "stopped" and eng.worker_pid is None
    finally:
        eng.close()


# -- recognize and faults ----------------------------------------------------------------------


def test_one_result_per_page_in_order(engine: VllmEngine) -> None:
    pages = [page(i, size=(100 + i, 150)) for i in range(5)]
    results = engine.recognize(pages)
    assert [r.markdown.splitlines()[0] for r in results] == [
        f"# Page {100 + i}x150" for i in range(5)]
    assert all(r.error is None and not r.warnings for r in results)
    assert results[0].text.startswith("Page 100x150\n\nSome bold text")
    assert engine.recognize([]) == []


def test_a_worker_dying_mid_batch_is_restarted_and_the_batch_read_page_by_page(
        engine: VllmEngine) -> None:
    results = engine.recognize([page(0), page(1, CRASH_IN_BATCH), page(2)])
    assert [r.error for r in results] == [None, None, None]
    facts = engine.describe()
    assert facts["restarts"] == 1 and "exit code 70" in str(facts["last_error"])
    assert engine.state == "ready"


def test_out_of_memory_in_a_batch_is_survived(engine: VllmEngine) -> None:
    results = engine.recognize([page(0, OOM_IN_BATCH), page(1)])
    assert [r.error for r in results] == [None, None]
    assert "ran out of memory" in str(engine.describe()["last_error"])


def test_a_page_failing_alone_is_tried_once_smaller(engine: VllmEngine) -> None:
    (result,) = engine.recognize([page(0, CRASH_AT_FULL_SIZE)])
    assert result.error is None
    assert result.markdown.startswith("# Page 84x112")  # 0.7 of 120x160


def test_a_page_that_never_works_fails_with_the_reason_and_others_survive(
        engine: VllmEngine) -> None:
    results = engine.recognize([page(0), page(1, CRASH_ALWAYS), page(2)])
    assert results[0].error is None and results[2].error is None
    assert results[1].error is not None
    assert "exit code 71" in results[1].error
    assert results[1].markdown == "" and results[1].text == ""


def test_refused_input_fails_the_page_without_a_restart(engine: VllmEngine) -> None:
    results = engine.recognize([page(0, REFUSED), page(1)])
    assert results[0].error is not None and "maximum model length" in results[0].error
    assert results[1].error is None
    assert engine.describe()["restarts"] == 0


def test_a_looping_page_is_tried_again_warmer(engine: VllmEngine) -> None:
    fixed, stuck, fine = engine.recognize(
        [page(0, LOOPS_WHEN_COLD), page(1, LOOPS_ALWAYS), page(2)])
    assert "t=0.6" in fixed.markdown and not fixed.warnings
    assert stuck.error is None and stuck.markdown
    assert stuck.warnings and "ran out of tokens" in stuck.warnings[0]
    assert "t=0.2" in fine.markdown


def test_a_killed_worker_is_replaced_on_the_next_batch(engine: VllmEngine) -> None:
    engine.start()
    pid = engine.worker_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    (result,) = engine.recognize([page(0)])
    assert result.error is None
    assert engine.worker_pid not in (None, pid)


def test_a_killed_worker_takes_its_helper_processes_with_it() -> None:
    # vLLM's engine process holds the GPU memory and may sit in a process group of its
    # own; ending the worker must end it too, or the card stays full.
    eng = make_engine(helper=True)
    try:
        eng.start()
        pid, helper = eng.worker_pid, eng.worker_info["helper_pid"]
        assert pid is not None and not gone(helper)
        os.kill(pid, signal.SIGKILL)
        assert eng.recognize([page(0)])[0].error is None  # notices, cleans up, restarts
        assert wait_gone(helper, 10)
        new_helper = eng.worker_info["helper_pid"]
        eng.release()
        assert wait_gone(new_helper, 10)
    finally:
        eng.close()


def test_a_worker_dying_while_pages_are_sent_does_not_hang_the_engine() -> None:
    # The forked helper keeps the pipe open, so without care the write of a page larger
    # than the pipe's buffer would block forever on a dead worker.
    eng = make_engine(helper=True)
    try:
        eng.start()
        pid, helper = eng.worker_pid, eng.worker_info["helper_pid"]
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        big = [page(i, size=(2000, 2000)) for i in range(2)]  # 24 MB to write
        results = eng.recognize(big)
        assert [r.error for r in results] == [None, None]
        assert wait_gone(helper, 10)
        assert eng.describe()["restarts"] == 1
    finally:
        eng.close()


def wait_gone(pid: int, timeout: float) -> bool:
    waiter = threading.Event()
    for _ in range(int(timeout / 0.05)):
        if gone(pid) or _zombie(pid):
            return True
        waiter.wait(0.05)
    return False


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_start_timeout_is_reported() -> None:
    config = Config()
    config.vllm.start_timeout_seconds = 0.5
    eng = VllmEngine(config, backend="fake", backend_options={"start_delay": 30},
                     card_mib=16 * 1024)
    try:
        with pytest.raises(EngineUnavailable, match="did not answer within"):
            eng.start()
        assert eng.state == "stopped"
    finally:
        eng.close()


# -- idle states -------------------------------------------------------------------------------


def test_idle_engine_sleeps_then_ends_its_worker_then_restarts() -> None:
    eng = make_engine(idle_sleep=0.2, idle_stop=0.8)
    try:
        eng.recognize([page(0)])
        pid = eng.worker_pid
        assert pid is not None
        assert eng.wait_for_state(["asleep"], 10)
        assert eng.worker_pid == pid  # asleep, still there
        assert eng.wait_for_state(["stopped"], 10)
        assert eng.worker_pid is None and gone(pid)
        assert eng.describe()["gpu_memory_mb"] == 0
        (result,) = eng.recognize([page(1)])
        assert result.error is None and eng.worker_pid not in (None, pid)
    finally:
        eng.close()


def test_next_page_wakes_a_sleeping_worker_without_a_restart() -> None:
    eng = make_engine(idle_sleep=0.1)
    try:
        eng.recognize([page(0)])
        pid = eng.worker_pid
        assert eng.wait_for_state(["asleep"], 10)
        (result,) = eng.recognize([page(1)])
        assert result.error is None
        assert eng.worker_pid == pid
        assert "wake" in eng.timings and "sleep" in eng.timings
    finally:
        eng.close()


def test_timers_off_keep_the_worker_ready(engine: VllmEngine) -> None:
    engine.recognize([page(0)])
    assert not engine.wait_for_state(["asleep", "stopped"], 0.3)
    assert engine.state == "ready"


def test_release_ends_the_worker_and_the_next_page_restarts_it(engine: VllmEngine) -> None:
    engine.recognize([page(0)])
    pid = engine.worker_pid
    assert pid is not None
    engine.release()
    assert engine.state == "stopped" and gone(pid)
    engine.release()  # nothing to release: fine
    assert engine.recognize([page(1)])[0].error is None


def test_explicit_sleep_and_wake(engine: VllmEngine) -> None:
    engine.start()
    engine.sleep()
    assert engine.state == "asleep"
    engine.wake()
    assert engine.state == "ready"


def test_close_is_safe_twice_and_refuses_more_work() -> None:
    eng = make_engine(idle_sleep=30, idle_stop=60)
    eng.recognize([page(0)])
    pid = eng.worker_pid
    assert pid is not None
    eng.close()
    eng.close()
    assert eng.state == "closed" and gone(pid)
    with pytest.raises(EngineError, match="closed"):
        eng.recognize([page(1)])


def test_describe_has_what_status_shows(engine: VllmEngine) -> None:
    engine.recognize([page(0), page(1)])
    facts = engine.describe()
    assert facts["engine"] == "vllm" and facts["state"] == "ready"
    assert facts["model"] == "lightonai/LightOnOCR-2-1B"
    assert isinstance(facts["pages_per_second"], float)
    assert facts["gpu_memory_budget_gb"] == 16.0


# -- text helpers -----------------------------------------------------------------------------


def test_markdown_to_text_strips_markup_and_keeps_math() -> None:
    md = ("# Title\n\nSome **bold**, *italic* and __strong__ words, a [link](http://x) "
          "and ![a figure](img.png).\n\n$$a_1 * b_2 = c^{*}$$ and $x_i$ stay.\n\n"
          "<table><tr><th>Item</th><th>Price</th></tr>"
          "<tr><td>Tea &amp; cake</td><td>3.50</td></tr></table>\n\n"
          "| A | B |\n|---|---|\n| 1 | 2 |\n")
    text = markdown_to_text(md)
    assert text.startswith("Title\n\nSome bold, italic and strong words, a link and a figure.")
    assert "$$a_1 * b_2 = c^{*}$$ and $x_i$ stay." in text
    assert "Item\tPrice\nTea & cake\t3.50" in text
    assert "A\tB\n1\t2" in text
    assert "<" not in text and "**" not in text
    assert markdown_to_text("") == ""


def test_repeats_itself_spots_the_model_looping() -> None:
    assert repeats_itself("Intro.\n" + "the same line again\n" * 40)
    assert repeats_itself("Total " + "0" * 400)
    assert not repeats_itself("A normal page of text, with no loop at all. " * 3
                              + "It ends here.")
    table = "<tr><td></td><td></td></tr>\n" * 4
    assert not repeats_itself("Header\n" + table + "Footer")
